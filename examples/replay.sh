#!/usr/bin/env bash
# examples/replay.sh: a spoken file (espeak-ng) replayed as N real-time
# sessions through mt-serve; the returned audio goes to out/replay/, the
# client's latency lines are summarized by mt-probe.
#   examples/replay.sh            N=8 MODEL=synthetic:tiny examples/replay.sh
set -euo pipefail
ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}
OUT=${OUT:-$ROOT/out/replay}
TMP=$(mktemp -d /tmp/mt-replay-ex.XXXXXX)
mkdir -p "$OUT"
espeak-ng -w "$OUT/talk.wav" "Hello. This is a replayed conversation, paced in real time."
"$BIN/mt-serve" -s "$TMP/mt.sock" -m "${MODEL:-synthetic:tiny}" >"$OUT/ticks.log" 2>"$TMP/serve.err" &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null; rm -rf "$TMP"' EXIT
for _ in $(seq 100); do [ -S "$TMP/mt.sock" ] && break; sleep 0.1; done
"$BIN/mt-replay" -s "$TMP/mt.sock" -n "${N:-4}" --stagger 250 "$OUT/talk.wav" \
    -o "$OUT/reply-%d.wav" >"$OUT/client.log"
"$BIN/mt-probe" summarize <"$OUT/client.log"
echo "replay: returned audio $OUT/reply-*.wav, client lines $OUT/client.log"
