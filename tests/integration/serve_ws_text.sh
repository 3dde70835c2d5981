#!/usr/bin/env bash
# serve_ws_text.sh: mt-serve --ws with a Kyutai LM (synthetic:kyutai-tiny-mimi)
# and --tokenizer: the model's text reaches a WebSocket client nobody here
# wrote (python3-websockets) as Kyutai's Text messages, after the
# handshake, valid UTF-8, in order with the audio. Exactly: for Ogg Opus
# silence (opusenc's, which decodes to zeros whatever the pre-skip) the
# Text messages, each placed after the audio page it follows, are the
# transcript an mt-frame client (mt-replay -t --tokenizer) gets from the
# same server for the same zeros and the same (default) seed, line for
# line. A real recording gets Text messages too, and mt-replay -s ws://
# records them (its transcript, without a tokenizer of its own). Without
# --tokenizer no Text message is sent, and the server says so at start.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
PY=/usr/bin/python3
WC=$MT_ROOT/tests/helpers/ws_client.py
TOKM=$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model
t_need mt-serve mt-replay opusenc sox espeak-ng
"$PY" -c 'import websockets' 2>/dev/null || t_skip_all "python3-websockets not installed"
cd "$T_TMP" || exit 1
t_fast_blas

port_of() {   # port_of LOG
    local i=0 p
    while [ $i -lt 300 ]; do
        p=$(sed -n 's|.*websocket on ws://127\.0\.0\.1:\([0-9]*\)/api/chat.*|\1|p' "$1")
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}
fact() { tr ' ' '\n' < "$1" | sed -n "s/^$2=//p"; }   # fact FILE KEY
# frames FILE.opus: the frames the server cuts the stream into (it keeps the
# pre-skip: all of opusenc's 20 ms packets up to the last granule position)
frames() {
    "$PY" - "$1" <<'PYEOF'
import struct, sys
d = open(sys.argv[1], "rb").read()
g = struct.unpack_from("<q", d, d.rindex(b"OggS") + 6)[0]
print((g + 959) // 960 * 960 // 2 // 1920)
PYEOF
}

"$S" -s "$T_TMP/s.sock" --ws 127.0.0.1:0 -m synthetic:kyutai-tiny-mimi --tokenizer "$TOKM" \
    --threads 1 > lat 2> log &
SRV=$!; t_track $SRV
P=$(port_of log)
t_check "mt-serve --ws with a Kyutai LM and --tokenizer is up" test -n "$P"
URL=ws://127.0.0.1:$P/api/chat
wait_for_socket "$T_TMP/s.sock"

# silence: the same input both ways, so the same text
sox -n -r 24000 -c 1 -b 16 sil.wav trim 0 3
opusenc --quiet sil.wav sil.opus
N=$(frames sil.opus)
"$PY" -c "
import wave
w = wave.open('zeros.wav', 'wb'); w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
w.writeframes(b'\0' * 2 * 1920 * $N); w.close()"
timeout 60 "$PY" "$WC" "$URL" sil.opus sil.out.opus --frames "$N" --drain 1 --text ws.tr > sil.txt 2>&1
t_check "silence over ws: every frame answered ($N) $(cat sil.txt)" test "$(fact sil.txt pages)" = "$N"
t_check "... Text messages came ($(fact sil.txt text))" test "$(fact sil.txt text)" -gt 0
t_check "... none before the handshake" test "$(fact sil.txt text_early)" = 0
t_check "... all UTF-8" test "$(fact sil.txt text_bad)" = 0
timeout 60 "$R" -s "$T_TMP/s.sock" zeros.wav -t mf.tr --tokenizer "$TOKM" > mf.out 2> mf.err
t_ok $? "mt-replay over mt-frame, the same zeros: done"
t_check "the Text messages ($(wc -l < ws.tr) lines) are the mt-frame transcript ($(wc -l < mf.tr) lines), text and frame alike" \
    cmp -s ws.tr mf.tr
cmp -s ws.tr mf.tr || diff ws.tr mf.tr | head -10 | sed 's/^/# /'

# a real recording
espeak-ng -w sp.wav "The words come back as text, after the audio they go with." 2>/dev/null
sox sp.wav -r 24000 -c 1 sp24.wav
opusenc --quiet sp24.wav sp.opus
M=$(frames sp.opus)
timeout 60 "$PY" "$WC" "$URL" sp.opus sp.out.opus --frames "$M" --drain 1 --text sp.tr > sp.txt 2>&1
t_check "a recording over ws: every frame answered ($M) $(cat sp.txt)" test "$(fact sp.txt pages)" = "$M"
t_check "... Text messages, after the handshake, UTF-8" \
    test "$(fact sp.txt text)" -gt 0 -a "$(fact sp.txt text_early)" = 0 -a "$(fact sp.txt text_bad)" = 0
timeout 60 "$R" -s "$URL" sp24.wav -t rws.tr > rws.out 2> rws.err
t_ok $? "mt-replay -s ws:// with the recording: done $(head -c 200 rws.err)"
t_check "... its transcript holds the server's words ($(wc -l < rws.tr) lines, no --tokenizer)" \
    test "$(wc -l < rws.tr)" -gt 0
t_check "... each a replay_text record with words" \
    test "$(grep -c '^replay_text=[0-9]* session=0 words=' rws.out)" = "$(wc -l < rws.tr)"
t_check "... and nothing printed on stderr for them" sh -c "! grep -q '^text' rws.err"
kill $SRV; wait $SRV 2>/dev/null

# no tokenizer: no Text messages, and the server says why
"$S" -s "$T_TMP/n.sock" --ws 127.0.0.1:0 -m synthetic:kyutai-tiny-mimi --threads 1 \
    > lat2 2> log2 &
SRV2=$!; t_track $SRV2
P2=$(port_of log2)
timeout 60 "$PY" "$WC" "ws://127.0.0.1:$P2/api/chat" sil.opus n.out.opus --frames "$N" \
    --drain 1 > n.txt 2>&1
t_check "without --tokenizer: every frame answered $(cat n.txt)" test "$(fact n.txt pages)" = "$N"
t_check "... and no Text message" test "$(fact n.txt text)" = 0
grep -q "no --tokenizer: the model's text is not sent" log2
t_ok $? "... as the server said at start"
kill $SRV2; wait $SRV2 2>/dev/null
t_done
