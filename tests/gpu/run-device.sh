#!/bin/bash
# run-device.sh: the one prepared run on a lent GPU machine, from the
# repository root: parity CUDA vs CPU, the calibration the simulated device
# needs, the benchmark, then the simulator's fidelity check on the GPU (a
# sweep of the real CUDA mt-serve and one of the simulated device on the
# profile just calibrated, same levels, same clients), a short
# compute-sanitizer pass, and a sweep of the datasheet profile last;
# everything logged, a machine-readable summary and a short table at the end.
#
# Budget: a lease is 15 minutes of device time, its start included, and
# no second machine starts with under 4 left, so this is one shot. Every
# step runs under timeout(1) with its own cap, the caps add up to BUDGET_S
# (540 s), and a step that would start past the budget is skipped (said
# so), so a hang costs its step's cap, not the lease. Steps are in order of
# what is owed most.
#
#   step       cap   what
#   info        10   nvidia-smi, date
#   build      120   make test_cuda mt-benchgpu mt-probe (only with build deps)
#   parity      80   test_cuda, MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 (a
#                    fault names its kernel)
#   calibrate   75   mt-probe calibrate --device cuda on synthetic:moshi-7b
#                    (B 1..128 x 16..768 positions), when mt-probe has it
#   calibrate_llama 30  the same on synthetic:llama-3.2-1b (B 1..1024)
#   bench       75   mt-benchgpu: step time by B, fractions of the measured
#                    bandwidth and matrix bounds, the output copy
#   sweep_cuda  90   mt-probe sweep, real mt-serve --device cuda, moshi-7b,
#                    window 128, 128..896 sessions step 128
#   sweep_sim   90   the same sweep on sim:<the profile calibrate wrote>
#   memcheck    30   compute-sanitizer memcheck over the forced-split cases
#                    (MT_CUDA_QUICK=1: rotary, attention split + combine),
#                    when compute-sanitizer is present
#   sweep_sheet 90   the same sweep on sim:profiles/h200-moshi7b.profile
#
# PART=scale runs a second, shorter set instead (about 300 s), for a lease
# with time left after the first: info, a calibration over batches up to
# 512 (calibrate_wide), the real CUDA sweep and the simulated one on that
# profile at 128..512 sessions (sweep_cuda2, sweep_sim2), and the collapse
# soak on the real GPU (soak: moshi-7b, 100 s of Poisson arrivals, the
# bounded window against the unbounded cache in the same 20 GB pool).
#
# Output under $OUT (when set; else build-gpu/out), at most 8 files as the
# device tool returns: run.log (all of it), summary.txt (one key=value
# record a line: verdicts; the benchmark's own "step ..." lines, already
# key=value; the sweeps' rows; then the table) and logs.tgz (every step's
# log, the calibrated profile, the sweeps' TSVs; remade after each step, so
# a run stopped at its limit still returns what it had).
#
# Where the machine has the build dependencies (nvcc, jansson, OpenBLAS)
# it builds in build-gpu/; a bare CUDA image runs what tests/gpu/pack.sh
# built here, carried in build-cuda/gpu/ (MT_GPU_USE_CARRIED=1 forces
# that). Exit status: 0 when parity passed and the benchmark ran.
#
#   bash tests/gpu/run-device.sh --dry-run   # here, no GPU: every step it would take
#   sh tests/gpu/pack.sh                     # here, then from a session with a device:
#   run(command="bash tests/gpu/run-device.sh", carry=["build-cuda/gpu"], timeout_s=590)
set -u
cd "$(dirname "$0")/../.."

dry=0
case "${1:-}" in
    --dry-run|-n) dry=1 ;;
    "") ;;
    -h|--help) sed -n '2,49p' "$0"; exit 0 ;;
    *) echo "usage: run-device.sh [--dry-run]" >&2; exit 2 ;;
esac

PART=${PART:-main}
case "$PART" in
    main) BUDGET_S=${BUDGET_S:-540} ;;
    scale) BUDGET_S=${BUDGET_S:-420} ;;
    *) echo "run-device.sh: PART is main or scale, not '$PART'" >&2; exit 2 ;;
esac
out=${OUT:-build-gpu/out}
t_start=$(date +%s)
summary="$out/summary.txt"
logs="${TMPDIR:-/tmp}/mt-device.$$/logs"   # not under $OUT: the device tool returns 8 files at most
if [ "$dry" = 0 ]; then
    mkdir -p "$out" "$logs"
    : >"$summary"
    exec > >(tee "$out/run.log") 2>&1
fi

say() { echo "== $*"; }
record() { [ "$dry" = 1 ] || echo "$*" >>"$summary"; }

# step NAME CAP LOG CMD...: runs CMD under timeout CAP, output to LOG (and
# the terminal); records NAME=pass|fail|timeout, NAME_rc, NAME_s.
step() {
    local name=$1 cap=$2 log=$3
    shift 3
    local now elapsed
    now=$(date +%s)
    elapsed=$((now - t_start))
    if [ "$dry" = 1 ]; then
        printf 'step %-9s timeout %3ss  %s\n' "$name" "$cap" "$*"
        return 0
    fi
    if [ $((elapsed + cap)) -gt "$BUDGET_S" ]; then
        say "$name: skipped (elapsed ${elapsed}s + cap ${cap}s > budget ${BUDGET_S}s)"
        record "$name=skipped_budget"
        return 1
    fi
    say "$name (cap ${cap}s): $*"
    local t0 rc
    t0=$(date +%s)
    timeout -k 5 "$cap" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    local dt=$(($(date +%s) - t0))
    local verdict=pass
    [ "$rc" = 0 ] || verdict=fail
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && verdict=timeout
    say "$name: $verdict (exit $rc, ${dt}s)"
    record "$name=$verdict"
    record "${name}_rc=$rc"
    record "${name}_s=$dt"
    tar -czf "$out/logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
    return "$rc"
}

# ---- where the programs come from ----------------------------------------
if [ -z "${MT_GPU_USE_CARRIED:-}" ] && command -v nvcc >/dev/null &&
   pkg-config --exists jansson openblas sndfile samplerate portaudio-2.0 2>/dev/null; then
    mode=build
    tdir=build-gpu/tests probe=build-gpu/bin/mt-probe
elif [ -x build-cuda/gpu/test_cuda ] || [ "$dry" = 1 ]; then
    mode=carried
    tdir=build-cuda/gpu probe=build-cuda/gpu/mt-probe
else
    echo "run-device.sh: no build dependencies here and nothing carried: run tests/gpu/pack.sh on the build machine and carry build-cuda/gpu" >&2
    exit 1
fi
if [ "$mode" = carried ] && [ "$dry" = 0 ]; then
    # cuBLAS and the runtime from the machine: /usr/local/cuda, else wherever they are
    cub=/usr/local/cuda/lib64
    [ -e "$cub/libcublas.so.13" ] || cub=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
    crt=$(dirname "$(find / -xdev -name 'libcudart.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
    export LD_LIBRARY_PATH="$PWD/build-cuda/gpu/lib:$cub:${crt:-$cub}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ldd "$tdir/test_cuda" | grep -i 'not found'
    # the CUDA backend is loaded with dlopen, through LD_LIBRARY_PATH here
    [ -e build-cuda/gpu/lib/libmetronome_cuda.so ] ||
        echo "run-device.sh: build-cuda/gpu/lib/libmetronome_cuda.so missing: rerun tests/gpu/pack.sh" >&2
fi
export OPENBLAS_NUM_THREADS=1
[ "$dry" = 1 ] && say "dry run: no GPU used; programs from $mode ($tdir); summary would go to $summary; budget ${BUDGET_S}s"
record "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
record "mode=$mode"
record "budget_s=$BUDGET_S"

# ---- the steps -------------------------------------------------------------
# a thousand sessions' sockets on each side of the sweeps
ulimit -n 65536 2>/dev/null || ulimit -n 8192 2>/dev/null || true

step info 10 "$logs/info.log" nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv,noheader
if [ "$dry" = 0 ] && [ -s "$logs/info.log" ]; then
    record "device=$(head -1 "$logs/info.log" | tr -d '\n' | tr ' ' '_')"
fi

if [ "$mode" = build ]; then
    step build 120 "$logs/build.log" make -s -j16 B=build-gpu BIN=build-gpu/bin \
        build-gpu/tests/test_cuda build-gpu/tests/mt-benchgpu build-gpu/bin/mt-probe \
        build-gpu/bin/mt-serve ||
        { say "build failed: nothing to run"; exit 1; }
fi

# ---- PART=scale: the second set --------------------------------------------
if [ "$PART" = scale ]; then
    wide="$logs/calibrated-h200-moshi7b-wide.profile"
    step calibrate_wide 40 "$logs/calibrate_wide.log" "$probe" calibrate -m synthetic:moshi-7b \
        --device cuda --memory 141e9 --batches 1,32,128,256,512 --lengths 16,132,256 --reps 8 \
        --name calibrated-h200-moshi7b -o "$wide"
    [ "$dry" = 0 ] && sed -n 's/^mt-probe calibrate: fit: /calibrate_wide_fit: /p' "$logs/calibrate_wide.log" >>"$summary"
    SWEEP_LEVELS="--from 128 --to 512 --step 128"
    sweep2() { # NAME DEVICE
        step "$1" 60 "$logs/$1.log" "$probe" sweep $SWEEP_LEVELS --hold 4s --warmup 1s \
            --tsv "$logs/$1.tsv" -- -m synthetic:moshi-7b --device "$2" --window 128 \
            --max-sessions 600
    }
    sweep2 sweep_cuda2 cuda
    sweep2 sweep_sim2 "sim:$wide"
    # the cliff on the real device: the same seeded load against the
    # bounded window and the unbounded cache (preempt and recompute), one
    # 20 GB pool; about 190 sessions live at the end
    step soak 260 "$logs/soak.log" "$probe" soak --runs 1 --duration 100s --arrivals poisson:3 \
        --lengths exp:60s --max-sessions 400 --backend cuda --data "$logs/soak" \
        -- -m synthetic:moshi-7b --device cuda --kv window --window 128 --kv-mem 20G --max-sessions 400 \
        -- -m synthetic:moshi-7b --device cuda --kv full --kv-mem 20G --max-sessions 400
    [ "$dry" = 1 ] && exit 0
    for sw in sweep_cuda2 sweep_sim2; do
        [ -f "$logs/$sw.tsv" ] && sed "s/^/$sw /" "$logs/$sw.tsv" >>"$summary"
    done
    [ -f "$logs/soak.log" ] && grep -v '^#' "$logs/soak.log" | sed 's/^/soak /' >>"$summary"
    record "total_s=$(($(date +%s) - t_start))"
    tar -czf "$out/logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
    echo
    echo "== summary ($summary)"
    cat "$summary"
    exit 0
fi

step parity 80 "$logs/parity.log" env MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 "$tdir/test_cuda"
parity_rc=$?
if [ "$dry" = 0 ] && [ -f "$logs/parity.log" ]; then
    record "parity_ok=$(grep -c '^ok ' "$logs/parity.log")"
    record "parity_not_ok=$(grep -c '^not ok ' "$logs/parity.log")"
    record "parity_skip=$(grep -c '# SKIP' "$logs/parity.log")"
fi

# The calibration the simulated device needs (issue 22): the paper's model
# on the real GPU, over batches and cache lengths that bracket a window of
# 128 to 768 positions; the profile it writes drives sweep_sim below.
cal_profile="$logs/calibrated-h200-moshi7b.profile"
CAL_MODEL=${CAL_MODEL:-synthetic:moshi-7b}
if [ "$dry" = 1 ] || { [ -x "$probe" ] && "$probe" calibrate --help >/dev/null 2>&1; }; then
    [ "$dry" = 1 ] && echo "            (calibrate runs only if '$probe calibrate --help' succeeds; else skipped, said so)"
    step calibrate 75 "$logs/calibrate.log" "$probe" calibrate -m "$CAL_MODEL" --device cuda \
        --memory 141e9 --batches 1,8,32,64,128 --lengths 16,256,768 --reps 8 \
        --name calibrated-h200-moshi7b -o "$cal_profile"
else
    say "calibrate: skipped ($probe has no 'calibrate' subcommand)"
    record "calibrate=absent"
fi
if [ "$dry" = 0 ] && [ -f "$logs/calibrate.log" ]; then
    sed -n 's/^mt-probe calibrate: fit: /calibrate_fit: /p' "$logs/calibrate.log" >>"$summary"
fi
# the second shipped model (issue 22 item 7): llama-3.2-1b's K/V is 32 KiB
# a position, so the grid can reach the batches its profile is used at
if [ "$dry" = 1 ] || { [ -x "$probe" ] && "$probe" calibrate --help >/dev/null 2>&1; }; then
    step calibrate_llama 30 "$logs/calibrate_llama.log" "$probe" calibrate \
        -m synthetic:llama-3.2-1b --device cuda --memory 141e9 --batches 1,16,64,256,1024 \
        --lengths 16,256,1024 --reps 8 --name calibrated-h200-llama1b \
        -o "$logs/calibrated-h200-llama1b.profile"
fi
if [ "$dry" = 0 ] && [ -f "$logs/calibrate_llama.log" ]; then
    sed -n 's/^mt-probe calibrate: fit: /calibrate_llama_fit: /p' "$logs/calibrate_llama.log" >>"$summary"
fi

step bench 75 "$logs/bench.log" "$tdir/mt-benchgpu" --max-batch 64 ${BENCH_GPU_ARGS:-}
bench_rc=$?

# The simulator's fidelity on the GPU: the real CUDA mt-serve and the
# simulated device on the profile calibrated above, the same sweep (levels,
# hold, clients) one after the other; then the datasheet profile.
SWEEP_LEVELS=${SWEEP_LEVELS:---from 128 --to 896 --step 128}
sweep() { # NAME DEVICE
    step "$1" 90 "$logs/$1.log" "$probe" sweep $SWEEP_LEVELS --hold 4s --warmup 1s \
        --tsv "$logs/$1.tsv" -- -m synthetic:moshi-7b --device "$2" --window 128 \
        --max-sessions 1100
}
sweep sweep_cuda cuda
if [ "$dry" = 1 ] || [ -s "$cal_profile" ]; then
    sweep sweep_sim "sim:$cal_profile"
else
    say "sweep_sim: skipped (no calibrated profile)"
    record "sweep_sim=skipped_no_profile"
fi

if [ "$dry" = 1 ] || command -v compute-sanitizer >/dev/null; then
    step memcheck 30 "$logs/memcheck.log" env MT_REQUIRE_GPU=1 MT_CUDA_QUICK=1 \
        compute-sanitizer --tool memcheck --error-exitcode 3 "$tdir/test_cuda"
else
    say "memcheck: skipped (no compute-sanitizer on this machine)"
    record "memcheck=absent"
fi

sweep sweep_sheet sim:profiles/h200-moshi7b.profile

if [ "$dry" = 1 ]; then
    echo "step summary   $summary (key=value), then the short table"
    exit 0
fi

# ---- summary and the short table, last -------------------------------------
grep -E '^(device|memory|attention|step|result) ' "$logs/bench.log" 2>/dev/null >>"$summary"
for sw in sweep_cuda sweep_sim sweep_sheet; do
    [ -f "$logs/$sw.tsv" ] && sed "s/^/$sw /" "$logs/$sw.tsv" >>"$summary"
    [ -f "$logs/$sw.log" ] && grep '^# wall' "$logs/$sw.log" | sed "s/^/$sw /" >>"$summary"
done
record "total_s=$(($(date +%s) - t_start))"
tar -czf "$out/logs.tgz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
echo
echo "== summary ($summary)"
grep -E '^[a-z_]+[= ]' "$summary"
echo
printf '%-24s %5s %9s %9s %8s %9s %9s\n' model B step_ms bound_ms bw_frac peak_frac copy_ms
awk '/^step /{
    for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    printf "%-24s %5s %9s %9s %8s %9s %9s\n", v["model"], v["B"], v["ms"], v["bound_ms"], v["bw_frac"], v["peak_frac"], v["out_copy_ms"]
}' "$logs/bench.log" 2>/dev/null
[ "$parity_rc" = 0 ] && [ "$bench_rc" = 0 ]
