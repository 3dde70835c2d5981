#!/usr/bin/env bash
# replay_devices.sh: the PortAudio side of mt-replay. --list-devices must
# exit cleanly on a machine without a sound card; --mic without a device
# fails with one message naming what PortAudio found; and, with ALSA's
# null plugin configured as a PCM (ALSA_CONFIG_PATH, so no sound card is
# needed), a real full-duplex stream runs for two seconds through the live
# --mic code path against mt-serve, and Ctrl-C ends it cleanly with END.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
R=$MT_BIN/mt-replay
S=$MT_BIN/mt-serve
t_need mt-replay
cd "$T_TMP" || exit 1

"$R" --list-devices > list.txt 2> list.err
t_check "--list-devices exits 0" test $? = 0
t_check "--list-devices says what PortAudio found" grep -q '^# PortAudio .*device' list.txt
t_check "--list-devices prints no ALSA chatter" test ! -s list.err

cat > asound.conf <<'CONF'
pcm.mtnull { type null }
pcm.!default { type null }
CONF
# x.sock: a socket file nothing listens on, so that -s passes mt-replay's
# check and the device is what fails
python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$T_TMP/x.sock"
# without any device (this machine as it is, when it has no sound card)
if grep -q '^# PortAudio .*: 0 devices' list.txt; then
    "$R" -s "$T_TMP/x.sock" --mic > /dev/null 2> nodev.err
    rc=$?
    t_check "--mic with no device: exit 1" test $rc = 1
    t_check "--mic with no device: one message saying what PortAudio found" \
        sh -c 'grep -q "PortAudio found" nodev.err && test "$(wc -l < nodev.err)" = 1'
    t_check "--mic with no device: it points to ALSA_CONFIG_PATH and a null device" \
        sh -c 'grep -q "ALSA_CONFIG_PATH" nodev.err && grep -q "type null.*--device mtnull" nodev.err'
else
    t_skip "this machine has audio devices: no-device case not testable"
    t_skip "this machine has audio devices: no-device case not testable"
    t_skip "this machine has audio devices: no-device case not testable"
fi
ALSA_CONFIG_PATH=$T_TMP/asound.conf "$R" --list-devices > nlist.txt 2>/dev/null
if ! grep -qi 'null' nlist.txt; then
    t_skip "PortAudio lists no ALSA null device here"
    t_done
fi
t_check "the null device is listed" grep -qi 'null' nlist.txt
ALSA_CONFIG_PATH=$T_TMP/asound.conf "$R" -s "$T_TMP/x.sock" --mic \
    --device no-such-device > /dev/null 2> nomatch.err
rc=$?
t_check "--device that matches nothing: exit 1, lists the devices" \
    sh -c 'test $0 = 1 && grep -q "mtnull" nomatch.err' $rc
[ -x "$S" ] || { t_skip "mt-serve not built: live stream tests"; t_done; }

t_serve serve.log serve.err -s "$T_TMP/mt.sock" -m synthetic:echo
wait_for_socket "$T_TMP/mt.sock"
t0=$(date +%s%N)
ALSA_CONFIG_PATH=$T_TMP/asound.conf timeout 20 "$R" -s "$T_TMP/mt.sock" --mic \
    --device null --duration 2 --latency none > mic.txt 2> mic.err
rc=$?
t1=$(date +%s%N)
ms=$(( (t1 - t0) / 1000000 ))
t_check "--mic on the null device for 2 s: exit 0 $(head -c 200 mic.err)" test $rc = 0
t_check "--mic took about 2 s ($ms ms)" test $ms -ge 1900 -a $ms -lt 8000
t_check "--mic: 25 frames sent, all answered" \
    grep -q '^replay_summary=1 done=1 rejected=0 failed=0 sent=25 received=25 ' mic.txt
t_check "--mic reports its device" grep -Eq '^replay_mic device="?mtnull' mic.txt
# what the null device dropped, in seconds of its audio (a count of
# samples, hundreds of millions, read as a fault)
t_check "--mic: the samples dropped also in seconds (mic_dropped_s)" \
    awk '/^replay_mic / { for (i = 1; i <= NF; i++) { split($i, kv, "=")
            if (kv[1] == "mic_dropped") n = kv[2]; if (kv[1] == "mic_dropped_s") s = kv[2]
            if (kv[1] == "device_rate") r = kv[2] } } END { exit !(s != "" && (n == 0 || (s > 0.999 * n / r && s < 1.001 * n / r + 0.001))) }' mic.txt
t_check "--mic: the null device (no clock of its own) is said not real-time" \
    sh -c 'grep -q "^replay_mic .* real_time=0" mic.txt &&
        grep -q "capture device \"mtnull\" is not real-time" mic.err'

# stdout a terminal (script(1) gives it a pty): one status line redrawn in
# place (carriage return, erase line), no replay_tick lines on the screen;
# the machine lines go to --latency-log
if command -v script >/dev/null; then
    ALSA_CONFIG_PATH=$T_TMP/asound.conf timeout 20 script -qec \
        "'$R' -s '$T_TMP/mt.sock' --mic --device null --duration 2 --latency-log '$T_TMP/tty.log'" \
        /dev/null > tty.out 2>&1
    rc=$?
    t_check "--mic on a terminal: exit 0" test $rc = 0
    t_check "--mic on a terminal: the status is redrawn in place" \
        sh -c 'test "$(grep -c "$(printf "\r\033\\[K")mic \[" tty.out)" -ge 1 &&
            grep -q "latency p50 .* p99 .* ms  late [0-9]*" tty.out'
    t_check "--mic on a terminal: no replay_tick lines on the screen" \
        sh -c '! grep -q replay_tick tty.out'
    t_check "--mic on a terminal: the summary closes the screen" \
        grep -q '^replay_summary=1 done=1 ' tty.out
    t_check "--mic on a terminal: the status says DEVICE NOT REAL-TIME" \
        grep -q 'DEVICE NOT REAL-TIME' tty.out
    t_check "--latency-log: the machine lines are there" \
        sh -c 'grep -q "^replay_tick=0 " tty.log && grep -q "^replay_summary=1 done=1 " tty.log'
else
    t_skip "script(1) not installed: terminal status"
fi

# Ctrl-C: the session ends with END and the run exits 0
ALSA_CONFIG_PATH=$T_TMP/asound.conf timeout 20 "$R" -s "$T_TMP/mt.sock" --mic \
    --device null --latency none > int.txt 2> int.err &
pid=$!
t_track $pid
# Ctrl-C once the stream is live and the session had a second to start
# (under the sanitizers PortAudio's start alone can take over a second).
for i in $(seq 100); do grep -q 'live on' int.err 2>/dev/null && break; sleep 0.1; done
sleep 1
kill -INT $pid
wait $pid
rc=$?
t_check "Ctrl-C ends --mic cleanly: exit 0" test $rc = 0
t_check "Ctrl-C: session done, nothing missing" \
    grep -q '^replay_summary=1 done=1 rejected=0 failed=0 .* missing=0 ' int.txt
t_done
