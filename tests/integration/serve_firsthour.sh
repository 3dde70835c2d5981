#!/usr/bin/env bash
# serve_firsthour.sh: what a new user meets on a first start (issue 52).
#  - A start that takes seconds says what it is doing: held on purpose
#    (a --latency-log FIFO with no reader yet), mt-serve prints from the
#    2nd second on, every 5 s, "starting: waiting for a reader of
#    --latency-log FIFO (N s so far)", then "started in N s"; a start
#    under 2 s prints none of it (synthetic:echo, when it is that fast).
#  - The client can tell which server it reached: mt-serve gives its pid
#    in its start line and mt-replay says "mt-serve pid N answered", the
#    pid of the server on that socket, not of another one.
#  - A FIFO given as an input file is read as a stream (its writer is
#    not left blocked), and the session answers all of it.
#  - A client that leaves is logged "closed: disconnected", one wording
#    whether its socket was closed or reset under the server's writes.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-replay sox
t_fast_blas
cd "$T_TMP" || exit 1
sox -n -r 24000 -c 1 -b 16 talk.wav synth 1 sine 300 vol 0.2

# a slow start: its progress lines. The start is held on purpose (its
# --latency-log is a FIFO that nobody reads yet, which the server waits
# for before it listens), so it is slow on any host: 3 s, then a reader.
mkfifo lat.fifo
t0=$(date +%s.%N)
t_serve base.out base.err -s "$T_TMP/base.sock" -m synthetic:tiny --latency-log lat.fifo
BASE=$SRV
wait_for_line base.err 'starting: waiting for a reader of --latency-log' 200
sleep 1
cat lat.fifo > lat.txt &
t_track $!
wait_for_socket "$T_TMP/base.sock" 1200
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
t_diag "held in start-up for $secs s (load $(cut -d' ' -f1 /proc/loadavg))"
for _ in $(seq 50); do grep -q ', pid ' base.err && break; sleep 0.1; done
sed 's/^/#   /' base.err
t_check "a start held $secs s says what it does: 'starting: waiting for a reader of --latency-log lat.fifo (N s so far)'" \
    grep -Eq '^mt-serve: starting: waiting for a reader of --latency-log lat.fifo \([0-9]+ s so far\)$' base.err
t_check "... and how long it took" grep -Eq '^mt-serve: started in [0-9.]+ s$' base.err
t_check "... before its start line" \
    sh -c 'grep -n "started in\|, pid " "$0" | head -1 | grep -q "started in"' base.err
t_check "the start line gives the server's pid ($BASE)" grep -q ", pid $BASE\$" base.err

# a second server on another socket: each client names the pid it reached
t0=$(date +%s.%N)
t_serve echo.out echo.err -s "$T_TMP/echo.sock" -m synthetic:echo
ECHO=$SRV
wait_for_socket "$T_TMP/echo.sock" 600
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
for _ in $(seq 50); do grep -q ', pid ' echo.err && break; sleep 0.1; done
if awk -v s="$secs" 'BEGIN { exit !(s < 1.5) }'; then
    t_check "a start of $secs s prints no progress" sh -c '! grep -q "starting:\|started in" echo.err'
else
    t_skip "synthetic:echo took $secs s to start here: not a quick start"
fi
"$MT_BIN/mt-replay" -s "$T_TMP/echo.sock" talk.wav > r1.out 2> r1.err
t_check "mt-replay against the echo server: exit 0" test $? = 0
t_check "it names the server it reached: pid $ECHO $(cat r1.err)" \
    grep -q "^mt-replay: $T_TMP/echo.sock: mt-serve pid $ECHO answered\$" r1.err
"$MT_BIN/mt-replay" -s "$T_TMP/base.sock" talk.wav > r2.out 2> r2.err
t_check "against the other server: its pid, $BASE $(cat r2.err)" \
    grep -q "mt-serve pid $BASE answered\$" r2.err

# a FIFO as an input file: read whole as a stream, its writer not blocked
mkfifo in.wav
# (the redirection inside the timeout: a writer whose reader never comes
# blocks in open(), which the timeout must end)
( timeout 30 sh -c 'exec sox talk.wav -t wav - 2>/dev/null > in.wav'; echo $? > writer.rc ) &
WRITER=$!
timeout 60 "$MT_BIN/mt-replay" -s "$T_TMP/echo.sock" in.wav -o back.wav > r3.out 2> r3.err
rc=$?
wait $WRITER
t_check "a FIFO input: mt-replay exits 0 ($rc) $(head -c 200 r3.err)" test $rc = 0
t_check "... its writer was not blocked (sox exit $(cat writer.rc))" test "$(cat writer.rc)" = 0
t_check "... and every frame of it was answered" \
    grep -q '^replay_summary=1 done=1 .* sent=13 received=13 ' r3.out
# a client that leaves mid-session (killed: its socket closed or reset
# under the server's writes) is logged in the one wording of a client that
# left, "closed: disconnected", never as a write or read error
sox -n -r 24000 -c 1 -b 16 long.wav synth 20 sine 300 vol 0.2
for i in 1 2 3; do
    "$MT_BIN/mt-replay" -s "$T_TMP/echo.sock" long.wav > gone$i.out 2>&1 &
    GONE=$!
    for _ in $(seq 100); do grep -q '^replay_tick=' gone$i.out && break; sleep 0.1; done
    kill -9 $GONE; wait $GONE 2>/dev/null
done
for _ in $(seq 50); do [ "$(grep -c 'closed: ' echo.err)" -ge 3 ] && break; sleep 0.1; done
grep 'closed: ' echo.err | sed 's/^/#   /'
t_check "three clients that left: three 'closed: disconnected'" \
    test "$(grep -c 'session [0-9]*: closed: disconnected$' echo.err)" = 3
t_check "... and no write or read error logged for them" \
    sh -c '! grep -q "closed: \(write\|read\): " "$0"' echo.err
# Kyutai's clients through --ws that hang up early: the gate closes its
# session's socket while the server still writes to it, which was logged
# "closed: write: Broken pipe" (1 time in 3 here before the fix)
if command -v opusenc >/dev/null && /usr/bin/python3 -c 'import websockets' 2>/dev/null; then
    "$MT_BIN/mt-serve" -s "$T_TMP/ws.sock" --ws 127.0.0.1:0 -m synthetic:echo \
        > ws.out 2> ws.err &
    WSS=$!; t_track $WSS
    for _ in $(seq 600); do url=$(grep -o 'ws://[^ ]*' ws.err) && break; sleep 0.1; done
    sox -n -r 24000 -c 1 -b 16 ws.wav synth 4 sine 300 vol 0.2
    opusenc --quiet ws.wav ws.opus
    for i in 1 2 3 4 5; do
        timeout 60 /usr/bin/python3 "$MT_ROOT/tests/helpers/ws_client.py" "$url" \
            ws.opus back$i.opus --frames 5 > wsc$i.txt 2>&1
    done
    for _ in $(seq 50); do [ "$(grep -c 'closed: ' ws.err)" -ge 5 ] && break; sleep 0.1; done
    grep 'closed: ' ws.err | sed 's/^/#   /'
    t_check "five ws clients that hung up early: five 'closed: disconnected'" \
        test "$(grep -c 'session [0-9]*: closed: disconnected$' ws.err)" = 5
else
    t_skip "opus-tools or Debian's python3-websockets missing: the ws hang-up"
fi
t_done
