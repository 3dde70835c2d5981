#!/usr/bin/env bash
# serve_asr.sh: mt-serve --ws /api/asr-streaming (issue 53), Kyutai's
# streaming speech-to-text protocol, against a client nobody here wrote
# from our code: tests/helpers/asr_client.py, written from their asr.rs and
# batched_asr.rs with python3-websockets and python3-msgpack, sends a
# spoken recording as f32 Audio messages with Markers between them.
#
# Ready comes first; every Marker comes back, in order, and after it no
# EndWord stops inside the audio sent before it (their server's promise:
# the words of that audio came first); word times never go backwards.
# Audio sent all at once (faster than real time) is taken and transcribed
# as fast as the ticks' catch-up rounds allow, with nothing dropped, as
# their server buffers and steps it; more than 30 s ahead of the model is
# refused with an Error and a close (their server has no bound). Bad
# MessagePack, wrong types, a NaN, an array header claiming 2^32-1
# samples, a message over 256 KiB, a flood of markers: an Error with the
# reason and a close with it (1008; 1009 for the oversize message), while a
# session at real time beside them keeps every marker and word. mt-replay
# as the client writes the words and times the Python clients got. A
# full server refuses with an Error and no Ready. The token
# is taken as the kyutai-api-key header or the auth_id query parameter;
# a model that is not speech-to-text answers the path with 404.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
PY=/usr/bin/python3
AC=$MT_ROOT/tests/helpers/asr_client.py
TOKZ=$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model
t_need mt-serve sox espeak-ng
"$PY" -c 'import websockets, msgpack' 2>/dev/null ||
    t_skip_all "python3-websockets or python3-msgpack not installed"
cd "$T_TMP" || exit 1
t_fast_blas

espeak-ng -w sp.wav "Words come back with their times, and every marker after them." 2>/dev/null
sox sp.wav -r 24000 -c 1 -b 16 sp24.wav
sox sp24.wav sp24.wav sp24.wav long.wav          # about 13 s
sox -n -r 24000 -c 1 -b 16 far.wav trim 0 45     # 45 s: more than 30 s ahead

port_of() {   # port_of LOG
    local i=0 p
    while [ $i -lt 300 ]; do
        p=$(sed -n 's|.*ws://127\.0\.0\.1:\([0-9]*\)/api/asr-streaming.*|\1|p' "$1")
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
fact() {   # fact FILE KEY: the value, quoted or not
    sed -n -e "s/.* *\\b$2=\"\\([^\"]*\\)\".*/\\1/p" -e t -e "s/^\\(.* \\)*$2=\\([^ ]*\\).*/\\2/p" "$1"
}

head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > tok
"$S" -s "$T_TMP/s.sock" --ws 127.0.0.1:0 --token-file tok -m synthetic:kyutai-tiny-stt \
    --tokenizer "$TOKZ" --threads 1 > lat 2> log &
SRV=$!; t_track $SRV
P=$(port_of log)
t_check "the log names the speech-to-text address" test -n "$P"
t_check "... and the delay in frames (0.5 s: 6)" grep -q "text 6 frames behind" log
URL=ws://127.0.0.1:$P/api/asr-streaming
KEY=kyutai-api-key=$(cat tok)

timeout 60 "$PY" "$AC" "$URL" sp24.wav --timeout 20 > notok.txt 2>&1
t_check "no token: HTTP 401 ($(cat notok.txt))" grep -q 'errors="http 401;"' notok.txt
timeout 60 "$PY" "$AC" "$URL?auth_id=$(cat tok)" sp24.wav --pace 0 --timeout 30 > q.txt 2>&1
t_check "the token as auth_id: Ready, the marker back ($(cat q.txt))" \
    test "$(fact q.txt ready_first)/$(fact q.txt markers_back)" = 1/1

# a session at real time, markers every 5 chunks, through everything below
timeout 120 "$PY" "$AC" "$URL" long.wav --header "$KEY" --marker-every 5 --pace 1 \
    --timeout 60 --log good.log > good.txt 2>&1 &
GOOD=$!

# audio all at once: taken faster than real time, nothing dropped
timeout 120 "$PY" "$AC" "$URL" long.wav --header "$KEY" --marker-every 5 --pace 0 \
    --timeout 60 --log fast.log > fast.txt 2>&1
t_diag "fast: $(cat fast.txt)"
t_check "all at once: Ready first" test "$(fact fast.txt ready_first)" = 1
t_check "... every marker back, in order" \
    test "$(fact fast.txt markers_back)/$(fact fast.txt marker_order)" = "$(fact fast.txt markers_sent)/1"
t_check "... after the words of the audio before it" test "$(fact fast.txt marker_late_words)" = 0
t_check "... words with times that never go backwards ($(fact fast.txt words) words)" \
    test "$(fact fast.txt ts_monotonic)" = 1 -a "$(fact fast.txt words)" -gt 0
t_check "... no Error, a clean close" test "$(fact fast.txt errors)/$(fact fast.txt close)" = /1000
t_at_most "... faster than real time (elapsed $(fact fast.txt elapsed) s for $(fact fast.txt audio) s + 1 s flush)" \
    "$(fact fast.txt elapsed)" "$(awk -v a="$(fact fast.txt audio)" 'BEGIN { print a + 1 }')"

# more than 30 s ahead of the model: refused
timeout 60 "$PY" "$AC" "$URL" far.wav --header "$KEY" --pace 0 --timeout 30 > far.txt 2>&1
t_check "45 s at once: an Error ($(fact far.txt errors))" grep -q 'errors="[^"]*ahead' far.txt
t_check "... and a close 1008 with the reason" test "$(fact far.txt close)" = 1008

# hostile messages, each on its own connection
for bad in garbage trailing wrongtype badsample hugearray notmap unknown markerflood; do
    timeout 30 "$PY" "$AC" "$URL" --header "$KEY" --bad $bad --timeout 20 > bad_$bad.txt 2>&1
    t_check "$bad: an Error with the reason ($(fact bad_$bad.txt errors))" \
        grep -q 'errors="[^"]\+"' bad_$bad.txt
    t_check "... then a close 1008 carrying it ($(fact bad_$bad.txt reason))" \
        test "$(fact bad_$bad.txt close)" = 1008 -a -n "$(fact bad_$bad.txt reason)"
done
timeout 30 "$PY" "$AC" "$URL" --header "$KEY" --bad bigmsg --timeout 20 > bad_big.txt 2>&1
t_check "a message over 256 KiB: close 1009 ($(cat bad_big.txt))" test "$(fact bad_big.txt close)" = 1009

wait $GOOD
t_diag "good: $(cat good.txt)"
t_check "the real-time session beside them: Ready first, every marker back in order" \
    test "$(fact good.txt ready_first)/$(fact good.txt markers_back)/$(fact good.txt marker_order)" = \
         "1/$(fact good.txt markers_sent)/1"
t_check "... after the words of the audio before each" test "$(fact good.txt marker_late_words)" = 0
t_check "... no Error, a clean close" test "$(fact good.txt errors)/$(fact good.txt close)" = /1000
t_check "the server logged each session's word latency" grep -q "asr: .* word latency p50" log
t_check "... with nothing dropped or FILLed in the good sessions" \
    test "$(grep -c "asr: .* 0 FILL, 0 not answered" log)" -ge 2

# mt-replay as the client: the file at real time, words with times in the
# transcript, every frame answered (by its marker's echo)
timeout 120 "$MT_BIN/mt-replay" -s "$URL" long.wav -t words.txt \
    --token-file tok > rep.txt 2> rep.err
t_check "mt-replay over the protocol: exit 0 ($(tail -1 rep.err))" test $? = 0
t_check "... every frame answered" grep -q "replay_summary=1 done=1 .* missing=0" rep.txt
# The words, each "[start] word", compared where they are owed. A Word is
# sent when its word ends, and the words that end in the silence a client
# sends after its audio come before or after its last Marker's echo as the
# host's timing falls; a client closes at that echo, so how many of them
# it gets is timing (under ASan beside other tests one client got 12 words
# and another 11, CI twice). The words before the last Marker are owed:
# the two Python clients must have the same ones, mt-replay must have at
# least as many, and every client's words must agree with every other's
# as far as both go (the shorter list begins the longer one).
for c in good fast; do
    sed -n "s/^[0-9.]* Word text=\\(.*\\) start_time=\\(.*\\)$/[\\2] \\1/p" $c.log |
        awk '{ $1 = sprintf("[%.2f]", substr($1, 2, length($1) - 2)); print }' > want_$c.txt
    awk '/ Marker id=/ { m = NR } { l[NR] = $0 } END { for (i = 1; i < m; i++) print l[i] }' $c.log |
        grep -c " Word text=" > owed_$c.txt
done
cut -d' ' -f3- words.txt > got.txt
agree() {   # agree A B: the shorter of the two files begins the longer
    local n a b
    a=$(wc -l < "$1"); b=$(wc -l < "$2"); n=$((a < b ? a : b))
    cmp -s <(head -n $n "$1") <(head -n $n "$2")
}
t_check "the Python clients were owed the same words ($(cat owed_good.txt) before the last Marker, $(cat owed_fast.txt) all at once)" \
    test "$(cat owed_good.txt)" = "$(cat owed_fast.txt)" -a "$(cat owed_good.txt)" -gt 0
t_check "... and got the same words and times as far as both go ($(wc -l < want_good.txt) and $(wc -l < want_fast.txt) words)" \
    agree want_good.txt want_fast.txt
t_check "mt-replay's transcript: every owed word ($(wc -l < got.txt) words, $(cat owed_good.txt) owed)" \
    test "$(wc -l < got.txt)" -ge "$(cat owed_good.txt)"
got_agrees() { test -s got.txt && agree want_good.txt got.txt && agree want_fast.txt got.txt; }
t_check "... the words and start times the Python clients got, as far as each goes" got_agrees
kill $SRV; wait $SRV 2>/dev/null

# admission as for any session: a full server refuses with the reason
"$S" -s "$T_TMP/f.sock" --ws 127.0.0.1:0 -m synthetic:kyutai-tiny-stt --threads 1 \
    --max-sessions 1 > lat3 2> log3 &
SRV3=$!; t_track $SRV3
P3=$(port_of log3)
URL3=ws://127.0.0.1:$P3/api/asr-streaming
timeout 60 "$PY" "$AC" "$URL3" long.wav --pace 1 --timeout 40 > hold.txt 2>&1 &
HOLD=$!
i=0   # until it is admitted
while ! grep -q "verdict=accept" lat3 && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
timeout 30 "$PY" "$AC" "$URL3" sp24.wav --timeout 20 > full.txt 2>&1
t_check "a full server: an Error with the reason ($(fact full.txt errors))" \
    grep -q 'errors="[^"]*[a-z]' full.txt
t_check "... no Ready, and a clean close" \
    test "$(fact full.txt ready_first)/$(fact full.txt close)" = 0/1000
kill $HOLD; wait $HOLD 2>/dev/null
kill $SRV3; wait $SRV3 2>/dev/null

# a model that speaks: no speech-to-text path
"$S" -s "$T_TMP/m.sock" --ws 127.0.0.1:0 -m synthetic:kyutai-tiny-mimi --threads 1 \
    > lat2 2> log2 &
SRV2=$!; t_track $SRV2
i=0; while ! grep -q "websocket on" log2 && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
P2=$(sed -n 's|.*ws://127\.0\.0\.1:\([0-9]*\)/api/chat.*|\1|p' log2)
timeout 30 "$PY" "$AC" "ws://127.0.0.1:$P2/api/asr-streaming" sp24.wav --timeout 10 > nostt.txt 2>&1
t_check "not a speech-to-text model: HTTP 404 ($(cat nostt.txt))" grep -q 'http 404' nostt.txt
kill $SRV2; wait $SRV2 2>/dev/null
t_done
