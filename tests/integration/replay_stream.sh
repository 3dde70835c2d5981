#!/usr/bin/env bash
# replay_stream.sh: a long input is streamed, not read whole. A one-hour
# WAV (a sparse file: an hour of silence that costs no disk) replayed for
# 5 s keeps mt-replay's peak RSS within 50 MB of a 10 s file replayed for
# 5 s (read whole it is 345 MB of float samples). And what a stream
# sends is the file: a two-minute 48 kHz stereo 440 Hz tone through
# synthetic:echo comes back 3 s long at 24 kHz, at 440 Hz and its level.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_serve_test mt-replay sox python3
[ -x /usr/bin/time ] || t_skip_all "/usr/bin/time not installed"
cd "$T_TMP" || exit 1
# wav RATE CHANNELS SECONDS FILE: a WAV header, then zeros to its length
wav() {
    python3 - "$@" <<'PY'
import struct, sys
rate, ch, secs, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
data = rate * secs * 2 * ch
with open(path, "wb") as f:
    f.write(b"RIFF" + struct.pack("<I", 36 + data) + b"WAVEfmt " +
            struct.pack("<IHHIIHH", 16, 1, ch, rate, rate * 2 * ch, 2 * ch, 16) +
            b"data" + struct.pack("<I", data))
    f.truncate(44 + data)
PY
}
wav 24000 1 3600 hour.wav
sox -n -r 24000 ten.wav synth 10 sine 300 vol 0.2
sox -n -r 48000 -c 2 tone.wav synth 120 sine 440 vol 0.25
t_check "the hour is an hour: $(soxi -D hour.wav) s" test "$(soxi -D hour.wav | cut -d. -f1)" = 3600
t_serve srv.out srv.err -s "$SOCK" -m synthetic:echo
wait_for_socket "$SOCK" 300
t_check "mt-serve is up" test -S "$SOCK"
EP=$(t_endpoint "$SOCK")
for f in hour ten; do
    /usr/bin/time -f %M -o $f.rss "$MT_BIN/mt-replay" -s "$EP" --duration 5 $f.wav >$f.out 2>$f.err
    echo $? >$f.rc
done
t_check "both replays exit 0 ($(cat hour.rc) $(cat ten.rc))" test "$(cat hour.rc)/$(cat ten.rc)" = 0/0
t_check "the hour: 5 s sent ($(grep '^replay_summary' hour.out | grep -o ' sent=[0-9]*'))" \
    grep -q '^replay_summary=1 done=1 .* sent=63 ' hour.out
h=$(tail -1 hour.rss) t=$(tail -1 ten.rss)
t_diag "peak RSS: one hour $h KB, ten seconds $t KB"
t_check "peak RSS of the hour within 50 MB of the ten seconds ($h KB vs $t KB)" \
    test $((h - t)) -le 51200
"$MT_BIN/mt-replay" -s "$EP" --duration 3 tone.wav -o back.wav >tone.out 2>tone.err
t_check "a streamed 48 kHz stereo file: exit 0 $(head -c 200 tone.err)" test $? = 0
t_check "it comes back 3 s long at 24 kHz ($(soxi -s back.wav 2>/dev/null) samples)" \
    test "$(soxi -r back.wav)" = 24000 -a "$(soxi -s back.wav)" -ge 72000 -a "$(soxi -s back.wav)" -le 74000
freq=$(sox back.wav -n stat 2>&1 | awk '/Rough   frequency/ { print $3 }')
rms=$(sox back.wav -n stat 2>&1 | awk '/RMS     amplitude/ { print $3 }')
t_check "at 440 Hz ($freq)" awk -v f="$freq" 'BEGIN { exit !(f >= 430 && f <= 450) }'
t_check "at its level, the channels averaged (RMS $rms, want 0.177)" \
    awk -v r="$rms" 'BEGIN { exit !(r >= 0.16 && r <= 0.19) }'
t_done
