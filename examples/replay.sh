#!/usr/bin/env bash
# examples/replay.sh: a spoken file (espeak-ng) replayed as N real-time
# sessions through mt-serve; the returned audio goes to out/replay/, the
# client's latency lines are summarized by mt-probe. About 5 s.
#   examples/replay.sh            N=8 MODEL=synthetic:tiny examples/replay.sh
set -euo pipefail
. "$(dirname "$0")/lib.sh"
ex_out replay
ex_tmp /tmp/mt-replay-ex
espeak-ng -w "$OUT/talk.wav" "Hello. This is a replayed conversation, paced in real time."
"$BIN/mt-serve" -s "$TMP/mt.sock" -m "${MODEL:-synthetic:tiny}" >"$OUT/ticks.log" 2>"$TMP/serve.err" &
PIDS="$PIDS $!"
ex_wait_socket "$TMP/mt.sock" 100
"$BIN/mt-replay" -s "$TMP/mt.sock" -n "${N:-4}" --stagger 250 "$OUT/talk.wav" \
    -o "$OUT/reply-%d.wav" >"$OUT/client.log"
"$BIN/mt-probe" summarize <"$OUT/client.log"
echo "replay: returned audio $OUT/reply-*.wav, client lines $OUT/client.log"
