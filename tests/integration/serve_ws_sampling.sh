#!/usr/bin/env bash
# serve_ws_sampling.sh: sampling set per WebSocket connection by Kyutai's own
# URL parameter names on /api/chat (what their web client's Settings panel
# sends), by a client nobody here wrote (python3-websockets):
#   - greedy (text_temperature=0&audio_temperature=0) gives the same text
#     tokens twice, and the same as an mt-frame client (mt-replay -t) gets
#     from a server started with --temperature 0 --text-temperature 0, for
#     the same input (Ogg Opus silence, which decodes to zeros);
#   - a high temperature (with fixed seeds) changes them;
#   - a value out of range is refused with an Error message naming the
#     parameter, and logged;
#   - the parameters not implemented (pad_mult, repetition_penalty...) are
#     named in the log, the honoured ones in the session's start line.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
PY=/usr/bin/python3
WC=$MT_ROOT/tests/helpers/ws_client.py
TOKM=$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model
t_need mt-serve mt-replay opusenc sox
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
frames() {   # the frames the server cuts an opusenc stream into
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
t_check "mt-serve --ws (default sampling) is up" test -n "$P"
URL=ws://127.0.0.1:$P/api/chat
wait_for_socket "$T_TMP/s.sock"

sox -n -r 24000 -c 1 -b 16 sil.wav trim 0 4
opusenc --quiet sil.wav sil.opus
N=$(frames sil.opus)
"$PY" -c "
import wave
w = wave.open('zeros.wav', 'wb'); w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
w.writeframes(b'\0' * 2 * 1920 * $N); w.close()"

ws() {   # ws NAME QUERY: one connection, its transcript in NAME.tr
    timeout 60 "$PY" "$WC" "$URL?$2" sil.opus "$1.opus" --frames "$N" --drain 1 \
        --text "$1.tr" > "$1.txt" 2>&1
}
KY="text_topk=25&audio_topk=250&pad_mult=0&repetition_penalty_context=64&repetition_penalty=1"
ws g1 "text_temperature=0&audio_temperature=0&$KY"
t_check "greedy by URL: every frame answered ($N) $(cat g1.txt)" test "$(fact g1.txt pages)" = "$N"
t_check "... text came ($(wc -l < g1.tr) lines)" test -s g1.tr
ws g2 "text_temperature=0&audio_temperature=0&text_seed=7&audio_seed=9&$KY"
t_check "greedy again (other seeds): the same tokens" cmp -s g1.tr g2.tr
grep -q "chat parameters: text_temperature=0 audio_temperature=0 .*ignored (not implemented): pad_mult, repetition_penalty_context, repetition_penalty" log
t_ok $? "the log names the honoured parameters and the ignored ones"
grep -q "admitted (uid [0-9]*), sampling text temperature 0 top-k 25, audio temperature 0 top-k 250 (HELLO), seed" log
t_ok $? "the session's start line shows its sampling"

ws h1 "text_temperature=5&audio_temperature=5&text_seed=11&audio_seed=12"
ws h2 "text_temperature=5&audio_temperature=5&text_seed=11&audio_seed=12"
t_check "temperature 5: every frame answered $(cat h1.txt)" test "$(fact h1.txt pages)" = "$N"
t_check "... its tokens differ from greedy's" sh -c '! cmp -s g1.tr h1.tr'
t_check "... and the same seeds give the same tokens" cmp -s h1.tr h2.tr

for bad in "text_temperature=11" "audio_temperature=-1" "text_topk=70000" "audio_topk=x" \
           "text_seed=-3" "audio_temperature=nan"; do
    ws bad "$bad"
    name=${bad%%=*}
    t_check "$bad: refused, naming $name ($(fact bad.txt errors))" \
        sh -c "grep -q 'errors=\"$name=' bad.txt && test \"\$(grep -o 'pages=[0-9]*' bad.txt)\" = pages=0"
done
grep -q "refused: text_temperature=11: not a number in 0..10" log
t_ok $? "... and logged"
kill $SRV; wait $SRV 2>/dev/null

# the same greedy decoding as a server default, over mt-frame
"$S" -s "$T_TMP/g.sock" -m synthetic:kyutai-tiny-mimi --threads 1 --temperature 0 \
    --text-temperature 0 > lat2 2> log2 &
SRV2=$!; t_track $SRV2
wait_for_socket "$T_TMP/g.sock"
timeout 60 "$R" -s "$T_TMP/g.sock" zeros.wav -t mf.tr --tokenizer "$TOKM" > mf.out 2> mf.err
t_ok $? "mt-replay over mt-frame to --temperature 0 --text-temperature 0: done"
t_check "the ws greedy tokens ($(wc -l < g1.tr) lines) are the mt-frame ones ($(wc -l < mf.tr) lines)" \
    cmp -s g1.tr mf.tr
cmp -s g1.tr mf.tr || diff g1.tr mf.tr | head -6 | sed 's/^/# /'
grep -q "sampling text temperature 0 top-k 25, audio temperature 0 top-k 250" log2
t_ok $? "the start line says the server's default sampling"
kill $SRV2; wait $SRV2 2>/dev/null
t_done
