#!/usr/bin/env bash
# serve_asr_kyutai.sh: Kyutai's speech-to-text service reproduced message for
# message (issue 53's proof from their code): mt-serve --ws serves the
# fixture's tiny speech-to-text model (tests/fixtures/kyutai_stt, made by
# tests/fixtures/gen/gen_kyutai_stt.py) on /api/asr-streaming, the Python
# client of tests/helpers/asr_client.py sends this input (a marker after
# every 10 frames and one after the last, then its flush silence), and the
# Word / EndWord / Marker messages it gets, texts, start and stop times and
# order, equal the fixture's up to the last Marker; mt-replay as the
# client writes the same words and start times.
#
# What the fixture holds and where it comes from: the text tokens are
# Kyutai's own LMModel + LMGen (greedy, their stt configs' layout: dep_q 0,
# every delay 0) on the codes synthetic:mimi-tiny makes of this input; the
# word assembly (padding 3 and end-of-padding 0 closing a word, start time
# the last end-of-padding, stop times from the steps less the audio delay
# of 0.4 s = 5 frames at 12.5 Hz, markers out once their step plus the
# delay is done) is a TRANSLITERATION in that script of their Rust
# (rust/moshi-core/src/asr.rs State::step_tokens, rust/moshi-server/src/
# asr.rs handle_socket), which cannot be built offline here, and the
# texts SentencePiece's decoding of the pieces. The model has no extra
# heads, so their server sends no Step message: none is expected here
# either. The extra heads (voice activity): tests/fixtures/kyutai_stt_vad
# is the same model with 2 heads of 3 outputs, and Kyutai's own
# LMGen.step_with_extra_heads gave each step's prs (gen_kyutai_stt_vad.py):
# a Step {step_idx, prs, buffered_pcm} before each step's words, where
# their asr.rs puts it, prs within 1e-5, the words unchanged; a config
# naming heads its checkpoint lacks is refused naming the tensor.
# Controls: the codec still makes the fixture's codes (so a
# mismatch is the LM's or the assembly's), and the same run with the delay
# one frame longer (--asr-delay 0.48) does not match.
# fp32 weights and K/V (--weights f32 --kv-dtype f32) as the fixture was
# made in fp32; no sampling option: a speech-to-text model's text is
# greedy by default, as Kyutai's configs and server have it.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
P=$MT_BIN/mt-probe
PY=/usr/bin/python3
AC=$MT_ROOT/tests/helpers/asr_client.py
FIX=$MT_ROOT/tests/fixtures/kyutai_stt
TOKZ=$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model
t_need mt-serve mt-probe
"$PY" -c 'import websockets, msgpack' 2>/dev/null ||
    t_skip_all "python3-websockets or python3-msgpack not installed"
cd "$T_TMP" || exit 1
t_fast_blas

# the input the fixture was made from: 48 frames of 1920 samples at 24 kHz
# (in.wav), and the same followed by the client's flush, 13 frames of
# silence (full.wav: what the model hears)
"$PY" - <<'PY'
import math, struct, wave
def write(name, n, tail):
    w = wave.open(name, "wb"); w.setnchannels(1); w.setsampwidth(2); w.setframerate(24000)
    s = [int(9000 * math.sin(i * 0.031 + 3 * math.sin(i * 0.0011)) * (0.5 + 0.5 * math.sin(i * 0.00023))
             * (1.0 if (i // 4800) % 3 else 0.2)) for i in range(n)]
    w.writeframes(b"".join(struct.pack("<h", v) for v in s + [0] * tail)); w.close()
write("in.wav", 1920 * 48, 0)
write("full.wav", 1920 * 48, 1920 * 13)
PY
"$P" codec -c synthetic:mimi-tiny -n 2 --encode full.wav codes.txt > /dev/null
t_check "synthetic:mimi-tiny makes the fixture's codes of this input" cmp -s codes.txt "$FIX/codes.txt"

port_of() {   # port_of LOG
    local i=0 p
    while [ $i -lt 300 ]; do
        p=$(sed -n 's|.*ws://127\.0\.0\.1:\([0-9]*\)/api/asr-streaming.*|\1|p' "$1")
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1; i=$((i + 1))
    done
    return 1
}

# transcribe NAME ARGS...: a server with ARGS, the client through it; the
# messages after Ready up to the last marker (id 4) in NAME.msgs
transcribe() {
    local name=$1; shift
    "$S" -s "$T_TMP/$name.sock" --ws 127.0.0.1:0 -m "$FIX" --codec synthetic:mimi-tiny \
        --tokenizer "$TOKZ" --device cpu --threads 1 --weights f32 --kv-dtype f32 \
        "$@" > "$name.lat" 2> "$name.log" &
    SRV=$!; t_track $SRV
    local port
    port=$(port_of "$name.log")
    timeout 60 "$PY" "$AC" "ws://127.0.0.1:$port/api/asr-streaming" in.wav --marker-every 10 \
        --pace 0 --timeout 30 --log "$name.all" > "$name.txt" 2>&1
    cut -d' ' -f2- "$name.all" | sed -e '/^Ready *$/d' -e '/^Marker id=4$/q' > "$name.msgs"
    [ "$name" = ok ] || [ "$name" = vad ] && timeout 60 "$MT_BIN/mt-replay" -s "ws://127.0.0.1:$port/api/asr-streaming" \
        in.wav -t "$name.words" > "$name.rep" 2> "$name.reperr"
    kill $SRV; wait $SRV 2>/dev/null
}

transcribe ok
t_diag "client: $(cat ok.txt)"
t_check "the delay from the fixture's stt_config: 5 frames" grep -q "text 5 frames behind" ok.log
t_check "... and greedy text by default (Kyutai's temp_text 0)" \
    grep -q "sampling text temperature 0 top-k" ok.log
t_check "Ready first, every marker back, a clean close" \
    grep -q 'ready_first=1 .*markers_sent=5 markers_back=5 marker_order=1 .*errors="" close=1000' ok.txt
t_check "Kyutai's words, times and markers, message for message ($(grep -c '^Word' ok.msgs) words, $(grep -c '^EndWord' ok.msgs) ends, $(grep -c '^Marker' ok.msgs) markers; the fixture $(wc -l < "$FIX/expected.msgs") messages)" \
    cmp -s ok.msgs "$FIX/expected.msgs"
cmp -s ok.msgs "$FIX/expected.msgs" || diff ok.msgs "$FIX/expected.msgs" | head -8 | sed 's/^/# /'
t_check "... the fixture is not trivial: words of several pieces, with a space inside" \
    test "$(grep -c '^Word text=[^ ]* [^ ]* start_time' "$FIX/expected.msgs")" -ge 2 -a \
         "$(grep -c '^EndWord' "$FIX/expected.msgs")" -ge 6
# mt-replay as the client (its own flush, longer): the same words and start
# times, as far as the fixture goes
n=$(grep -c '^Word' "$FIX/expected.msgs")
sed -n 's/^Word text=\(.*\) start_time=\(.*\)$/\2 \1/p' "$FIX/expected.msgs" |
    awk '{ $1 = sprintf("[%.2f]", $1); print }' > want.words
head -n "$n" ok.words | cut -d' ' -f3- > got.words
t_check "mt-replay over the protocol: Kyutai's $n words and start times ($(wc -l < ok.words) words in all)" \
    cmp -s want.words got.words
cmp -s want.words got.words || diff want.words got.words | head -6 | sed 's/^/# /'
t_check "no Step message (no extra heads: their server sends none either)" \
    sh -c '! grep -q " Step " ok.all'

# the delay one frame longer: other times, so the comparison above can fail
transcribe late --asr-delay 0.48
t_check "control: a delay of 6 frames does not match the fixture" \
    sh -c '! cmp -s late.msgs "$1" && test -s late.msgs' _ "$FIX/expected.msgs"

# a config with extra heads (stt-1b-en_fr has 4 of 6) over a checkpoint
# without their tensors: refused, naming the first one missing
mkdir xh bad
cp "$FIX/model.safetensors" xh/; cp "$FIX/model.safetensors" bad/
"$PY" -c 'import json, sys; c = json.load(open(sys.argv[1]))
c["extra_heads_num_heads"] = 4; c["extra_heads_dim"] = 6
json.dump(c, open("xh/config.json", "w"))
c["extra_heads_num_heads"] = "four"; json.dump(c, open("bad/config.json", "w"))' "$FIX/config.json"
timeout 30 "$S" -s "$T_TMP/xh.sock" --ws 127.0.0.1:0 -m xh --codec synthetic:mimi-tiny \
    --device cpu --threads 1 > xh.lat 2> xh.log
rc=$?
t_check "extra heads in the config, none in the checkpoint: exit 1 naming the tensor ($(tail -1 xh.log))" \
    sh -c 'test "$1" = 1 && grep -q "tensor .extra_heads.0.weight.: missing" xh.log' _ $rc
timeout 30 "$S" -s "$T_TMP/bad.sock" --ws 127.0.0.1:0 -m bad --codec synthetic:mimi-tiny \
    --device cpu --threads 1 > bad.lat 2> bad.log
rc=$?
t_check "... a malformed extra_heads_num_heads: exit 1 naming it ($(tail -1 bad.log))" \
    sh -c 'test "$1" = 1 && grep -q "extra_heads_num_heads is not an integer" bad.log' _ $rc

# the extra heads (voice activity): tests/fixtures/kyutai_stt_vad is this
# model with 2 heads of 3 outputs, run by Kyutai's LMGen.step_with_extra_heads
# (gen_kyutai_stt_vad.py); their server sends, before each step's words,
# Step {step_idx, prs: each head's softmax output 0, buffered_pcm}
FIX=$MT_ROOT/tests/fixtures/kyutai_stt_vad
transcribe vad
t_check "extra heads: said at start ($(grep 'extra heads' vad.log))" \
    grep -q "2 extra heads of 3 outputs (voice activity): Step messages (prs) sent" vad.log
# words and markers as before; Steps where theirs are, one a step, prs
# within 1e-5 (fp32 both sides); buffered_pcm + step_idx x 1920 (the audio
# received when the step's answer came) never falls, never passes what was
# sent and at least once is ahead of the model (the client sends at once)
"$PY" - vad.msgs "$FIX/expected.msgs" "$MT_ROOT/tests/fixtures/kyutai_stt/expected.msgs" \
    "$(( 1920 * 48 + 1920 * 13 ))" > vad.cmp <<'PY'
import re, sys
got = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8")]
want = [l.rstrip("\n") for l in open(sys.argv[2], encoding="utf-8")]
words = [l.rstrip("\n") for l in open(sys.argv[3], encoding="utf-8")]
total = int(sys.argv[4])
kind = lambda l: re.sub(r" prs=.*", "", l)
gs = [re.match(r"Step step_idx=(\d+) prs=\[(.*)\] buffered_pcm=(\d+)$", l) for l in got if l.startswith("Step ")]
ws = [re.match(r"Step step_idx=(\d+) prs=(.*)$", l) for l in want if l.startswith("Step ")]
same_words = [l for l in got if not l.startswith("Step ")] == words
order = [kind(l) for l in got] == [kind(l) for l in want]
worst, prev, ahead, inside = 0.0, -1, 0, 1
for g, w in zip(gs, ws):
    gp = [float(x) for x in g.group(2).split(",")]
    wp = [float(x) for x in w.group(2).split(",")]
    if len(gp) != len(wp):
        worst = 1.0
    worst = max([worst] + [abs(a - b) for a, b in zip(gp, wp)])
    have = int(g.group(3)) + int(g.group(1)) * 1920
    inside &= prev <= have <= total
    ahead |= int(g.group(3)) > 0
    prev = have
print("words=%d order=%d steps=%d want=%d worst=%.3g buffered_inside=%d ahead=%d" % (
    same_words, order, len(gs), len(ws), worst, inside, ahead))
PY
t_diag "$(cat vad.cmp)"
t_check "extra heads: Kyutai's words and markers unchanged" grep -q "^words=1 " vad.cmp
t_check "... a Step before each step's words, where theirs are ($(grep -c '^Step' vad.msgs) of $(grep -c '^Step' "$FIX/expected.msgs"))" \
    grep -q " order=1 steps=53 want=53 " vad.cmp
t_check "... Kyutai's prs within 1e-5 at every step ($(sed 's/.*\(worst=[^ ]*\).*/\1/' vad.cmp))" \
    awk '{ split($5, a, "="); exit !(a[2] + 0 <= 1e-5) }' vad.cmp
t_check "... buffered_pcm: the audio received and not yet stepped" \
    grep -q "buffered_inside=1 ahead=1" vad.cmp
head -n "$n" vad.words | cut -d' ' -f3- > vadgot.words
t_check "... mt-replay as the client, Steps among the words: the same $n words and start times" \
    cmp -s want.words vadgot.words
t_done
