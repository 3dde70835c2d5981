#!/usr/bin/env bash
# reference_qwen.sh: the Qwen backbones (q/k/v biases of Qwen2, per-head
# q/k RMSNorm of Qwen3 with an explicit head_dim) in the C decoder against
# the numpy reference (tests/reference/llama_ref.py, written from
# HuggingFace's modeling_qwen2.py / modeling_qwen3.py descriptions), on the
# same safetensors files: synthetic:tiny-qwen2 and synthetic:tiny-qwen3
# saved by our writer as F32 and BF16 (config.json with model_type qwen2 /
# qwen3 and the fields those models publish), full cache, window S=0 and
# S=4, rope cache and absolute, token and audio input, f16 K/V and weights;
# the schedule and the 1e-4 tolerance of reference.sh (3 sessions starting
# at steps 0, 5, 11; W=16 over 56 steps).
#
# Positions supplied per input (mt_step_io.positions) are checked the same
# way, with their own negative control.
#
# Negative controls: the same C output against the reference with the
# biases dropped (qwen2) or the q/k norms dropped (qwen3) must fail the
# same comparison, so a decoder that skipped either could not pass.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
REF=$MT_ROOT/tests/reference/llama_ref.py
DUMP=$MT_TESTBIN/mt-refdump
t_need mt-refdump
$PY -c 'import numpy' 2>/dev/null || t_skip_all "python3-numpy missing"

W=16 STEPS=56 STARTS=0,5,11
for q in qwen2 qwen3; do
    for dt in f32 bf16; do
        "$DUMP" --model synthetic:tiny-$q --save "$T_TMP/$q-$dt" --dtype $dt 2>"$T_TMP/err"
        t_ok $? "save synthetic:tiny-$q as $dt"
    done
done
t_check "qwen2 config.json says model_type qwen2, Qwen2ForCausalLM, no sliding window" \
    grep -q '"model_type": "qwen2"' "$T_TMP/qwen2-f32/config.json"
t_check "qwen2 config.json: Qwen2ForCausalLM, use_sliding_window false" \
    $PY -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (c["architectures"]==["Qwen2ForCausalLM"] and c["use_sliding_window"] is False and c["sliding_window"]==131072 and c["rope_scaling"] is None and "attention_bias" not in c))' "$T_TMP/qwen2-f32/config.json"
t_check "qwen3 config.json: Qwen3ForCausalLM, head_dim 32, attention_bias false" \
    $PY -c 'import json,sys; c=json.load(open(sys.argv[1])); sys.exit(not (c["model_type"]=="qwen3" and c["architectures"]==["Qwen3ForCausalLM"] and c["head_dim"]==32 and c["attention_bias"] is False and c["sliding_window"] is None))' "$T_TMP/qwen3-f32/config.json"

# run_case NAME DIR POLICY SINK ROPE INPUT [DROP]: DROP set, the comparison
# must fail (a negative control)
run_case() {
    local name=$1 dir=$2 policy=$3 sink=$4 rope=$5 input=$6 drop=${7:-} out
    out=$T_TMP/$name
    if ! "$DUMP" --model "$dir" --policy $policy --sink $sink --window $W --rope $rope \
         --starts $STARTS --steps $STEPS --input $input --threads 2 ${HALF:-} \
         --out "$out.c" 2>"$out.err"; then
        t_ok 1 "$name: mt-refdump ran"; t_diag "$(cat "$out.err")"; return
    fi
    local res rc
    res=$($PY "$REF" "$dir" --policy $policy --sink $sink --window $W --rope $rope \
          --starts $STARTS --steps $STEPS --input $input ${HALF:-} ${drop:+--drop $drop} \
          --out "$out.r" --check "$out.c" 2>&1)
    rc=$?
    if [ -n "$drop" ]; then
        [ $rc -eq 1 ] && [ -n "$res" ]; t_ok $? "$name: C differs from the reference without $drop ($res)"
    else
        t_ok $rc "$name: C matches reference ($res)"
    fi
}

for q in qwen2 qwen3; do
    for dt in f32 bf16; do
        D=$T_TMP/$q-$dt
        run_case $q-$dt-full            "$D" full   0 absolute tokens
        run_case $q-$dt-window-S4-cache "$D" window 4 cache    tokens
        run_case $q-$dt-window-S0-abs   "$D" window 0 absolute tokens
        run_case $q-$dt-window-S4-abs   "$D" window 4 absolute tokens
    done
    D=$T_TMP/$q-f32
    run_case $q-f32-window-S4-audio "$D" window 4 cache audio
    HALF="--kv-dtype f16 --weights f16" run_case $q-f16kvw-full "$D" full 0 absolute tokens
    HALF="--kv-dtype f16 --weights f16" run_case $q-f16kvw-window-S4-cache "$D" window 4 cache tokens
done

# negative controls: what the comparison sees without the bias / the norm
run_case qwen2-nobias-full         "$T_TMP/qwen2-f32" full   0 absolute tokens bias
run_case qwen2-nobias-window-cache "$T_TMP/qwen2-f32" window 4 cache    tokens bias
run_case qwen3-nonorm-full         "$T_TMP/qwen3-f32" full   0 absolute tokens qknorm
run_case qwen3-nonorm-window-cache "$T_TMP/qwen3-f32" window 4 cache    tokens qknorm

# Positions supplied per input (mt_step_io.positions, as an adapter's
# position ids): the input of session b at its i-th step sits at rotary
# position 3b + K i; full policy and window with rope absolute; and the
# comparison separates a decoder that ignored them (the same C output
# against the reference at slot positions must fail).
HALF="--pos-stride 2" run_case qwen2-pos2-full "$T_TMP/qwen2-f32" full 0 absolute tokens
HALF="--pos-stride 3" run_case qwen3-pos3-window-S4-abs "$T_TMP/qwen3-bf16" window 4 absolute tokens
HALF="--pos-stride 3 --kv-dtype f16 --weights f16" run_case qwen3-pos3-f16kvw-full "$T_TMP/qwen3-f32" full 0 absolute tokens
res=$($PY "$REF" "$T_TMP/qwen2-f32" --policy full --sink 0 --window $W --rope absolute \
      --starts $STARTS --steps $STEPS --out "$T_TMP/slot.r" --check "$T_TMP/qwen2-pos2-full.c" 2>&1)
[ $? -eq 1 ] && [ -s "$T_TMP/qwen2-pos2-full.c" ]
t_ok $? "positions matter: the stride-2 C output fails against slot positions ($res)"
"$DUMP" --model "$T_TMP/qwen2-f32" --policy window --sink 4 --window $W --rope cache \
    --starts $STARTS --steps 4 --pos-stride 2 --out "$T_TMP/cache.c" 2>"$T_TMP/cache.err"
rc=$?
[ $rc -ne 0 ] && grep -q "rope absolute" "$T_TMP/cache.err"
t_ok $? "positions with --rope cache are refused ($(cat "$T_TMP/cache.err"))"

# The policies and rope modes must matter for these models too.
differ() {
    [ -s "$1" ] && [ -s "$2" ] || return 1
    $PY - "$1" "$2" <<'PY'
import sys, numpy as np
a = np.fromfile(sys.argv[1], dtype=np.float32); b = np.fromfile(sys.argv[2], dtype=np.float32)
sys.exit(0 if a.size == b.size and np.max(np.abs(a - b)) > 1e-3 * np.max(np.abs(a)) else 1)
PY
}
for q in qwen2 qwen3; do
    t_check "$q: window S=4 differs from full past the window" differ "$T_TMP/$q-f32-full.c" "$T_TMP/$q-f32-window-S4-cache.c"
    t_check "$q: rope cache differs from rope absolute" differ "$T_TMP/$q-f32-window-S4-cache.c" "$T_TMP/$q-f32-window-S4-abs.c"
done
t_done
