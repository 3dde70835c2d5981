#!/bin/bash
# serve_window: window (bounded) mode at a load this machine sustains.
# late_ms must stay under one frame period on every tick of the run (but
# an isolated tick a stall of the shared host delayed), and
# kv_used must stay constant (N times one session's bound) while the N
# sessions are admitted: the bound holds from the first frame on.
# Serial lane: its eight sessions step a real model on the CPU (about 23 s of
# CPU), and it judges every tick's lateness: beside the light lane's six
# at a time a step took 97 ms (5 late ticks of 204, a fresh clone alone).
. "$(dirname "$0")/lib.sh"
t_fast_blas
t_need mt-serve
SOCK=$T_TMP/serve.sock
N=${MT_SERVE_WINDOW_N:-8}
FRAMES=${MT_SERVE_FRAMES:-200}          # 16 s
PERIOD=80
LIMIT=$PERIOD
[ -n "$MT_ASAN" ] && LIMIT=$((PERIOD * 4))   # ASan: timing relaxed only
tk() { awk -v k="$1" '/^tick=/{for(i=1;i<=NF;i++){n=index($i,"=");if(substr($i,1,n-1)==k)print substr($i,n+1)}}' "$T_TMP/lat"; }

t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" -m synthetic:${MT_SERVE_WINDOW_MODEL:-tiny} --kv window --sink 4 --window 64 \
    --latency=frames
t_check "server listens" wait_for_socket "$SOCK" 300
timeout 120 "$MT_TESTBIN/mt-fakeclient" -s "$SOCK" -n "$N" -f "$FRAMES" >"$T_TMP/cli"
t_ok $? "$N sessions served completely and in order"
kill -TERM $SRV; wait $SRV
t_ok $? "drained, exit 0"
maxlate=$(tk late_ms | sort -g | tail -1)
t_diag "late_ms max $maxlate ms; step_ms max $(tk step_ms | sort -g | tail -1) ms"
# Every tick on time, but for a stall of this shared machine: one clean-
# clone CI run (2026-12-05) saw one tick 114 ms late with every step under
# 6 ms (a thread of ours not run for 100 ms while the frames kept being
# read). A load the server cannot sustain is late tick after tick. So: at
# most one tick in 100 late, never two in a row; each late tick is shown
# with how late it began (t against its 80 ms slot).
read -r nticks nlate inrow <<<"$(awk -v l="$LIMIT" -v p="$PERIOD" '/^tick=/ {
        for (i = 1; i <= NF; i++) { j = index($i, "="); v[substr($i, 1, j - 1)] = substr($i, j + 1) }
        n++; if (v["late_ms"] + 0 >= l) { late++; if (prev) two = 1; prev = 1
            printf "late tick %s: late_ms %s, step_ms %s, began %.0f ms after its slot\n", v["tick"],
                   v["late_ms"], v["step_ms"], v["t"] * 1000 - v["tick"] * p > "/dev/stderr" } else prev = 0 }
    END { print n + 0, late + 0, two + 0 }' "$T_TMP/lat" 2>"$T_TMP/late")"
[ -s "$T_TMP/late" ] && t_diag "$(cat "$T_TMP/late")"
t_check "late_ms under $LIMIT ms on every tick but a host stall's (max $maxlate; $nlate of $nticks late, never two in a row)" \
    test "$nticks" -gt 100 -a "$inrow" = 0 -a $((nlate * 100)) -le "$nticks"
bound=$(awk '/^request /{for(i=1;i<=NF;i++) if($i ~ /^kv_bound=/){sub("kv_bound=","",$i); print $i; exit}}' "$T_TMP/lat")
used=$(awk -v n="$N" '/^tick=/{a=0;u=0;for(i=1;i<=NF;i++){if($i ~ /^active=/){sub("active=","",$i);a=$i} if($i ~ /^kv_used=/){sub("kv_used=","",$i);u=$i}} if(a==n) print u}' "$T_TMP/lat" | sort -u)
t_diag "kv_bound $bound; kv_used while $N active: $used"
t_check "kv_used constant while $N sessions are active" [ "$(echo "$used" | wc -l)" = 1 ] 
t_check "kv_used is $N x the session bound" [ -n "$bound" -a "$used" = "$((N * ${bound:-0}))" ]
t_check "one frame line per frame (--latency=frames)" \
    [ "$(grep -c '^frame=' "$T_TMP/lat")" = "$((N * FRAMES))" ]
t_check "no FILL in window mode" [ "$(awk '/^tick=/{for(i=1;i<=NF;i++) if($i ~ /^fill=/){sub("fill=","",$i); s+=$i}} END{print s+0}' "$T_TMP/lat")" = 0 ]
t_done
