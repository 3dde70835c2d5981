#!/usr/bin/env bash
# bench/bench_rt.sh: what `mt-serve --rt-priority` buys on a busy host,
# measured in one run. A simulated device (its step is a wait on the
# absolute clock, so whatever a tick takes beyond the profile's prediction
# and drawn noise is this host's delay) serves N sessions with LOAD busy
# loops of normal priority running beside it (default 3 per core), first
# under the normal policy, then under SCHED_FIFO (--rt-priority 50). The
# clients run under SCHED_FIFO in both (a remote client is not slowed by
# this host's load), so that only the server's policy differs. Per run:
# the host delay a tick added to the model (max, p99, ticks over 5 ms),
# late ticks (late_ms over the 80 ms budget) and the longest run of them,
# and whether every frame came back. Prints figures; asserts nothing.
# Needs root or CAP_SYS_NICE (skipped without).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${MT_BIN:-$ROOT/bin}
TESTBIN=${MT_TESTBIN:-$ROOT/build/tests}
. "$ROOT/bench/lib.sh"
bench_need bench_rt "$BIN/mt-serve" "$TESTBIN/mt-fakeclient"
if ! chrt -f 10 true 2>/dev/null; then
    echo "bench_rt: SCHED_FIFO is not permitted here (root or CAP_SYS_NICE): skipped"
    exit 0
fi
PROFILE=${PROFILE:-$ROOT/tests/profiles/bench-small.profile}
N=${N:-30} FRAMES=${FRAMES:-250}
LOAD=${LOAD:-$((3 * $(nproc)))}
T_TMP=$(mktemp -d /tmp/mt-bench-rt.XXXXXX)
LOADPIDS=""
trap 'for p in $LOADPIDS; do kill "$p" 2>/dev/null; done; rm -rf "$T_TMP"' EXIT
label=$(sed -n 's/^name *= *\([^ #]*\).*/\1/p' "$PROFILE")
echo "bench_rt: SIMULATED device sim:$label, synthetic:moshi-7b, $N sessions (phases spread over the tick), $FRAMES frames; $LOAD busy loops beside it; clients under SCHED_FIFO 40"
for i in $(seq 1 "$LOAD"); do
    (while :; do :; done) &
    LOADPIDS="$LOADPIDS $!"
done
printf "%-22s %9s %9s %8s %10s %8s %s\n" server host_max host_p99 over_5ms late_ticks longest frames
for mode in normal "--rt-priority 50"; do
    d=$T_TMP/run; rm -rf "$d"; mkdir -p "$d"
    args=""; [ "$mode" = normal ] || args=$mode
    "$BIN/mt-serve" -s "$d/s" --device "sim:$PROFILE" -m synthetic:moshi-7b --sink 4 \
        --window 28 --max-sessions 128 $args >"$d/lat" 2>"$d/log" &
    srv=$!
    i=0; while [ ! -S "$d/s" ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i + 1)); done
    chrt -f 40 "$TESTBIN/mt-fakeclient" -s "$d/s" -n "$N" -f "$FRAMES" --echo \
        --arrive-ms "$(awk -v n="$N" 'BEGIN { printf "%.3f", 80 / n }')" >"$d/cli" 2>&1
    fc=$?
    kill -TERM $srv 2>/dev/null; wait $srv 2>/dev/null
    # ticks with every session in: host ms = step - prediction - drawn noise
    awk -v n="$N" -v mode="$mode" -v fc="$fc" '/^tick=/ {
            for (i = 1; i <= NF; i++) { k = index($i, "="); v[substr($i, 1, k - 1)] = substr($i, k + 1) + 0 }
            if (v["active"] < n) { r = 0; next }
            h = v["step_ms"] - v["sim_pred_ms"] - v["sim_noise_ms"]; H[++m] = h
            if (h > 5) o5++
            if (v["late_ms"] > 80) { late++; if (++r > lr) lr = r } else r = 0 }
        END { # insertion sort: a few hundred ticks
              for (i = 2; i <= m; i++) { x = H[i]; for (j = i - 1; j > 0 && H[j] > x; j--) H[j + 1] = H[j]; H[j + 1] = x }
              printf "%-22s %9.2f %9.2f %8d %10d %8d %s\n", mode, H[m], H[int(m * 0.99)], o5, late, lr,
                     fc == 0 ? "all back" : "LOST (client status " fc ")" }' "$d/lat"
done
echo "bench_rt: host_* in ms of host delay a full tick added to the simulated step; SIMULATED sim:$label"
