#!/usr/bin/env bash
# probe_soak.sh: the collapse soak in miniature (synthetic:tiny, two short
# runs per configuration, same seeds). Under a load whose unbounded demand
# is several times the pool, every unbounded run must collapse and no
# bounded run may; the prediction must be printed beside each unbounded run.
. "$(dirname "$0")/lib.sh"
. "$MT_ROOT/tools/columns.sh"
P=$MT_BIN/mt-probe
t_need mt-probe mt-serve
M=synthetic:tiny
pb=$("$P" predict -m $M --kv-mem 1M --samples 1 2>/dev/null |
     sed -n 's/^kv bytes per position\t.*(\([0-9]*\))$/\1/p')
[ -n "$pb" ] || t_skip_all "no shape for $M"
# The pool holds 4 bounded sessions (sink 4 + window 28 = 2 blocks each):
# 8 blocks of 16 positions. Two arrivals a second for 8 s, each staying to
# the end: the unbounded demand passes the pool within ~3 s.
pool=$((8 * 16 * pb))
t_diag "position $pb bytes, pool $pool bytes"
"$P" predict -m $M --kv-mem $pool --sink 4 --window 28 --arrivals even:2 \
    --lengths fixed:8s --duration 8s --samples 2 >"$T_TMP/pred" 2>&1
grep -q "overflow within run	2 of 2" "$T_TMP/pred"
t_ok $? "the configured pressure overflows the unbounded pool (predicted)"
timeout 120 "$P" soak --runs 2 --duration 8s --seed 3 --arrivals even:2 \
    --lengths fixed:8s --data "$T_TMP/d" --plot "$T_TMP/soak.png" \
    -- -m $M --device cpu --kv window --sink 4 --window 28 --kv-mem $pool \
    -- -m $M --device cpu --kv full --kv-mem $pool >"$T_TMP/out" 2>"$T_TMP/err"
rc=$?
sed 's/^/# /' "$T_TMP/out"
[ $rc -eq 0 ] || sed 's/^/# err: /' "$T_TMP/err"
t_check "soak exits 0" test $rc -eq 0
rows=$(awk '$1 ~ /^(window|full)/ && $2 ~ /^[0-9]+$/' "$T_TMP/out" | wc -l)
t_check "one row per run (4)" test "$rows" -ge 4
nb=$(awk '$1 ~ /^window/ && $2 ~ /^[0-9]+$/ && / COLLAPSED/' "$T_TMP/out" | wc -l)
nu=$(awk '$1 ~ /^full/ && $2 ~ /^[0-9]+$/ && / COLLAPSED/' "$T_TMP/out" | wc -l)
if [ -n "$MT_ASAN" ]; then
    t_diag "asan build: collapse counts not asserted (window $nb, full $nu)"
    t_skip "bounded runs do not collapse (timing, ASan)"
    t_skip "unbounded runs collapse (timing, ASan)"
else
    t_check "bounded: no run collapsed" test "$nb" -eq 0
    t_check "unbounded: every run collapsed" test "$nu" -eq 2
fi
grep -qE '^window[^ ]* +collapsed [0-9]+ of 2 runs' "$T_TMP/out"
t_ok $? "summary line for the bounded configuration"
grep -qE '^full[^ ]* +collapsed [0-9]+ of 2 runs' "$T_TMP/out"
t_ok $? "summary line for the unbounded configuration"
# the prediction column is filled for the unbounded rows
awk "$COLS_AWK"'cols_try("config") { next } /^#/ { next }
    $1 ~ /^full/ && $2 ~ /^[0-9]+$/ { if (col("pred_s") == "-") bad = 1 }
    END { if (COLS_BAD) exit 2; exit bad }' "$T_TMP/out"
t_ok $? "every unbounded row carries its predicted overflow time"
# the model's time beside the host's: a collapsed unbounded row's coll_s
# is its pool exhaustion (ovf_s); every row has a host_s column
awk "$COLS_AWK"'cols_try("config") { next } /^#/ { next }
    $1 ~ /^full/ && $2 ~ /^[0-9]+$/ && col("verdict") == "COLLAPSED" {
        if (col("ovf_s") == "-" || col("coll_s") != col("ovf_s")) bad = 1 }
    $2 ~ /^[0-9]+$/ { if (col("host_s") == "") bad = 1 }
    END { if (COLS_BAD) exit 2; exit bad }' "$T_TMP/out"
t_ok $? "a collapsed unbounded run is the model's at its pool exhaustion (coll_s = ovf_s)"
grep -qE '^(0 of 4 runs disturbed by the host|[1-4] of 4 runs disturbed by the host: rerun on a quieter machine)$' "$T_TMP/out"
t_ok $? "the summary counts the runs a host stall disturbed"
grep -qE "^full[^ ]* +predicted: pool overflows" "$T_TMP/out"
t_ok $? "the summary prints the prediction"
# same seeds in both configurations
s1=$(awk '$1 ~ /^window/ && $2 ~ /^[0-9]+$/ {print $3}' "$T_TMP/out" | tr '\n' ' ')
s2=$(awk '$1 ~ /^full/ && $2 ~ /^[0-9]+$/ {print $3}' "$T_TMP/out" | tr '\n' ' ')
t_check "both configurations played the same seeds ($s1)" test "$s1" = "$s2"
# stderr was a file: no progress line, not one carriage return or escape
! grep -q $'[\r\033]' "$T_TMP/err"
t_ok $? "stderr not a terminal: no progress line"
# stderr a terminal (script(1) gives it one): run i of n, elapsed, time left
if command -v script >/dev/null; then
    SHELL=/bin/sh timeout 60 script -qec "'$P' soak --runs 1 --duration 3s --seed 3 \
        --arrivals even:1 --lengths fixed:3s -- -m $M --device cpu >/dev/null" \
        "$T_TMP/tty.log" >/dev/null 2>&1 </dev/null
    grep -a $'\r' "$T_TMP/tty.log" | grep -aqE 'soak: run 1 of 1 \([0-9]+%\), 0:0[0-9] elapsed, (about [0-9:]+ left|finishing)'
    t_ok $? "stderr a terminal: the progress line, redrawn in place"
else
    t_skip "script(1) not installed"
fi
n=$(ls "$T_TMP"/d/ticks-c*-r*.log 2>/dev/null | wc -l)
t_check "tick lines kept per run (--data)" test "$n" -eq 4
t_png "$T_TMP/soak.png" "soak --plot writes a PNG"
t_done
