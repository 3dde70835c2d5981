#!/usr/bin/env bash
# serve_ws_slow.sh: a WebSocket client that stops reading (Debian's
# python3-websockets on a small receive buffer, reading nothing after the
# Handshake) does not hurt a good one: the good session, running all the
# while (its pages sent as their audio is due), has every frame answered
# in order; the slow client is dropped, and the server logs who and why
# (as a frame-socket client that does not read: --write-timeout).
# lane: light (it mostly waits: make test runs it beside other light tests)
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
PY=/usr/bin/python3
WC=$MT_ROOT/tests/helpers/ws_client.py
SLOW=$MT_ROOT/tests/helpers/ws_slow.py
t_need mt-serve opusenc sox espeak-ng
"$PY" -c 'import websockets' 2>/dev/null || t_skip_all "python3-websockets not installed"
cd "$T_TMP" || exit 1
t_fast_blas

espeak-ng -w sp.wav "A client that stops reading is dropped; the others keep their frames." 2>/dev/null
sox sp.wav -r 24000 -c 1 sp24.wav
sox sp24.wav sp24.wav sp24.wav sp24.wav long.wav   # about 16 s
opusenc --quiet --max-delay 0 long.wav long.opus   # a page a packet
FRAMES=$("$PY" - long.opus <<'PYEOF'
import struct, sys
d = open(sys.argv[1], "rb").read()
g = struct.unpack_from("<q", d, d.rindex(b"OggS") + 6)[0]
print((g + 959) // 960 * 960 // 2 // 1920)
PYEOF
)
"$S" -s "$T_TMP/s.sock" --ws 127.0.0.1:0 -m synthetic:echo --threads 1 --max-sessions 4 \
    --write-timeout 1000 > lat 2> log &
SRV=$!; t_track $SRV
i=0; P=
while [ -z "$P" ] && [ $i -lt 300 ]; do
    P=$(sed -n 's|.*websocket on ws://127\.0\.0\.1:\([0-9]*\)/api/chat.*|\1|p' log)
    sleep 0.1; i=$((i + 1))
done
t_check "mt-serve --ws is up" test -n "$P"
URL=ws://127.0.0.1:$P/api/chat
fact() { tr ' ' '\n' < "$1" | sed -n "s/^$2=//p"; }   # fact FILE KEY

timeout 60 "$PY" "$WC" "$URL" long.opus good.opus --frames "$FRAMES" --realtime > good.txt 2>&1 &
GOOD=$!
timeout 60 "$PY" "$SLOW" "$URL" long.opus --timeout 40 > slow.txt 2> slow.err
wait $GOOD
t_check "the slow client got its Handshake $(cat slow.txt)" test "$(fact slow.txt handshake)" = 1
t_check "... and was dropped (its sends failed)" test "$(fact slow.txt dropped)" = 1
t_check "the server logged it: who, and that it does not read" \
    grep -qE '^mt-serve: ws: 127\.0\.0\.1:[0-9]+ dropped: no output accepted for [0-9.]+ s .*the client does not read' log
t_check "the good session: every frame answered ($FRAMES) $(cat good.txt)" \
    test "$(fact good.txt pages)" = "$FRAMES"
t_check "... in order (granule positions rise page by page)" test "$(fact good.txt monotone)" = 1
t_check "... no error" grep -q 'errors="" ' good.txt
t_check "... and it was still running when the slow one was dropped (it ended last)" \
    test good.txt -nt slow.txt
kill $SRV; wait $SRV 2>/dev/null
t_done
