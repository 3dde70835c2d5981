#!/usr/bin/env bash
# gpu_dryrun.sh: tests/gpu/run-device.sh --dry-run, here without a GPU:
# exits 0, touches no device, and lists every step the device run would
# take, each under a timeout, their caps within the 9.5-minute budget.
. "$(dirname "$0")/lib.sh"
script="$MT_ROOT/tests/gpu/run-device.sh"
[ -f "$script" ] || t_skip_all "no tests/gpu/run-device.sh"
OUT="$T_TMP/out" MT_GPU_USE_CARRIED=1 bash "$script" --dry-run >"$T_TMP/dry" 2>"$T_TMP/err"
t_ok $? "run-device.sh --dry-run exits 0"
for s in info parity calibrate bench sweep_cuda sweep_sim memcheck sweep_sheet summary; do
    t_check "lists the $s step" grep -Eq "^step $s " "$T_TMP/dry"
done
t_check "parity runs with CUDA_LAUNCH_BLOCKING=1" \
    grep -Eq '^step parity .*CUDA_LAUNCH_BLOCKING=1' "$T_TMP/dry"
t_check "memcheck uses compute-sanitizer" grep -Eq '^step memcheck .*compute-sanitizer --tool memcheck' "$T_TMP/dry"
t_check "calibrate is conditional on mt-probe knowing it" grep -q "calibrate --help' succeeds" "$T_TMP/dry"
total=$(awk '/^step / && $3 == "timeout" { sub(/s$/, "", $4); t += $4 } END { print t + 0 }' "$T_TMP/dry")
t_diag "sum of step caps: ${total}s"
t_check "every step's cap adds up to under 9.5 minutes (a 15-minute lease, its start and a margin)" awk -v t="$total" 'BEGIN { exit !(t > 0 && t <= 570) }'
t_check "no summary written by a dry run" test ! -e "$T_TMP/out/summary.txt"
t_check "nothing on stderr" test ! -s "$T_TMP/err"
t_done
