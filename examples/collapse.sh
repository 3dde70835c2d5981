#!/usr/bin/env bash
# examples/collapse.sh: the headline comparison. RUNS sustained runs of the
# same seeded load against mt-serve with the bound (--kv window) and without
# it (--kv full, the baseline), the same pool for both, each run against its
# own fresh server. Prints the prediction, one row per run, the collapsed /
# total summary, and writes the table and the plot under OUT.
#
#   examples/collapse.sh                 # default size (~20 min on 2 cores)
#   RUNS=3 DURATION=20s examples/collapse.sh   # a quick look
#
# Every knob is an environment variable (defaults below). The pool is given
# as CAP, the number of bounded sessions it holds; the load is chosen so the
# unbounded sessions' growing caches pass that pool within a run in most
# seeds (check with the printed prediction before a long run).
set -euo pipefail
ROOT=${MT_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
BIN=${MT_BIN:-$ROOT/bin}
RUNS=${RUNS:-20}
DURATION=${DURATION:-30s}
SEED=${SEED:-1}
MODEL=${MODEL:-synthetic:small}
DEVICE=${DEVICE:-cpu}
SINK=${SINK:-4}
WINDOW=${WINDOW:-60}
CAP=${CAP:-3}                       # bounded sessions the pool holds
THREADS=${THREADS:-1}               # mt-serve CPU threads (1: robust on a shared machine)
ARRIVALS=${ARRIVALS:-poisson:0.15}
LENGTHS=${LENGTHS:-exp:20s}
OUT=${OUT:-$ROOT/out/collapse}

for p in mt-probe mt-serve; do
    [ -x "$BIN/$p" ] || { echo "collapse: $BIN/$p is not built (run make)" >&2; exit 1; }
done
# OpenBLAS misdetects some AVX-512 VMs and falls back to slow SSE3 kernels
# (mt-serve's note says so); name the core unless the caller did.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
    export OPENBLAS_CORETYPE=SkylakeX
fi
mkdir -p "$OUT"
P=$BIN/mt-probe
elem=cpu; [ "$DEVICE" = cuda ] && elem=cuda
pb=$("$P" predict -m "$MODEL" --backend $elem --kv-mem 1M --samples 1 |
     sed -n 's/^kv bytes per position\t.*(\([0-9]*\))$/\1/p')
[ -n "$pb" ] || { echo "collapse: cannot read the shape of $MODEL" >&2; exit 1; }
blocks=$(( (SINK + WINDOW + 15) / 16 ))
POOL=$(( CAP * blocks * 16 * pb ))
SERVE_COMMON=(-m "$MODEL" --device "$DEVICE" --threads "$THREADS" --kv-mem "$POOL")

{
echo "# collapse.sh $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname) ($(nproc) cores)"
echo "# $RUNS runs x 2 configurations, $DURATION each, $ARRIVALS, $LENGTHS,"
echo "# model $MODEL on $DEVICE ($THREADS thread), load average $(cut -d" " -f1-3 /proc/loadavg), pool $POOL bytes = $CAP bounded sessions of"
echo "# sink $SINK + window $WINDOW"
} | tee "$OUT/conditions.txt"

"$P" predict -m "$MODEL" --backend $elem --kv-mem "$POOL" --sink "$SINK" \
    --window "$WINDOW" --arrivals "$ARRIVALS" --lengths "$LENGTHS" \
    --duration "$DURATION" --seed "$SEED" --samples 1000 | tee "$OUT/predict.txt"
echo

"$P" soak --runs "$RUNS" --duration "$DURATION" --seed "$SEED" \
    --arrivals "$ARRIVALS" --lengths "$LENGTHS" --backend $elem \
    --data "$OUT/data" --plot "$OUT/soak.png" \
    -- "${SERVE_COMMON[@]}" --kv window --sink "$SINK" --window "$WINDOW" \
    -- "${SERVE_COMMON[@]}" --kv full | tee "$OUT/soak.txt"

echo
echo "collapse: table $OUT/soak.txt, prediction $OUT/predict.txt,"
echo "          plot $OUT/soak.png, per-run tick lines in $OUT/data/"
