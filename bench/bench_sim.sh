#!/usr/bin/env bash
# bench/bench_sim.sh: is the simulated device believable? (issue 22, item 3)
# In one run: calibrate a profile from this host's CPU backend on
# synthetic:small (mt-probe calibrate), then sweep the real CPU backend and
# the simulated device on that profile with the same levels, hold, window
# and budget (mt-probe sweep, each against its own mt-serve), and print
# both walls N* and both truthful p99s per level side by side, with the
# relative difference against the acceptance: N* within 15%, and p99
# within 15% at every level up to the measured (CPU) wall. Prints figures
# and a verdict line; exits 0 whatever the verdict (a bench, not a test),
# non-zero when it cannot run. `bench_sim.sh --compare CPU.tsv SIM.tsv
# WALL` prints the comparison of two sweep tables already made.
#
# The calibration (CAL) is served by default: `mt-probe calibrate
# --served` times the step inside a serving mt-serve (same model, window
# and sink as the sweeps) under mt-probe's paced clients at CAL_LEVELS,
# from its tick lines, so the profile has the host's contention in it: on
# a 2-core host the served step shares the cores with the clients, the I/O
# thread and the ticker and is 1.4-2x the bare one. CAL=bare times a bare
# decoder alone instead (the grid BATCHES x LENGTHS, REPS steps a point).
# Either way the calibration is its own run; the sweeps compared are not
# it.
#
# The budget is two frame periods (160 ms), mt-serve's default deadline: a
# frame waits up to a period for its tick, so a one-period budget leaves
# no room for the step at all. A short window (WINDOW, default 32) keeps
# the visible positions (sink + window) within the calibrated lengths, so
# the comparison is of batch size against step time, where the wall is.
#
# Knobs (environment): MODEL, WINDOW, FROM TO STEP (levels), HOLD, WARMUP,
# BUDGET (ms), CAL (served or bare), CAL_LEVELS CAL_HOLD CAL_WARMUP (the
# served calibration's levels and times), BATCHES LENGTHS REPS (the bare
# calibration's grid), KEEP (a directory to keep the profile, both
# sweeps' tables and the calibration log in).
set -u
export LC_ALL=C
. "$(cd "$(dirname "$0")/.." && pwd)/tools/columns.sh"
# compare CPU.tsv SIM.tsv WALL: per level found in both sweep tables, the
# truthful p99 (p99_true_ms: FILL counted as missed) and the mean step
# (step_ms) of each side by side, judged up to the CPU's wall WALL; the
# columns are read by their header names (tools/columns.sh). Exits 2 when
# a column is missing.
compare() {
    awk -F'\t' -v cpu="$1" -v wall="$3" "$COLS_AWK"'
    function rel(s, c) { return c > 0 ? sprintf("%+.1f%%", 100 * (s - c) / c) : "?" }
    cols_try("concurrency") { next }
    /^#/ || NF == 0 { next }
    {   n = col("concurrency") + 0
        if (FILENAME == cpu) { cp[n] = col("p99_true_ms"); cs[n] = col("step_ms") }
        else { sp[n] = col("p99_true_ms"); ss[n] = col("step_ms") }
    }
    END {
        if (COLS_BAD) exit 2
        m = 0
        for (n in cp) if (n in sp) L[++m] = n + 0
        for (a = 2; a <= m; a++) for (b = a; b > 1 && L[b - 1] > L[b]; b--) { t = L[b]; L[b] = L[b - 1]; L[b - 1] = t }
        printf "%5s  %11s %11s %8s  %12s %12s  %s\n", "n", "cpu_p99_ms", "sim_p99_ms", "diff",
               "cpu_step_ms", "sim_step_ms", "judged"
        for (k = 1; k <= m; k++) {
            n = L[k]; c = cp[n]; s = sp[n]
            num = (c ~ /^[0-9.]+$/ && s ~ /^[0-9.]+$/)
            if (n <= wall) {
                judged = (num && c > 0 && (s - c) / c <= 0.15 && (c - s) / c <= 0.15) ? "within 15%" : "MISS"
                J++; if (judged != "within 15%") M++
            } else judged = "(above the wall)"
            printf "%5d  %11s %11s %8s  %12s %12s  %s\n", n, c, s, num ? rel(s, c) : "?", cs[n], ss[n], judged
        }
        printf "bench_sim: p99 at the %d levels up to the cpu wall: %d within 15%%, %d miss\n", J, J - M, M
    }' "$1" "$2"
}
if [ "${1:-}" = --compare ]; then
    [ $# = 4 ] || { echo "usage: bench_sim.sh --compare CPU.tsv SIM.tsv CPU_WALL" >&2; exit 2; }
    compare "$2" "$3" "$4"
    exit
fi
BIN=${MT_BIN:-bin}
. "$(dirname "$0")/lib.sh"
bench_need bench_sim "$BIN/mt-probe" "$BIN/mt-serve"
MODEL=${MODEL:-synthetic:small}
WINDOW=${WINDOW:-32}
FROM=${FROM:-8} TO=${TO:-96} STEP=${STEP:-8}
HOLD=${HOLD:-4s} WARMUP=${WARMUP:-1s}
BUDGET=${BUDGET:-160}
BATCHES=${BATCHES:-1,8,16,32,48,64,96}
LENGTHS=${LENGTHS:-16,36,64}
REPS=${REPS:-8}
CAL=${CAL:-served}
CAL_LEVELS=${CAL_LEVELS:-1,8,24,40,56,72,96}
CAL_HOLD=${CAL_HOLD:-4s} CAL_WARMUP=${CAL_WARMUP:-1s}
TMP=$(mktemp -d /tmp/mt-bench-sim.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
grep -q avx512f /proc/cpuinfo 2>/dev/null && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
t0=$(date +%s)
echo "bench_sim: $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

case $CAL in
served)
    PROFILE=calibrated-cpu-small-served
    CAL_WHAT="served: mt-probe calibrate --served, the step timed inside mt-serve (window $WINDOW) under mt-probe's paced clients at $CAL_LEVELS sessions, $CAL_HOLD hold after $CAL_WARMUP each"
    "$BIN/mt-probe" calibrate --served -m "$MODEL" --device cpu --window "$WINDOW" \
        --batches "$CAL_LEVELS" --hold "$CAL_HOLD" --warmup "$CAL_WARMUP" \
        --name "$PROFILE" -o "$TMP/cal.profile" 2>"$TMP/cal.log" ;;
bare)
    PROFILE=calibrated-cpu-small
    CAL_WHAT="bare: mt-probe calibrate, a decoder timed alone over batches $BATCHES x lengths $LENGTHS, $REPS steps a point"
    "$BIN/mt-probe" calibrate -m "$MODEL" --device cpu --batches "$BATCHES" --lengths "$LENGTHS" \
        --reps "$REPS" --name "$PROFILE" -o "$TMP/cal.profile" 2>"$TMP/cal.log" ;;
*)
    echo "bench_sim: CAL=$CAL: served or bare"; exit 1 ;;
esac || { echo "bench_sim: calibrate ($CAL) failed: $(tail -1 "$TMP/cal.log")"; exit 1; }
echo "bench_sim: calibration $CAL_WHAT"
sed -n 's/^mt-probe calibrate: fit: /bench_sim: profile fit: /p' "$TMP/cal.log"
t1=$(date +%s)

# sweep NAME DEVICE: the table's rows to $TMP/NAME.tsv, the wall to NAME.wall
sweep() {
    "$BIN/mt-probe" sweep --from "$FROM" --to "$TO" --step "$STEP" --hold "$HOLD" \
        --warmup "$WARMUP" --budget "$BUDGET" --tsv "$TMP/$1.tsv" \
        -- -m "$MODEL" --device "$2" --window "$WINDOW" --max-sessions $((TO + 16)) \
        >"$TMP/$1.out" 2>"$TMP/$1.err" ||
        { echo "bench_sim: sweep on $2 failed: $(tail -1 "$TMP/$1.err")"; return 1; }
    sed -n 's/^# wall: \([0-9]*\) sessions.*/\1/p' "$TMP/$1.out" >"$TMP/$1.wall"
}
sweep cpu cpu || exit 1
t2=$(date +%s)
sweep sim "sim:$TMP/cal.profile" || exit 1
t3=$(date +%s)

ncpu=$(cat "$TMP/cpu.wall") nsim=$(cat "$TMP/sim.wall")
echo "bench_sim: $MODEL, window $WINDOW, levels $FROM..$TO step $STEP, hold $HOLD after $WARMUP," \
     "budget $BUDGET ms; calibrate $((t1 - t0)) s, cpu sweep $((t2 - t1)) s, sim sweep $((t3 - t2)) s"
echo "bench_sim: sim = SIMULATED device --device sim:$PROFILE, profile calibrated ($CAL) from this host's CPU on $MODEL"
compare "$TMP/cpu.tsv" "$TMP/sim.tsv" "${ncpu:-0}" || exit 1
awk -v c="${ncpu:-0}" -v s="${nsim:-0}" -v prof="$PROFILE" 'BEGIN {
    d = c > 0 ? (s - c) / c : 0
    printf "bench_sim: wall N* cpu %s, sim (SIMULATED, %s) %s: %+.1f%% (%s)\n", c ? c : "below the first level", prof,
           s ? s : "below the first level", 100 * d,
           (c > 0 && s > 0 && d <= 0.15 && d >= -0.15) ? "within 15%" : "MISS"
}'
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP" && cp "$TMP"/cal.profile "$TMP"/cal.log "$TMP"/cpu.out "$TMP"/sim.out "$KEEP"/ &&
        echo "bench_sim: kept in $KEEP"
fi
