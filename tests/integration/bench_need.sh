#!/usr/bin/env bash
# bench_need.sh: a benchmark that cannot run fails, with the reason. With
# its test helper missing (MT_TESTBIN pointing where nothing is built, out
# of the tree, so that bench_need cannot build it), bench/bench_admit.sh
# exits 1 naming the program, in both of its modes, before it measures
# anything; bench/run.sh then fails too.
. "$(dirname "$0")/lib.sh"
t_need mt-serve mt-admit mt-probe
for mode in "" sim; do
    MODE=$mode MT_TESTBIN=$T_TMP/none timeout 60 bash "$MT_ROOT/bench/bench_admit.sh" \
        >"$T_TMP/out" 2>"$T_TMP/err"
    rc=$?
    sed 's/^/# /' "$T_TMP/out" "$T_TMP/err" | head -5
    t_check "bench_admit${mode:+ MODE=$mode}: exit 1 without mt-fakeclient" test $rc = 1
    t_check "bench_admit${mode:+ MODE=$mode}: says which program and why" \
        grep -q "bench_admit: $T_TMP/none/mt-fakeclient is not built (make bench builds it): cannot run" "$T_TMP/err"
    t_check "bench_admit${mode:+ MODE=$mode}: measured nothing" test ! -s "$T_TMP/out"
done
t_done
