#!/bin/bash
# serve_concurrent: 32 concurrent scripted sessions against synthetic:small
# for 30 s over one Unix socket. Every input frame must come back as exactly
# one output frame (real or FILL), in order, and the per-tick counters of
# mt-serve's latency lines must add up to what the clients counted.
. "$(dirname "$0")/lib.sh"
t_fast_blas
SOCK=$T_TMP/serve.sock
N=${MT_SERVE_N:-32}
FRAMES=${MT_SERVE_FRAMES:-375}          # 30 s at 80 ms
tk() { awk -v k="$1" '/^tick=/{for(i=1;i<=NF;i++){n=index($i,"=");if(substr($i,1,n-1)==k)print substr($i,n+1)}}' "$T_TMP/lat"; }
sumk() { tk "$1" | awk '{s+=$1} END{printf "%d\n", s}'; }
tot() { awk -v k="$1" '/^total /{for(i=1;i<=NF;i++){n=index($i,"=");if(substr($i,1,n-1)==k)print substr($i,n+1)}}' "$T_TMP/cli"; }

t_need mt-serve
# --fill: 32 sessions of synthetic:small are more than 2 cores compute in
# real time; FILL answers what is late, so every frame is still answered
# exactly once and the run stays bounded however loaded the machine is.
t_serve "$T_TMP/lat" "$T_TMP/log" $(t_listen_args "$SOCK") -m synthetic:small --max-sessions 64 --fill
t_check "server listens" wait_for_socket "$SOCK" 300
timeout 150 "$MT_TESTBIN/mt-fakeclient" -s "$(t_endpoint "$SOCK")" -n "$N" -f "$FRAMES" \
    --end-timeout 20 >"$T_TMP/cli"
t_ok $? "$N sessions: every input got exactly one output, in order"
t_check "all $N sessions ended with END" [ "$(tot done)" = "$N" ]
t_check "clients sent $((N * FRAMES)) frames" [ "$(tot sent)" = "$((N * FRAMES))" ]
kill -TERM $SRV; wait $SRV; rc=$?
t_ok $rc "SIGTERM: drained, exit status 0"
t_diag "ticks: $(grep -c '^tick=' "$T_TMP/lat"); step_ms max $(tk step_ms | sort -g | tail -1); late_ms max $(tk late_ms | sort -g | tail -1)"
t_check "sum of in= equals frames sent ($(sumk in) vs $(tot sent))" [ "$(sumk in)" = "$(tot sent)" ]
t_check "sum of out= equals real outputs received ($(sumk out) vs $(tot real))" [ "$(sumk out)" = "$(tot real)" ]
t_check "sum of fill= equals FILL frames received ($(sumk fill) vs $(tot fill))" [ "$(sumk fill)" = "$(tot fill)" ]
t_check "no input frame ended as a miss" [ "$(sumk miss)" = 0 ]
t_check "admitted=$N in the last tick" [ "$(tk admitted | tail -1)" = "$N" ]
t_check "every tick line parses with the stable keys" \
    awk '/^tick=/{ if ($0 !~ / t=/ || $0 !~ / naive_met=/ || $0 !~ / kv_free=/) bad=1 } END{exit bad}' "$T_TMP/lat"
t_done
