#!/usr/bin/env bash
# serve_qwen.sh: HuggingFace-format Qwen2 and Qwen3 checkpoint directories
# (config.json with model_type qwen2 / qwen3 and the fields the published
# Qwen2.5-7B and Qwen3-8B configs carry, model.safetensors in BF16, written
# by our own writer from synthetic:tiny-qwen2 / tiny-qwen3) load in mt-serve
# and serve 4 concurrent sessions over a Unix socket, every input frame
# answered once and in order, under both cache policies; and the same
# directory with an arithmetic-changing field it does not implement is
# refused at start, the message naming the field.
# lane: light (it mostly waits: make test runs it beside other light tests)
. "$(dirname "$0")/lib.sh"
t_serve_test mt-refdump
PY=/usr/bin/python3

for q in qwen2 qwen3; do
    D=$T_TMP/$q
    "$MT_TESTBIN/mt-refdump" --model synthetic:tiny-$q --save "$D" --dtype bf16 2>"$T_TMP/err"
    t_ok $? "tiny-$q saved as a HuggingFace-format directory (BF16)"
    t_check "$q: config.json says model_type $q" grep -q "\"model_type\": \"$q\"" "$D/config.json"
    for kv in "window --sink 4 --window 16" "full"; do
        rm -f "$SOCK"
        t_serve "$T_TMP/lat" "$T_TMP/log" -s "$SOCK" -m "$D" --kv $kv --max-sessions 8 --fill
        if ! wait_for_socket "$SOCK" 300; then
            t_ok 1 "$q --kv ${kv%% *}: server listens"; t_diag "$(cat "$T_TMP/log")"
            kill $SRV 2>/dev/null; wait $SRV 2>/dev/null; continue
        fi
        timeout 60 "$FC" -s "$SOCK" -n 4 -f 40 --end-timeout 20 >"$T_TMP/cli"
        t_ok $? "$q --kv ${kv%% *}: 4 sessions of 40 frames, every input answered once, in order"
        t_check "$q --kv ${kv%% *}: the server stepped real outputs" \
            awk '/^tick=/{for(i=1;i<=NF;i++) if ($i ~ /^out=/) { sub("out=", "", $i); s += $i } } END { exit !(s > 0) }' "$T_TMP/lat"
        kill -TERM $SRV; wait $SRV
        t_ok $? "$q --kv ${kv%% *}: SIGTERM, exit 0"
    done
done

# refused fields: the message names each one
refuse() {   # refuse NAME TYPE PYTHON-EDIT FIELD
    local name=$1 q=$2 edit=$3 field=$4 D=$T_TMP/bad-$1
    mkdir -p "$D" && cp "$T_TMP/$q/model.safetensors" "$D/" &&
        $PY -c "import json,sys; c=json.load(open(sys.argv[1])); $edit; json.dump(c, open(sys.argv[2], 'w'))" \
            "$T_TMP/$q/config.json" "$D/config.json"
    timeout 30 "$MT_BIN/mt-serve" -s "$T_TMP/bad.sock" -m "$D" >/dev/null 2>"$T_TMP/bad.err"
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "field $field" "$T_TMP/bad.err"
    t_ok $? "$name: refused at start, naming $field ($(head -c 200 "$T_TMP/bad.err"))"
}
refuse sliding      qwen2 'c["use_sliding_window"] = True'                        use_sliding_window
refuse rope-scaling qwen2 'c["rope_scaling"] = {"type": "yarn", "factor": 4.0}'  rope_scaling
refuse layer-types  qwen3 'c["layer_types"] = ["full_attention", "sliding_attention"]' layer_types
refuse o-bias       qwen3 'c["attention_bias"] = True'                            attention_bias
refuse model-type   qwen2 'c["model_type"] = "qwen2_moe"'                         model_type
t_done
