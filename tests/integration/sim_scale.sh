#!/bin/bash
# sim_scale: mt-serve on the simulated device (--device sim:h200-moshi7b,
# synthetic:moshi-7b at its real shape) starts with an RSS under 100 MB
# (no weights, no K/V memory), then carries MT_SIM_N (200)
# sessions for 10 s: every frame comes back once, in order and equal to
# what was sent (the sim echoes), every tick names the simulated device,
# the profile's prediction is what the cost model gives for the batch,
# and every tick's step time is the prediction plus the drawn noise plus
# host time that is never negative (the wait is on the absolute clock, so
# a step never ends before its prediction).
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
SOCK=$T_TMP/serve.sock
N=${MT_SIM_N:-200}
FRAMES=${MT_SIM_FRAMES:-125}            # 10 s at 80 ms
# Host time a tick's steps add to the prediction (the tick thread's
# wake-up after its absolute-time wait, the engine's own work) is this
# machine's speed: a busy one adds tens of ms. Reported, not asserted;
# MT_SIM_TOL_MS and MT_SIM_TYP_MS, when set, assert every tick and 90% of
# ticks under them (for a quiet machine). The start-up time is reported.
TOL=${MT_SIM_TOL_MS:-}
TYP=${MT_SIM_TYP_MS:-}
PROFILE=$MT_ROOT/profiles/h200-moshi7b.profile
# A short window so every session's visible positions saturate (S + W = 64)
# half way through, and the prediction for a full batch is one number.
S=4 W=60 V=64
tk() { awk -v k="$1" '/^tick=/{for(i=1;i<=NF;i++){n=index($i,"=");if(substr($i,1,n-1)==k)print substr($i,n+1)}}' "$T_TMP/lat"; }
sumk() { tk "$1" | awk '{s+=$1} END{printf "%d\n", s}'; }
tot() { awk -v k="$1" '/^total /{for(i=1;i<=NF;i++){n=index($i,"=");if(substr($i,1,n-1)==k)print substr($i,n+1)}}' "$T_TMP/cli"; }
prof() { sed 's/#.*//' "$PROFILE" | awk -F= -v k="$1" '{gsub(/[ \t]/,"",$1); gsub(/[ \t]/,"",$2)} $1==k{print $2}'; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

t_need mt-serve mt-fakeclient
[ -r "$PROFILE" ] || t_skip_all "no $PROFILE"

t0=$(now_ms)
t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" --device sim:h200-moshi7b -m synthetic:moshi-7b \
    --max-sessions $((N + 16)) --sink $S --window $W
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
t1=$(now_ms)
rss_kb=$(awk '/^VmRSS:/{print $2}' /proc/$SRV/status 2>/dev/null)
t_check "server listens" [ -S "$SOCK" ]
t_diag "listening $((t1 - t0)) ms after it was started"
cu_maps=$(grep -c -E '/libcu(blas|blasLt|dart)[.]so' /proc/$SRV/maps 2>/dev/null)
t_check "RSS at start under 100 MB (${rss_kb:-?} kB)" [ "${rss_kb:-999999}" -lt 102400 ]
# A CUDA build loads its backend (and cuBLAS, ~150 MB) only when CUDA is
# asked for or probed (src/gpu/cuda_loader.c): never for the sim.
t_check "no CUDA library mapped (${cu_maps:-?} mappings)" [ "${cu_maps:-1}" = 0 ]
t_check "stderr says the device is simulated and names the profile" \
    grep -q "SIMULATED device sim:h200-moshi7b (profile .*h200-moshi7b.profile.*no figure from this server is a measurement" "$T_TMP/log"

timeout 120 "$MT_TESTBIN/mt-fakeclient" -s "$SOCK" -n "$N" -f "$FRAMES" --echo \
    --end-timeout 20 >"$T_TMP/cli"
t_ok $? "$N sessions: every input got exactly one output, in order, equal to the input"
hwm_kb=$(awk '/^VmHWM:/{print $2}' /proc/$SRV/status 2>/dev/null)
# CPU seconds the server used (user + system), for the scale figure
cpu_s=$(awk '{printf "%.1f", ($14 + $15) / '"$(getconf CLK_TCK)"'}' /proc/$SRV/stat 2>/dev/null)
kill -TERM $SRV; wait $SRV; rc=$?
t_ok $rc "SIGTERM: drained, exit status 0"
t_check "all $N sessions ended with END" [ "$(tot done)" = "$N" ]
t_check "no frame lost: $(tot real) real of $((N * FRAMES)), fill $(tot fill), missing $(tot missing)" \
    [ "$(tot real)/$(tot missing)/$(tot echo_err)" = "$((N * FRAMES))/0/0" ]
t_check "no input frame ended as a miss" [ "$(sumk miss)" = 0 ]
t_diag "peak RSS ${hwm_kb:-?} kB with $N sessions; server CPU ${cpu_s:-?} s; ticks $(grep -c '^tick=' "$T_TMP/lat"); met min $(tk met | sort -g | head -1)%; late_ms max $(tk late_ms | sort -g | tail -1)"
[ -n "$MT_SIM_KEEP" ] && cp "$T_TMP/lat" "$T_TMP/log" "$T_TMP/cli" "$MT_SIM_KEEP/"
t_check "every tick line names the device" \
    awk '/^tick=/{ if ($0 !~ / device=sim:h200-moshi7b sim_pred_ms=[0-9.]+ sim_noise_ms=-?[0-9.]+/) bad=1 } END{exit bad}' "$T_TMP/lat"

# The cost model by hand for a full batch of N sessions seeing V positions
# each: synthetic:moshi-7b has P = 6,492,000,256 parameters (mt_model_params),
# 32 layers, 32 heads (and K/V heads) of 128, so K/V bytes a position are
# 32*2*32*128*kv_bytes.
BW=$(prof bandwidth) RATE=$(prof matrix_rate) OV=$(prof overhead_us)
WB=$(prof weight_bytes) KB=$(prof kv_bytes) SIG=$(prof jitter_sigma)
STALL=$(prof stall_ms)
# hand_pred B V SCALE: the profile's cost model by hand for synthetic:moshi-7b
# (6.49e9 parameters, 32 layers of 32 heads x 128), B sessions with V
# visible positions each, the weights read once: max(bytes / bandwidth,
# flops / matrix_rate) plus the overhead, in ms, times SCALE (1/K)
hand_pred() {
    awk -v P=6492000256 -v B="$1" -v V="$2" -v sc="$3" -v bw="$BW" -v r="$RATE" \
        -v ov="$OV" -v wb="$WB" -v kb="$KB" 'BEGIN{pb=32*2*32*128*kb;
    bytes=P*wb+pb*V*B; fl=2*P*B+4*32*32*128*V*B;
    tm=bytes/bw; tf=fl/r; t=(tm>tf?tm:tf)+ov*1e-6; printf "%.3f", sc*t*1e3}'
}
want=$(hand_pred "$N" "$V" 1)
t_diag "hand prediction for B=$N, $V visible: $want ms"
# ticks after every session has V positions (7 s on), all N in one round
awk -v N="$N" -v w="$want" '/^tick=/{ for(i=1;i<=NF;i++){n=index($i,"="); v[substr($i,1,n-1)]=substr($i,n+1)+0}
      if (v["t"] >= 7 && v["stepped"] == N && v["active"] == N) { full++;
        d = v["sim_pred_ms"] - w; if (d < 0) d = -d; if (d <= 0.002) hit++; else other++ } }
      END{ printf "%d %d %d\n", full, hit, other }' "$T_TMP/lat" >"$T_TMP/pred"
read full hit other <"$T_TMP/pred"
t_check "sim_pred_ms equals the hand prediction for full batches ($hit of $full ticks; others $other)" \
    [ "${full:-0}" -ge 3 -a "${hit:-0}" -ge $((${full:-0} * 3 / 4)) ]
# step_ms = prediction + noise + host time in [0, TOL]; noise within the
# profile's jitter (4 sigma) plus its stalls (at most MAX_ROUNDS steps a tick)
awk -v tol="${TOL:-1e30}" -v typ="${TYP:-1e30}" -v sig="$SIG" -v stall="$STALL" '/^tick=/{ for(i=1;i<=NF;i++){n=index($i,"="); v[substr($i,1,n-1)]=substr($i,n+1)+0}
      if (v["stepped"] == 0) next; steps++
      host = v["step_ms"] - v["sim_pred_ms"] - v["sim_noise_ms"]
      if (host > hmax) hmax = host
      if (host < -0.003 || host > tol) badh++
      if (host > typ) slow++
      p = v["sim_pred_ms"]; z = v["sim_noise_ms"]
      if (p <= 0 || z > p * (exp(4 * sig) - 1) + 4 * stall + 0.003 || z < p * (exp(-4 * sig) - 1) - 0.003) badn++ }
      END{ printf "%d %d %d %.3f %d\n", steps, badh, badn, hmax, slow }' "$T_TMP/lat" >"$T_TMP/steps"
read steps badh badn hmax slow <"$T_TMP/steps"
t_check "every tick's step_ms is its prediction + noise + a host time >= 0${TOL:+ and under $TOL ms} ($badh of $steps outside; host time max $hmax ms)" \
    [ "${steps:-0}" -gt 0 -a "${badh:-1}" = 0 ]
if [ -n "$TYP" ]; then
    t_check "90% of ticks add under $TYP ms of host time ($slow of $steps over)" \
        [ "${steps:-0}" -gt 0 -a "${slow:-99999}" -le $((${steps:-0} / 10)) ]
fi
t_check "every tick's noise within 4 sigma of jitter plus stalls ($badn of $steps outside)" \
    [ "${steps:-0}" -gt 0 -a "${badn:-1}" = 0 ]
# --time-scale below 1: the model runs slower than real time (how
# bench_admit.sh MODE=sim shrinks this host's hiccups in model time). At
# K = 0.5 the tick is 160 ms of real time, every simulated step waits
# twice its model time (sim_pred_ms, in real ms, is twice the cost model's
# figure), clients pacing at 160 ms get every frame back, and K under 0.1
# is refused.
"$MT_BIN/mt-serve" -s "$T_TMP/x.sock" --device sim:h200-moshi7b -m synthetic:moshi-7b \
    --time-scale 0.05 >/dev/null 2>"$T_TMP/log.k"
rc=$?
t_check "--time-scale 0.05 refused with status 2 ($(head -1 "$T_TMP/log.k"))" [ $rc = 2 ]
SOCK=$T_TMP/slow.sock
t_serve "$T_TMP/lat.k" "$T_TMP/log.k" -s "$SOCK" --device sim:h200-moshi7b -m synthetic:moshi-7b \
    --max-sessions 8 --sink 4 --window 12 --time-scale 0.5
i=0
while [ ! -S "$SOCK" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i + 1)); done
# the start line comes after the socket (made first): wait for it
t_check "the start line says the model runs 2 times slower, tick 160 ms" \
    wait_for_line "$T_TMP/log.k" "tick 160.000 ms"
t_check "... and TIME-SCALED x0.5, slower than real time" \
    grep -q "TIME-SCALED x0.5: model time runs 2 times slower than real time" "$T_TMP/log.k"
timeout 60 "$MT_TESTBIN/mt-fakeclient" -s "$SOCK" -n 4 -f 30 --period-ms 160 --echo \
    --end-timeout 10 >"$T_TMP/cli.k"
t_ok $? "4 sessions paced at 160 ms: every input got exactly one output, in order"
kill -TERM $SRV; wait $SRV
t_ok $? "SIGTERM: drained, exit status 0"
want=$(hand_pred 4 16 2)
awk '/^tick=/{ for(i=1;i<=NF;i++){n=index($i,"="); v[substr($i,1,n-1)]=substr($i,n+1)+0}
      if (v["stepped"] == 4 && v["sim_pred_ms"] > m) m = v["sim_pred_ms"]
      if (n0++) { d[++all] = v["t"] - t0 } t0 = v["t"] }
      END{ for (i = 2; i <= all; i++) for (j = i; j > 1 && d[j - 1] > d[j]; j--) { x = d[j]; d[j] = d[j - 1]; d[j - 1] = x }
           med = all ? d[int((all + 1) / 2)] : 0
           printf "%.3f %.1f %d\n", m, 1000 * med, all }' "$T_TMP/lat.k" >"$T_TMP/k"
read kpred med all <"$T_TMP/k"
t_check "a full batch's sim_pred_ms is twice the cost model's ($kpred ms, want $want)" \
    awk -v a="$kpred" -v b="$want" 'BEGIN { d = a - b; exit !(d < 0.004 && d > -0.004) }'
# the tick clock is absolute: a late tick is followed by a short one, so
# the median interval is the period however busy the machine is
t_check "ticks 160 ms apart in real time (median interval $med ms of $all)" \
    awk -v m="${med:-0}" -v n="${all:-0}" 'BEGIN { exit !(n >= 20 && m > 150 && m < 170) }'

t_done
