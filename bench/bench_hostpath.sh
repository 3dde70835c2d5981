#!/usr/bin/env bash
# bench/bench_hostpath.sh: mt-serve's host path alone (issue 40): the
# simulated device of tests/profiles/hostpath.profile (a step that costs
# next to nothing) serving synthetic:echo, N sessions paced at the 80 ms
# frame period from CLIENTS mt-fakeclient processes, N in LEVELS. Per
# level: the server's own CPU time (utime+stime of its process, from
# /proc/PID/stat, over the whole run: the clients' share does not count)
# per frame answered (one frame in and its answer out; usr_us: its
# user-space share alone; cli_us: the client processes' CPU a frame, for
# where clients on the same cores saturate), the frames a
# second carried each way, the server's p99 (the worst p99_ms of its tick
# lines) and the clients' round trip (p99 over sessions of each session's
# worst round trip: an upper bound on the round-trip p99); and in steady
# state, all sessions admitted and streaming (ss_fps: the frames a second
# the ticks answered there; ss_p99_ms: the worst tick p99 there), without
# the storm of N connections arriving within a quarter of a second and
# the clients' ending, which the whole-run columns include. OLD=PATH runs
# another mt-serve (the one before a change) beside this tree's at every
# level, in the same run, one after the other; BINS="LABEL=PATH ..." runs
# more (each step of a series of changes), in that order, between OLD and
# this tree's. FILL=1 serves with --fill (every input also waits on a FILL
# deadline). All figures simulated.
# Knobs: LEVELS, CLIENTS (processes), HOLD (seconds a level), OLD, BINS,
# FILL, REPEAT (the whole series this many times over, interleaved: on a
# shared machine the least of a server's rows is the figure least
# inflated by others' load).
set -u
export LC_ALL=C
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${MT_BIN:-$ROOT/bin}
TB=${MT_TESTBIN:-$ROOT/build/tests}
S=$B/mt-serve
FC=$TB/mt-fakeclient
. "$ROOT/bench/lib.sh"
bench_need bench_hostpath "$S" "$FC"
LEVELS=${LEVELS:-64 500 1000 2000 2400}
CLIENTS=${CLIENTS:-4}
SECONDS_RUN=${HOLD:-8}
OLD=${OLD:-}
BINS=${BINS:-}
FILLOPT=
[ "${FILL:-0}" = 1 ] && FILLOPT=--fill
PROF=$ROOT/tests/profiles/hostpath.profile
FRAMES=$(awk -v s="$SECONDS_RUN" 'BEGIN { printf "%d", s * 1000 / 80 }')
T=$(mktemp -d "${TMPDIR:-/tmp}/mt-bench-hostpath.XXXXXX")
SP=
cleanup() { [ -n "$SP" ] && kill "$SP" 2>/dev/null && wait "$SP" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
# 2,000 sessions need 2,000 descriptors in the server and N/CLIENTS in
# each client: raise the soft limit as far as the hard one allows
ulimit -n "$(ulimit -Hn)" 2>/dev/null || ulimit -n 8192 2>/dev/null || true
HZ=$(getconf CLK_TCK)

cpu_of() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null; }
# its user-space share alone (utime): what the server's own code costs,
# less moved by other processes than the kernel's share (wake-ups, locks)
usr_of() { awk '{ print $14 }' "/proc/$1/stat" 2>/dev/null; }
# kids_cpu VAR: the CPU seconds of this shell's children reaped so far
# (bash's `times`, run in this shell: a subshell would count its own), in
# VAR. Read before and after a level's clients are waited for (the server
# is reaped after), its difference is what those clients cost.
kids_cpu() {
    times >"$T/times"
    printf -v "$1" '%s' "$(tail -1 "$T/times" | awk '{ t = 0
        for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] } print t }')"
}

# run LABEL SERVER N: one level against one server; prints one row
run() {
    local label=$1 srv=$2 n=$3 sock=$T/s.sock log=$T/lat.log i per pids=() c0 c1 t0 t1
    rm -f "$sock" "$log"
    "$srv" -s "$sock" -m synthetic:echo --device "sim:$PROF" \
        --max-sessions $((n + 16)) --max-conns $((2 * n + 64)) \
        --kv-mem 4G --latency-log "$log" $FILLOPT 2>"$T/serve.err" &
    SP=$!
    for i in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
    [ -S "$sock" ] || { echo "bench_hostpath: $label: mt-serve did not start:" >&2; cat "$T/serve.err" >&2; exit 1; }
    c0=$(cpu_of "$SP"); u0=$(usr_of "$SP"); kids_cpu k0; t0=$(date +%s.%N); ld=$(cut -d' ' -f1 /proc/loadavg)
    per=$(( (n + CLIENTS - 1) / CLIENTS ))
    for i in $(seq "$CLIENTS"); do
        "$FC" -s "$sock" -n "$per" -f "$FRAMES" --arrive-ms 0.5 --end-timeout 30 >"$T/fc.$i" 2>&1 &
        pids+=($!)
    done
    wait "${pids[@]}"
    t1=$(date +%s.%N); c1=$(cpu_of "$SP"); u1=$(usr_of "$SP"); kids_cpu k1
    kill "$SP"; wait "$SP" 2>/dev/null; SP=
    # a client process that failed: why, in a few of its lines (stderr)
    for i in $(seq "$CLIENTS"); do
        grep -q '^total .* ok=1' "$T/fc.$i" ||
            { echo "bench_hostpath: $label n=$n client $i:"; grep ' ok=0 ' "$T/fc.$i" |
              sed 's/.* state=\([a-z]*\) .* reason=/state=\1 reason=/' | sort | uniq -c |
              sort -rn | head -3
              echo "  the server's reasons:"
              grep 'closed:' "$T/serve.err" | sed 's/^.*closed: //' | sort | uniq -c |
              sort -rn | head -3; } >&2
    done
    cat "$T"/fc.* | awk -v l="$label" -v n="$n" -v c0="$c0" -v c1="$c1" -v hz="$HZ" -v u0="$u0" -v u1="$u1" -v k0="$k0" -v k1="$k1" \
        -v t0="$t0" -v t1="$t1" -v lat="$log" -v ld="$ld" '
    function fld(line, key) { return match(line, " " key "=[0-9.]+") ? substr(line, RSTART + length(key) + 2, RLENGTH - length(key) - 2) + 0 : 0 }
    /^session=/ { for (k = 1; k <= NF; k++) { split($k, kv, "=")
                    if (kv[1] == "lat_max_ms") m[++ns] = kv[2] + 0 } }
    /^total / { for (k = 1; k <= NF; k++) { split($k, kv, "=")
                  if (kv[1] == "sent") sent += kv[2]; if (kv[1] == "real") real += kv[2]
                  if (kv[1] == "fill") fill += kv[2]; if (kv[1] == "ok") ok += kv[2] } }
    END {
        # steady state: from 1 s (12 ticks) after the tick that admitted
        # the last session to the last tick whose input was 90% of a full
        # tick (the clients ending); its worst tick p99 and its frames a
        # second (the connection storm and the end are left out there, not
        # in the whole-run columns)
        nt = 0
        while ((getline line < lat) > 0)
            if (line ~ /^tick=/) {
                nt++; tp[nt] = fld(line, "p99_ms"); tt[nt] = fld(line, "t")
                ti[nt] = fld(line, "in"); to[nt] = fld(line, "out")
                if (tp[nt] > p99) p99 = tp[nt]
                if (fld(line, "admitted") >= n && !full) full = nt
                if (ti[nt] >= 0.9 * n) last = nt }
        ss_p99 = 0; ss_out = 0; ss_fps = 0
        if (full && last > full + 12 + 12) {
            for (k = full + 12; k <= last; k++) { if (tp[k] > ss_p99) ss_p99 = tp[k]
                if (k > full + 12) ss_out += to[k] }
            ss_fps = ss_out / (tt[last] - tt[full + 12]) }
        for (a = 2; a <= ns; a++) for (b = a; b > 1 && m[b - 1] > m[b]; b--) { x = m[b]; m[b] = m[b - 1]; m[b - 1] = x }
        rt = ns ? m[int(0.99 * (ns - 1)) + 1] : 0
        ans = real + fill; cpu = (c1 - c0) / hz; usr = (u1 - u0) / hz; wall = t1 - t0
        printf "%-8s %5d %8d %9d %9d %8.2f %9.1f %8.1f %8.1f %9.0f %8.2f %8.2f %9.0f %8.2f %6s\n", l, n, ok, sent, ans,
               cpu, (ans ? 1e6 * cpu / ans : 0), (ans ? 1e6 * usr / ans : 0),
               (ans ? 1e6 * (k1 - k0) / ans : 0), (wall > 0 ? ans / wall : 0), p99, rt,
               ss_fps, ss_p99, ld
    }'
}

echo "# mt-serve host path, simulated device (tests/profiles/hostpath.profile), $(date -u +%F)"
echo "# $CLIENTS client processes, ${SECONDS_RUN} s of frames at 80 ms a session; $(nproc) cores${FILLOPT:+; --fill}; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-8s %5s %8s %9s %9s %8s %9s %8s %8s %9s %8s %8s %9s %8s %6s\n" which n ok_procs sent answered cpu_s \
    us_frame usr_us cli_us fps_each p99_ms rt_p99_ms ss_fps ss_p99_ms load1
for rep in $(seq "${REPEAT:-1}"); do
    for n in $LEVELS; do
        [ -n "$OLD" ] && run old "$OLD" "$n"
        for lb in $BINS; do run "${lb%%=*}" "${lb#*=}" "$n"; done
        run new "$S" "$n"
    done
done
