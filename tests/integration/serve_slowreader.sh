#!/bin/bash
# serve_slowreader: a client that stops reading is disconnected (with a log
# line) within a bounded time, the others are served all along, and the
# tick never stalls (asserted from the latency lines).
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_serve_test
GAPMAX=$(t_timing 160 640)      # plus the host's hiccups (t_limit)
t_hiccup_start
t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" -m synthetic:tiny --write-timeout 1000 --out-queue 32
t_check "server listens" wait_for_socket "$SOCK" 300
timeout 60 "$FC" -s "$SOCK" -n 4 -f 150 >"$T_TMP/good" &
G=$!
timeout 60 "$FC" -s "$SOCK" -n 1 -f 150 --bad stop-reading --bad-at 5 >"$T_TMP/slow"
t_ok $? "the non-reading client was disconnected by the server"
after=$(awk '/^session=/{for(i=1;i<=NF;i++) if($i ~ /^end_after_ms=/){sub("end_after_ms=","",$i); print $i}}' "$T_TMP/slow")
t_check "within 8 s of it stopping to read (${after} ms)" awk -v a="$after" 'BEGIN{exit !(a > 0 && a < 8000)}'
wait $G
t_ok $? "the 4 reading sessions were served completely, in order"
t_check "log line names the client that does not read" grep -q 'does not read' "$T_TMP/log"
gap=$(awk '/^tick=/{for(i=1;i<=NF;i++) if($i ~ /^t=/){sub("t=","",$i); if(p!="" && $i-p>g) g=$i-p; p=$i}} END{print g*1000}' "$T_TMP/lat")
lim=$(t_limit "$GAPMAX")
t_check "the tick never stalled: max gap $gap ms < $lim ms ($GAPMAX + the host's $(t_hiccup_ms) ms)" awk -v g="$gap" -v l="$lim" 'BEGIN{exit !(g < l)}'
kill -TERM $SRV; wait $SRV
t_ok $? "drained, exit 0"
t_done
