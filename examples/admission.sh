#!/usr/bin/env bash
# examples/admission.sh: the admission loop. mt-serve's latency lines feed
# mt-admit, whose accept/reject answers go back through a FIFO into
# mt-serve's --control; then more sessions arrive than fit, and mt-admit
# decides which. Prints what it decided and the server's summary.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ex_out admission
ex_tmp /tmp/mt-admit-ex
ex_admission_loop "$OUT/ticks.log" "$OUT/admit.log" "$OUT/serve.log" "${BUDGET:-80ms}" \
    -s "$TMP/mt.sock" -m "${MODEL:-synthetic:small}"
ex_wait_socket "$TMP/mt.sock" 300
espeak-ng -w "$TMP/talk.wav" "One more caller, and one more, and one more."
"$BIN/mt-replay" -s "$TMP/mt.sock" -n "${N:-12}" --stagger 700 --loop --duration 8 \
    "$TMP/talk.wav" >"$OUT/client.log" || true
kill $SERVE; wait $SERVE 2>/dev/null || true
grep -c 'state=done' "$OUT/client.log" | sed 's/^/sessions served: /'
grep -c 'state=rejected' "$OUT/client.log" | sed 's/^/sessions refused: /'
tail -1 "$OUT/admit.log"
"$BIN/mt-probe" summarize --kind tick <"$OUT/ticks.log" | tail -4
