#!/usr/bin/env bash
# quality.sh: `mt-probe quality` on the shipped byte-level model (issue 9).
#
# Checks what could go wrong: the command's usage errors; on a short stream,
# that a sliding window (with or without sinks) gives per-position NLL equal
# to the full cache while the window still holds everything (exactness, not
# quality) and differs once it slides; that the batched prefill agrees with
# step-by-step decoding; the training script's held-out perplexity
# (models/fortune-byte/eval.json) reproduced by the C decoder within 1%; and
# seeded generation being reproducible. The 1% check runs the whole
# held-out set (480 chunks of 256 bytes, prefilled); under ASan (MT_ASAN=1)
# every third chunk only (see below).
. "$(dirname "$0")/lib.sh"

M=$MT_ROOT/models/fortune-byte
H=$M/heldout.txt
[ -f "$M/model.safetensors" ] || t_skip_all "models/fortune-byte not present"
if [ -x "$MT_BIN/mt-probe" ] && "$MT_BIN/mt-probe" quality --help >/dev/null 2>&1; then
    Q=("$MT_BIN/mt-probe" quality)
elif [ -x "$MT_TESTBIN/mt-quality" ]; then
    Q=("$MT_TESTBIN/mt-quality")
else
    t_skip_all "neither mt-probe quality nor mt-quality is built"
fi
t_diag "using ${Q[*]}"

# ---- usage ---------------------------------------------------------------------
"${Q[@]}" --help >"$T_TMP/help" 2>&1
t_ok $? "--help exits 0"
t_check "--help names the policies" grep -q 'window+sink' "$T_TMP/help"
"${Q[@]}" -m "$M" -t "$H" --policy bogus >/dev/null 2>"$T_TMP/e"
t_check "unknown policy: exit 2" [ $? -eq 2 ]
"${Q[@]}" -m "$M" >/dev/null 2>"$T_TMP/e"
t_check "nothing to do: exit 2" [ $? -eq 2 ]
"${Q[@]}" -m "$T_TMP/no-such-model" -t "$H" >/dev/null 2>"$T_TMP/e"
rc=$?
t_check "missing model: exit 1 with a message" [ $rc -eq 1 -a -s "$T_TMP/e" ]
head -c 100 "$H" >"$T_TMP/short.txt"
"${Q[@]}" -m "$M" -t "$T_TMP/short.txt" --length 128 >/dev/null 2>"$T_TMP/e"
rc=$?
[ $rc -eq 1 ] && grep -q 'bytes' "$T_TMP/e"
t_ok $? "text shorter than the stream: exit 1, says so"

# ---- exactness within the window -------------------------------------------------
# Sinks 4 + ring 60: positions 0..63 see exactly what the full cache sees.
N=128 S=4 W=60
run_pp() { # out-file args...
    local out=$1; shift
    "${Q[@]}" -m "$M" -t "$H" --length $N --buckets 4 --per-position "$out" "$@" \
        >"$out.lines" 2>"$out.err"
}
run_pp "$T_TMP/full" --policy full
t_ok $? "full policy runs on a $N-position stream"
[ "$(grep -c '^quality policy=full .* bucket=[0-9]/4 ' "$T_TMP/full.lines")" -eq 4 ] &&
    grep -q 'bucket=all .*nll=[0-9.]* ppl=[0-9.]*' "$T_TMP/full.lines"
t_ok $? "prints 4 buckets and the overall line"
run_pp "$T_TMP/ws" --policy window+sink --sink $S --window $W
t_ok $? "window+sink policy runs (S=$S W=$W)"
run_pp "$T_TMP/w" --policy window --window $((S + W))
t_ok $? "window policy runs (S=0 W=$((S + W)))"
[ "$(grep -vc '^#' "$T_TMP/full")" -eq $N ] && [ "$(grep -vc '^#' "$T_TMP/ws")" -eq $N ]
t_ok $? "per-position files have $N positions"

# cmp_pp A B LIMIT: max relative difference of positions < LIMIT, then >= LIMIT
cmp_pp() {
    paste "$1" "$2" | awk -v L="$3" '!/^#/ {
        d = $2 - $4; if (d < 0) d = -d; m = ($2 > $4 ? $2 : $4); r = m > 0 ? d / m : d
        if ($1 < L) { if (r > a) a = r } else { if (r > b) b = r } }
        END { printf "%.3g %.3g\n", a, b }'
}
read -r in_ws past_ws < <(cmp_pp "$T_TMP/full" "$T_TMP/ws" $((S + W)))
t_diag "window+sink vs full: max rel diff within window $in_ws, past it $past_ws"
t_at_most "window+sink NLL = full NLL within the window (1e-5 relative)" "$in_ws" 1e-5
t_above "window+sink NLL differs from full once the window slides" "$past_ws" 1e-4
read -r in_w past_w < <(cmp_pp "$T_TMP/full" "$T_TMP/w" $((S + W)))
t_diag "window vs full: within $in_w, past $past_w"
t_at_most "window (S=0) NLL = full NLL within the window (1e-5 relative)" "$in_w" 1e-5
read -r in_ww past_ww < <(cmp_pp "$T_TMP/w" "$T_TMP/ws" $((S + W)))
t_above "sinks change what the window sees once it slides" "$past_ww" 1e-4

# recompute, shorter stream (it prefills the whole window every step)
"${Q[@]}" -m "$M" -t "$H" --length 80 --buckets 1 --per-position "$T_TMP/rc" \
    --policy recompute --sink $S --window $W >"$T_TMP/rc.lines" 2>"$T_TMP/rc.err"
t_ok $? "recompute policy runs"
head -81 "$T_TMP/ws" >"$T_TMP/ws80"
read -r in_rc past_rc < <(cmp_pp "$T_TMP/ws80" "$T_TMP/rc" $((S + W)))
t_diag "recompute vs window+sink: within $in_rc, past $past_rc"
t_at_most "recompute NLL = window+sink NLL within the window (1e-5 relative)" "$in_rc" 1e-5
t_above "recompute (fresh states) differs from window+sink (kept states) past it" "$past_rc" 1e-6

# ---- prefill vs step: the first chunk two ways -------------------------------------
c1=$("${Q[@]}" -m "$M" -t "$H" --chunk 256 --max-chunks 1 | sed -n 's/.* nll=\([0-9.]*\) .*/\1/p')
s1=$("${Q[@]}" -m "$M" -t "$H" --policy full --length 256 --buckets 1 |
     sed -n 's/.*bucket=all .* nll=\([0-9.]*\) .*/\1/p')
t_diag "first chunk: prefill nll $c1, step-by-step nll $s1"
t_check "prefill and step-by-step agree on the first chunk (1e-5 relative)" \
    awk -v a="$c1" -v b="$s1" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d / a <= 1e-5) }'

# ---- the training script's evaluation, reproduced ----------------------------------
want=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["heldout_nll_nats_per_byte"])' "$M/eval.json" 2>/dev/null ||
       sed -n 's/.*"heldout_nll_nats_per_byte": *\([0-9.eE+-]*\).*/\1/p' "$M/eval.json")
# Under ASan the instrumented attention is ~4x slower: every 3rd chunk (160
# of 480; its NLL is 1.6946 against 1.6872 for all, 0.44% apart).
stride=1 nchunks=480
[ -n "${MT_ASAN:-}" ] && stride=3 nchunks=160
line=$("${Q[@]}" -m "$M" -t "$H" --chunk 256 --chunk-stride $stride 2>"$T_TMP/e")
t_ok $? "chunked evaluation of heldout.txt runs (every ${stride}. chunk)"
got=$(echo "$line" | sed -n 's/.* nll=\([0-9.]*\) .*/\1/p')
chunks=$(echo "$line" | sed -n 's/.* chunks=\([0-9]*\) .*/\1/p')
t_diag "C decoder: nll $got over $chunks chunks; eval.json: $want"
t_check "$nchunks chunks of 256 bytes evaluated" [ "${chunks:-0}" -eq $nchunks ]
t_check "held-out NLL matches eval.json within 1%" \
    awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && a > 0 && d / b <= 0.01) }'

# ---- generation -------------------------------------------------------------------------
gen() {
    "${Q[@]}" -m "$M" -t "$H" --gen-only --gen-prompt 'Q: Why?
A:' --gen-tokens 300 --seed 7 --policy window+sink --sink 4 --window 28 --gen-out "$1"
}
g1=$(gen "$T_TMP/g1.txt") && g2=$(gen "$T_TMP/g2.txt")
t_ok $? "generation runs twice"
t_diag "$g1"
t_check "generation line has tokens=300 and figures in [0,1]" \
    awk '{ for (i = 2; i <= NF; i++) { split($i, a, "=");
            if (a[1] == "tokens") t = a[2];
            if (a[1] == "rep4" || a[1] == "distinct2" || a[1] == "rep4_bytes") { n++; if (!(a[2] >= 0 && a[2] <= 1)) bad = 1 } } }
         END { exit !(t == 300 && n == 3 && !bad) }' <<<"$g1"
t_check "the same seed gives the same bytes" cmp -s "$T_TMP/g1.txt" "$T_TMP/g2.txt"
t_check "prompt + 300 bytes written" [ "$(wc -c <"$T_TMP/g1.txt")" -eq $((10 + 300)) ]
t_done
