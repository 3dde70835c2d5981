#!/bin/bash
# serve_badinput: sessions that send garbage, a truncated header, an
# oversized length, a wrong format (HELLO and AUDIO), or disconnect in the
# middle of a frame lose only their own session; the well-behaved sessions
# running at the same time get every frame back, in order, on time, and the
# ticks go on without a gap.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_serve_test
GOOD=6
LATMAX=$(t_timing 160 640)      # two frame periods, or 3 x the same figure
# of a baseline phase in this run when more, plus the host's hiccups
t_hiccup_start
t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" -m synthetic:tiny
t_check "server listens" wait_for_socket "$SOCK" 300
# the baseline: the good sessions alone, 3 s, on the same server
timeout 60 "$FC" -s "$SOCK" -n $GOOD -f 40 >"$T_TMP/base"
t_ok $? "baseline: the $GOOD good sessions alone, every frame back"
blat=$(t_max_lat "$T_TMP/base"); bgap=$(t_max_gap "$T_TMP/lat")
t_diag "baseline: worst latency $blat ms, largest tick gap $bgap ms"
timeout 90 "$FC" -s "$SOCK" -n $GOOD -f 100 >"$T_TMP/good" &
G=$!
sleep 1
pids=""
for m in garbage truncated oversized wrong-format wrong-length mid-frame; do
    timeout 60 "$FC" -s "$SOCK" -n 1 -f 100 --bad $m --bad-at 15 >"$T_TMP/bad.$m" &
    pids="$pids $!"
done
for m in garbage truncated oversized wrong-format wrong-length mid-frame; do :; done
i=0; for p in $pids; do wait $p; eval "rc$i=$?"; i=$((i+1)); done
wait $G; grc=$?
t_ok $grc "the $GOOD good sessions: every frame back, in order"
i=0
for m in garbage truncated oversized wrong-format wrong-length mid-frame; do
    eval "r=\$rc$i"; i=$((i+1))
    t_ok "$r" "$m: ended as it should ($(awk '/^session=/{print $4, $NF}' "$T_TMP/bad.$m"))"
done
# limits: two periods or 3 x the baseline, plus the host's hiccups
lim=$(t_limit "$LATMAX" "$blat")
if grep -q '^total .* fill=0 ' "$T_TMP/base" && [ "$(t_limit "$LATMAX")" -lt $((2 * LATMAX)) ]; then
    t_check "good sessions got no FILL" grep -q '^total .* fill=0 ' "$T_TMP/good"
else
    t_skip "no FILL: this host stalled a process $(t_hiccup_ms) ms, or FILL came without bad clients"
fi
lmax=$(t_max_lat "$T_TMP/good")
t_check "good sessions' worst latency $lmax ms < $lim ms (the larger of $LATMAX and 3 x the baseline's $blat, + the host's $(t_hiccup_ms) ms)" \
    awk -v m="$lmax" -v l="$lim" 'BEGIN{exit !(m < l)}'
t_check "log names the bad frames" grep -q 'bad frame' "$T_TMP/log"
t_check "log names the mid-frame disconnect" grep -q 'disconnected mid-frame' "$T_TMP/log"
t_check "log names the format mismatch" grep -q 'rejected: format mismatch' "$T_TMP/log"
gap=$(t_max_gap "$T_TMP/lat")
glim=$(t_limit "$LATMAX" "$bgap")
t_check "no tick gap over two periods or 3 x the baseline's $bgap ms, + the host's hiccups (max gap $gap ms < $glim ms)" \
    awk -v g="$gap" -v l="$glim" 'BEGIN{exit !(g < l)}'
kill -0 $SRV 2>/dev/null
t_ok $? "server still running"
kill -TERM $SRV; wait $SRV
t_ok $? "drained, exit 0"
t_done
