#!/usr/bin/env bash
# tcp_hostile: mt-serve --listen with --token-file against hostile clients
# over TCP (issue 23): a wrong token, no token, garbage before HELLO each
# get REJECT or a close, with a log line naming the peer; repeated failures
# from one address wait longer each time (and mt-replay --retry does not
# ask again: the REJECT is FINAL); an admitted session is untouched
# throughout; the Unix socket beside it needs no token; a non-loopback
# --listen without --token-file or --insecure refuses to start.
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
FC=$MT_TESTBIN/mt-fakeclient
PY=/usr/bin/python3
[ -x "$S" ] || t_skip_all "mt-serve not built"
[ -x "$FC" ] || t_skip_all "mt-fakeclient not built"
cd "$T_TMP" || exit 1

head -c 24 /dev/urandom | base64 > tok
head -c 24 /dev/urandom | base64 > bad
P=$(t_free_port)
"$S" -s "$T_TMP/s.sock" --listen 127.0.0.1:$P --token-file tok -m synthetic:echo \
    --device cpu --threads 1 --max-sessions 4 > lat 2> log &
SRV=$!; t_track $SRV
t_check "server listens" wait_for_socket "$T_TMP/s.sock" 300
t_check "the log says a token is required" grep -q "listening on tcp 127.0.0.1:$P (token required)" log

# the session that must come through untouched
timeout 60 "$FC" -s tcp:127.0.0.1:$P --token-file tok -n 1 -f 75 > good &
G=$!

sox -n -r 24000 -c 1 one.wav synth 1 sine 300 vol 0.3 2>/dev/null
# --retry does not ask again: the REJECT says (MT_FLAG_FINAL) that the
# same HELLO would be refused again
timeout 20 "$R" -s tcp:127.0.0.1:$P --token-file bad --retry 3 one.wav > r_bad.txt 2>&1
rc=$?
t_check "wrong token: REJECT with the reason" \
    grep -q 'replay_rejected=rejected.*authentication failed' r_bad.txt
t_check "wrong token with --retry 3: exit 3, not retried, saying why (rc $rc)" \
    sh -c 'test $0 = 3 && ! grep -q "^replay_retry=" r_bad.txt &&
        grep -q "not retried: the server says the same request would be refused again" r_bad.txt' $rc
t_check "wrong token: a log line with the peer address" \
    grep -Eq "connection from 127\.0\.0\.1:[0-9]+: wrong token" log
timeout 20 "$R" -s tcp:127.0.0.1:$P one.wav > r_none.txt 2>&1
t_check "no token: REJECT with the reason" \
    grep -q 'replay_rejected=rejected.*authentication failed' r_none.txt
t_check "no token: a log line with the peer address" \
    grep -Eq "connection from 127\.0\.0\.1:[0-9]+: no token" log

# garbage before HELLO: an ERROR frame (or a close), and a log line
"$PY" - $P > garbage.txt <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"\x00" * 100)
data = b""
try:
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
except Exception as e:
    print("error", e)
t = data[5] if len(data) > 5 else 0
print("closed bytes=%d type=%d" % (len(data), t))
PYEOF
t_check "garbage: ERROR frame then close" grep -q "closed bytes=[0-9]* type=7" garbage.txt
t_check "garbage: a log line with the peer address" \
    grep -Eq "connection from 127\.0\.0\.1:[0-9]+: bad frame" log

# failures from one address wait longer each time (0.25, 0.5, 1, 2 s ...);
# garbage is not a token failure
t0=$(date +%s%N)
timeout 20 "$R" -s tcp:127.0.0.1:$P --token-file bad one.wav > /dev/null 2>&1
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
t_check "the third failure from one address waits >= 1 s ($ms ms)" test $ms -ge 1000
t_check "the log counts the failures, each waiting twice as long" \
    grep -q "REJECT in 1.00 s (failure 3 from this address)" log

# the Unix socket beside the TCP port is guarded by its mode, not a token
timeout 30 "$FC" -s "$T_TMP/s.sock" -n 1 -f 5 > unix.txt
t_check "the Unix socket takes a session without a token" \
    grep -q "^total sessions=1 ok=1 done=1 " unix.txt

wait $G
t_check "the admitted session is untouched (done, no frame lost)" \
    grep -q "^total sessions=1 ok=1 done=1 .* missing=0" good
kill -TERM $SRV; wait $SRV
t_check "server exits 0" test $? = 0

# a non-loopback bind
"$S" --listen 0.0.0.0:0 -m synthetic:tiny --device cpu --threads 1 > /dev/null 2> nl.txt
rc=$?
t_check "non-loopback --listen without a token refuses to start (rc $rc)" test $rc != 0
t_check "... saying why" grep -q "not a loopback address.*--token-file.*--insecure" nl.txt
"$S" --listen 0.0.0.0:0 --insecure -m synthetic:tiny --device cpu --threads 1 > /dev/null 2> ins.txt &
I=$!; t_track $I
i=0; while ! grep -q "listening on tcp" ins.txt && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
t_check "--insecure starts, with a warning" grep -q "WARNING: --insecure" ins.txt
kill -TERM $I; wait $I
t_done
