#!/bin/bash
# serve_iobatch: mt-serve --io-batch-us (issue 40). A busy server takes
# client input in batches, at most once a batch period, instead of waking
# for nearly every frame. With an exaggerated period (20 ms) and 256
# sessions on the simulated device of tests/profiles/hostpath.profile
# (3,200 frames a second in), every frame must still come back exactly once,
# in order and equal to its input (synthetic:echo), and the I/O thread
# (the main thread) must wake at most a few times a period, not for each
# frame: its sleeps (voluntary context switches) a second stay under a bound that the same
# load without batching (--io-batch-us 0, run beside it for the figure)
# exceeds several times over on a host with a core free. Bad values are
# usage errors (status 2) that name the option.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_serve_test
PROF=$MT_ROOT/tests/profiles/hostpath.profile
N=${MT_IOBATCH_N:-$(t_timing 256 128)}
FRAMES=75            # 6 s at 80 ms a session

for bad in -1 20001 x; do
    "$MT_BIN/mt-serve" -s "$SOCK" --io-batch-us "$bad" >"$T_TMP/out.bad" 2>"$T_TMP/err.bad"
    rc=$?
    t_check "--io-batch-us $bad: status 2 ($rc)" [ $rc = 2 ]
    t_check "--io-batch-us $bad: the message names the option" grep -q -- "--io-batch-us" "$T_TMP/err.bad"
done

# the main thread's voluntary context switches: its sleeps, each ended by
# a wake (preemptions by other processes are not its doing)
ctxsw() { awk '/^voluntary_ctxt_switches/ { print $2 }' "/proc/$1/task/$1/status" 2>/dev/null; }

# run LABEL US: N sessions from two client processes against a server with
# --io-batch-us US; sets RATE (the I/O thread's sleeps a second)
run() {
    local label=$1 us=$2 sock=$T_TMP/$1.sock c0 c1 t0 t1 p1 p2
    t_serve "$T_TMP/$label.lat" "$T_TMP/$label.log" -s "$sock" -m synthetic:echo \
        --device "sim:$PROF" --max-sessions $((N + 16)) --io-batch-us "$us"
    t_check "$label: server listens" wait_for_socket "$sock"
    c0=$(ctxsw $SRV); t0=$(date +%s.%N)
    timeout 120 "$FC" -s "$sock" -n $((N / 2)) -f $FRAMES --echo --arrive-ms 0.5 \
        --end-timeout 20 >"$T_TMP/$label.c1" 2>&1 &
    p1=$!
    timeout 120 "$FC" -s "$sock" -n $((N / 2)) -f $FRAMES --echo --arrive-ms 0.5 \
        --end-timeout 20 >"$T_TMP/$label.c2" 2>&1 &
    p2=$!
    wait $p1; local r1=$?
    wait $p2; local r2=$?
    c1=$(ctxsw $SRV); t1=$(date +%s.%N)
    tail -q -n 1 "$T_TMP/$label.c1" "$T_TMP/$label.c2" >&2
    t_ok $((r1 | r2)) "$label: $N sessions, every input got exactly one output, in order, equal to it"
    t_check "$label: $((N * FRAMES)) frames answered" [ "$(cat "$T_TMP/$label.c1" "$T_TMP/$label.c2" |
        awk '/^total /{ for (i = 1; i <= NF; i++) if ($i ~ /^real=/) s += substr($i, 6) } END { print s + 0 }')" = $((N * FRAMES)) ]
    kill -TERM $SRV; wait $SRV
    t_ok $? "$label: SIGTERM: drained, exit status 0"
    RATE=$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.0f", (b - a) / (t1 - t0) }')
}

# 20 ms: at most one batch wait and one epoll_wait a period (50 a second
# each), a tick's wake (12.5) and a few lock waits: under 200 a second
run batch 20000
BATCHED=$RATE
run nobatch 0
t_diag "the I/O thread's sleeps (voluntary context switches) a second: $BATCHED with --io-batch-us 20000," \
       "$RATE with 0 ($((N * 1000 / 80)) frames a second in; load $(cut -d' ' -f1 /proc/loadavg))"
t_at_most "batched: the I/O thread slept at most 200 times a second ($BATCHED)" "$BATCHED" 200
t_done
