#!/bin/bash
# admit_shed: load shedding (issue 24) on a simulated device whose capacity
# drops. profiles/drift-small.profile is a made-up device on which
# about 36 sessions of synthetic:moshi-7b fit an 80 ms tick until 12 s after
# the server starts, when its bandwidth and matrix rate drop to 0.7 (every
# step 1.43 x longer: about 26 fit). N sessions are admitted first (a static
# limit: reaching the wall is admit_closedloop's business; this test is
# about what happens when the wall moves under an admitted load), then:
#   without --shed  every session goes late and stays late (asserted: the
#                   late stretch shows, most ticks after the drop late);
#   with --shed     mt-admit ends the newest sessions (`shed ID reason`),
#                   and lateness is back under the budget within 2 s of the
#                   drop, no run of late ticks after that (late_ms is the
#                   oldest unanswered frame of any kept session), every shed
#                   session ended with END (not ERROR, not a dropped
#                   connection) and a reason, counted in shed=, and every
#                   input the server read is one output or one counted miss.
# The two runs go side by side (the sim sleeps; 2 x N clients are light),
# about 25 s in all. MT_SHED_KEEP=DIR keeps the files.
. "$(dirname "$0")/lib.sh"
S=$MT_BIN/mt-serve
A=$MT_BIN/mt-admit
FC=$MT_TESTBIN/mt-fakeclient
PROFILE=$MT_ROOT/profiles/drift-small.profile
[ -x "$S" ] || t_skip_all "mt-serve not built"
[ -x "$A" ] || t_skip_all "mt-admit not built"
[ -x "$FC" ] || t_skip_all "mt-fakeclient not built"
[ -r "$PROFILE" ] || t_skip_all "no $PROFILE"
BUDGET=80
N=${MT_SHED_N:-30}
DROP=12               # the profile's schedule
FRAMES=${MT_SHED_FRAMES:-200}   # 16 s: the last session ends near 20 s
RECOVER=2             # seconds after the drop

# run NAME ADMIT-ARGS...: server + controller + clients; files $T_TMP/NAME.*
# All three under SCHED_FIFO where permitted (t_fifo; the device sleeps,
# the clients and the controller mostly wait): the late ticks asserted
# are then the device's, not a neighbour's build taking the cores.
FIFO=$(t_fifo)
# What stops a FIFO process is a stall of the whole host (this VM stops
# every process for 50-100 ms at a time when its cores are full); the
# sampler, under the same policy, measures it for the busy rule below.
t_hiccup_start $FIFO
run() {
    local name=$1 sock=$T_TMP/$1.sock srv ctl cl; shift
    mkfifo "$T_TMP/$name.ctl" "$T_TMP/$name.out"
    tee "$T_TMP/$name.lat" <"$T_TMP/$name.out" |
        $FIFO "$A" --budget $BUDGET -p static:$N --status-every 0 "$@" >"$T_TMP/$name.ctl" 2>"$T_TMP/$name.err" &
    ctl=$!; t_track $ctl
    $FIFO "$S" -s "$sock" --device "sim:$PROFILE" -m synthetic:moshi-7b --sink 4 --window 28 \
        --max-sessions 64 --control "$T_TMP/$name.ctl" --admit-timeout 2000 \
        >"$T_TMP/$name.out" 2>"$T_TMP/$name.log" &
    srv=$!; t_track $srv
    wait_for_socket "$sock" 300 || return 1
    timeout 60 $FIFO "$FC" -s "$sock" -n "$N" --arrive-ms 100 -f "$FRAMES" --echo \
        --end-timeout 5 >"$T_TMP/$name.clients" 2>&1
    kill -TERM $srv; wait $srv; echo $? >"$T_TMP/$name.rc"
    wait $ctl
}
# one after the other: two servers and sixty paced clients at once on two
# cores add host time to every step and make late ticks of their own
run noshed
run shed --shed

tk='{ split("", v); for (i = 1; i <= NF; i++) { j = index($i, "="); if (j) v[substr($i, 1, j - 1)] = substr($i, j + 1) } }'
# late: ticks with late_ms over the budget in [from, to) while sessions are active
late() {
    awk -v b=$BUDGET -v from="$2" -v to="$3" "/^tick=/ $tk"'
        /^tick=/ && v["t"] + 0 >= from && v["t"] + 0 < to && v["active"] + 0 > 0 {
            n++; if (v["late_ms"] + 0 > b) { l++; r++; if (r > m) m = r } else r = 0 }
        END { printf "%d %d %d\n", n + 0, l + 0, m + 0 }' "$1"
}
# the end of the load: the first tick with fewer than N/2 active after the drop
load_end=$(awk -v n=$N -v d=$DROP "/^tick=/ $tk"'/^tick=/ && v["t"] + 0 > d && v["active"] + 0 < n / 2 { print v["t"]; exit }' "$T_TMP/noshed.lat")
load_end=${load_end:-$((DROP + 6))}
read -r nt nl nm <<<"$(late "$T_TMP/noshed.lat" $((DROP + RECOVER)) "$load_end")"
t_diag "without --shed: $nl of $nt ticks late from $((DROP + RECOVER)) s to $load_end s (longest run $nm); before the drop: $(late "$T_TMP/noshed.lat" 6 $DROP)"
t_check "without --shed the late stretch shows: most ticks after the drop late ($nl of $nt)" \
    test "$nt" -gt 10 -a $((nl * 10)) -ge $((nt * 8))
# Before the drop: no sustained lateness. One stall of the host (another
# tenant, a test before this one still exiting) delays a tick, and the
# frames it held back drain over the next few ticks (about 20 ms of room a
# tick at 30 of 36): a clean-clone CI run saw a run of 3 late ticks there.
# The lost capacity after the drop makes a run of 40 or more.
read -r bt bl bm <<<"$(late "$T_TMP/noshed.lat" 6 $DROP)"
# a host busier than its cores (beside a build) runs the sim's ticks late
# before any drop, and the controller sheds then: those runs measure the
# host, and the timing checks say so instead of passing or failing
# (under SCHED_FIFO: a stall of half a frame period or more, which
# bunches the clients' frames into steps over the period; otherwise the
# load average at or over the core count)
if [ -n "$FIFO" ]; then
    host="this host stopped every process for up to $(t_hiccup_ms) ms"
    awk -v h="$(t_hiccup_ms)" 'BEGIN { exit !(h >= 40) }' && busy=1 || busy=0
else
    t_host_busy && busy=1 || busy=0
    host="this host had load $T_LOAD on $(nproc) cores"
fi
if [ -n "$MT_ASAN" ]; then   # host time under ASan eats the 18 ms of margin
    t_skip "before the drop on time (timing; not under ASan)"
elif [ $busy = 1 ] && [ "$bm" -ge 5 ]; then
    t_skip "before the drop on time: $host (longest run $bm late ticks)"
else
    t_check "and before the drop $N sessions were on time (no run of 5+ late ticks: longest $bm; $bl of $bt late)" \
        test "$bm" -lt 5
fi

shed_end=$(awk -v n=$N -v d=$DROP "/^tick=/ $tk"'/^tick=/ && v["t"] + 0 > d + 2 && v["active"] + 0 < n / 4 { print v["t"]; exit }' "$T_TMP/shed.lat")
shed_end=${shed_end:-$((DROP + 6))}
read -r st sl sm <<<"$(late "$T_TMP/shed.lat" $((DROP + RECOVER)) "$shed_end")"
nshed=$(grep -c '^shed session=' "$T_TMP/shed.lat")
# recovery: the end of the last late tick after the drop, from the drop
rec=$(awk -v b=$BUDGET -v d=$DROP -v e="$shed_end" "/^tick=/ $tk"'/^tick=/ && v["t"] + 0 >= d && v["t"] + 0 < e && v["late_ms"] + 0 > b { l = v["t"] + 0 } END { printf "%.2f", l ? l - d : 0 }' "$T_TMP/shed.lat")
first=$(awk "/^shed session=/ $tk"'/^shed session=/ { print v["t"]; exit }' "$T_TMP/shed.lat")
kept=$(awk "/^tick=/ $tk"'/^tick=/ && v["t"] + 0 > '"$DROP"' + 2 { print v["active"]; exit }' "$T_TMP/shed.lat")
t_diag "with --shed: $nshed sessions shed (first at ${first:-never} s), $kept kept; last late tick ${rec} s after the drop; late ticks from $((DROP + RECOVER)) s to $shed_end s: $sl of $st; before the drop: $(late "$T_TMP/shed.lat" 6 $DROP)"
t_diag "$(grep 'at=end' "$T_TMP/shed.err" | tr '\n' ' ')"
if [ $busy = 1 ] && awk -v f="${first:-0}" -v d=$DROP 'BEGIN { exit !(f < d) }'; then
    t_check "sessions were shed ($nshed; the first at ${first:-never} s, before the drop: $host)" \
        test "$nshed" -gt 0
else
    t_check "sessions were shed after the drop ($nshed, first at ${first:-never} s)" \
        awk -v n="$nshed" -v f="${first:-0}" -v d=$DROP 'BEGIN { exit !(n > 0 && f >= d) }'
fi
if [ -n "$MT_ASAN" ]; then
    t_skip "lateness back under the budget within ${RECOVER} s (timing; not under ASan: $sl late of $st)"
elif [ $busy = 1 ] && ! [ "$st" -gt 10 -a "$sm" -lt 3 -a $((sl * 10)) -le "$st" ]; then
    t_skip "lateness back under the budget within ${RECOVER} s: $host ($sl late of $st, longest $sm)"
else
    # a host stall can still delay one tick or two after the recovery
    # (two clean-clone CI runs: 1 and 2 late ticks about 4 s after the
    # drop, with 19 and 20 sessions kept of about 26 that fit); shedding
    # too slowly or too little gives a run from the drop on
    t_check "lateness back under the budget within ${RECOVER} s of the drop and no kept session late after (no run of 3+ late ticks, at most 1 in 10: $sl late of $st, longest $sm)" \
        test "$st" -gt 10 -a "$sm" -lt 3 -a $((sl * 10)) -le "$st"
fi
last_shed=$(awk "/^tick=/ $tk"'/^tick=/ { s = v["shed"] } END { print s + 0 }' "$T_TMP/shed.lat")
t_check "shed= in the tick lines counts them ($last_shed = $nshed)" [ "$last_shed" = "$nshed" ]
t_check "every shed line carries a reason" \
    sh -c "! grep '^shed session=' '$T_TMP/shed.lat' | grep -qv 'reason=\"[^\"]'"
ids=$(awk "/^shed session=/ $tk"'/^shed session=/ { print v["session"] }' "$T_TMP/shed.lat" | tr '\n' ' ')
bad=0
for id in $ids; do
    if ! grep -q "^session=[0-9]* id=$id .*reason=\"END before our END\"" "$T_TMP/shed.clients"; then
        bad=$((bad + 1))
        t_diag "shed session $id, its client: $(grep "^session=[0-9]* id=$id " "$T_TMP/shed.clients")"
    fi
    if ! grep -q "session $id: shed: device slower" "$T_TMP/shed.log"; then
        bad=$((bad + 1))
        t_diag "shed session $id, the server's log: $(grep "session $id[: ]" "$T_TMP/shed.log" | tr '\n' ' ')"
    fi
done
t_check "every shed session ended with END, its reason in the server's log ($bad wrong)" [ "$bad" = 0 ]
kept_ok=$(grep -c '^session=.* state=done ok=1' "$T_TMP/shed.clients")
t_check "every kept session ended normally ($kept_ok of $((N - nshed)))" [ "$kept_ok" = $((N - nshed)) ]
for r in shed noshed; do
    sums=$(awk "/^tick=/ $tk"'/^tick=/ { si += v["in"]; so += v["out"]; sf += v["fill"]; sm += v["miss"] } END { printf "%d %d %d %d", si, so, sf, sm }' "$T_TMP/$r.lat")
    read -r si so sf sm2 <<<"$sums"
    t_check "$r: every input one output or one counted miss (in $si = out $so + fill $sf + miss $sm2)" \
        test "$si" -gt 0 -a "$si" = $((so + sf + sm2))
done
t_check "shed: the misses are the shed sessions' queued inputs only (no miss before the first shed)" \
    awk "/^tick=/ $tk"'/^tick=/ && v["shed"] + 0 == 0 && v["miss"] + 0 > 0 { bad = 1 } END { exit bad }' "$T_TMP/shed.lat"
t_check "servers exited 0 after SIGTERM" [ "$(cat "$T_TMP/shed.rc")/$(cat "$T_TMP/noshed.rc")" = 0/0 ]
[ -n "$MT_SHED_KEEP" ] && cp -r "$T_TMP"/. "$MT_SHED_KEEP"
t_done
