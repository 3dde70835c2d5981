#!/bin/bash
# probe_calibrate: `mt-probe calibrate` times the CPU backend on
# synthetic:tiny over a small grid, prints every point's residual, and
# writes a profile that mt-serve accepts as a simulated device: a session
# through it comes back whole, each tick naming the calibrated profile.
# --served (briefly: two levels of 2 s) sweeps a real mt-serve and fits its
# tick lines into a profile of the same format.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_need mt-probe
P=$T_TMP/cal.profile
timeout 120 "$MT_BIN/mt-probe" calibrate -m synthetic:tiny --threads 1 \
    --batches 1,4,16 --lengths 16,256 --reps 6 --memory 8e9 --name cal-tiny \
    -o "$P" 2>"$T_TMP/err"
t_ok $? "calibrate exits 0"
t_check "a residual line per grid point (6)" \
    [ "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[-+][0-9.]+$' "$T_TMP/err")" = 6 ]
t_check "the fit is printed" grep -q "fit: bandwidth .* RMS relative residual" "$T_TMP/err"
t_check "the profile names itself, its model and its source" \
    grep -q "^name          = cal-tiny" "$P"
t_check "its figures say they were fitted" grep -q "^bandwidth .*# fitted" "$P"
t_check "fp32 on cpu" grep -q "^weight_bytes  = 4" "$P"
"$MT_TESTBIN/mt-fakeclient" --emit -f 20 --no-pace |
    "$MT_BIN/mt-serve" --stdio --device "sim:$P" -m synthetic:tiny \
        --latency-log "$T_TMP/lat" 2>"$T_TMP/log" |
    "$MT_TESTBIN/mt-fakeclient" --read --expect 20 >"$T_TMP/read"
t_ok $? "mt-serve runs a session on the calibrated profile"
t_check "it says SIMULATED and names the profile" grep -q "SIMULATED device sim:cal-tiny" "$T_TMP/log"
t_check "ticks carry device=sim:cal-tiny" grep -q " device=sim:cal-tiny sim_pred_ms=" "$T_TMP/lat"
"$MT_BIN/mt-probe" calibrate --batches 1 --lengths 16 --reps 2 -m synthetic:tiny -o /dev/null 2>"$T_TMP/err2"
t_check "one point is too few to fit: exit 1" [ $? = 1 ]
t_check "and it says so" grep -q "too few points" "$T_TMP/err2"

S=$T_TMP/served.profile
timeout 60 "$MT_BIN/mt-probe" calibrate --served -m synthetic:tiny --threads 1 \
    --batches 1,4 --window 16 --hold 2s --warmup 0.5s --memory 8e9 --name cal-served \
    -o "$S" 2>"$T_TMP/serr"
t_ok $? "calibrate --served exits 0"
t_check "it swept mt-serve: a table row per level (2)" \
    [ "$(grep -cP '^[0-9]+\t[0-9]+\t' "$T_TMP/serr")" = 2 ]
t_check "residual lines with a ticks column (at least 3)" \
    [ "$(grep -cE '^ +[0-9]+ +[0-9]+ +[0-9.]+ +[0-9.]+ +[-+][0-9.]+ +[0-9]+$' "$T_TMP/serr")" -ge 3 ]
t_check "the fit is printed" grep -q "fit: bandwidth .* RMS relative residual" "$T_TMP/serr"
t_check "the profile says it was fitted to served ticks" grep -q "fitted by mt-probe calibrate --served" "$S"
t_check "and names itself" grep -q "^name          = cal-served" "$S"
t_check "its figures say they were fitted" grep -q "^matrix_rate .*# fitted" "$S"
"$MT_TESTBIN/mt-fakeclient" --emit -f 5 --no-pace |
    "$MT_BIN/mt-serve" --stdio --device "sim:$S" -m synthetic:tiny 2>"$T_TMP/slog" |
    "$MT_TESTBIN/mt-fakeclient" --read --expect 5 >"$T_TMP/sread"
t_ok $? "mt-serve runs a session on the served profile"
"$MT_BIN/mt-probe" calibrate --served --lengths 16 -o /dev/null 2>"$T_TMP/err3"
t_check "--served with --lengths: usage error, exit 2" [ $? = 2 ]
"$MT_BIN/mt-probe" calibrate --window 16 -o /dev/null 2>"$T_TMP/err4"
t_check "--window without --served: usage error, exit 2" [ $? = 2 ]
# a Kyutai model: the depformer and the codec timed beside the temporal
# step, their fitted figures in the profile, which the simulator reads
K="$T_TMP/kyutai.profile"
"$MT_BIN/mt-probe" calibrate -m synthetic:kyutai-tiny --batches 1,2,4 --lengths 16,64 \
    --reps 3 --threads 1 -o "$K" 2>"$T_TMP/kerr"
t_ok $? "calibrate a Kyutai model exits 0"
t_check "the depformer is timed at each batch (3)" \
    [ "$(grep -c '^mt-probe calibrate: depformer  *[0-9]' "$T_TMP/kerr")" = 3 ]
t_check "the codec is timed at each batch (3)" \
    [ "$(grep -c '^mt-probe calibrate: codec (cpu' "$T_TMP/kerr")" = 3 ]
t_check "the depformer's figures are in the profile" grep -q "^depformer_rate .*# fitted" "$K"
t_check "the codec's figures are in the profile" grep -q "^codec_rate .*# fitted" "$K"
"$MT_BIN/mt-probe" predict -m synthetic:kyutai-tiny --kv-mem 1G --profile "$K" >"$T_TMP/kpred" 2>&1
t_ok $? "mt-probe predict reads the calibrated profile"
t_check "and gives the whole frame's sessions per device, SIMULATED" \
    grep -qE "^sessions per device on sim:calibrated-cpu	[0-9]+ .*\(SIMULATED\)" "$T_TMP/kpred"
"$MT_BIN/mt-probe" predict -m synthetic:moshiko --kv-mem 50G --window 252 --sink 4 \
    --profile h100-moshiko >"$T_TMP/mpred" 2>&1
t_ok $? "predict moshiko on the shipped h100-moshiko profile"
t_check "its frame has a depformer share at B=1" \
    grep -qE "^frame on sim:h100-moshiko B=1	.* depformer [1-9][0-9.]* .*SIMULATED" "$T_TMP/mpred"
t_check "and sessions per H100 (SIMULATED)" \
    grep -qE "^sessions per device on sim:h100-moshiko	[1-9][0-9]* .*\(SIMULATED\)" "$T_TMP/mpred"
"$MT_BIN/mt-probe" calibrate -m synthetic:small --codec synthetic:mimi -o /dev/null 2>"$T_TMP/err5"
t_check "--codec with a model that is not Kyutai's: usage error, exit 2" [ $? = 2 ]
"$MT_BIN/mt-probe" calibrate --gpu 1 -o /dev/null 2>"$T_TMP/err6"
t_check "--gpu without --device cuda: usage error, exit 2" [ $? = 2 ]
t_done
