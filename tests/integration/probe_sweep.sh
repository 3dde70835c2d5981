#!/usr/bin/env bash
# probe_sweep.sh: mt-probe sweep against a server it starts itself
# (synthetic:tiny, three short levels): a table row per level with every
# session admitted, frames measured, KV bytes from the tick lines, the wall
# line (above 1 session with the default budget), and the plot.
. "$(dirname "$0")/lib.sh"
P=$MT_BIN/mt-probe
t_need mt-probe mt-serve
timeout 90 "$P" sweep --from 1 --to 3 --hold 2s --warmup 0.5s \
    --plot "$T_TMP/sweep.png" --tsv "$T_TMP/rows.tsv" \
    -- -m synthetic:tiny --device cpu >"$T_TMP/out" 2>"$T_TMP/err"
rc=$?
sed 's/^/# /' "$T_TMP/out"
[ $rc -eq 0 ] || sed 's/^/# err: /' "$T_TMP/err"
t_check "sweep exits 0" test $rc -eq 0
t_check "three level rows" test "$(grep -cE '^[0-9]+	' "$T_TMP/out")" -eq 3
awk -F'\t' '/^[0-9]+\t/ { if ($2 != $1) bad=1 } END {exit bad}' "$T_TMP/out"
t_ok $? "every session of every level was admitted"
awk -F'\t' '/^[0-9]+\t/ { if ($4 + 0 < $1 * 10) bad=1 } END {exit bad}' "$T_TMP/out"
t_ok $? "each level measured real frames (>= 10 per session)"
awk -F'\t' '/^[0-9]+\t/ { if ($12 == "-" || $12 + 0 <= 0) bad=1 } END {exit bad}' "$T_TMP/out"
t_ok $? "KV bytes come from the server's tick lines"
grep -qE '^# wall: ' "$T_TMP/out"
t_ok $? "the wall is named"
# No --budget: two frame periods, so a lightly loaded server's wall is at
# least one session (one period would put it below one on any server).
grep -qE '^# wall: [1-9][0-9]* sessions .* budget of two frame periods' "$T_TMP/out"
t_ok $? "the default budget (two frame periods) finds a wall of 1 session or more"
t_check "--tsv writes the rows" test "$(wc -l <"$T_TMP/rows.tsv")" -eq 3
"$P" sweep --from 3 --to 1 -s /nonexistent >/dev/null 2>&1
t_check "--to below --from: exit 2" test $? -eq 2
timeout 30 "$P" sweep --from 1 --to 1 --hold 1s -s "$T_TMP/none.sock" \
    >/dev/null 2>&1
t_check "no server at the socket: not a success" test $? -ne 0
t_png "$T_TMP/sweep.png" "sweep --plot writes a PNG"
t_done
