#!/bin/bash
# run-device.sh: the one-shot GPU check for issue 4, run ON the lent GPU
# machine from the repository root: `make test-gpu bench-gpu` (parity CUDA
# vs CPU, then the benchmark), with everything it prints also written to
# $OUT/gpu-test.log and $OUT/gpu-bench.log when OUT is set.
#
# Where the machine has the build dependencies (nvcc, jansson, OpenBLAS
# headers) it builds in build-gpu/ and runs the make targets. A bare CUDA
# image usually lacks them: then it runs the programs that tests/gpu/pack.sh
# built on the build machine, carried in build-cuda/gpu/ (the same commands
# the make targets run; MT_GPU_USE_CARRIED=1 forces that). Exit status: 0 when the parity tests passed and the
# benchmark ran, 1 otherwise.
#
# From a session with a device lent:
#   sh tests/gpu/pack.sh      # here
#   run(command="bash tests/gpu/run-device.sh", carry=["build-cuda/gpu"], timeout_s=600)
set -u
cd "$(dirname "$0")/../.."
out=${OUT:-}
log_t=/dev/null log_b=/dev/null
if [ -n "$out" ]; then
    mkdir -p "$out"
    log_t="$out/gpu-test.log" log_b="$out/gpu-bench.log"
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1; } | tee "$log_t"

export OPENBLAS_NUM_THREADS=1
if [ -z "${MT_GPU_USE_CARRIED:-}" ] && command -v nvcc >/dev/null &&
   pkg-config --exists jansson openblas sndfile samplerate portaudio-2.0 2>/dev/null; then
    echo "== building in build-gpu (make)" | tee -a "$log_t"
    tb() { timeout 280 make -s B=build-gpu BIN=build-gpu/bin test-gpu; }
    bb() { timeout 300 make -s B=build-gpu BIN=build-gpu/bin bench-gpu; }
elif [ -x build-cuda/gpu/test_cuda ]; then
    echo "== using the programs carried in build-cuda/gpu (no build deps here)" | tee -a "$log_t"
    # cuBLAS 13 from the machine: /usr/local/cuda, else wherever it is
    cub=/usr/local/cuda/lib64
    [ -e "$cub/libcublas.so.13" ] || cub=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
    crt=$(dirname "$(find / -xdev -name 'libcudart.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
    export LD_LIBRARY_PATH="$PWD/build-cuda/gpu/lib:$cub:${crt:-$cub}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ldd build-cuda/gpu/test_cuda | grep -i 'not found' | tee -a "$log_t"
    tb() { MT_REQUIRE_GPU=1 timeout 280 build-cuda/gpu/test_cuda; }
    bb() { timeout 300 build-cuda/gpu/mt-benchgpu; }
else
    echo "run-device.sh: no build dependencies here and nothing carried: run tests/gpu/pack.sh on the build machine and carry build-cuda/gpu" | tee -a "$log_t" >&2
    exit 1
fi

echo "== make test-gpu" | tee -a "$log_t"
tb 2>&1 | tee -a "$log_t"
trc=${PIPESTATUS[0]}
echo "== test-gpu exit $trc" | tee -a "$log_t"

echo "== make bench-gpu" | tee "$log_b"
bb 2>&1 | tee -a "$log_b"
brc=${PIPESTATUS[0]}
echo "== bench-gpu exit $brc" | tee -a "$log_b"
[ "$trc" = 0 ] && [ "$brc" = 0 ]
