#!/usr/bin/env bash
# models_cli.sh: examples/paper.sh --model and examples/models.sh take the
# four models' names and refuse anything else by name, before any run
# (their runs are minutes long: bench/RESULTS.md, "Collapse across four
# models"); each model's preset and profile load together on the
# simulated device.
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-probe
E=$MT_ROOT/examples
bash "$E/paper.sh" --model nope >/dev/null 2>"$T_TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "unknown model nope" "$T_TMP/err"
t_ok $? "paper.sh --model nope: exit 2, named ($(cat "$T_TMP/err"))"
MODELS=nope RESULTS=- OUT=$T_TMP/m bash "$E/models.sh" >/dev/null 2>"$T_TMP/err"
rc=$?
[ $rc -eq 2 ] && grep -q "unknown model nope" "$T_TMP/err"
t_ok $? "models.sh MODELS=nope: exit 2, named ($(cat "$T_TMP/err"))"
bash "$E/paper.sh" --help | grep -q -- "--model qwen2.5-7b"
t_ok $? "paper.sh --help shows --model"
# each name's profile fits its preset: a simulated server starts on it
for pair in moshi-7b:h200-moshi7b qwen2.5-7b:h200-qwen2.5-7b qwen3-8b:h200-qwen3-8b \
            llama-3.2-1b:h200-llama1b; do
    m=${pair%%:*} p=${pair#*:}
    grep -q "^$m)  *DPROFILE=$p " "$E/paper.sh"
    t_ok $? "paper.sh maps $m to $p"
    timeout 20 "$MT_BIN/mt-serve" --stdio --device "sim:$p" -m "synthetic:$m" \
        </dev/null >/dev/null 2>"$T_TMP/serve.err"
    t_ok $? "mt-serve --device sim:$p -m synthetic:$m starts and ends ($(grep -o 'device=[^ ]*' "$T_TMP/serve.err" | head -1))"
done
t_done
