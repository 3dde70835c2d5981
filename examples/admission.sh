#!/usr/bin/env bash
# examples/admission.sh: the admission loop. mt-serve's latency lines feed
# mt-admit, whose accept/reject answers go back through a FIFO into
# mt-serve's --control; then more sessions arrive than fit, and mt-admit
# decides which. Prints what it decided and the server's summary. About
# 20 s (N sessions 0.7 s apart, each DURATION s).
#   examples/admission.sh      N=3 DURATION=3 MODEL=synthetic:tiny examples/admission.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ex_out admission
ex_tmp /tmp/mt-admit-ex
ex_admission_loop "$OUT/ticks.log" "$OUT/admit.log" "$OUT/serve.log" "${BUDGET:-80ms}" \
    -s "$TMP/mt.sock" -m "${MODEL:-synthetic:small}"
ex_wait_socket "$TMP/mt.sock" 300
espeak-ng -w "$TMP/talk.wav" "One more caller, and one more, and one more."
"$BIN/mt-replay" -s "$TMP/mt.sock" -n "${N:-12}" --stagger 700 --loop --duration "${DURATION:-8}" \
    "$TMP/talk.wav" >"$OUT/client.log" || true
kill $SERVE; wait $SERVE 2>/dev/null || true
# the client's own count, one per session (its last attempt)
key() { sed -n "s/^replay_summary=.* $1=\([0-9]*\).*/\1/p" "$OUT/client.log"; }
echo "sessions served: $(key done)"
echo "sessions refused: $(key rejected)"
tail -1 "$OUT/admit.log"
"$BIN/mt-probe" summarize --kind tick <"$OUT/ticks.log" | tail -4
