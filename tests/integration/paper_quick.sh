#!/usr/bin/env bash
# paper_quick.sh: examples/paper.sh --quick, the paper's experiment in
# miniature on the simulated device (sim:h200-moshi7b, synthetic:moshi-7b,
# a 4 GB slice of the K/V pool, 40 s calls at poisson:1/s for 45 s, time
# scale x2: 1 + 1 runs, the same seed; MT_PAPER_RUNS and MT_PAPER_SCALE
# change that). The prediction says the unbounded
# pool overflows in these seeds; the test asserts that every unbounded run
# collapses, no bounded run does, the measured time to collapse is within
# 20% of the prediction of its seed, and the time scale reached mt-serve.
. "$(dirname "$0")/lib.sh"
. "$MT_ROOT/tools/columns.sh"
for p in mt-probe mt-serve; do
    [ -x "$MT_BIN/$p" ] || t_skip_all "$p not built"
done
[ -r "$MT_ROOT/profiles/h200-moshi7b.profile" ] || t_skip_all "no profiles/h200-moshi7b.profile"
OUT=$T_TMP/paper
# Host noise is multiplied by the scale in model time: on this shared
# 2-core machine x4 and x5 have each turned a client stall of ~0.4 s into
# a 2 s starvation of a bounded run; x2 needs a 1 s stall.
RUNS_WANT=${MT_PAPER_RUNS:-1}
timeout 150 env MT_BIN="$MT_BIN" MT_ROOT="$MT_ROOT" OUT="$OUT" \
    SCALE=${MT_PAPER_SCALE:-2} RUNS=$RUNS_WANT \
    bash "$MT_ROOT/examples/paper.sh" --quick >"$T_TMP/out" 2>"$T_TMP/err"
rc=$?
sed 's/^/# /' "$T_TMP/out"
[ $rc -eq 0 ] || sed 's/^/# err: /' "$T_TMP/err" | tail -20
t_check "paper.sh --quick exits 0" test $rc -eq 0
t_check "the output says the device is simulated and names the profile" \
    grep -q "SIMULATED device" "$T_TMP/out"
t_check "table is labelled simulated, profile h200-moshi7b, with the scale" \
    grep -q "simulated, profile h200-moshi7b; time scale x" "$OUT/table.md"
t_check "the soak ran time-scaled (model times in its table)" \
    grep -q "^# time-scaled x" "$OUT/soak.txt"
t_check "the prediction overflows the unbounded pool" \
    grep -q "unbounded overflow within run" "$T_TMP/out"
nw=$(awk '$1 ~ /^window/ && $2 ~ /^[0-9]+$/' "$OUT/soak.txt" | wc -l)
nf=$(awk '$1 == "full" && $2 ~ /^[0-9]+$/' "$OUT/soak.txt" | wc -l)
cw=$(awk '$1 ~ /^window/ && $2 ~ /^[0-9]+$/ && / COLLAPSED/' "$OUT/soak.txt" | wc -l)
cf=$(awk '$1 == "full" && $2 ~ /^[0-9]+$/ && / COLLAPSED/' "$OUT/soak.txt" | wc -l)
t_diag "bounded collapsed $cw of $nw, unbounded $cf of $nf"
t_check "$RUNS_WANT run(s) of each configuration" test "$nw" -eq "$RUNS_WANT" -a "$nf" -eq "$RUNS_WANT"
if [ -n "${MT_ASAN:-}" ]; then
    t_skip "bounded runs do not collapse (timing, ASan)"
    t_skip "unbounded runs collapse (timing, ASan)"
else
    t_check "no bounded run collapses" test "$cw" -eq 0
    t_check "every unbounded run collapses" test "$cf" -eq "$nf"
fi
# measured (coll_s) against predicted (pred_s), per seed
bad=$(awk "$COLS_AWK"'cols_try("config") { next } /^#/ { next }
          $1 == "full" && $2 ~ /^[0-9]+$/ && col("pred_s") != "-" && col("coll_s") != "-" {
          d = (col("coll_s") - col("pred_s")) / col("pred_s"); if (d < 0) d = -d; if (d > 0.2) n++ }
          END { if (COLS_BAD) { print "no-column"; exit 2 } print n + 0 }' "$OUT/soak.txt")
t_check "each measured time to collapse within 20% of its seed's prediction" test "$bad" -eq 0
t_check "table.md counts the runs disturbed by the host apart" \
    grep -q "| collapsed (by the model) | disturbed by the host |" "$OUT/table.md"
t_check "server-view.md reads each run" \
    test "$(grep -c '^| \(un\)\?bounded |' "$OUT/server-view.md")" -eq $((2 * RUNS_WANT))
t_check "the soak plot was written and relabelled" \
    grep -q "SIMULATED, profile h200-moshi7b" "$OUT/paper-soak.png.gp"
t_done
