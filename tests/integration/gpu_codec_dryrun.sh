#!/usr/bin/env bash
# gpu_codec_dryrun.sh: tests/gpu/run-codec.sh --dry-run, here without a
# GPU: exits 0, touches no device, lists the codec's parity and memcheck
# steps, each under a timeout, their caps within the budget of one lease.
. "$(dirname "$0")/lib.sh"
script="$MT_ROOT/tests/gpu/run-codec.sh"
[ -f "$script" ] || t_skip_all "no tests/gpu/run-codec.sh"
OUT="$T_TMP/out" MT_GPU_USE_CARRIED=1 bash "$script" --dry-run >"$T_TMP/dry" 2>"$T_TMP/err"
t_ok $? "run-codec.sh --dry-run exits 0"
for s in info build parity depformer memcheck; do
    t_check "lists the $s step" grep -Eq "^step $s " "$T_TMP/dry"
done
t_check "parity requires the GPU, launches blocking" \
    grep -Eq '^step parity .*MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 .*test_mimi_cuda' "$T_TMP/dry"
t_check "the depformer's parity too" grep -Eq '^step depformer .*MT_REQUIRE_GPU=1 CUDA_LAUNCH_BLOCKING=1 .*test_depformer_cuda' "$T_TMP/dry"
t_check "memcheck uses compute-sanitizer" grep -Eq '^step memcheck .*compute-sanitizer --tool memcheck' "$T_TMP/dry"
total=$(awk '/^step / && $3 == "timeout" { sub(/s$/, "", $4); t += $4 } END { print t + 0 }' "$T_TMP/dry")
t_diag "sum of step caps: ${total}s"
t_check "the caps add up to under 7.5 minutes (a lease's start and a margin)" awk -v t="$total" 'BEGIN { exit !(t > 0 && t <= 450) }'
t_check "no summary written by a dry run" test ! -e "$T_TMP/out/summary.txt"
t_check "nothing on stderr" test ! -s "$T_TMP/err"
t_done
