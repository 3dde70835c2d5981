#!/usr/bin/env bash
# reference.sh: the C decoder against the independent numpy reference
# (tests/reference/llama_ref.py, HuggingFace Llama semantics) on the same
# safetensors files (synthetic:tiny saved as F32, BF16, F16): full cache,
# window S=0 and window+sinks S=4, rope cache and absolute, W=16 over 56
# steps (3.5x the window) for a batch of 3 sessions that start at steps 0,
# 5 and 11. Pass: max |C - reference| < 1e-4 * max |logit|.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
REF=$MT_ROOT/tests/reference/llama_ref.py
DUMP=$MT_TESTBIN/mt-refdump
[ -x "$DUMP" ] || t_skip_all "mt-refdump not built"
$PY -c 'import numpy' 2>/dev/null || t_skip_all "python3-numpy missing"

W=16 STEPS=56 STARTS=0,5,11
for dt in f32 bf16 f16; do
    "$DUMP" --model synthetic:tiny --save "$T_TMP/tiny-$dt" --dtype $dt 2>"$T_TMP/err"
    t_ok $? "save synthetic:tiny as $dt"
done

# run_case NAME DIR POLICY SINK ROPE INPUT
run_case() {
    local name=$1 dir=$2 policy=$3 sink=$4 rope=$5 input=$6 out
    out=$T_TMP/$name
    if ! "$DUMP" --model "$dir" --policy $policy --sink $sink --window $W --rope $rope \
         --starts $STARTS --steps $STEPS --input $input --threads 2 --out "$out.c" 2>"$out.err"; then
        t_ok 1 "$name: mt-refdump ran"; t_diag "$(cat "$out.err")"; return
    fi
    local res
    res=$($PY "$REF" "$dir" --policy $policy --sink $sink --window $W --rope $rope \
          --starts $STARTS --steps $STEPS --input $input --out "$out.r" --check "$out.c" 2>&1)
    local rc=$?
    t_ok $rc "$name: C matches reference ($res)"
}

D=$T_TMP/tiny-f32
run_case f32-full            "$D" full   0 absolute tokens
run_case f32-window-S0-cache "$D" window 0 cache    tokens
run_case f32-window-S0-abs   "$D" window 0 absolute tokens
run_case f32-window-S4-cache "$D" window 4 cache    tokens
run_case f32-window-S4-abs   "$D" window 4 absolute tokens
run_case f32-window-S4-audio "$D" window 4 cache    audio
for dt in bf16 f16; do
    run_case $dt-full            "$T_TMP/tiny-$dt" full   0 absolute tokens
    run_case $dt-window-S4-cache "$T_TMP/tiny-$dt" window 4 cache    tokens
    run_case $dt-window-S0-abs   "$T_TMP/tiny-$dt" window 0 absolute tokens
done

# The policies must matter: past the window, window and full outputs differ
# (a decoder that ignored the policy would pass every case above only if
# the reference made the same mistake).
differ() {
    [ -s "$1" ] && [ -s "$2" ] || return 1
    $PY - "$1" "$2" <<'PY'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32); b = np.fromfile(sys.argv[2], dtype=np.float32)
sys.exit(0 if a.size == b.size and np.max(np.abs(a - b)) > 1e-3 * np.max(np.abs(a)) else 1)
PY
}
t_check "window S=4 differs from full past the window" differ "$T_TMP/f32-full.c" "$T_TMP/f32-window-S4-cache.c"
t_check "rope cache differs from rope absolute past the window" differ "$T_TMP/f32-window-S4-cache.c" "$T_TMP/f32-window-S4-abs.c"
t_check "sinks matter: S=0 differs from S=4" differ "$T_TMP/f32-window-S0-cache.c" "$T_TMP/f32-window-S4-cache.c"
t_done
