#!/bin/bash
# admit_kvfull: the same controller against the unbounded baseline
# (`mt-serve --kv full` with a small pool), to record why the bound
# matters: while the caches grow, the latency lines look healthy and the
# controller admits; later the pool runs out (preemption, recompute, FILL)
# and no controller that reads latency could have known. Asserted from the
# lines: sessions were admitted before any sustained lateness (a run of
# three ticks over the budget: one host stall delays a tick or two), and
# after that the cache ran out (a tick with preempted > 0 or kv_free 0)
# with those sessions still active, i.e. the controller admitted past the
# point where the cache later ran out. A host that cannot run one session
# of the model in real time (sustained lateness with at most one session
# active, before the cache ran out) shows nothing of this: both checks
# are skipped, saying so.
. "$(dirname "$0")/lib.sh"
A=$MT_BIN/mt-admit
FC=$MT_TESTBIN/mt-fakeclient
t_need mt-serve mt-admit mt-fakeclient
BUDGET=80
MODEL=${MT_ADMIT_MODEL:-synthetic:small}
KVMEM=32M
# Under the sanitizers one synthetic:small step alone is over the budget,
# so no signal is ever healthy: the tiny model with a pool cut to the same
# number of positions (32 KiB vs 1 KiB per position) keeps the experiment.
if [ -n "$MT_ASAN" ] && [ -z "$MT_ADMIT_MODEL" ]; then MODEL=synthetic:tiny KVMEM=1M; fi
t_fast_blas
SOCK=$T_TMP/s.sock
. "$(dirname "$0")/admit_lib.sh"

mkfifo "$T_TMP/ctl" "$T_TMP/out"
tee "$T_TMP/lat" <"$T_TMP/out" |
    "$A" --budget $BUDGET --margin 0.9 >"$T_TMP/ctl" 2>"$T_TMP/admit.err" &
CTL=$!; t_track $CTL
t_serve "$T_TMP/out" "$T_TMP/log" -s "$SOCK" -m "$MODEL" --kv full --kv-mem $KVMEM --control "$T_TMP/ctl"
wait_for_socket "$SOCK" 300 || { t_ok 1 "server started"; t_done; }
admit_arrivals "$SOCK" 20 0.25 500
kill -TERM $SRV; wait $SRV
wait $CTL
t_ok $? "mt-admit ended at EOF with exit 0"

# cliff: first tick that shows the cache out (preempted, kv_free 0);
# slow: sustained lateness before it with at most one session active
awk "$ADMIT_AWK_PARSE"'
    /^tick=/ { if (v["late_ms"] + 0 > '$BUDGET') {
                   if (++run >= 3 && !bad) { bad = 1; if (!cliff && v["active"] + 0 <= 1) slow = v["t"] }
               } else run = 0
               if (!cliff && (v["preempted"] + 0 > 0 || v["kv_free"] + 0 == 0)) {
                   cliff = v["t"]; active_at = v["active"] }
               if (cliff) { pre += v["preempted"]; fill += v["fill"]; if (v["late_ms"] + 0 > '$BUDGET') late++ } }
    /^admit / && v["verdict"] == "accept" { if (!cliff && !bad) healthy++ }
    END { printf "healthy_accepts=%d cliff_t=%s active_at_cliff=%d preempted=%d fills=%d late_after=%d host_slow_t=%s\n",
                 healthy, cliff ? cliff : "none", active_at, pre, fill, late, slow ? slow : "none" }' "$T_TMP/lat" >"$T_TMP/sum"
t_diag "kv full: $(cat "$T_TMP/sum")"
t_diag "admit: $(grep 'at=end' "$T_TMP/admit.err")"
healthy=$(sed -n 's/.*healthy_accepts=\([0-9]*\).*/\1/p' "$T_TMP/sum")
cliff=$(sed -n 's/.*cliff_t=\([^ ]*\).*/\1/p' "$T_TMP/sum")
slow=$(sed -n 's/.*host_slow_t=\([^ ]*\).*/\1/p' "$T_TMP/sum")
if [ -n "$MT_ASAN" ]; then
    t_skip "healthy signal before the cliff: timing not asserted under sanitizers ($healthy sessions before sustained lateness)"
elif [ "$slow" != none ]; then
    t_skip "healthy signal before the cliff: this host ran one session of $MODEL late from t=$slow s"
else
    t_check "the controller admitted on a healthy signal ($healthy sessions before three late ticks in a row)" \
        [ "${healthy:-0}" -ge 2 ]
fi
if [ "$slow" != none ] && [ "$cliff" = none ]; then
    t_skip "the cache ran out under them: this host ran one session of $MODEL late, so few were admitted"
else
    t_check "then the cache ran out under them (cliff at t=$cliff)" [ "$cliff" != none ]
fi
t_done
