#!/usr/bin/env bash
# probe_soak_int.sh: Ctrl-C (SIGINT) on a soak after its first run prints
# the summary and draws the plot of the runs finished, says so, and exits
# 130; no mt-serve of the soak is left running.
. "$(dirname "$0")/lib.sh"
t_need mt-probe mt-serve gnuplot
t_fast_blas
cd "$T_TMP" || exit 1
"$MT_BIN/mt-probe" soak --runs 4 --duration 2s --arrivals even:2 --lengths fixed:2s \
    --plot "$T_TMP/soak.png" -- -m synthetic:tiny --device cpu >out 2>err &
PID=$!; t_track $PID
for _ in $(seq 300); do grep -q '^config1 ' out 2>/dev/null && break; sleep 0.1; done
t_check "the first run ended" grep -q '^config1 ' out
kill -INT $PID
wait $PID
rc=$?
sed 's/^/# /' out
t_check "exit 130 after Ctrl-C (got $rc)" test $rc = 130
runs=$(grep -cE '^config1 +[0-9]' out)
t_check "it says it was interrupted, and after how many runs" \
    grep -q "^# interrupted after $runs of 4 runs: the summary and the plot are of those" out
t_check "the summary of those runs" grep -q "^config1 *collapsed 0 of $runs runs" out
t_png "$T_TMP/soak.png" "the plot of those runs"
t_check "stderr says it too" grep -q "^mt-probe soak: interrupted after $runs runs\\?: the summary and the plot are of those" err
left=$(pgrep -f "mt-serve.*mt-probe-soak" -P $$ 2>/dev/null)
t_check "no mt-serve left behind" test -z "$left"
t_done
