#!/usr/bin/env bash
# bench_fuzz.sh: how many inputs the admission and connection fuzz
# harnesses (tests/fuzz/fuzz_admit.c, fuzz_conn.c; clang + libFuzzer, as
# `make fuzz` builds them) run in BENCH_FUZZ_SECONDS (30) from the seed
# corpus, beside the same harnesses of an older tree (BASE, a git
# revision; default the tree issue 37 measured, 623 and 6.1k runs in 30 s)
# run at the same time on the other core: both figures come from one run
# on one machine, whatever its load. Each tree fuzzes from its own seed
# corpus (tests/fuzz/corpus/NAME of that tree), as `make fuzz` there
# would: fuzz_conn's inputs differ in format between the trees (the frame
# size its server serves), so the old harness on the new seeds would only
# refuse HELLOs. Both with libFuzzer's defaults otherwise (-max_len: the
# largest seed). Target (reported, never asserted): 10x the old figure.
#   BASE=none                 no side-by-side run (the issue's figures only)
#   BENCH_FUZZ_REPEAT=N       N rounds (default 1)
#   BENCH_FUZZ_HARNESSES=...  which (default "admit conn")
#   BENCH_FUZZ_CORPUS=this    both trees on this tree's seed corpus
# On a shared machine the two runs do not get equal CPU: with
# /usr/bin/time each run's CPU seconds are printed too, and the ratio of
# runs per CPU second (cpu_ratio), which the load moves far less. cov: the
# edges each run had covered at its end (libFuzzer's cov), so that more
# runs are seen not to be shallower ones.
# The old tree is built once into build-fuzz/base-REV/ (a few minutes).
# Without clang it says so and exits 0: there is nothing to measure.
set -u
cd "$(dirname "$0")/.." || exit 1
command -v clang >/dev/null 2>&1 || { echo "bench_fuzz: no clang: skipped"; exit 0; }
S=${BENCH_FUZZ_SECONDS:-30}
REPEAT=${BENCH_FUZZ_REPEAT:-1}
BASE=${BASE:-b16e3bc}
read -r -a HARNESSES <<<"${BENCH_FUZZ_HARNESSES:-admit conn}"
SAME_CORPUS=${BENCH_FUZZ_CORPUS:-own}
declare -A ISSUE=([admit]=623 [conn]=6100)   # issue 37, runs in 30 s

for h in "${HARNESSES[@]}"; do
    make -s "build-fuzz/fuzz_$h" >&2 || { echo "bench_fuzz: make build-fuzz/fuzz_$h failed" >&2; exit 1; }
done

old=""
if [ "$BASE" != none ]; then
    rev=$(git rev-parse --short "$BASE^{commit}" 2>/dev/null) ||
        { echo "bench_fuzz: no revision $BASE here (BASE=none to skip it)" >&2; exit 1; }
    old=build-fuzz/base-$rev
    for h in "${HARNESSES[@]}"; do
        [ -x "$old/build-fuzz/fuzz_$h" ] && continue
        echo "bench_fuzz: building the fuzz harnesses of $rev in $old" >&2
        if ! { rm -rf "$old" && mkdir -p "$old" &&
               git archive "$rev" | tar -x -C "$old" &&
               make -s -C "$old" "${HARNESSES[@]/#/build-fuzz/fuzz_}" >&2; }; then
            echo "bench_fuzz: building $rev failed" >&2
            exit 1
        fi
        break
    done
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# start BIN NAME TAG SEED ROOT: one fuzzing run in the background, from
# ROOT's seed corpus. Round r runs both trees with -seed=r: the same
# mutation stream to start with, so a round's pair differs by the harness
# (and its seeds), not by luck of the draw.
TIME=()
[ -x /usr/bin/time ] && TIME=(/usr/bin/time -f '%U %S')
start() {
    local bin=$1 h=$2 tag=$3 seed=$4 root=$5
    mkdir -p "$tmp/$tag"
    [ ${#TIME[@]} -gt 0 ] && TIME[3]=-o && TIME[4]="$tmp/$tag.cpu"
    "${TIME[@]}" "$bin" -max_total_time="$S" -print_final_stats=1 -seed="$seed" \
        -artifact_prefix="$tmp/$tag-" "$tmp/$tag" "$root/tests/fuzz/corpus/$h" \
        >"$tmp/$tag.log" 2>&1 &
}
units() { awk '/stat::number_of_executed_units/ {print $2}' "$1"; }
edges() { awk '/DONE/ {for (i = 1; i < NF; i++) if ($i == "cov:") c = $(i + 1)} END {print c + 0}' "$1"; }
# CPU seconds (user + system) of a run, or - without /usr/bin/time
cpu() { [ -s "$1" ] && awk 'END {printf "%.1f", $1 + $2}' "$1" || echo -; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
oldroot=$old
[ "$SAME_CORPUS" = this ] && oldroot=.
echo "# runs in ${S} s from the seed corpus (old: ${oldroot:-none}'s), -seed=ROUND; new = this tree, old = ${rev:-none} (run at the same time)"
printf '%-11s %5s %10s %10s %8s %14s %10s %8s %8s %9s %7s %7s\n' harness round new old new/old "issue's figure" new/issue new_cpu old_cpu cpu_ratio new_cov old_cov
rc=0
for r in $(seq 1 "$REPEAT"); do
    for h in "${HARNESSES[@]}"; do
        rm -rf "${tmp:?}"/*
        start "build-fuzz/fuzz_$h" "$h" new "$r" .
        pn=$!
        po=""
        if [ -n "$old" ]; then
            start "$old/build-fuzz/fuzz_$h" "$h" old "$r" "$oldroot"
            po=$!
        fi
        wait $pn || { echo "bench_fuzz: fuzz_$h stopped early:" >&2; tail -20 "$tmp/new.log" >&2; rc=1; }
        [ -n "$po" ] && { wait "$po" || echo "bench_fuzz: old fuzz_$h stopped early" >&2; }
        n=$(units "$tmp/new.log")
        o=- oc=- ocov=-
        [ -n "$old" ] && o=$(units "$tmp/old.log") && oc=$(cpu "$tmp/old.cpu") &&
            ocov=$(edges "$tmp/old.log")
        nc=$(cpu "$tmp/new.cpu") ncov=$(edges "$tmp/new.log")
        awk -v h="fuzz_$h" -v r="$r" -v n="${n:-0}" -v o="${o:--}" -v i="${ISSUE[$h]}" -v s="$S" \
            -v nc="$nc" -v oc="$oc" -v ncov="$ncov" -v ocov="$ocov" 'BEGIN {
            ratio = (o == "-" || o + 0 == 0) ? "-" : sprintf("%.1fx", n / o)
            cr = (o == "-" || o + 0 == 0 || nc == "-" || oc == "-" || nc + 0 == 0) ? "-" : \
                 sprintf("%.1fx", (n / nc) / (o / oc))
            # the issue figure is for 30 s
            printf "%-11s %5d %10d %10s %8s %14d %9.1fx %8s %8s %9s %7s %7s\n", h, r, n, o, ratio, i,
                   n * 30 / s / i, nc, oc, cr, ncov, ocov }'
    done
done
exit $rc
