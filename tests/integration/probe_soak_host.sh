#!/usr/bin/env bash
# probe_soak_host.sh: a host stall is not booked as the model's collapse.
# One unbounded run (--kv full) on a pool far larger than its sessions
# need; 1 s into it the test stops mt-probe (the client) for 2.5 s with
# SIGSTOP, as a busy host would: its frames then arrive late and in a
# burst, the server answers the backlog with FILL, and a session goes over
# 2 s without a real frame. The soak must say the run was disturbed by the
# host (its row's host_s and note, the summary's count), and not that the
# model collapsed: the pool never ran out.
. "$(dirname "$0")/lib.sh"
. "$MT_ROOT/tools/columns.sh"
t_need mt-probe mt-serve
P=$MT_BIN/mt-probe
"$P" soak --runs 1 --duration 10s --seed 3 --arrivals even:2 --lengths fixed:10s \
    --data "$T_TMP/d" -- -m synthetic:tiny --device cpu --kv full --kv-mem 64M \
    >"$T_TMP/out" 2>"$T_TMP/err" &
PR=$!; t_track $PR
# the watchdog's output away from the TAP pipe, or prove waits out its sleep
( sleep 120; kill $PR 2>/dev/null ) >/dev/null 2>&1 &
W=$!; t_track $W
# the load under way: a tick line with sessions active, then 1 s more
i=0
until grep -q ' active=[1-9]' "$T_TMP/d/ticks-c0-r00.log" 2>/dev/null || [ $i -ge 600 ]; do
    sleep 0.05; i=$((i + 1))
done
sleep 1
kill -STOP $PR
sleep 2.5
kill -CONT $PR
wait $PR; rc=$?
sed 's/^/# /' "$T_TMP/out"
[ $rc = 0 ] || sed 's/^/# err: /' "$T_TMP/err"
t_check "soak exits 0" test $rc = 0
row=$(awk "$COLS_AWK"'cols_try("config") { next } /^#/ { next }
    col("run") ~ /^[0-9]+$/ { print col("verdict"), col("coll_s"), col("ovf_s"), col("starve_s"), col("host_s") }
    END { if (COLS_BAD) exit 2 }' "$T_TMP/out")
read -r verdict coll ovf starve host <<<"$row"
t_diag "verdict $verdict, coll_s $coll, ovf_s $ovf, starve_s $starve, host_s $host"
t_check "the pool never ran out (ovf_s -)" test "$ovf" = -
t_check "not collapsed by the model (verdict ok, coll_s -)" test "$verdict $coll" = "ok -"
t_check "flagged: a host stall (host_s $host), the starvation within it (starve_s $starve)" \
    awk -v h="$host" -v s="$starve" 'BEGIN { exit !(h != "-" && s != "-" && s >= h - 2 && s <= h + 2) }'
t_check "its row says when, with the pool's room" \
    grep -Eq '^full .*  # host stall [0-9.]+-[0-9.]+ s with [0-9.]+ GB of the pool free, client input starved' "$T_TMP/out"
t_check "the summary counts it apart" \
    grep -q '^full  *collapsed 0 of 1 runs (by the model); 1 of 1 runs disturbed by the host;' "$T_TMP/out"
t_check "and says what to do" \
    grep -qx '1 of 1 runs disturbed by the host: rerun on a quieter machine' "$T_TMP/out"
t_done
