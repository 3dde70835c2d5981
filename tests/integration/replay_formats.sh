#!/usr/bin/env bash
# replay_formats.sh: an MP3, an Ogg Vorbis, a FLAC and a 48 kHz stereo WAV
# (made by sox) each replay through mt-serve (synthetic:echo) with the
# frame count their duration predicts, duration x 12.5 frames/s at 24 kHz
# within one frame (issue 20 item 1: every MP3 used to be refused as
# "truncated", libsndfile's MP3 frame count being an estimate); a WAV that
# a streaming writer left with a placeholder data size replays too, and a
# WAV cut short is still refused (issue 19 item 8).
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
S=$MT_BIN/mt-serve
t_need mt-replay mt-serve sox
cd "$T_TMP" || exit 1

DUR=1.37
sox -n -r 44100 -c 2 tone.mp3 synth $DUR sine 300-1200 vol 0.5 2>/dev/null
sox -n -r 44100 -c 1 tone.ogg synth $DUR sine 300-1200 vol 0.5
sox -n -r 44100 -c 1 tone.flac synth $DUR sine 300-1200 vol 0.5
sox -n -r 48000 -c 2 tone48.wav synth $DUR sine 300-1200 vol 0.5
# sox into a pipe cannot seek back: data size 0x7FFFF000 in the header
sox -n -r 16000 -c 1 -t wav - synth $DUR sine 300-1200 vol 0.5 2>/dev/null > piped.wav
files="tone.mp3 tone.ogg tone.flac tone48.wav piped.wav"
for f in $files; do
    t_check "sox made $f" test -s "$f"
done

# frames within one of DUR x 12.5
near() { awk -v g="$1" -v d="$DUR" 'BEGIN { w = d * 12.5; exit !(g - w <= 1 && w - g <= 1) }'; }

nice -n 10 "$S" -s "$T_TMP/mt.sock" -m synthetic:echo --threads 1 > serve.log 2> serve.err &
t_track $!
wait_for_socket "$T_TMP/mt.sock"
t_check "mt-serve is listening" test -S "$T_TMP/mt.sock"

mkdir out
timeout 60 "$R" -s "$T_TMP/mt.sock" $files -o "out/%d.wav" > lines.txt 2> err.txt
rc=$?
t_check "replay of mp3, ogg, flac, 48 kHz wav, piped wav exits 0 $(head -c 200 err.txt)" test $rc = 0
i=0
for f in $files; do
    sent=$(sed -n "s/^replay_session=$i .* sent=\([0-9]*\).*/\1/p" lines.txt)
    got=$(soxi -s "out/$i.wav" 2>/dev/null || echo 0)
    t_check "$f: $sent frames sent, want $DUR s x 12.5 within one" near "${sent:-0}"
    t_check "$f: $got samples back = $sent frames x 1920" test "$got" = $((${sent:-0} * 1920))
    i=$((i + 1))
done

# a WAV cut short is refused, by file and through the server alike
head -c 40000 tone48.wav > cut.wav
"$R" --emit cut.wav > /dev/null 2> msg; rc=$?
t_check "--emit cut.wav: exit 1, truncated ($(head -c 100 msg))" sh -c "test $rc = 1 && grep -q truncated msg"
"$R" -s "$T_TMP/mt.sock" cut.wav -o out/cut.wav > /dev/null 2> msg; rc=$?
t_check "replay cut.wav: exit 1, no output" test $rc = 1 -a ! -e out/cut.wav
t_done
