#!/usr/bin/env bash
# replay_serve.sh: mt-replay against a real mt-serve running the
# synthetic:echo preset (output frame = input frame): every frame sent
# comes back, the returned audio equals the resampled input sample for
# sample (within 1 LSB), the --emit | mt-serve --stdio | --play pipe works,
# a wrong format is rejected with its reason, and 64 sessions from one
# process keep their send schedule (--rate-check).
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
S=$MT_BIN/mt-serve
t_need mt-replay mt-serve
cd "$T_TMP" || exit 1
PY=/usr/bin/python3

# same: A B -> exit 0 if two mono s16 WAVs have equal length and differ by
# at most 1 LSB anywhere
same() {
    "$PY" - "$1" "$2" <<'PYEOF'
import sys, wave, array
def rd(p):
    w = wave.open(p); a = array.array('h', w.readframes(w.getnframes())); return a
a, b = rd(sys.argv[1]), rd(sys.argv[2])
if len(a) != len(b):
    print("# length %d vs %d" % (len(a), len(b))); sys.exit(1)
d = max((abs(x - y) for x, y in zip(a, b)), default=0)
print("# max difference %d LSB over %d samples" % (d, len(a)))
sys.exit(0 if d <= 1 else 1)
PYEOF
}

espeak-ng -w speech.wav "Every frame comes back, nothing dropped, nothing duplicated." 2>/dev/null
sox speech.wav -r 44100 -c 2 speech44.flac
sox -n -r 8000 -c 1 tone8.ogg synth 1.1 sine 440 vol 0.5
sox -n -r 48000 -c 2 tone48.aiff synth 0.9 sine 200-2000 vol 0.5

# one BLAS thread at low priority: the pacing check measures the client,
# not how two processes share two cores
nice -n 10 "$S" $(t_listen_args "$T_TMP/mt.sock") -m synthetic:echo --threads 1 --max-sessions 80 > serve.log 2> serve.err &
t_track $!
wait_for_socket "$T_TMP/mt.sock"
t_check "mt-serve is listening" test -S "$T_TMP/mt.sock"

i=0
for f in speech.wav speech44.flac tone8.ogg tone48.aiff; do
    "$R" --emit "$f" --no-pace | "$R" --play -o "ref$i.wav" > /dev/null
    i=$((i + 1))
done
mkdir out
timeout 60 "$R" -s "$(t_endpoint "$T_TMP/mt.sock")" speech.wav speech44.flac tone8.ogg tone48.aiff \
    -o "out/%d.wav" --latency frames > lines.txt 2> err.txt
rc=$?
t_check "replay of 4 files exits 0 $(head -c 200 err.txt)" test $rc = 0
for i in 0 1 2 3; do
    sent=$(sed -n "s/^replay_session=$i .* sent=\([0-9]*\).*/\1/p" lines.txt)
    got=$(soxi -s "out/$i.wav" 2>/dev/null || echo none)
    t_check "session $i: output samples $got = frames sent $sent * 1920" \
        test "$got" = $((sent * 1920))
    t_check "session $i: returned audio equals the resampled input" same "ref$i.wav" "out/$i.wav"
done
t_check "a latency line per frame" test "$(grep -c '^replay_frame=' lines.txt)" -gt 40
t_check "summary: all done, none missing" \
    grep -q '^replay_summary=4 done=4 rejected=0 failed=0 .* missing=0 ' lines.txt
t_check "summary has latency percentiles" grep -Eq '^replay_summary.* p50_ms=[0-9.]+ p99_ms=[0-9.]+ max_ms=[0-9.]+' lines.txt

# the pipe through mt-serve --stdio
"$R" --emit speech.wav | timeout 30 "$S" --stdio -m synthetic:echo 2> stdio.err | \
    "$R" --play -o piped.wav > play.txt 2> play.err
t_check "emit | mt-serve --stdio | play: output equals the input" same ref0.wav piped.wav

# a format the server does not serve: REJECT with a reason, exit 3, no file
mkdir rej
timeout 20 "$R" -s "$(t_endpoint "$T_TMP/mt.sock")" -r 16000 -f 1280 tone8.ogg -o rej/x.wav > rej.txt 2>&1
rc=$?
t_check "wrong format: exit 3 (refused, none failed)" test $rc = 3
t_check "wrong format: rejected with a reason" grep -Eq '^replay_rejected=rejected session=0 reason=.+' rej.txt
t_check "wrong format: no output file" test -z "$(ls -A rej)"
t_check "unreachable socket: exit 1" sh -c '! "$0" -s "$1/nope.sock" "$1/tone8.ogg" >/dev/null 2>&1' "$R" "$T_TMP"

# 64 sessions from one process: every frame scheduled is sent and
# answered. How closely the sends keep their schedule (the jitter) is a
# speed, which a busy machine decides: bench/bench_replay.sh measures it;
# here it is only reported.
timeout 60 "$R" -s "$(t_endpoint "$T_TMP/mt.sock")" -n 64 --stagger 1 --loop --duration 4 --rate-check \
    --latency none tone8.ogg > rate.txt 2> rate.err
rc=$?
t_check "64 sessions: exit 0 $(head -c 200 rate.err)" test $rc = 0
t_check "64 sessions: all done, every frame answered" \
    grep -q '^replay_summary=64 done=64 rejected=0 failed=0 .* missing=0 ' rate.txt
t_diag "$(grep '^replay_rate=' rate.txt)"
sent=$(sed -n 's/^replay_summary=.* sent=\([0-9]*\) .*/\1/p' rate.txt)
recv=$(sed -n 's/^replay_summary=.* received=\([0-9]*\) .*/\1/p' rate.txt)
paced=$(sed -n 's/^replay_rate=64 frames=\([0-9]*\) .*/\1/p' rate.txt)
# 4 s of frames of 80 ms, 64 sessions: 50 frames each at least
t_check "64 sessions: the pacer timed every frame sent ($paced of $sent), 64 x 50 or more" \
    test "${paced:-0}" = "${sent:-x}" -a "${sent:-0}" -ge 3200
t_check "64 sessions: as many frames received as sent ($recv of $sent)" test "${recv:-x}" = "${sent:-y}"
t_done
