#!/usr/bin/env bash
# examples/soak.sh: a short collapse soak on the tiny model (about a minute):
# three runs with the bound, three without, same seeds, same pool, under a
# load whose unbounded caches outgrow the pool. examples/collapse.sh is the
# full-size version.
#   examples/soak.sh           RUNS=1 DURATION=3s examples/soak.sh
set -euo pipefail
ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}
OUT=${OUT:-$ROOT/out/soak}
M=${MODEL:-synthetic:tiny}
mkdir -p "$OUT"
pb=$("$BIN/mt-probe" predict -m "$M" --kv-mem 1M --samples 1 |
     sed -n 's/^kv bytes per position\t.*(\([0-9]*\))$/\1/p')
pool=$((8 * 16 * pb))       # 4 sessions of sink 4 + window 28
"$BIN/mt-probe" soak --runs "${RUNS:-3}" --duration "${DURATION:-10s}" \
    --arrivals even:2 --lengths fixed:10s --plot "$OUT/soak.png" \
    -- -m "$M" --device cpu --kv window --sink 4 --window 28 --kv-mem $pool \
    -- -m "$M" --device cpu --kv full --kv-mem $pool | tee "$OUT/soak.txt"
echo "soak: table $OUT/soak.txt, plot $OUT/soak.png"
