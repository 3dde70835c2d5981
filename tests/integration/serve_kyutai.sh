#!/usr/bin/env bash
# serve_kyutai.sh: mt-serve serving a Kyutai-format model end to end: the
# tiny LM (synthetic:kyutai-tiny-mimi) with the tiny Mimi, real speech
# (espeak-ng) from two mt-replay sessions. Frames in = frames out per
# session, the text records there (one per frame once the delays are
# filled) and in the transcript file, every input frame accounted for in
# the tick lines, the per-session bytes in the startup report; an LM and a
# codec that disagree refused with both numbers; the speech-to-text shape
# answering with text and silence; --tokenizer: the transcript as text,
# checked against SentencePiece's reading, a tokenizer of another size
# refused.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-replay
S=$MT_BIN/mt-serve
R=$MT_BIN/mt-replay
command -v espeak-ng >/dev/null || t_skip_all "espeak-ng not installed"
cd "$T_TMP" || exit 1
espeak-ng -w speech.wav "The model hears this, and answers." 2>/dev/null

# run MODEL TAG [ARGS]: a server, two sessions of the speech, the server stopped
run() {
    rm -f mt.sock
    nice -n 10 "$S" -s "$T_TMP/mt.sock" -m "$1" --threads 1 --max-sessions 4 "${@:3}" \
        > "ticks.$2" 2> "serve.$2" &
    local pid=$!
    t_track $pid
    wait_for_socket "$T_TMP/mt.sock"
    timeout 60 "$R" -s "$T_TMP/mt.sock" speech.wav speech.wav -o "out.$2.%d.wav" \
        -t "transcript.$2" > "lines.$2" 2> "err.$2"
    echo $? > "rc.$2"
    kill -TERM $pid 2>/dev/null
    wait $pid 2>/dev/null
}

run synthetic:kyutai-tiny-mimi moshi
t_check "replay exits 0 $(head -c 200 err.moshi)" [ "$(cat rc.moshi)" = 0 ]
t_check "startup: per-session bytes = K/V bound + depformer + codec state" \
    grep -Eq 'per-session bytes = temporal K/V under the bound [0-9]+ \+ depformer scratch and token rings [0-9]+ \+ codec state [0-9]+ = [0-9]+' serve.moshi
t_check "startup: the depformer on the host (a cpu decoder)" grep -q "; depformer on host" serve.moshi
# mt-probe predict adds a session up as the startup report does (its
# default codec the one mt-serve took, the same bound S 4 W 256)
sb=$(sed -n 's/.*per-session bytes = temporal K\/V under the bound \([0-9]*\) + depformer scratch and token rings \([0-9]*\) + codec state \([0-9]*\).*/\1 \2 \3/p' serve.moshi)
pb=$("$MT_BIN/mt-probe" predict -m synthetic:kyutai-tiny-mimi --kv-mem 64M --samples 1 |
     sed -n 's/^per-session bytes\t.* = temporal K\/V under the bound \([0-9]*\) + depformer scratch and token rings \([0-9]*\) + codec state \([0-9]*\)$/\1 \2 \3/p')
t_check "mt-probe predict: per-session K/V + depformer + codec bytes as the startup report ($pb | $sb)" \
    [ "${sb:-none}" = "$pb" ]
t_check "summary: both done, none missing" \
    grep -q '^replay_summary=2 done=2 rejected=0 failed=0 .* missing=0 ' lines.moshi
total=0
for i in 0 1; do
    sent=$(sed -n "s/^replay_session=$i .* sent=\([0-9]*\) received=\([0-9]*\).*/\1/p" lines.moshi)
    recv=$(sed -n "s/^replay_session=$i .* sent=\([0-9]*\) received=\([0-9]*\).*/\2/p" lines.moshi)
    [ -n "$sent" ] && [ "$sent" = "$recv" ] && [ "$sent" -gt 20 ]
    t_ok $? "session $i: frames in ($sent) = frames out ($recv), more than 20"
    got=$(soxi -s "out.moshi.$i.wav" 2>/dev/null || echo none)
    t_check "session $i: output samples ($got) = frames sent * 1920" [ "$got" = $((sent * 1920)) ]
    ntext=$(grep -c "^replay_text=[0-9]* session=$i " lines.moshi)
    # the tiny model's largest delay is 1 frame: text from the second on
    t_check "session $i: a text record for every frame after the delays ($ntext of $sent)" \
        [ "$ntext" = $((sent - 1)) ]
    total=$((total + sent - 1))
done
t_check "transcript file written: one line a text record ($total)" \
    [ "$(wc -l < transcript.moshi)" = "$total" ]
t_check "transcript lines: SESSION SEQ ID with ids in the vocabulary" \
    awk 'NF != 3 || $3 < 0 || $3 >= 40 { exit 1 }' transcript.moshi
t_check "the model speaks: returned audio not all silence" \
    /usr/bin/python3 -c "
import wave, array, sys
w = wave.open('out.moshi.0.wav'); a = array.array('h', w.readframes(w.getnframes()))
sys.exit(0 if any(a) else 1)"
# every input frame: one output (real or FILL) or one counted miss
acc=$(awk '/^tick=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] } }
           END { print v["in"], v["out"] + v["fill"] + v["miss"], v["out"] }' ticks.moshi)
read -r tin tacc tout <<<"$acc"
[ -n "$tin" ] && [ "$tin" = "$tacc" ] && [ "$tin" -gt 40 ]
t_ok $? "tick lines: frames in ($tin) = out + fill + miss ($tacc), real outputs $tout"

# --weights q8: the LM and the codec on their 8-bit copies (the codec's
# transformers, deepest convolutions and codebook search), every frame
# still answered with audio
run synthetic:kyutai-tiny-mimi q8 --weights q8
t_check "q8: the codec on its 8-bit copies ($(grep -o 'codec on 8-bit copies ([^)]*)' serve.q8))" \
    grep -q "codec on 8-bit copies" serve.q8
t_check "q8: both sessions done, none missing" \
    grep -q '^replay_summary=2 done=2 rejected=0 failed=0 .* missing=0 ' lines.q8
t_check "q8: the model speaks (audio not all silence)" /usr/bin/python3 -c "
import wave, array, sys
w = wave.open('out.q8.0.wav'); a = array.array('h', w.readframes(w.getnframes()))
sys.exit(0 if any(a) else 1)"

# HELLO's seed (mt-replay --seed): the same seed twice, the same tokens;
# another seed, other tokens (sampling at Kyutai's temperatures)
rm -f mt.sock
nice -n 10 "$S" -s "$T_TMP/mt.sock" -m synthetic:kyutai-tiny-mimi --threads 1 \
    > /dev/null 2> serve.seed &
spid=$!
t_track $spid
wait_for_socket "$T_TMP/mt.sock"
for sd in 5 5 6; do
    timeout 60 "$R" -s "$T_TMP/mt.sock" speech.wav --seed $sd -t "tr.$sd.$((n = n + 1))" \
        > /dev/null 2>> err.seed
done
# 2^32 + 5: HELLO's 64-bit seed (its high half in the header's reserved
# field, mt-frame(5)) reaches the generator
timeout 60 "$R" -s "$T_TMP/mt.sock" speech.wav --seed 4294967301 -t tr.big \
    > /dev/null 2>> err.seed
# the same seed with --tokenizer: the transcript holds the text
TOKM=$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.model
timeout 60 "$R" -s "$T_TMP/mt.sock" speech.wav --seed 5 -t tr.text --tokenizer "$TOKM" \
    > /dev/null 2>> err.seed
kill -TERM $spid 2>/dev/null
wait $spid 2>/dev/null
t_check "--seed 5 twice: the same transcript" cmp -s tr.5.1 tr.5.2
t_check "  (and it has text)" [ -s tr.5.1 ]
differ() { [ -s "$1" ] && [ -s "$2" ] && ! cmp -s "$1" "$2"; }
awk '$1 == 0' transcript.moshi > tr.default
t_check "--seed 6: another transcript than --seed 5" differ tr.5.1 tr.6.3
t_check "--seed 5: another transcript than the server's default seed" differ tr.5.1 tr.default
t_check "--seed 2^32+5: another transcript than --seed 5 (the high 32 bits count)" \
    differ tr.5.1 tr.big
# the ids of tr.5.1 turned into text by SentencePiece's own table (the
# fixture's dump), Kyutai's way: ids 0 and 3 and control pieces skipped
/usr/bin/python3 - "$MT_ROOT/tests/fixtures/kyutai_lm/tokenizer-tiny.pieces" tr.5.1 \
    > tr.want <<'PY'
import sys
pieces = {}
for line in open(sys.argv[1], encoding="utf-8"):
    i, ctl, p = line.rstrip("\n").split("\t")
    pieces[int(i)] = None if ctl == "1" else p.replace("\u2581", " ")
for line in open(sys.argv[2]):
    f = line.split()
    text = "".join(pieces[int(t)] or "" for t in f[2:] if int(t) not in (0, 3))
    if text:
        sys.stdout.write("%s %s %s\n" % (f[0], f[1], text))
PY
t_check "--tokenizer: the transcript is the text of the ids, as SentencePiece reads them" \
    cmp -s tr.want tr.text
t_check "  (and it has text: $(wc -l < tr.text) lines)" [ -s tr.text ]

# speech to text (dep_q 0): the answers are TEXT frames alone
run synthetic:kyutai-tiny-stt stt
t_check "stt: replay exits 0" [ "$(cat rc.stt)" = 0 ]
t_check "stt: startup says text only" grep -q "speech to text (dep_q 0): text only" serve.stt
t_check "stt: summary: both done, every frame answered, none missing" \
    grep -q '^replay_summary=2 done=2 rejected=0 failed=0 sent=\([0-9]*\) received=\1 .* missing=0 ' lines.stt
sent0=$(sed -n "s/^replay_session=0 .* sent=\([0-9]*\).*/\1/p" lines.stt)
t_check "stt: ACCEPT said text only: a TEXT frame answered each of the $sent0 frames" \
    [ "$(grep -c '^replay_text=[0-9]* session=0 ' lines.stt)" = "$sent0" ]
t_check "stt: tokens in every answer after the delays" \
    [ "$(grep '^replay_text=' lines.stt | grep -vc 'tokens=""')" = $((total)) ]
t_check "stt: the file written from the answers is silence" \
    /usr/bin/python3 -c "
import wave, array, sys
w = wave.open('out.stt.0.wav'); a = array.array('h', w.readframes(w.getnframes()))
sys.exit(0 if len(a) > 0 and not any(a) else 1)"

# refusals, with names and numbers, before listening (a server that did
# not refuse is stopped by timeout, and the check fails)
timeout 10 "$S" -s "$T_TMP/x.sock" -m synthetic:kyutai-tiny > /dev/null 2> refuse.err
rc=$?
t_check "LM card 24 with Mimi's 32 bins: refused (exit $rc)" [ $rc = 1 ]
t_check "the refusal names both numbers" grep -q "32 entries (bins), the LM's card is 24" refuse.err
t_check "nothing listened" [ ! -e "$T_TMP/x.sock" ]
timeout 10 "$S" -s "$T_TMP/x.sock" -m synthetic:kyutai-tiny-mimi --codec synthetic:mimi > /dev/null 2> refuse2.err
t_check "the published Mimi (2048 bins) with the tiny LM: refused" \
    grep -q "2048 entries (bins), the LM's card is 32" refuse2.err
timeout 10 "$S" -s "$T_TMP/x.sock" -m synthetic:kyutai-tiny-mimi --kv full --on-full preempt \
    > /dev/null 2> refuse3.err
t_check "full policy with preemption refused (a codec state cannot be recomputed)" \
    grep -q "cannot be preempted" refuse3.err
timeout 10 "$S" -s "$T_TMP/x.sock" -m synthetic:tiny --codec synthetic:mimi-tiny > /dev/null 2> refuse4.err
t_check "--codec on a model that is not Kyutai's: refused" grep -q -- "--codec is for Kyutai models" refuse4.err
# --tokenizer: checked against the LM's text card before listening
timeout 10 "$S" -s "$T_TMP/x.sock" -m synthetic:kyutai-tiny-mimi \
    --tokenizer "$MT_ROOT/tests/fuzz/corpus/tokenizer/one-piece.bin" > /dev/null 2> refuse5.err
t_check "a 1-piece tokenizer with the 40-token text card: refused with both numbers" \
    grep -q "has 1 pieces, the text card of synthetic:kyutai-tiny-mimi is 40" refuse5.err
mkfifo tok.fifo
timeout 10 "$S" -s "$T_TMP/x.sock" -m synthetic:kyutai-tiny-mimi --tokenizer tok.fifo \
    > /dev/null 2> refuse6.err
t_check "a FIFO as the tokenizer: refused, not waited on" grep -q "not a regular file" refuse6.err
timeout 10 "$R" -s "$T_TMP/x.sock" speech.wav --tokenizer "$TOKM" > /dev/null 2> refuse7.err
t_check "mt-replay --tokenizer without -t: a usage error (exit 2)" [ $? = 2 ]
t_check "nothing listened" [ ! -e "$T_TMP/x.sock" ]
rm -f mt.sock
nice -n 10 "$S" -s "$T_TMP/mt.sock" -m synthetic:kyutai-tiny-stt --threads 1 --tokenizer "$TOKM" \
    > /dev/null 2> serve.tok &
spid=$!
t_track $spid
wait_for_socket "$T_TMP/mt.sock"
kill -TERM $spid 2>/dev/null
wait $spid 2>/dev/null
t_check "the right tokenizer: loaded, said at start" grep -q "tokenizer: 40 pieces" serve.tok
t_done
