#!/usr/bin/env bash
# replay_ws.sh: mt-replay -s ws://HOST:PORT/api/chat (issue 41, the client
# side): against mt-serve --ws speaking Kyutai's WebSocket protocol, a
# spoken recording replayed by two sessions comes back whole (every frame
# sent answered, none missing) with the same counts as over mt-frame to
# the same server, the server's tick lines count the same input frames,
# the returned audio is the echo of the input (matched against what the
# mt-frame path returned), and a refusal is reported with the server's own
# reason (a full server's Error message; a wrong token's HTTP 401).
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
S=$MT_BIN/mt-serve
PY=/usr/bin/python3
t_need mt-replay mt-serve espeak-ng
cd "$T_TMP" || exit 1
t_fast_blas

espeak-ng -w sp.wav "Every frame sent over the WebSocket comes back, in order." 2>/dev/null
port_of() {   # port_of LOG
    local i=0 p
    while [ $i -lt 300 ]; do
        p=$(sed -n 's|.*websocket on ws://127\.0\.0\.1:\([0-9]*\)/api/chat.*|\1|p' "$1" 2>/dev/null)   # the log may not exist yet
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
kv() { sed -n "s/.*[ ^]$2=\([^ ]*\).*/\1/p" "$1" | head -1; }   # kv FILE KEY (summary line)
insum() { awk '/^tick=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "in") s += kv[2] } } END { print s + 0 }' "$1"; }

"$S" -s "$T_TMP/s.sock" --ws 127.0.0.1:0 -m synthetic:echo --threads 1 \
    --max-sessions 4 > lat 2> log &
SRV=$!; t_track $SRV
P=$(port_of log)
t_check "mt-serve --ws is up" test -n "$P"
URL=ws://127.0.0.1:$P/api/chat

timeout 60 "$R" -s "$URL" -n 2 -o ws%d.wav sp.wav > ws.out 2> ws.err
t_ok $? "mt-replay -s ws://: two sessions done $(grep summary ws.out) $(head -c 300 ws.err)"
grep '^replay_summary' ws.out > ws.sum
i=0   # until the server has ended both
while ! tail -1 lat | grep -q " active=0 " && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
in_ws=$(insum lat)
timeout 60 "$R" -s "$T_TMP/s.sock" -n 2 -o mf%d.wav sp.wav > mf.out 2> mf.err
t_ok $? "mt-replay over mt-frame to the same server: done"
grep '^replay_summary' mf.out > mf.sum
t_check "over ws://: both sessions done" test "$(kv ws.sum done)" = 2
t_check "... frames sent ($(kv ws.sum sent)) the same as over mt-frame ($(kv mf.sum sent))" \
    test "$(kv ws.sum sent)" = "$(kv mf.sum sent)"
t_check "... every frame answered: received $(kv ws.sum received) = sent" \
    test "$(kv ws.sum received)" = "$(kv ws.sum sent)"
t_check "... as many as over mt-frame ($(kv mf.sum received))" \
    test "$(kv ws.sum received)" = "$(kv mf.sum received)"
t_check "... none missing" test "$(kv ws.sum missing)" = 0
t_check "... none a FILL" test "$(kv ws.sum filled)" = 0
# each bridge sends a page of silence after its END (the tail of the
# audio, for a server that drops the pre-skip); this server keeps the
# pre-skip, so that page is one more whole frame a session
t_check "the server's tick lines count the ws sessions' input frames ($in_ws), and the silence page after each END" \
    test "$in_ws" = $(( $(kv ws.sum sent) + 2 ))
"$PY" - ws0.wav mf0.wav > corr.txt <<'PYEOF'
import sys, wave, numpy as np
def rd(p):
    w = wave.open(p); return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(float)
a, b = rd(sys.argv[1]), rd(sys.argv[2])
n = min(len(a), len(b)) - 4000
best = max((np.corrcoef(a[l:l + n], b[:n])[0, 1], l) for l in range(0, 4000, 4))
print("corr=%.3f lag=%d samples=%d,%d" % (best[0], best[1], len(a), len(b)))
sys.exit(0 if best[0] > 0.8 and len(a) == len(b) else 1)
PYEOF
t_ok $? "the audio back over ws:// is the echo the mt-frame path returned, frame for frame in length ($(cat corr.txt))"
kill $SRV; wait $SRV 2>/dev/null

# refusals: a full server (one session, two asked for), a wrong token
head -c 24 /dev/urandom | base64 > tok
"$S" -s "$T_TMP/t.sock" --ws 127.0.0.1:0 -m synthetic:echo --threads 1 \
    --max-sessions 1 > lat2 2> log2 &
SRV2=$!; t_track $SRV2
P2=$(port_of log2)
timeout 60 "$R" -s "ws://127.0.0.1:$P2/api/chat" -n 2 sp.wav > full.out 2> full.err
rc=$?
t_check "a full server: mt-replay fails (rc $rc)" test $rc != 0
grep -E '^replay_(summary|rejected|retry|session)' full.out | head -6 | sed 's/^/#   /'
why=$(sed -n 's/.*verdict=reject reason="\([^"]*\)".*/\1/p' lat2 | head -1)
t_check "the server logged its reason ($why)" test -n "$why"
t_check "... one session done, one rejected $(grep summary full.out)" \
    grep -q '^replay_summary=2 done=1 rejected=1 ' full.out
# either session may be the one refused: their HELLOs race
t_check "... rejected with the server's own reason" \
    sh -c "grep '^replay_rejected=rejected session=' full.out | grep -qF 'reason=\"$why\"'"
kill $SRV2; wait $SRV2 2>/dev/null
"$S" -s "$T_TMP/u.sock" --ws 127.0.0.1:0 --token-file tok -m synthetic:echo --threads 1 \
    > lat3 2> log3 &
SRV3=$!; t_track $SRV3
P3=$(port_of log3)
timeout 60 "$R" -s "ws://127.0.0.1:$P3/api/chat" sp.wav > tok.out 2> tok.err
t_check "no token: rejected with the HTTP status $(grep rejected= tok.out)" \
    grep -q 'reason="upgrade refused: HTTP/1.1 401' tok.out
timeout 60 "$R" -s "ws://127.0.0.1:$P3/api/chat" --token-file tok sp.wav > tok2.out 2> tok2.err
t_ok $? "with the token (sent as kyutai-api-key): done $(grep summary tok2.out)"
kill $SRV3; wait $SRV3 2>/dev/null
timeout 60 "$R" -s "ws://127.0.0.1:$P3/api/chat" sp.wav > gone.out 2> gone.err
t_check "nobody listening: a refusal naming the connect, no hang" \
    grep -q 'reason="connect' gone.out
t_done
