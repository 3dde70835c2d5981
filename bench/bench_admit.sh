#!/usr/bin/env bash
# bench/bench_admit.sh: mt-admit's policies compared in one run on this
# machine. First the wall N* (a sweep against mt-serve, window mode,
# synthetic:small), then for each policy a closed loop
# (`mt-serve --control ctl | mt-admit > ctl`, clients arriving every
# 0.25 s, each longer than the run): the concurrency reached, the time to
# reach it, overshoot episodes (runs of late ticks) and sustained ones
# (3+ ticks), late ticks, session-ticks late; then metronome against
# `--kv full` with a small pool, where the latency lies: it admits, then
# the cache runs out (preemptions, FILL frames). Prints figures; asserts
# nothing. The wall is swept again after the policies' loops, to show
# how far it moved meanwhile. SECS (default 75, as the closed-loop test)
# per loop; POLICIES to change the list.
# As in tests/integration/admit_closedloop.sh, sweep and loops run on a
# short window (WINDOW, default 32) so that both measure full caches.
set -u
BIN=${MT_BIN:-bin}
TESTBIN=${MT_TESTBIN:-build/tests}
for p in "$BIN/mt-serve" "$BIN/mt-admit" "$TESTBIN/mt-fakeclient"; do
    [ -x "$p" ] || { echo "bench_admit: $p not built: skipped"; exit 0; }
done
S=$BIN/mt-serve A=$BIN/mt-admit FC=$TESTBIN/mt-fakeclient
export FC
MODEL=${MODEL:-synthetic:small}
BUDGET=${BUDGET:-80}
MARGIN=${MARGIN:-0.9}
SECS=${SECS:-75}
WINDOW=${WINDOW:-32}
export ADMIT_SKIP=$((WINDOW + 8))
T_TMP=$(mktemp -d /tmp/mt-bench-admit.XXXXXX)
T_PIDS=""
t_track() { T_PIDS="$T_PIDS $1"; }
cleanup() {
    for p in $T_PIDS; do kill "$p" 2>/dev/null; done
    for p in $T_PIDS; do wait "$p" 2>/dev/null; done
    rm -rf "$T_TMP"
}
trap cleanup EXIT
grep -q avx512f /proc/cpuinfo 2>/dev/null && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
. "$(dirname "$0")/../tests/integration/admit_lib.sh"
wait_sock() { local i=0; while [ ! -S "$1" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done; }
SOCK=$T_TMP/s.sock

# sweep: sets NSWEEP to the wall N* of a fresh server (run in this shell,
# so that cleanup knows its pid); its levels go to $T_TMP/sweep.levels
sweep() {
    local srv
    rm -f "$SOCK"
    "$S" -s "$SOCK" -m "$MODEL" --window "$WINDOW" --max-sessions 128 >"$T_TMP/sweep.lat" 2>/dev/null &
    srv=$!; t_track $srv; wait_sock "$SOCK"
    NSWEEP=$(admit_sweep "$SOCK" "$T_TMP/sweep.lat" "$BUDGET" 128 $((ADMIT_SKIP + 100)))
    kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null
}
t0=$(date +%s)
sweep; nstar=$NSWEEP
echo "bench_admit: wall N* = $nstar sessions ($MODEL, window, p99 of max(step_ms, late_ms) over 100 ticks <= $BUDGET ms; sweep $(( $(date +%s) - t0 )) s: $(tr '\n' ' ' <"$T_TMP/sweep.levels"))"

# loop POLICY [SERVE-ARGS...]: one closed loop; prints its figures
loop() {
    local pol=$1; shift
    rm -f "$SOCK" "$T_TMP/ctl" "$T_TMP/out"
    mkfifo "$T_TMP/ctl" "$T_TMP/out"
    tee "$T_TMP/loop.lat" <"$T_TMP/out" |
        "$A" --budget "$BUDGET" --margin "$MARGIN" --policy "$pol" >"$T_TMP/ctl" 2>"$T_TMP/admit.err" &
    local ctl=$!; t_track $ctl
    "$S" -s "$SOCK" -m "$MODEL" --window "$WINDOW" --max-sessions 128 --control "$T_TMP/ctl" "$@" >"$T_TMP/out" 2>/dev/null &
    local srv=$!; t_track $srv
    wait_sock "$SOCK"
    admit_arrivals "$SOCK" "$SECS" 0.25 $((SECS * 25))
    kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null; wait $ctl 2>/dev/null
    local sum lsess
    sum=$(admit_summary "$T_TMP/loop.lat" "$BUDGET" 3 8)
    lsess=$(awk -v b="$BUDGET" "$ADMIT_AWK_PARSE"'/^tick=/ && v["late_ms"] + 0 > b { s += v["active"] } END { print s + 0 }' "$T_TMP/loop.lat")
    local settled
    settled=$(echo "$sum" | sed -n 's/.*settled=\([0-9]*\).*/\1/p')
    printf "bench_admit: %-10s %s late_session_ticks=%s of_nstar=%s\n" "$pol" "$sum" "$lsess" \
        "$(awk -v s="$settled" -v n="$nstar" 'BEGIN { if (n > 0) printf "%.2f", s / n; else print "?" }')"
}

for pol in ${POLICIES:-metronome aimd gradient static:$nstar}; do
    loop "$pol"
done
# the wall again, after the loops: on a shared machine it moves within
# minutes, and of_nstar is only as good as N* still is
sweep; nafter=$NSWEEP
echo "bench_admit: wall after the loops N* = $nafter sessions ($(awk -v a="$nstar" -v b="$nafter" 'BEGIN { if (a > 0) printf "%+.0f%%", 100 * (b - a) / a; else print "?" }') on the first; $(tr '\n' ' ' <"$T_TMP/sweep.levels"))"
# the unbounded cache: the latency lines look fine while the cache fills
echo "bench_admit: --kv full --kv-mem 32M (the cache runs out; admissions are made on a signal that lies):"
loop metronome --kv full --kv-mem 32M
