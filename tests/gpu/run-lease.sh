#!/bin/bash
# run-lease.sh: one short lease, the new CUDA paths first. Parity of the
# new CUDA tests with MT_REQUIRE_GPU=1 (Kyutai's LM against its fixtures,
# Mimi's codec, the depformer, the served path's depformer and the speech
# stage's codec on the GPU), then Kyutai's moshiko shape by stage
# (mt-benchkyutai, synthetic weights: the temporal transformer and the
# depformer on the GPU, B = 1, 8, 32, 64; B = 1 with the depformer on the
# host beside it, same run), then run-device.sh (the backend's parity with
# the Qwen and positions cases, calibration, the benchmark) within what is
# left of BUDGET_S. Carried mode only: run tests/gpu/pack.sh here first, then
#   run(command="bash tests/gpu/run-lease.sh", carry=["build-cuda/gpu"], timeout_s=560)
# Output under $OUT (else build-gpu/out): parity-NAME.log, summary.txt.
set -u
cd "$(dirname "$0")/../.."
BUDGET_S=${BUDGET_S:-540}
out=${OUT:-build-gpu/out}
mkdir -p "$out"
t0=$(date +%s)
g=build-cuda/gpu
[ -x "$g/test_cuda" ] || { echo "run-lease.sh: nothing carried: run tests/gpu/pack.sh and carry build-cuda/gpu" >&2; exit 1; }
cub=/usr/local/cuda/lib64
[ -e "$cub/libcublas.so.13" ] || cub=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
crt=$(dirname "$(find / -xdev -name 'libcudart.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
export LD_LIBRARY_PATH="$PWD/$g/lib:$cub:${crt:-$cub}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPENBLAS_NUM_THREADS=1 MT_ROOT=$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/info.txt"
echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$out/summary.txt"
rc=0
for t in test_kyutai_lm test_mimi_cuda test_depformer_cuda test_speech_cuda; do
    timeout -k 5 100 env MT_REQUIRE_GPU=1 "$g/$t" >"$out/parity-$t.log" 2>&1
    r=$?
    nok=$(grep -c '^not ok' "$out/parity-$t.log")
    echo "$t=exit$r not_ok=$nok ($(grep -c '^ok' "$out/parity-$t.log") ok)" | tee -a "$out/summary.txt"
    [ "$r" = 0 ] || rc=1
done
echo "parity took $(($(date +%s) - t0)) s" | tee -a "$out/summary.txt"
# moshiko by stage; W = 252 (+ 4 sinks) so that B = 64 fits an H100 (f32
# K/V, 1 MiB a position: 0.27 GB a session); each B warms S + W + 2 frames
# first. Lines "kyutai device=cuda depformer=cuda|host ... B=..".
if [ -x "$g/mt-benchkyutai" ]; then
    timeout -k 5 240 "$g/mt-benchkyutai" -m synthetic:moshiko -d cuda -b 1,8,32,64 -f 8 \
        -S 4 -W 252 -t 16 >"$out/kyutai-moshiko.log" 2>&1
    echo "kyutai_moshiko_gpu_depformer=exit$? lines=$(grep -c '^kyutai ' "$out/kyutai-moshiko.log")" \
        | tee -a "$out/summary.txt"
    timeout -k 5 90 "$g/mt-benchkyutai" -m synthetic:moshiko -d cuda -D host -b 1 -f 4 \
        -S 4 -W 252 -t 16 >>"$out/kyutai-moshiko.log" 2>&1
    echo "kyutai_moshiko_host_depformer=exit$?" | tee -a "$out/summary.txt"
    grep '^kyutai ' "$out/kyutai-moshiko.log" | tee -a "$out/summary.txt"
fi
left=$((BUDGET_S - ($(date +%s) - t0)))
echo "parity and kyutai took $(($(date +%s) - t0)) s; run-device.sh gets ${left} s" | tee -a "$out/summary.txt"
if [ "$left" -gt 60 ]; then
    OUT="$out/device" BUDGET_S=$left MT_GPU_USE_CARRIED=1 bash tests/gpu/run-device.sh
fi
exit $rc
