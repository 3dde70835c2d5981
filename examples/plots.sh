#!/usr/bin/env bash
# examples/plots.sh: record a server's tick lines for a few seconds of load
# and draw them (p99 latency, step time, lateness, active sessions), then
# summarize the same lines. Shows the pieces mt-probe is made of. About
# 12 s (three levels held HOLD each).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ex_out plots
ex_tmp /tmp/mt-plots
"$BIN/mt-serve" -s "$TMP/mt.sock" -m "${MODEL:-synthetic:tiny}" --device cpu \
    >"$OUT/ticks.log" 2>"$TMP/serve.err" &
SERVE=$!
PIDS=$SERVE
ex_wait_socket "$TMP/mt.sock" 100
"$BIN/mt-probe" sweep -s "$TMP/mt.sock" --from 2 --to 6 --step 2 --hold "${HOLD:-3s}" \
    --ticks "$OUT/ticks.log" >"$OUT/sweep.tsv"
kill $SERVE; wait $SERVE 2>/dev/null || true
"$BIN/mt-probe" summarize --kind tick <"$OUT/ticks.log"
"$BIN/mt-probe" plot --ticks "$OUT/ticks.log" -o "$OUT/ticks.png" \
    --title "mt-serve under 2, 4, 6 sessions"
echo "plots: $OUT/ticks.png (from $OUT/ticks.log)"
