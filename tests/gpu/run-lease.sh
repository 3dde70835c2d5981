#!/bin/bash
# run-lease.sh: issue 54's one prepared device run: Kyutai's Moshi
# (synthetic:moshiko) at density on one GPU. Builds nothing on the device:
# run tests/gpu/pack.sh here first, then from a session with a device
#   run(command="bash tests/gpu/run-lease.sh", carry=["build-cuda/gpu"], timeout_s=590)
# and here, without a GPU, to see every step and run what needs none:
#   bash tests/gpu/run-lease.sh --dry-run
#
# Every step runs under timeout(1) with its own cap; a step that would
# start past BUDGET_S (540 s: under 9 minutes) is skipped and says so.
# The moshiko steps (stages, calibrate, sweep_cuda) each make the LM's
# host-side weights first (the depformer's and the embeddings' fp32, 45 s
# of one core on the build machine; less on the device's), inside their
# caps.
# In order of what is owed most:
#
#   step        cap  what it measures
#   info         10  nvidia-smi: the card, its memory, the driver
#   parity_*  30-45  whole-frame parity against the CPU (test_frame_cuda:
#                    encode, temporal, depformer, sampling, decode; greedy
#                    tokens identical over a wrapping run, sampled >= 90%),
#                    the backbone with and without CUDA Graphs (test_cuda,
#                    MT_CUDA_GRAPHS=0/1), the depformer, the codec, the
#                    speech stage, Kyutai's LM (MT_REQUIRE_GPU=1 each);
#                    test_frame_cuda also runs the frame with the
#                    depformer's sampling on the device
#                    (MT_CUDA_DEVICE_SAMPLING=1) against the host sampler
#   bounds       60  mt-benchgpu on moshiko's temporal shape (moshi-7b:
#                    same layers, heads, K/V) at S=4 W=252, B = 1..64
#                    doubling: the copy bandwidth and the bf16 GEMM peak
#                    measured in the same run, each B's fraction of its
#                    byte bound (the backbone's target: >= 0.80 at B=1)
#   bounds_graphs 45 the same with MT_CUDA_GRAPHS=1
#   stages      150  mt-benchkyutai moshiko by stage (embed, temporal,
#                    depformer, sampling, total) at B = 1, 8, 32, 64,
#                    W = 252 + 4 sinks, depformer on the GPU
#   stages_graphs 90 the same at B = 1, 64 with MT_CUDA_GRAPHS=1 and
#                    MT_CUDA_DEVICE_SAMPLING=1
#   (summary)        moshiko's whole-frame byte bound at B=1: temporal bf16
#                    13.416 GB + depformer fp32 2.668 GB + codec fp32
#                    0.385 GB = 16.469 GB at the bandwidth `bounds`
#                    measured; the frame's ratio to it (target <= 1.5x)
#   calibrate   120  mt-probe calibrate --device cuda -m synthetic:moshiko:
#                    the temporal step (B 1,8,32,64 x 64,256 positions), the
#                    depformer and the codec alone (B 1,8,32,64); the
#                    profile it writes (moshiko-cal.profile)
#   sweep_cuda  130  mt-probe sweep of a real mt-serve --device cuda -m
#                    synthetic:moshiko --window 252 --sink 4, 8..96
#                    sessions step 8, 3 s a level, judged by the tick
#                    signal's p99 under 80 ms: the wall = how many moshiko
#                    sessions hold p99 < 80 ms on this GPU
#   predict      20  mt-probe predict on moshiko-cal.profile: the
#                    simulator's sessions per GPU (p99 under 80 ms, and
#                    what the K/V pool holds), to set against sweep_cuda's
#                    wall (target within 10%). The served sweep on that
#                    profile needs no GPU: run it here after the lease
#                    (on a sim device the Mimi codec still runs on the
#                    host, so that sweep wants a host with cores to spare)
#
# Output under $OUT (else build-gpu/out): summary.txt (key=value lines and
# the benchmarks' own lines), run.log, moshiko-cal.profile, the sweeps'
# TSVs, every step's log. Exit status 0 when every parity step passed.
set -u
cd "$(dirname "$0")/../.."

dry=0
case "${1:-}" in
    --dry-run|-n) dry=1 ;;
    "") ;;
    -h|--help) sed -n '2,52p' "$0"; exit 0 ;;
    *) echo "usage: run-lease.sh [--dry-run]" >&2; exit 2 ;;
esac
BUDGET_S=${BUDGET_S:-540}
out=${OUT:-build-gpu/out}
t_start=$(date +%s)
g=build-cuda/gpu
if [ "$dry" = 1 ] && [ ! -x "$g/mt-probe" ]; then
    g=.dry   # not packed: the steps name the carried programs all the same
fi
mkdir -p "$out"
summary="$out/summary.txt"
runlog="$out/run.log"
: >"$summary"
: >"$runlog"
say() { echo "run-lease: $*" | tee -a "$runlog"; }
record() { echo "$*" >>"$summary"; }

if [ "$dry" = 0 ]; then
    [ -x "$g/test_cuda" ] || { echo "run-lease.sh: nothing carried: run tests/gpu/pack.sh and carry build-cuda/gpu" >&2; exit 1; }
    cub=/usr/local/cuda/lib64
    [ -e "$cub/libcublas.so.13" ] || cub=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
    crt=$(dirname "$(find / -xdev -name 'libcudart.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
    export LD_LIBRARY_PATH="$PWD/$g/lib:$cub:${crt:-$cub}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export OPENBLAS_NUM_THREADS=1 MT_ROOT=$PWD

# step NAME CAP CMD...: runs CMD under its cap into $out/NAME.log, or says
# why not; records NAME=pass|fail|timeout|skipped_budget.
step() {
    local name=$1 cap=$2
    shift 2
    local elapsed=$(($(date +%s) - t_start))
    if [ "$dry" = 1 ]; then
        printf 'step %-14s timeout %3ss  %s\n' "$name" "$cap" "$*" | tee -a "$runlog"
        return 0
    fi
    if [ $((elapsed + cap)) -gt "$BUDGET_S" ]; then
        say "$name: skipped (elapsed ${elapsed}s + cap ${cap}s > budget ${BUDGET_S}s)"
        record "$name=skipped_budget"
        return 1
    fi
    local t0=$(date +%s)
    timeout -k 5 "$cap" "$@" >"$out/$name.log" 2>&1
    local rc=$?
    local verdict=pass
    [ "$rc" = 0 ] || verdict=fail
    { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && verdict=timeout
    say "$name: $verdict (exit $rc, $(($(date +%s) - t0))s)"
    record "$name=$verdict"
    return "$rc"
}

# ---- info -------------------------------------------------------------------
record "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
if [ "$dry" = 0 ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
        tee "$out/info.txt" | sed 's/^/gpu=/' >>"$summary"
    mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
else
    mem_mib=81559
fi
mem_bytes=$(awk -v m="${mem_mib:-81559}" 'BEGIN { printf "%.0f", m * 1048576 }')

# ---- parity: the whole frame first ------------------------------------------
parity_ok=1
for t in test_frame_cuda test_cuda test_depformer_cuda test_mimi_cuda test_speech_cuda \
         test_kyutai_lm; do
    cap=30
    [ "$t" = test_frame_cuda ] && cap=45
    [ "$t" = test_cuda ] && cap=40
    step "parity_$t" "$cap" env MT_REQUIRE_GPU=1 "$g/$t" || parity_ok=0
    [ "$dry" = 1 ] || record "parity_$t not_ok=$(grep -c '^not ok' "$out/parity_$t.log")"
done
step parity_test_cuda_graphs 40 env MT_REQUIRE_GPU=1 MT_CUDA_GRAPHS=1 "$g/test_cuda" || parity_ok=0

# ---- the backbone against its bounds, then moshiko by stage -------------------
step bounds 60 "$g/mt-benchgpu" -m synthetic:moshi-7b -s 4 -w 252 -n 64
step bounds_graphs 45 env MT_CUDA_GRAPHS=1 "$g/mt-benchgpu" -m synthetic:moshi-7b -s 4 -w 252 -n 64
step stages 150 "$g/mt-benchkyutai" -m synthetic:moshiko -d cuda -b 1,8,32,64 -f 8 -S 4 -W 252 -t 16
step stages_graphs 90 env MT_CUDA_GRAPHS=1 MT_CUDA_DEVICE_SAMPLING=1 "$g/mt-benchkyutai" \
    -m synthetic:moshiko -d cuda -b 1,64 -f 8 -S 4 -W 252 -t 16
if [ "$dry" = 0 ]; then
    for f in bounds bounds_graphs; do
        grep -h '^step \|^result ' "$out/$f.log" 2>/dev/null | sed "s/^/$f /" >>"$summary"
    done
    for f in stages stages_graphs; do
        grep -h '^kyutai ' "$out/$f.log" 2>/dev/null | sed "s/^/$f /" >>"$summary"
    done
    # the whole frame's byte bound at B=1: every weight read once, at the
    # bandwidth the B=1 backbone step's bound was computed with
    awk '/^step / && / B=1 / {
            for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
            bw = (v["weight_GB"] + v["kv_GB"]) / v["bound_ms"]      # GB/ms
            printf "frame_bound_B1_ms=%.3f bandwidth_GBps=%.0f (16.469 GB: temporal 13.416 bf16 + depformer 2.668 fp32 + codec 0.385 fp32)\n", 16.469 / bw, bw * 1000
            exit }' "$out/bounds.log" >>"$summary" 2>/dev/null
fi

# ---- calibration: the temporal step, the depformer, the codec ---------------
cal="$out/moshiko-cal.profile"
step calibrate 120 "$g/mt-probe" calibrate --device cuda -m synthetic:moshiko \
    --batches 1,8,32,64 --lengths 64,256 --reps 5 --memory "$mem_bytes" --reserve 9.388e9 \
    --name moshiko-calibrated -o "$cal"
[ "$dry" = 0 ] && grep -h 'fit' "$out/calibrate.log" 2>/dev/null | sed 's/^/calibrate /' >>"$summary"

# ---- the sweep: how many moshiko sessions hold p99 under 80 ms --------------
LEVELS=${LEVELS:---from 8 --to 96 --step 8}
sweep() { # NAME CAP DEVICE [mt-probe's extra options]
    local name=$1 cap=$2 dev=$3
    shift 3
    step "$name" "$cap" "$g/mt-probe" sweep $LEVELS --hold 3s --warmup 1s --signal tick \
        --budget 80 --tsv "$out/$name.tsv" "$@" -- -m synthetic:moshiko --device "$dev" \
        --window 252 --sink 4 --max-sessions 128
}
sweep sweep_cuda 130 cuda
if [ "$dry" = 1 ] || [ -s "$cal" ]; then
    step predict 20 "$g/mt-probe" predict -m synthetic:moshiko --kv-mem 50G --window 252 \
        --sink 4 --profile "$cal"
else
    say "predict: skipped (no calibrated profile)"
    record "predict=skipped_no_profile"
fi
if [ "$dry" = 0 ]; then
    for sw in sweep_cuda; do
        [ -f "$out/$sw.tsv" ] && sed "s/^/$sw /" "$out/$sw.tsv" >>"$summary"
        grep -h '^# wall' "$out/$sw.log" 2>/dev/null | sed "s/^/$sw /" >>"$summary"
    done
    grep -h 'sessions per device\|^frame on' "$out/predict.log" 2>/dev/null |
        sed 's/^/predict /' >>"$summary"
fi

# ---- without a GPU: what the shipped (uncalibrated) profiles predict --------
if [ "$dry" = 1 ]; then
    for p in h100 h200; do
        say "SIMULATED, uncalibrated profiles/$p-moshiko.profile (what the lease replaces):"
        bin/mt-probe predict -m synthetic:moshiko --kv-mem 50G --window 252 --sink 4 \
            --profile "profiles/$p-moshiko.profile" 2>&1 |
            grep 'frame on\|sessions per device' | tee -a "$runlog"
    done
fi
say "done in $(($(date +%s) - t_start)) s; parity $([ "$parity_ok" = 1 ] && echo passed || echo FAILED)"
record "elapsed_s=$(($(date +%s) - t_start))"
[ "$parity_ok" = 1 ]
