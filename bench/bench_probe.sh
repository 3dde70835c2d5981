#!/usr/bin/env bash
# bench/bench_probe.sh: the wall of this machine for synthetic:small on the
# CPU backend (mt-probe sweep against its own mt-serve), and the predicted
# bounded capacity of the default pool beside it, measured in this run.
# Prints figures; asserts nothing.
set -u
BIN=${MT_BIN:-bin}
. "$(dirname "$0")/lib.sh"
bench_need bench_probe "$BIN/mt-probe" "$BIN/mt-serve"
M=${MODEL:-synthetic:small}
TMP=$(mktemp -d /tmp/mt-bench-probe.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
start=$(date +%s.%N)
"$BIN/mt-probe" sweep --from 1 --to "${TO:-16}" --step "${STEP:-3}" --hold 4s \
    --warmup 1s -- -m "$M" --device cpu >"$TMP/sweep" 2>"$TMP/err" ||
    { echo "bench_probe: sweep failed: $(tail -1 "$TMP/err")"; exit 1; }
end=$(date +%s.%N)
cat "$TMP/sweep"
wall=$(sed -n 's/^# wall: \([0-9]*\) sessions.*/\1/p; s/^# no wall up to \([0-9]*\) session.*/\1 (or more)/p' "$TMP/sweep")
cap=$("$BIN/mt-probe" predict -m "$M" --kv-mem 512M --samples 1 |
      sed -n 's/^bounded capacity\t\([0-9]*\) sessions/\1/p')
echo "bench_probe: compute wall ${wall:-below 1} sessions; KV capacity of the"\
     "default 512M pool (sink 4 + window 256): ${cap:-?} sessions;"\
     "sweep took $(echo "$end - $start" | bc) s"
if [ -n "$wall" ] && [ -n "$cap" ] && [ "$cap" -gt 0 ]; then
    echo "bench_probe: ratio compute wall / KV capacity = $(echo "scale=2; $wall / $cap" | bc)"
fi
