#!/usr/bin/env bash
# examples/sweep.sh: find the wall. Starts its own mt-serve (synthetic:small
# on the CPU, the bounded cache), holds 1, 2, ... N concurrent sessions for a
# few seconds each, prints latency per level and the wall, and draws
# latency vs concurrency. About TO x HOLD (40 s by default).
#   examples/sweep.sh            TO=16 HOLD=10s examples/sweep.sh
set -euo pipefail
ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}
OUT=${OUT:-$ROOT/out/sweep}
mkdir -p "$OUT"
"$BIN/mt-probe" sweep --from "${FROM:-1}" --to "${TO:-8}" --step "${STEP:-1}" \
    --hold "${HOLD:-5s}" --plot "$OUT/sweep.png" \
    -- -m "${MODEL:-synthetic:small}" --device "${DEVICE:-cpu}" | tee "$OUT/sweep.tsv"
echo "sweep: table $OUT/sweep.tsv, plot $OUT/sweep.png"
