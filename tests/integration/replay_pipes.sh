#!/usr/bin/env bash
# replay_pipes.sh: mt-replay's audio through pipes (mt-replay(1): '-' as an
# input file and for --emit, -o - and --type). A WAV from sox's stdout goes
# through mt-serve (synthetic:echo) and out of mt-replay's stdout into sox,
# with the frame count the arithmetic predicts; Ogg and raw both ways;
# --emit - reads a pipe; the formats a pipe cannot carry are refused before
# anything runs, with a message naming the ones that work.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
t_need mt-replay mt-serve sox
cd "$T_TMP" || exit 1

# expected output samples: ceil(round(n * 24000 / rate) / 1920) * 1920
expect() { # expect SAMPLES RATE
    awk -v n="$1" -v r="$2" 'BEGIN { m = int(n * 24000 / r + 0.5);
        f = int((m + 1919) / 1920); print f * 1920 }'
}
sox -n -r 16000 -c 2 in.wav synth 1.37 sine 300-1200 vol 0.5
want=$(expect "$(soxi -s in.wav)" 16000)

t_serve serve.log serve.err -s "$T_TMP/mt.sock" -m synthetic:echo
wait_for_socket "$T_TMP/mt.sock" || { t_ok 1 "mt-serve started"; t_done; }

# the issue's pipe: sox | mt-replay -o - - | sox
sox in.wav -t wav - | "$R" -s "$T_TMP/mt.sock" -o - - 2> lines1.txt | sox - out1.wav
st=("${PIPESTATUS[@]}")
t_check "sox | mt-replay -o - - | sox: all exit 0 (${st[*]})" test "${st[*]}" = "0 0 0"
got=$(soxi -s out1.wav 2>/dev/null || echo none)
t_check "through the pipes: $got samples at 24000 Hz (want $want)" \
    test "$got" = "$want" -a "$(soxi -r out1.wav 2>/dev/null)" = 24000
t_check "with -o -, the machine lines go to stderr" \
    grep -q '^replay_summary=1 done=1 rejected=0 failed=0 ' lines1.txt
t_check "the input is named '-'" grep -q '^replay_session=0 .* file=- ' lines1.txt

# FLAC on stdin (libsndfile cannot decode it from a pipe by itself; mt-replay
# reads stdin whole first), Ogg Vorbis out
sox in.wav -t flac - | "$R" -s "$T_TMP/mt.sock" -o - --type ogg - 2> lines2.txt |
    sox -t ogg - out2.wav
st=("${PIPESTATUS[@]}")
t_check "FLAC in, --type ogg out: all exit 0 (${st[*]})" test "${st[*]}" = "0 0 0"
got=$(soxi -s out2.wav 2>/dev/null || echo none)
t_check "FLAC in, Ogg out: $got samples (want $want)" test "$got" = "$want"

# headerless raw in (s16le mono at --rate) and out
sox in.wav -r 24000 -c 1 -t raw -e signed -b 16 -L in24.raw
n24=$(( $(stat -c %s in24.raw) / 2 ))
want24=$(expect "$n24" 24000)
"$R" -s "$T_TMP/mt.sock" --type raw -o - - < in24.raw 2> lines3.txt > out3.raw
rc=$?
got=$(( $(stat -c %s out3.raw) / 2 ))
t_check "--type raw in and out: exit $rc, $got samples (want $want24)" \
    test "$rc" = 0 -a "$got" = "$want24"
t_check "raw out equals raw in (synthetic:echo), the padding aside" \
    cmp -n $((n24 * 2)) in24.raw out3.raw

# --emit - from a pipe, and --play -o - into one
sox in.wav -t wav - | "$R" --emit - --no-pace | "$R" --play -o - 2> play.txt | sox - out4.wav
st=("${PIPESTATUS[@]}")
t_check "sox | --emit - | --play -o - | sox: all exit 0 (${st[*]})" test "${st[*]}" = "0 0 0 0"
got=$(soxi -s out4.wav 2>/dev/null || echo none)
t_check "--emit - through --play -o -: $got samples (want $want)" test "$got" = "$want"
t_check "--play -o -: its summary on stderr" grep -q '^replay_play frames=' play.txt

# standard output redirected to a file takes the formats a pipe cannot
"$R" -s "$T_TMP/mt.sock" --type wav -o - in.wav > out5.wav 2> lines5.txt
rc=$?
got=$(soxi -s out5.wav 2>/dev/null || echo none)
t_check "-o - --type wav into a file: exit $rc, $got samples (want $want)" \
    test "$rc" = 0 -a "$got" = "$want"

# refused before anything runs: exit 2, one message, no session on the server
before=$(grep -c '^request' serve.log)
for t in wav flac aiff caf w64; do
    "$R" -s "$T_TMP/mt.sock" --type $t -o - in.wav 2> ref.err | cat > ref.out
    rc=${PIPESTATUS[0]}
    t_check "--type $t into a pipe: exit 2, says which types work" \
        sh -c 'test $0 = 2 && grep -q "cannot be written to a pipe.*au, ogg or raw" ref.err && test ! -s ref.out' $rc
done
"$R" -s "$T_TMP/mt.sock" --type mp3 -o - in.wav 2> ref.err | cat >/dev/null
t_check "--type mp3: exit 2, not a type" sh -c 'test $0 = 2 && grep -q "not a type" ref.err' "${PIPESTATUS[0]}"
"$R" -s "$T_TMP/mt.sock" -n 2 -o - in.wav 2> ref.err | cat >/dev/null
t_check "-o - with two sessions: exit 2" sh -c 'test $0 = 2 && grep -q "one session" ref.err' "${PIPESTATUS[0]}"
"$R" -s "$T_TMP/mt.sock" - - < in.wav > /dev/null 2> ref.err
t_check "'-' twice: exit 2" sh -c 'test $0 = 2 && grep -q "read once" ref.err' $?
"$R" --emit - < /dev/null > /dev/null 2> ref.err
t_check "--emit - with nothing on stdin: exit 1, one message" \
    sh -c 'test $0 = 1 && grep -q "stdin: no data" ref.err && test "$(wc -l < ref.err)" = 1' $?
head -c 5000 /dev/urandom | "$R" --emit - --no-pace 2> ref.err > /dev/null
t_check "--emit - with noise on stdin: exit 1, not audio" \
    sh -c 'test $0 = 1 && grep -q "^mt-replay: stdin: " ref.err' "${PIPESTATUS[1]}"
sleep 0.3
after=$(grep -c '^request' serve.log)
t_check "the refused runs reached no session ($before -> $after requests)" test "$before" = "$after"
t_done
