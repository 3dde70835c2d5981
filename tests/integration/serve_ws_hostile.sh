#!/usr/bin/env bash
# serve_ws_hostile.sh: mt-serve --ws under hostile clients (issue 51), each
# made byte by byte by tests/helpers/ws_hostile.py, loopback only:
#  1. an Opus packet continued page after page for 10 s, with
#     --input-timeout 0: the session ends with the reason, and the server's
#     peak RSS stays within 64 MB of what it was;
#  2. an Ogg bomb (256 KiB of 120 ms packets) every second beside 8 real
#     sessions at real time: each bomb refused, every frame answered, and
#     no answer later than one period (80 ms) more than without bombs;
#  3. silent upgraded connections fill --ws-max-conns: a new client still
#     gets its handshake (the oldest silent one is evicted, close 1008);
#     one address's idle connections past --ws-max-per-addr evict its own;
#  4. loopback without a token: a warning at start;
#  5. 150 sessions: the session lines are rate-limited, with a summary;
#  6. wrong WebSocket keys (kyutai-api-key) and wrong metrics bearer tokens
#     wait longer each time;
#  7. a drain: close 1001 with a reason, and mt-replay ws:// counts its
#     sessions done;
#  9. --ws and --metrics off loopback without a token: exit 2 before the
#     model is even looked at;
# 10. RFC 6455: an invalid close code gets 1002, text not UTF-8 1007.
# (Item 8, the log's wording, is in the code: the queue to the server has
# its own line.)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
PY=/usr/bin/python3
H=$MT_ROOT/tests/helpers/ws_hostile.py
WC=$MT_ROOT/tests/helpers/ws_client.py
t_need mt-serve mt-replay opusenc sox espeak-ng
cd "$T_TMP" || exit 1
t_fast_blas

espeak-ng -w sp.wav "Every frame sent comes back, in order, through the protocol of Kyutai, while bombs fall beside it." 2>/dev/null
sox sp.wav -r 24000 -c 1 sp24.wav
opusenc --quiet --max-delay 20 sp24.wav in20.opus   # one 20 ms packet a page
opusenc --quiet sp24.wav in.opus

port_of() {   # port_of LOG
    local i=0 p
    while [ $i -lt 300 ]; do
        p=$(sed -n 's|.*websocket on ws://127\.0\.0\.1:\([0-9]*\)/api/chat.*|\1|p' "$1" 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
fact() { tr ' ' '\n' < "$1" | sed -n "s/^$2=//p"; }   # fact FILE KEY
kib() { sed -n "s/^$2:[^0-9]*\([0-9]*\) kB/\1/p" "/proc/$1/status"; }   # kib PID FIELD

# ---- 9: off loopback without a token: exit 2, before the model ---------------
"$S" -s "$T_TMP/x.sock" --ws 0.0.0.0:0 -m /nonexistent/model 2> off.err
rc=$?
t_check "--ws off loopback without a token: exit 2 ($(head -c 120 off.err))" test $rc = 2
t_check "... saying why, before the model is looked at" grep -q "is not a loopback address" off.err
"$S" -s "$T_TMP/x.sock" --metrics 0.0.0.0:0 -m /nonexistent/model 2> offm.err
rc=$?
t_check "--metrics off loopback without a token: exit 2 (rc $rc)" test $rc = 2

# ---- one server for 1-5 and 10 ---------------------------------------------------
"$S" -s "$T_TMP/s.sock" --ws 127.0.0.1:0 -m synthetic:echo --threads 1 --max-sessions 24 \
    --input-timeout 0 --ws-max-conns 20 --ws-max-per-addr 4 > lat 2> log &
SRV=$!; t_track $SRV
P=$(port_of log)
t_check "the log names the WebSocket address" test -n "$P"
URL=ws://127.0.0.1:$P/api/chat

# 4: the warning
t_check "loopback --ws without a token: a warning at start" \
    grep -q "WARNING: WebSocket on 127.0.0.1:$P without a token: every user" log

# 10: RFC 6455 close codes and UTF-8
timeout 20 "$PY" "$H" close "$URL" badcode > c1.txt 2>&1
t_check "a close frame with code 1005 (not to be sent): answered 1002 $(cat c1.txt)" \
    test "$(fact c1.txt close)" = 1002
timeout 20 "$PY" "$H" close "$URL" onebyte > c2.txt 2>&1
t_check "a close frame of one byte: 1002" test "$(fact c2.txt close)" = 1002
timeout 20 "$PY" "$H" close "$URL" badutf8 > c3.txt 2>&1
t_check "a text message that is not UTF-8: 1007 $(cat c3.txt)" test "$(fact c3.txt close)" = 1007
timeout 20 "$PY" "$H" close "$URL" goodclose > c4.txt 2>&1
t_check "a valid close: answered 1000" test "$(fact c4.txt close)" = 1000

# 1: the endless packet, with --input-timeout 0
rss0=$(kib $SRV VmRSS)
timeout 40 "$PY" "$H" endless "$URL" "${MT_WS_ENDLESS_S:-10}" > endless.txt 2>&1
hwm=$(kib $SRV VmHWM)
t_check "an endless Ogg packet: the session ends with the reason $(cat endless.txt)" \
    grep -q 'errors="bad audio: an Ogg packet over 65536 bytes' endless.txt
t_check "... and the server's peak RSS stays within 64 MB of before (+$(( (hwm - rss0) / 1024 )) MB)" \
    test $(( hwm - rss0 )) -le 65536

# 2: bombs beside 8 real sessions; the baseline first, in the same run.
# The server's CPU time in each (utime + stime, clock ticks) shows the
# bombs' cost whatever the machine's load.
cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
c0=$(cpu $SRV)
timeout 60 "$PY" "$H" realtime "$URL" in20.opus 8 > base.txt 2>&1
c1=$(cpu $SRV)
timeout 30 "$PY" "$H" bomb "$URL" 1 6.5 > bombs.txt 2>&1 &
B=$!
timeout 60 "$PY" "$H" realtime "$URL" in20.opus 8 > rt.txt 2>&1
wait $B
c2=$(cpu $SRV)
hz=$(getconf CLK_TCK)
want=$(fact rt.txt want)
t_check "every real session beside the bombs answered every frame ($(fact rt.txt answered); baseline $(cat base.txt))" \
    test "$(fact rt.txt answered)" = "$want,$want,$want,$want,$want,$want,$want,$want"
# late: an answer more than one period (80 ms) later than its session's
# median lateness. On a quiet machine there are none; on a loaded one the
# run without bombs has some too, so the bombs may add at most one a
# session (a bomb decoded whole stalled every session for 0.4 s and more:
# hundreds of late frames).
b=$(fact base.txt late_frames); l=$(fact rt.txt late_frames)
if [ "$l" -gt $(( 2 * b + 24 )) ] && t_host_busy; then
    t_skip "... no more frames late than without bombs: $l late, $b without, on a host with load $T_LOAD on $(nproc) cores (the CPU check below holds the bombs' cost)"
else
    t_check "... no more frames late by more than one period than without bombs: $l late (max $(fact rt.txt max_late_ms) ms), $b without (max $(fact base.txt max_late_ms) ms; load $(cut -d' ' -f1 /proc/loadavg))" \
        test "$l" -le $(( 2 * b + 24 ))
fi
t_check "... the bombs cost the server under a second of CPU (with them $(( c2 - c1 )) ticks, without $(( c1 - c0 )), $hz a second)" \
    test $(( c2 - c1 )) -le $(( c1 - c0 + hz ))
t_check "each bomb refused with the reason $(head -c 200 bombs.txt)" \
    test "$(fact bombs.txt bombs)" -ge 5 -a "$(tr ',' '\n' < bombs.txt | grep -vc 'faster_than_real_time\|before_admission')" = 0

# 3: silent upgraded connections fill the endpoint (20 places); after 2 s
# of silence they are idle, and a new client evicts the oldest
WS_HOSTILE_READY=ready WS_HOSTILE_STOP=stop timeout 60 "$PY" "$H" silent "$URL" 20 40 \
    > silent.txt 2>&1 &
SIL=$!
i=0; while [ ! -s ready ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
sleep 2.5   # silent for 2 s: idle
timeout 30 "$PY" "$WC" "$URL" in.opus out.opus --frames 5 > real.txt 2>&1
sleep 1; touch stop
t_check "20 silent upgraded connections: a new client gets its handshake and its frames $(cat real.txt)" \
    test "$(fact real.txt handshake_first)" = 1 -a "$(fact real.txt pages)" -ge 5
wait $SIL
t_check "... the silent ones were all upgraded $(cat silent.txt)" test "$(fact silent.txt upgraded)" = 20
t_check "... and one, the oldest, evicted for it (close 1008); a burst of one address is not" \
    grep -q 'closed=1 codes=1008$' silent.txt
i=0; while ! grep -q "idle ones evicted" log && [ $i -lt 120 ]; do sleep 0.1; i=$((i + 1)); done
# per address: 127.0.0.2 holds 5 idle connections against a cap of 4: its own
# oldest is evicted (close 1008), nobody else's
timeout 30 "$PY" "$H" silent "$URL" 4 5 --src 127.0.0.2 > a4.txt 2>&1 &
A4=$!
sleep 2.8   # silent for 2 s: idle
timeout 30 "$PY" "$H" silent "$URL" 1 2 --src 127.0.0.2 > a5.txt 2>&1
wait $A4
t_check "one address past --ws-max-per-addr 4 (idle): its oldest evicted with 1008 $(cat a4.txt)" \
    grep -q 'closed=1 codes=1008' a4.txt
t_check "... the newest kept $(cat a5.txt)" grep -q 'closed=0' a5.txt

# 5: 300 short sessions at once: their two lines each are rate-limited (a
# burst of 64, 10 a second), the rest summed up (a session the endpoint,
# full of closing connections on a loaded host, turned away is tried again)
sl() { grep -c "session [0-9]*: admitted\|session [0-9]*: closed" log; }
n0=$(sl)
timeout 120 "$PY" "$H" many "$URL" 300 12 > many.txt 2>&1
n1=$(sl)
secs=$(fact many.txt secs); secs=${secs%.*}
kill -TERM $SRV; wait $SRV
t_check "300 sessions in $(fact many.txt secs) s ($(fact many.txt sessions) done, $(fact many.txt retries) tried again): $((n1 - n0)) session lines, at most 2 x (64 + 10 a second)" \
    test $((n1 - n0)) -le $(( 2 * (64 + 10 * (secs + 1)) )) -a "$(fact many.txt sessions)" = 300
t_check "... the rest summed up in a line $(grep -m1 'without their own lines' log | cut -c1-160)" \
    grep -q "session(s) admitted and closed without their own lines" log

# ---- 6: back-off after wrong keys and wrong bearer tokens --------------------
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > tok; chmod 600 tok
"$S" -s "$T_TMP/t.sock" --ws 127.0.0.1:0 --metrics 127.0.0.1:0 --token-file tok \
    -m synthetic:echo --threads 1 > lat2 2> log2 &
SRV2=$!; t_track $SRV2
P2=$(port_of log2)
i=0; while ! grep -q "metrics on http://" log2 && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
MP=$(sed -n 's|.*metrics on http://127\.0\.0\.1:\([0-9]*\)/metrics.*|\1|p' log2)
timeout 60 "$PY" "$H" keyguess "ws://127.0.0.1:$P2/api/chat" 4 > kg.txt 2>&1
t_check "4 wrong WebSocket keys in a row: each 401 $(cat kg.txt)" \
    test "$(fact kg.txt statuses)" = 401,401,401,401
t_check "... after a doubling wait (0.25 + 0.5 + 1 + 2 s at least)" \
    awk -v s="$(fact kg.txt secs)" 'BEGIN { exit !(s >= 3.7) }'
timeout 60 "$PY" "$H" mguess "http://127.0.0.1:$MP/metrics" 4 > mg.txt 2>&1
t_check "4 wrong metrics bearer tokens in a row: each 401 $(cat mg.txt)" \
    test "$(fact mg.txt statuses)" = 401,401,401,401
t_check "... after a doubling wait" awk -v s="$(fact mg.txt secs)" 'BEGIN { exit !(s >= 3.7) }'
t_check "... the wrong keys logged once an interval, not once each" \
    test "$(grep -c 'wrong or missing token: 401' log2)" -le 1
kill -TERM $SRV2; wait $SRV2

# ---- 7: a drain is a going away (1001), and mt-replay counts it done -----------
"$S" -s "$T_TMP/d.sock" --ws 127.0.0.1:0 -m synthetic:echo --threads 1 --max-sessions 4 \
    > lat3 2> log3 &
SRV3=$!; t_track $SRV3
P3=$(port_of log3)
U3=ws://127.0.0.1:$P3/api/chat
timeout 60 "$PY" "$WC" "$U3" in.opus d.opus --realtime --timeout 20 > drain.txt 2>&1 &
DC=$!
timeout 60 "$R" -s "$U3" -n 2 -o dr%d.wav sp.wav > dr.out 2> dr.err &
DR=$!
i=0; while [ "$(grep -c 'admitted' log3)" -lt 3 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
sleep 1.5
kill -TERM $SRV3
wait $DC
wait $DR; rc=$?
wait $SRV3
t_check "a drained WebSocket session: close 1001 $(cat drain.txt)" test "$(fact drain.txt close)" = 1001
t_ok $rc "mt-replay ws:// through a drain: exit 0 $(grep summary dr.out) $(head -c 300 dr.err)"
t_check "... both sessions done" test "$(grep '^replay_summary' dr.out | sed -n 's/.* done=\([0-9]*\).*/\1/p')" = 2
# frames sent after the server stopped reading are missing, as over mt-frame
grep '^replay_summary' dr.out > dr.sum
snt=$(sed -n 's/.* sent=\([0-9]*\).*/\1/p' dr.sum)
rcv=$(sed -n 's/.* received=\([0-9]*\).*/\1/p' dr.sum)
mis=$(sed -n 's/.* missing=\([0-9]*\).*/\1/p' dr.sum)
t_check "... every frame sent answered or counted missing ($snt = $rcv + $mis)" test "$snt" = $(( rcv + mis ))

t_done
