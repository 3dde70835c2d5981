#!/bin/bash
# run-codec.sh: Mimi's CUDA codec and the CUDA depformer on a lent GPU, a
# run of its own beside run-device.sh (whose step caps already fill a
# lease): the codec's parity test (tests/unit/test_mimi_cuda.c: Kyutai's
# fixtures and the CPU, the published shape at batch 4) and the
# depformer's (test_depformer_cuda.c) with MT_REQUIRE_GPU=1 and
# CUDA_LAUNCH_BLOCKING=1 (a fault names its kernel), then the codec's under
# compute-sanitizer's memcheck when present. From the repository root (the
# fixtures are read from tests/fixtures/).
#
#   step      cap   what
#   info       10   nvidia-smi
#   build     130   make test_mimi_cuda test_depformer_cuda (only where the
#                   build deps are)
#   parity     90   test_mimi_cuda, MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1
#   depformer  60   test_depformer_cuda, the same
#   memcheck  150   compute-sanitizer --tool memcheck test_mimi_cuda
#
# The caps add up to BUDGET_S (440 s): with a lease's start, one run fits
# a 15-minute lease with a margin; a step that would start past the budget
# is skipped (said so). Output under $OUT (else build-gpu/out): run.log and
# summary.txt (name=pass|fail|timeout|skipped a line).
#
#   bash tests/gpu/run-codec.sh --dry-run   # here, no GPU: the steps it would take
#   sh tests/gpu/pack.sh                    # here, then from a session with a device:
#   run(command="bash tests/gpu/run-codec.sh", carry=["build-cuda/gpu"], timeout_s=480)
set -u
cd "$(dirname "$0")/../.."
dry=0
case "${1:-}" in
    --dry-run|-n) dry=1 ;;
    "") ;;
    *) echo "usage: run-codec.sh [--dry-run]" >&2; exit 2 ;;
esac
BUDGET_S=${BUDGET_S:-440}
out=${OUT:-build-gpu/out}
summary="$out/summary.txt"
t_start=$(date +%s)
if [ "$dry" = 0 ]; then
    mkdir -p "$out"
    : >"$summary"
    exec > >(tee "$out/run.log") 2>&1
fi
say() { echo "== $*"; }
record() { [ "$dry" = 1 ] || echo "$*" >>"$summary"; }

# step NAME CAP CMD...: CMD under timeout CAP; records NAME=verdict.
step() {
    local name=$1 cap=$2
    shift 2
    if [ "$dry" = 1 ]; then
        printf 'step %-9s timeout %3ss  %s\n' "$name" "$cap" "$*"
        return 0
    fi
    local elapsed=$(($(date +%s) - t_start))
    if [ $((elapsed + cap)) -gt "$BUDGET_S" ]; then
        say "$name: skipped (elapsed ${elapsed}s + cap ${cap}s > budget ${BUDGET_S}s)"
        record "$name=skipped_budget"
        return 1
    fi
    say "$name (cap ${cap}s): $*"
    local t0=$(date +%s) rc verdict=pass
    timeout -k 5 "$cap" "$@" 2>&1
    rc=$?
    [ "$rc" = 0 ] || verdict=fail
    { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && verdict=timeout
    say "$name: $verdict (exit $rc, $(($(date +%s) - t0))s)"
    record "$name=$verdict"
    return "$rc"
}

if [ -z "${MT_GPU_USE_CARRIED:-}" ] && command -v nvcc >/dev/null &&
   pkg-config --exists jansson openblas sndfile samplerate portaudio-2.0 2>/dev/null; then
    mode=build tdir=build-gpu/tests
elif [ -x build-cuda/gpu/test_mimi_cuda ] || [ "$dry" = 1 ]; then
    mode=carried tdir=build-cuda/gpu
    if [ "$dry" = 0 ]; then
        cub=/usr/local/cuda/lib64
        [ -e "$cub/libcublas.so.13" ] || cub=$(dirname "$(find / -xdev -name 'libcublas.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
        crt=$(dirname "$(find / -xdev -name 'libcudart.so.13*' 2>/dev/null | head -1)" 2>/dev/null)
        export LD_LIBRARY_PATH="$PWD/build-cuda/gpu/lib:$cub:${crt:-$cub}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
else
    echo "run-codec.sh: no build dependencies here and nothing carried: run tests/gpu/pack.sh on the build machine and carry build-cuda/gpu" >&2
    exit 1
fi
export OPENBLAS_NUM_THREADS=1 MT_ROOT=$PWD
[ "$dry" = 1 ] && say "dry run: no GPU used; programs from $mode ($tdir); budget ${BUDGET_S}s"
record "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
record "mode=$mode"

step info 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
{ [ "$mode" = build ] || [ "$dry" = 1 ]; } &&   # a dry run lists it: its cap counts
    step build 130 make -s -j16 B=build-gpu BIN=build-gpu/bin build-gpu/tests/test_mimi_cuda \
        build-gpu/tests/test_depformer_cuda
step parity 90 env MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 "$tdir/test_mimi_cuda"
parity=$?
step depformer 60 env MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 "$tdir/test_depformer_cuda" || parity=1
if command -v compute-sanitizer >/dev/null || [ "$dry" = 1 ]; then
    step memcheck 150 env MT_REQUIRE_GPU=1 compute-sanitizer --tool memcheck --error-exitcode 3 \
        "$tdir/test_mimi_cuda"
else
    say "memcheck: skipped (no compute-sanitizer)"
    record "memcheck=skipped_absent"
fi
exit "$parity"
