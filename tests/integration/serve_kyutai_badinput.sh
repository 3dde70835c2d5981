#!/usr/bin/env bash
# serve_kyutai_badinput.sh: hostile sessions on a server whose sessions
# carry the Mimi codec (synthetic:kyutai-tiny-mimi): a frame of the wrong
# size and a disconnect in the middle of a frame end only their own
# session, with the reason in the log; the good sessions beside them get
# every frame back, in order; every input frame is in the tick lines (out
# + fill + miss); the slots and codec states of the ended sessions come
# back (a full server's worth of sessions runs after them); the server
# drains and exits 0.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_serve_test
t_serve "$T_TMP/ticks" "$T_TMP/log" -s "$SOCK" -m synthetic:kyutai-tiny-mimi --threads 1 \
    --max-sessions 4
t_check "server listens" wait_for_socket "$SOCK" 300
timeout 90 "$FC" -s "$SOCK" -n 2 -f 40 >"$T_TMP/good" &
G=$!
pids=""
for m in wrong-length mid-frame; do
    timeout 60 "$FC" -s "$SOCK" -n 1 -f 40 --bad $m --bad-at 10 >"$T_TMP/bad.$m" &
    pids="$pids $!"
done
set -- $pids
wait "$1"; r1=$?
wait "$2"; r2=$?
wait $G
t_ok $? "the 2 good sessions: every frame back, in order ($(grep -c '^session=' "$T_TMP/good") sessions)"
t_ok $r1 "wrong-length: ended as it should ($(awk '/^session=/{print $4, $NF}' "$T_TMP/bad.wrong-length"))"
t_ok $r2 "mid-frame: ended as it should ($(awk '/^session=/{print $4, $NF}' "$T_TMP/bad.mid-frame"))"
t_check "log names the wrong size and the right one (3840 bytes: 1920 samples)" \
    grep -q 'AUDIO payload of [0-9]* bytes; this format needs 3840 (1920 mono s16le samples): ending it with ERROR' "$T_TMP/log"
t_check "log names the mid-frame disconnect" grep -q 'disconnected mid-frame' "$T_TMP/log"
# the ended sessions' slots (and codec states) are free again: all four
timeout 60 "$FC" -s "$SOCK" -n 4 -f 10 >"$T_TMP/after"
t_ok $? "after them, 4 sessions on the 4-session server: every frame back"
kill -0 $SRV 2>/dev/null
t_ok $? "server still running"
kill -TERM $SRV; wait $SRV
t_ok $? "drained, exit 0"
# every complete input frame: one output (real or FILL) or one counted miss
acc=$(awk '/^tick=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] += kv[2] } }
           END { print v["in"], v["out"] + v["fill"] + v["miss"] }' "$T_TMP/ticks")
read -r tin tacc <<<"$acc"
# 2 x 40 good, 4 x 10 after, and the bad sessions' frames before --bad-at
[ -n "$tin" ] && [ "$tin" = "$tacc" ] && [ "$tin" -ge 120 ]
t_ok $? "tick lines: frames in ($tin) = out + fill + miss ($tacc), at least the 120 good ones"
t_done
