#!/usr/bin/env bash
# examples/admission.sh: the admission loop. mt-serve's latency lines feed
# mt-admit, whose accept/reject answers go back through a FIFO into
# mt-serve's --control; then more sessions arrive than fit, and mt-admit
# decides which. Prints what it decided and the server's summary.
set -euo pipefail
ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}
OUT=${OUT:-$ROOT/out/admission}
TMP=$(mktemp -d /tmp/mt-admit-ex.XXXXXX)
mkdir -p "$OUT"
mkfifo "$TMP/ctl" "$TMP/lines" "$TMP/serve-out"
PIDS=""
trap 'for p in $PIDS; do kill $p 2>/dev/null; done; wait 2>/dev/null; rm -rf "$TMP"' EXIT
"$BIN/mt-admit" --budget "${BUDGET:-80ms}" <"$TMP/lines" >"$TMP/ctl" 2>"$OUT/admit.log" &
PIDS="$PIDS $!"
tee "$OUT/ticks.log" <"$TMP/serve-out" >"$TMP/lines" &
PIDS="$PIDS $!"
"$BIN/mt-serve" -s "$TMP/mt.sock" -m "${MODEL:-synthetic:small}" --control "$TMP/ctl" \
    >"$TMP/serve-out" 2>"$OUT/serve.log" &
SERVE=$!
PIDS="$SERVE $PIDS"
for _ in $(seq 300); do [ -S "$TMP/mt.sock" ] && break; sleep 0.1; done
espeak-ng -w "$TMP/talk.wav" "One more caller, and one more, and one more."
"$BIN/mt-replay" -s "$TMP/mt.sock" -n "${N:-12}" --stagger 700 --loop --duration 8 \
    "$TMP/talk.wav" >"$OUT/client.log" || true
kill $SERVE; wait $SERVE 2>/dev/null || true
grep -c 'state=done' "$OUT/client.log" | sed 's/^/sessions served: /'
grep -c 'state=rejected' "$OUT/client.log" | sed 's/^/sessions refused: /'
tail -1 "$OUT/admit.log"
"$BIN/mt-probe" summarize --kind tick <"$OUT/ticks.log" | tail -4
