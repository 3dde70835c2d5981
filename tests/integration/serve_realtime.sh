#!/bin/bash
# serve_realtime: mt-serve --rt-priority N. Out-of-range and non-numeric
# priorities are usage errors (status 2); where SCHED_FIFO is permitted
# (root or CAP_SYS_NICE) the I/O, tick and log threads run under it at N
# while the CPU decoder's workers keep the normal policy, the start line
# says so, and sessions are served; where it is not permitted (an
# unprivileged user, rtprio limit 0) mt-serve exits 1 saying what to give.
. "$(dirname "$0")/lib.sh"
t_serve_test

for bad in 0 100 x -5; do
    "$MT_BIN/mt-serve" -s "$SOCK" --rt-priority "$bad" 2>"$T_TMP/err.bad"
    rc=$?
    t_check "--rt-priority $bad: status 2 ($rc) and a message" \
        [ $rc = 2 -a -s "$T_TMP/err.bad" ]
done
t_check "the message names the option" grep -q -- "--rt-priority" "$T_TMP/err.bad"

# policy TID: the scheduling policy name chrt reports for a thread
policy() { chrt -p "$1" 2>/dev/null | sed -n "s/.*scheduling policy: //p"; }
prio() { chrt -p "$1" 2>/dev/null | sed -n "s/.*scheduling priority: //p"; }

if ! chrt -f 10 true 2>/dev/null; then
    t_skip "SCHED_FIFO not permitted here: the privileged checks"
else
    # the simulated device: no decoder threads at all
    t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" --device sim:h200-moshi7b \
        -m synthetic:moshi-7b --sink 4 --window 28 --rt-priority 10
    wait_for_socket "$SOCK"
    t_check "server listens" [ -S "$SOCK" ]
    # the threads counted below exist once the first tick line is out
    t_check "the first tick line is out" wait_for_line "$T_TMP/lat" '^tick='

    t_check "the start line says SCHED_FIFO priority 10" \
        grep -q "I/O, tick and log threads under SCHED_FIFO priority 10" "$T_TMP/log"
    t_check "the I/O (main) thread runs SCHED_FIFO ($(policy $SRV)) at 10 ($(prio $SRV))" \
        [ "$(policy $SRV)" = SCHED_FIFO -a "$(prio $SRV)" = 10 ]
    fifo=0
    for t in /proc/$SRV/task/*; do
        [ "$(policy "${t##*/}")" = SCHED_FIFO ] && fifo=$((fifo + 1))
    done
    t_check "the tick and log threads too ($fifo threads under SCHED_FIFO)" [ $fifo -ge 3 ]
    timeout 60 "$FC" -s "$SOCK" -n 4 -f 25 --echo --end-timeout 10 >"$T_TMP/cli"
    t_ok $? "4 sessions: every input got exactly one output, in order"
    kill -TERM $SRV; wait $SRV
    t_ok $? "SIGTERM: drained, exit status 0"

    # the CPU device: its worker made before keeps the normal policy
    OPENBLAS_NUM_THREADS=1 t_serve "$T_TMP/lat.c" "$T_TMP/log.c" -s "$SOCK.c" \
        --device cpu --threads 2 -m synthetic:small --rt-priority 10
    wait_for_socket "$SOCK.c"
    t_check "cpu: the first tick line is out" wait_for_line "$T_TMP/lat.c" '^tick='
    other=0 fifo=0
    for t in /proc/$SRV/task/*; do
        case $(policy "${t##*/}") in
            SCHED_FIFO) fifo=$((fifo + 1)) ;;
            SCHED_OTHER) other=$((other + 1)) ;;
        esac
    done
    t_check "cpu: the decoder's worker keeps SCHED_OTHER ($other), the rest SCHED_FIFO ($fifo)" \
        [ $other = 1 -a $fifo -ge 3 ]
    timeout 60 "$FC" -s "$SOCK.c" -n 2 -f 10 >"$T_TMP/cli.c"
    t_ok $? "cpu: 2 sessions served"
    kill -TERM $SRV; wait $SRV
    t_ok $? "cpu: SIGTERM: drained, exit status 0"
fi

# not permitted: an unprivileged user with no rtprio limit
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    setpriv --reuid 65534 --regid 65534 --clear-groups bash -c 'ulimit -r 0 2>/dev/null
        exec "$0" --stdio --device cpu -m synthetic:tiny --threads 1 --rt-priority 10' \
        "$MT_BIN/mt-serve" </dev/null >/dev/null 2>"$T_TMP/err.perm"
    rc=$?
    if [ $rc = 126 -o $rc = 127 ]; then
        t_skip "the unprivileged user cannot run $MT_BIN/mt-serve (status $rc)"
        t_skip "the unprivileged user cannot run $MT_BIN/mt-serve (status $rc)"
    else
        t_check "unprivileged: exit status 1 ($rc)" [ $rc = 1 ]
        t_check "unprivileged: says it is not permitted and what to give" \
            grep -q "SCHED_FIFO priority 10: not permitted (run as root, grant CAP_SYS_NICE, or raise the rtprio limit" "$T_TMP/err.perm"
    fi
else
    t_skip "not root: cannot drop to an unprivileged user"
    t_skip "not root: cannot drop to an unprivileged user"
fi
t_done
