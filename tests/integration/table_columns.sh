#!/usr/bin/env bash
# table_columns.sh: the scripts that read a table select its columns by
# name (tools/columns.sh). bench/bench_sim.sh's comparison of two sweep
# tables prints the same figures when a column is inserted into both, reads
# the truthful p99 and the step (not the naive p99 or the round trip beside
# them), and fails loudly, naming the column, when one it reads is renamed.
# The soak's whitespace table ("# config ..." header) is read the same way.
. "$(dirname "$0")/lib.sh"
. "$MT_ROOT/tools/columns.sh"
cd "$T_TMP" || exit 1
tab=$(printf '\t')
# a sweep table as mt-probe sweep --tsv writes it; every figure distinct,
# so that a column read in the wrong place shows
sweep() { # FILE P99_TRUE STEP
    {
        echo "# sweep: hold 4 s per level"
        printf 'concurrency\taccepted\trejected\treal\tfill\tp50_ms\tp99_ms\tp99_true_ms\tmax_ms\trtt_p99_ms\tstep_ms\tkv_bytes\ttick_p99_ms\n'
        printf '8\t8\t0\t400\t0\t41.0\t77.7\t%s\t90.0\t88.8\t%s\t1000\t55.5\n' "$2" "$3"
        printf '16\t16\t0\t800\t3\t42.0\t78.7\t%s\t91.0\t89.8\t%s\t2000\t56.5\n' "$4" "$5"
    } >"$1"
}
sweep cpu.tsv 100.0 10.5 120.0 20.5
sweep sim.tsv 105.0 11.5 150.0 21.5
bash "$MT_ROOT/bench/bench_sim.sh" --compare cpu.tsv sim.tsv 16 >a.out 2>a.err
rc=$?
sed 's/^/# /' a.out a.err
t_check "bench_sim --compare exits 0" test $rc = 0
t_check "level 8: the truthful p99s (100.0, 105.0) and steps (10.5, 11.5)" \
    grep -Eq '^ +8 +100\.0 +105\.0 +\+5\.0% +10\.5 +11\.5 +within 15%$' a.out
t_check "level 16: 120.0 against 150.0 is a miss" \
    grep -Eq '^ +16 +120\.0 +150\.0 +\+25\.0% +20\.5 +21\.5 +MISS$' a.out
t_check "the verdict counts them (2 levels, 1 within, 1 miss)" \
    grep -q '^bench_sim: p99 at the 2 levels up to the cpu wall: 1 within 15%, 1 miss$' a.out

# a column inserted at the front of both tables, and one more in the
# middle of one: the figures do not change
insert() { awk -F'\t' -v OFS='\t' -v at="$2" -v nm="$3" '
    /^#/ { print; next }
    { v = (NR == 2) ? nm : "9999"; s = ""
      for (i = 1; i <= NF; i++) { if (i == at) s = s v OFS; s = s $i (i < NF ? OFS : "") }
      print s }' "$1"; }
insert cpu.tsv 1 new_first >cpu2.tsv
insert sim.tsv 1 new_first | insert /dev/stdin 9 new_middle >sim2.tsv
t_check "the planted tables have the inserted columns" \
    grep -q "^new_first${tab}concurrency${tab}.*${tab}new_middle${tab}" sim2.tsv
bash "$MT_ROOT/bench/bench_sim.sh" --compare cpu2.tsv sim2.tsv 16 >b.out 2>b.err
rc=$?
t_check "with columns inserted: exits 0" test $rc = 0
t_check "with columns inserted: the same figures" cmp -s a.out b.out

# a column it reads renamed: exit non-zero, naming it
sed 's/\tp99_true_ms\t/\tp99_truth_ms\t/' sim.tsv >sim3.tsv
bash "$MT_ROOT/bench/bench_sim.sh" --compare cpu.tsv sim3.tsv 16 >c.out 2>c.err
rc=$?
sed 's/^/# /' c.err
t_check "a renamed column: exit 2" test $rc = 2
t_check "a renamed column: stderr names the file and the column" \
    grep -q "sim3.tsv: no column 'p99_true_ms' in its header" c.err

# the soak's table: whitespace columns, the header after "# "
cat >soak.txt <<'EOF'
# soak: 1 runs x 2 configurations
# config               run   seed  sess pred_s   coll_s    ovf_s   host_s  verdict
window                   0      3     9      -        -        -        -  ok
full                     0      3     9   30.1     29.8     29.8      5.6  COLLAPSED  # host stall
EOF
read_soak() { awk "$COLS_AWK"'cols_try("config") { next } /^#/ { next }
    { print col("config"), col("seed"), col("coll_s"), col("host_s"), col("verdict") }
    END { if (COLS_BAD) exit 2 }' "$1"; }
read_soak soak.txt >s1.out
t_check "soak table: read by name" test "$(tail -1 s1.out)" = "full 3 29.8 5.6 COLLAPSED"
sed 's/ run / run  extra /; s/^\(window *0\)/\1  x/; s/^\(full *0\)/\1  y/' soak.txt >soak2.txt
read_soak soak2.txt >s2.out
t_check "soak table with a column inserted: the same figures" cmp -s s1.out s2.out
t_done
