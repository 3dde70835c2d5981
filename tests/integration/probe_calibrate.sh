#!/bin/bash
# probe_calibrate: `mt-probe calibrate` times the CPU backend on
# synthetic:tiny over a small grid, prints every point's residual, and
# writes a profile that mt-serve accepts as a simulated device: a session
# through it comes back whole, each tick naming the calibrated profile.
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
t_done
