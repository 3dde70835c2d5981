#!/usr/bin/env bash
# replay_files.sh: mt-replay's file handling without a server: real audio
# (sox tones and espeak-ng speech) in several formats, rates and channel
# counts goes through --emit | --play and comes back with exactly the
# sample count the frame arithmetic predicts; bad inputs each give one
# clear error, exit status 1 and no output file.
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
t_need mt-replay sox
cd "$T_TMP" || exit 1

# expected output samples: ceil(round(n * 24000 / rate) / 1920) * 1920
expect() { # expect SAMPLES RATE
    awk -v n="$1" -v r="$2" 'BEGIN { m = int(n * 24000 / r + 0.5);
        f = int((m + 1919) / 1920); print f * 1920 }'
}

espeak-ng -w speech.wav "Metronome replays recorded conversations in real time." 2>/dev/null
t_check "espeak-ng made speech" test -s speech.wav

k=0
for rate in 8000 16000 22050 44100 48000; do
    for fmt in wav flac ogg aiff; do
        k=$((k + 1)); ch=$(( k % 2 + 1 ))     # mono and stereo both occur
        [ "$fmt" = wav ] && [ "$rate" = 48000 ] && ch=3
        f=in_${rate}_${ch}.$fmt
        if [ "$fmt" = wav ] && [ "$rate" = 22050 ]; then
            sox speech.wav -r $rate -c $ch "$f"
        else
            sox -n -r $rate -c $ch "$f" synth 1.37 sine 300-1200 vol 0.5
        fi
        n=$(soxi -s "$f")
        want=$(expect "$n" $rate)
        "$R" --emit "$f" --no-pace 2>err | "$R" --play -o "out_$rate.$fmt.wav" >/dev/null 2>>err
        got=$(soxi -s "out_$rate.$fmt.wav" 2>/dev/null || echo none)
        grate=$(soxi -r "out_$rate.$fmt.wav" 2>/dev/null || echo none)
        t_check "$fmt $rate Hz $ch ch: $got samples at $grate Hz (want $want at 24000)" \
            test "$got" = "$want" -a "$grate" = 24000
    done
done

# output format from the extension
for ext in flac ogg aiff; do
    "$R" --emit in_16000_2.wav --no-pace | "$R" --play -o "back.$ext" >/dev/null
    t_check "--play -o back.$ext writes $ext" sh -c "soxi -t back.$ext | grep -Eqi '^($ext|vorbis)'"
done

# paced emit takes real time: 1.37 s of audio -> at least 1.2 s
t0=$(date +%s%N)
"$R" --emit in_16000_2.wav | "$R" --play -o paced.wav >/dev/null
t1=$(date +%s%N)
t_check "paced --emit runs at the frame rate ($(( (t1 - t0) / 1000000 )) ms)" \
    test $(( (t1 - t0) / 1000000 )) -ge 1200

# bad inputs: one message, exit 1, nothing left behind
head -c 20000 in_44100_2.wav > trunc.wav
head -c 3000 in_16000_1.flac > trunc.flac
head -c 5000 /dev/urandom > noise.wav
echo "this is not audio" > text.ogg
mkdir adir
for bad in trunc.wav trunc.flac noise.wav text.ogg adir missing.wav; do
    mkdir -p o; rm -rf o/*
    "$R" --emit "$bad" > o/stream 2> msg; rc=$?
    lines=$(wc -l < msg)
    t_check "--emit $bad: exit 1, one line: $(head -c 100 msg)" test $rc = 1 -a "$lines" = 1
    "$R" -s "$T_TMP/none.sock" "$bad" -o o/out.wav > /dev/null 2> msg; rc=$?
    t_check "replay $bad: exit 1, no output file" test $rc = 1 -a -z "$(ls -A o | grep -v stream)"
done

# a truncated frame stream into --play: error, no partial file
"$R" --emit in_16000_2.wav --no-pace 2>/dev/null | head -c 20000 | "$R" --play -o cut.wav 2>msg >/dev/null
rc=$?
t_check "--play of a truncated stream: exit 1, no cut.wav ($(head -c 80 msg))" \
    test $rc = 1 -a ! -e cut.wav
t_check "no temporary files left" test -z "$(ls -A . | grep '\.tmp-')"

# usage errors exit 2
"$R" --bogus 2>/dev/null; t_check "unknown option: exit 2" test $? = 2
"$R" -o x.mp3 --play </dev/null 2>/dev/null; t_check "unsupported output format: exit 2" test $? = 2
"$R" --help | grep -q -- --emit; t_check "--help lists --emit" test $? = 0
t_done
