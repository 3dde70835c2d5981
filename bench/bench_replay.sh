#!/usr/bin/env bash
# bench_replay.sh: mt-replay's pacing, measured: the send jitter (actual
# send time minus scheduled time) of 1, 16 and 64 sessions from one
# process against mt-serve running synthetic:echo, and of --emit alone
# (no server) as the floor. Ratios are against the 2 ms target and the
# 80 ms frame period, all measured in this run.
set -u
B=${MT_BIN:-$(cd "$(dirname "$0")/.." && pwd)/bin}
R=$B/mt-replay
S=$B/mt-serve
DUR=${BENCH_REPLAY_SECONDS:-10}
. "$(dirname "$0")/lib.sh"
bench_need bench_replay "$R" "$S"
T=$(mktemp -d "${TMPDIR:-/tmp}/mt-bench-replay.XXXXXX")
SP=
cleanup() { [ -n "$SP" ] && kill "$SP" 2>/dev/null && wait "$SP" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
sox -n -r 16000 -c 1 "$T/tone.wav" synth 2 sine 440 vol 0.5

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
# The hypervisor's steal time (/proc/stat) over each run: on a shared
# virtual machine a run's tail is set by it more than by the pacer.
cpu_ticks() { awk '/^cpu /{ print $9, $2+$3+$4+$5+$6+$7+$8+$9 }' /proc/stat 2>/dev/null; }
row() { # label line ticks-before
    local p50 p99 max
    p50=$(echo "$2" | field jitter_p50_ms); p99=$(echo "$2" | field jitter_p99_ms)
    max=$(echo "$2" | field jitter_max_ms)
    awk -v l="$1" -v a="$p50" -v b="$p99" -v c="$max" -v t0="$3" -v t1="$(cpu_ticks)" 'BEGIN {
        split(t0, x, " "); split(t1, y, " ")
        st = (y[2] > x[2]) ? 100 * (y[1] - x[1]) / (y[2] - x[2]) : 0
        printf "%-22s %9.3f %9.3f %9.3f %10.2f %10.4f %7.1f\n", l, a, b, c, b / 2.0, b / 80.0, st }'
}
echo "mt-replay send jitter, $DUR s per run, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
printf "%-22s %9s %9s %9s %10s %10s %7s\n" config p50_ms p99_ms max_ms p99/2ms p99/period steal%
t0=$(cpu_ticks)
line=$("$R" --emit "$T/tone.wav" --loop --duration "$DUR" --rate-check 2>&1 >/dev/null | grep '^replay_rate')
row "emit (no server)" "$line" "$t0"
# The server runs one BLAS thread at low priority: what is measured is the
# client's pacing, not how two processes share two cores.
nice -n 10 "$S" -s "$T/mt.sock" -m synthetic:echo --threads 1 --max-sessions 128 > "$T/serve.log" 2> "$T/serve.err" &
SP=$!
for i in $(seq 100); do [ -S "$T/mt.sock" ] && break; sleep 0.1; done
for n in 1 16 64; do
    for st in 0 1.25; do
        t0=$(cpu_ticks)
        line=$("$R" -s "$T/mt.sock" -n $n --stagger $st --loop --duration "$DUR" \
                --rate-check --latency none "$T/tone.wav" | grep '^replay_rate')
        row "$n sessions stagger $st" "$line" "$t0"
    done
done
