#!/bin/sh
# pack.sh: run HERE (the build machine, no GPU needed) before a device run.
# Builds the CUDA tests (test_cuda, test_kyutai_lm, test_mimi_cuda, test_depformer_cuda,
# test_speech_cuda, test_frame_cuda), the benchmarks (mt-benchgpu, mt-benchkyutai) and mt-probe (for its
# calibration, when it has one) in
# build-cuda/ and copies them, with the CUDA backend's shared object and
# the few shared libraries they need that a bare CUDA image may lack
# (jansson, OpenBLAS and its Fortran runtime; never glibc or CUDA's own
# libraries, which the GPU machine has), into build-cuda/gpu/ (ignored by
# git; a few MiB), for run(carry=["build-cuda/gpu"]).
set -eu
cd "$(dirname "$0")/../.."
make -j2 B=build-cuda BIN=build-cuda/bin build-cuda/tests/test_cuda build-cuda/tests/test_mimi_cuda \
    build-cuda/tests/test_depformer_cuda build-cuda/tests/test_kyutai_lm build-cuda/tests/test_speech_cuda \
    build-cuda/tests/test_frame_cuda build-cuda/tests/mt-benchgpu build-cuda/tests/mt-benchkyutai \
    build-cuda/bin/mt-probe build-cuda/bin/mt-serve build-cuda/libmetronome_cuda.so
out=build-cuda/gpu
rm -rf "$out"
mkdir -p "$out/lib"
# The CUDA backend is loaded with dlopen (src/gpu/cuda_loader.c): on the
# GPU machine it is found through LD_LIBRARY_PATH, which run-device.sh
# points at $out/lib.
cp build-cuda/libmetronome_cuda.so "$out/lib/"
cp build-cuda/tests/test_cuda build-cuda/tests/test_mimi_cuda build-cuda/tests/test_depformer_cuda build-cuda/tests/test_kyutai_lm \
    build-cuda/tests/test_speech_cuda build-cuda/tests/test_frame_cuda \
    build-cuda/tests/mt-benchgpu build-cuda/tests/mt-benchkyutai build-cuda/bin/mt-probe \
    build-cuda/bin/mt-serve "$out/"
for bin in "$out/test_cuda" "$out/test_kyutai_lm" "$out/test_mimi_cuda" "$out/test_depformer_cuda" "$out/test_speech_cuda" "$out/test_frame_cuda" "$out/mt-benchgpu" "$out/mt-benchkyutai" "$out/mt-probe" "$out/mt-serve"; do
    ldd "$bin" | awk '$3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
        libcu*) ;;  # CUDA's: the GPU machine has its own, matching its driver
        *) cp -L "$lib" "$out/lib/" ;;
    esac
done
strip "$out/test_cuda" "$out/test_kyutai_lm" "$out/test_mimi_cuda" "$out/test_depformer_cuda" "$out/test_speech_cuda" "$out/test_frame_cuda" "$out/mt-benchgpu" "$out/mt-benchkyutai" "$out/mt-probe" "$out/mt-serve" 2>/dev/null || true
strip --strip-unneeded "$out"/lib/* 2>/dev/null || true
cp tests/gpu/run-device.sh tests/gpu/run-codec.sh tests/gpu/run-lease.sh "$out/"
du -sh "$out"
ls "$out" "$out/lib"
