#!/usr/bin/env bash
# bench/quality.sh: quality under the bound (issue 9), `make bench-quality`.
#
# Runs `mt-probe quality` (the C decoder, CPU, one thread, niced) with the
# shipped byte-level model over the held-out text under every policy, side
# by side on the same streams, and writes:
#   - the measured tables into bench/RESULTS.md, between the markers
#     <!-- quality:begin --> and <!-- quality:end --> of the section
#     "## Quality under the bound" (the prose around them is kept);
#   - bench/quality-ppl.png, perplexity by position (gnuplot);
#   - the raw lines and per-position files under $OUT (default
#     build/bench-quality).
# Not in bench/run.sh's bench_*.sh set: it takes minutes (recompute
# prefills a whole window at every step). Nothing here asserts a target.
#
# Knobs (environment): STREAMS (4), LENGTH (8 T = 2048), SEEDS ("1 2 3"),
# SMALL_W (32: the tight-window table), OUT; REUSE=1 keeps the runs already
# in $OUT and only redoes the table and the plot.
set -u -o pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
M=${MODEL:-models/fortune-byte}
TEXT=${TEXT:-$M/heldout.txt}
STREAMS=${STREAMS:-4}
SEEDS=${SEEDS:-1 2 3}
SMALL_W=${SMALL_W:-32}
OUT=${OUT:-build/bench-quality}
RESULTS=bench/RESULTS.md
PNG=bench/quality-ppl.png
BIN=${MT_BIN:-bin}
TESTBIN=${MT_TESTBIN:-build/tests}
PROMPT=$(printf 'Q: What do you get if you cross a computer with a cat?\nA:')

if [ -x "$BIN/mt-probe" ] && "$BIN/mt-probe" quality --help >/dev/null 2>&1; then
    Q=("$BIN/mt-probe" quality)
elif [ -x "$TESTBIN/mt-quality" ]; then
    Q=("$TESTBIN/mt-quality")
else
    echo "bench-quality: neither '$BIN/mt-probe quality' nor $TESTBIN/mt-quality is built" >&2
    exit 1
fi
T=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["max_position_embeddings"])' "$M/config.json")
LENGTH=${LENGTH:-$((8 * T))}
mkdir -p "$OUT"
[ "${REUSE:-0}" = 1 ] || rm -f "$OUT"/*.lines "$OUT"/*.pos "$OUT"/seconds
start=$(date +%s)

q() { nice -n 10 "${Q[@]}" -m "$M" "$@"; }

# name policy sink window: perplexity over the streams, then generation per seed
run() {
    local name=$1 pol=$2 s=$3 w=$4 args=(--policy "$2")
    [ "${REUSE:-0}" = 1 ] && [ -s "$OUT/$name.lines" ] && return 0
    [ "$s" != - ] && args+=(--sink "$s")
    [ "$w" != - ] && args+=(--window "$w")
    echo "bench-quality: $name" >&2
    q -t "$TEXT" "${args[@]}" --streams "$STREAMS" --length "$LENGTH" \
        --buckets 8 --per-position "$OUT/$name.pos" >"$OUT/$name.lines" || return 1
    for seed in $SEEDS; do
        q -t "$TEXT" "${args[@]}" --gen-prompt "$PROMPT" --seed "$seed" \
            --gen-out "$OUT/$name.gen$seed.txt" --gen-only \
            >>"$OUT/$name.lines" || return 1
    done
}

MAIN=(
    "full full - -"
    "window window - -"
    "sink1 window+sink 1 -"
    "sink2 window+sink 2 -"
    "sink4 window+sink 4 -"
    "sink8 window+sink 8 -"
    "recompute0 recompute 0 -"
    "recompute1 recompute 1 -"
)
SMALL=(
    "w${SMALL_W}_window window - $SMALL_W"
    "w${SMALL_W}_sink1 window+sink 1 $SMALL_W"
    "w${SMALL_W}_sink4 window+sink 4 $SMALL_W"
    "w${SMALL_W}_sink8 window+sink 8 $SMALL_W"
    "w${SMALL_W}_recompute0 recompute 0 $SMALL_W"
    "w${SMALL_W}_recompute4 recompute 4 $SMALL_W"
)
for r in "${MAIN[@]}" "${SMALL[@]}"; do
    # shellcheck disable=SC2086
    run $r || { echo "bench-quality: run '$r' failed" >&2; exit 1; }
done
[ "${REUSE:-0}" = 1 ] && [ -s "$OUT/chunked.lines" ] ||
    q -t "$TEXT" --chunk "$T" >"$OUT/chunked.lines" || exit 1
[ -s "$OUT/seconds" ] || echo $(($(date +%s) - start)) >"$OUT/seconds"
secs=$(cat "$OUT/seconds")

# logfmt value of key k from the lines of file f that start with prefix p
val() { awk -v k="$3" -v p="$2" '$1 == p { for (i = 2; i <= NF; i++) { split($i, a, "="); if (a[1] == k) print a[2] } }' "$1"; }
mean() { awk '{ s += $1; n++ } END { if (n) printf "%.*f", p, s / n; else printf "-" }' p="$1"; }
kept() { # the KV positions one sequence keeps
    case $2 in
    full) echo "all ($LENGTH)" ;;
    *) local s=$3 w=$4; [ "$s" = - ] && s=0; [ "$w" = - ] && w=$((T - s)); echo $((s + w)) ;;
    esac
}
label() {
    case $1 in
    full) echo "full cache (past T)" ;;
    window) echo "window only (S = 0)" ;;
    window+sink) echo "window + $2 sink(s)" ;;
    recompute) [ "$2" = 0 ] && echo "recompute (last W, no BOS)" || echo "recompute ($2 sink(s) + last W)" ;;
    esac
}
row() { # name policy sink window
    local f="$OUT/$1.lines" s=$3 w=$4
    [ "$s" = - ] && s=0
    [ "$w" = - ] && { [ "$2" = full ] && w=- || w=$((T - s)); }
    local all in past
    all=$(awk '$1 == "quality" && / bucket=all /' "$f" | tr ' ' '\n' | sed -n 's/^ppl=//p')
    in=$(awk '$1 == "quality" && / bucket=all /' "$f" | tr ' ' '\n' | sed -n 's/^ppl_within_ctx=//p')
    past=$(awk '$1 == "quality" && / bucket=all /' "$f" | tr ' ' '\n' | sed -n 's/^ppl_past_ctx=//p')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
        "$(label "$2" "$s")" "$s" "$w" "$(kept "$@")" "$in" "$past" "$all" \
        "$(val "$f" generation gen_ppl | mean 2)" "$(val "$f" generation rep4 | mean 3)" \
        "$(val "$f" generation distinct2 | mean 3)" "$(val "$f" generation rep4_bytes | mean 3)"
}
HDR='| policy | S | W | kept | ppl [0,T) | ppl [T,8T) | ppl all | gen ppl | rep4 | distinct-2 | byte rep4 |
|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|'
ref=$OUT/full.lines
chunked_ppl=$(val "$OUT/chunked.lines" quality ppl)
eval_ppl=$(/usr/bin/python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["heldout_ppl"])' "$M/eval.json")
TABLE=$OUT/table.md
{
    echo "Measured by \`make bench-quality\` on $(date -u +%Y-%m-%d) ($(nproc) CPU(s), one decoder thread, $secs s of runs)."
    echo "Model \`$M\` (T = $T), text \`$TEXT\`: $STREAMS streams of $LENGTH positions"\
         "(consecutive slices, each [BOS, bytes]), the same streams for every policy;"\
         "generation: BOS + a ${#PROMPT}-byte prompt, $((4 * T)) sampled bytes at temperature 0.8,"\
         "seeds $SEEDS, figures averaged over the seeds."
    echo
    echo "C decoder, train.py's chunking (full cache within T): ppl $chunked_ppl; eval.json: $eval_ppl."
    echo
    echo "Kept cache T = $T positions (W = T - S):"
    echo
    echo "$HDR"
    for r in "${MAIN[@]}"; do
        # shellcheck disable=SC2086
        row $r
    done
    echo
    echo "Tight window W = $SMALL_W (kept S + W):"
    echo
    echo "$HDR"
    for r in "${SMALL[@]}"; do
        # shellcheck disable=SC2086
        row $r
    done
    echo
    echo "Natural level, the first $((4 * T)) bytes of the text: gen ppl" \
         "$(val "$ref" generation ref_ppl | head -1), rep4 $(val "$ref" generation ref_rep4 | head -1)," \
         "distinct-2 $(val "$ref" generation ref_distinct2 | head -1), byte rep4 $(val "$ref" generation ref_rep4_bytes | head -1)."
    echo
    echo "![perplexity by position](quality-ppl.png)"
} >"$TABLE"
cat "$TABLE"

# ---- the plot: perplexity of 32-position bins, mean over the streams --------
# Top: every policy, log scale. Bottom: the bounded policies against the gold
# standard (recompute, BOS + last T-1), as a ratio of perplexities.
for n in full window sink4 recompute1 "w${SMALL_W}_window" "w${SMALL_W}_sink4"; do
    awk -v b=32 '!/^#/ { k = int($1 / b); s[k] += $2; c[k]++ }
        END { for (k in s) printf "%d\t%.6f\n", k * b + b / 2, exp(s[k] / c[k]) }' \
        "$OUT/$n.pos" | sort -n >"$OUT/$n.bins"
done
for n in window sink4 "w${SMALL_W}_window" "w${SMALL_W}_sink4"; do
    paste "$OUT/$n.bins" "$OUT/recompute1.bins" |
        awk '{ printf "%d\t%.6f\n", $1, $2 / $4 }' >"$OUT/$n.ratio"
done
if command -v gnuplot >/dev/null; then
    term=pngcairo
    gnuplot -e 'set terminal pngcairo' 2>/dev/null </dev/null || term=png
    gnuplot <<EOF || { echo "bench-quality: gnuplot failed" >&2; exit 1; }
set terminal $term size 1000,820
set output '$PNG'
set multiplot layout 2,1 title "fortune-byte (T = $T): $STREAMS held-out streams of $LENGTH bytes, 32-position bins"
set xrange [0:$LENGTH]
set grid
set key top left opaque
set arrow 1 from $T, graph 0 to $T, graph 1 nohead dt 2 lc rgb 'gray40'
set label 1 'T' at $T, graph 0.06 offset 0.5,0
set ylabel 'perplexity (bytes, log scale)'
set logscale y
set yrange [3:40]
set ytics (3, 4, 5, 6, 8, 10, 15, 20, 30)
plot '$OUT/full.bins' w lp lw 2 pt 7 ps 0.6 lc rgb '#9400d3' t 'full cache', \
     '$OUT/window.bins' w lp lw 2 pt 5 ps 0.6 lc rgb '#009e73' t 'window only, W = $T', \
     '$OUT/sink4.bins' w lp lw 2 pt 9 ps 0.6 lc rgb '#56b4e9' t '4 sinks + W = $((T - 4))', \
     '$OUT/recompute1.bins' w l lw 2 dt 2 lc rgb '#e69f00' t 'recompute, BOS + last $((T - 1))', \
     '$OUT/w${SMALL_W}_window.bins' w lp lw 1 pt 4 ps 0.6 lc rgb '#d55e00' t 'window only, W = $SMALL_W', \
     '$OUT/w${SMALL_W}_sink4.bins' w lp lw 1 pt 8 ps 0.6 lc rgb '#0072b2' t '4 sinks + W = $SMALL_W'
unset logscale y
set yrange [0.9:1.3]
set ytics auto
set xlabel 'position in the stream'
set ylabel 'perplexity / recompute (BOS + last $((T - 1)))'
plot 1 w l lc rgb 'gray40' notitle, \
     '$OUT/window.ratio' w lp lw 2 pt 5 ps 0.6 lc rgb '#009e73' t 'window only, W = $T', \
     '$OUT/sink4.ratio' w lp lw 2 pt 9 ps 0.6 lc rgb '#56b4e9' t '4 sinks + W = $((T - 4))', \
     '$OUT/w${SMALL_W}_window.ratio' w lp lw 1 pt 4 ps 0.6 lc rgb '#d55e00' t 'window only, W = $SMALL_W', \
     '$OUT/w${SMALL_W}_sink4.ratio' w lp lw 1 pt 8 ps 0.6 lc rgb '#0072b2' t '4 sinks + W = $SMALL_W'
unset multiplot
EOF
    echo "bench-quality: plot $PNG"
fi

# ---- RESULTS.md: replace the generated block of our section -----------------
[ -f "$RESULTS" ] || printf '# Benchmark results\n' >"$RESULTS"
if ! grep -q '^<!-- quality:begin -->' "$RESULTS"; then
    printf '\n## Quality under the bound\n\n<!-- quality:begin -->\n<!-- quality:end -->\n' >>"$RESULTS"
fi
/usr/bin/python3 - "$RESULTS" "$TABLE" <<'EOF'
import sys
path, table = sys.argv[1], open(sys.argv[2]).read()
s = open(path).read()
b, e = "<!-- quality:begin -->\n", "<!-- quality:end -->"
i, j = s.index(b) + len(b), s.index(e)
open(path + ".tmp", "w").write(s[:i] + table + s[j:])
import os
os.replace(path + ".tmp", path)
EOF
echo "bench-quality: table written to $RESULTS ($secs s of runs)"
