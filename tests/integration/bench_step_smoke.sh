#!/usr/bin/env bash
# bench_step_smoke.sh: bench/bench_step.sh (make bench's CPU step figures)
# runs end to end on synthetic:tiny in a few seconds: every figure it
# prints is a number, the summary lines are there, and the full policy's
# step rises with length while the window's does not (a tiny model's
# attention over 10,000 positions is 40 times its window's, far past the
# machine's noise). Timing targets are the benchmark's, not asserted here.
. "$(dirname "$0")/lib.sh"
t_need mt-benchstep
MT_TESTBIN=$MT_TESTBIN bash "$MT_ROOT/bench/bench_step.sh" --quick --model synthetic:tiny \
    >"$T_TMP/out" 2>"$T_TMP/err"
t_ok $? "bench_step.sh --quick exits 0"
t_check "four batch sizes" test "$(grep -c '^step policy=window' "$T_TMP/out")" = 4
t_check "the bounds were measured" \
    grep -Eq '^machine .*sgemm_peak_gflops=[0-9.]+ copy_bandwidth_gbs=[0-9.]+' "$T_TMP/out"
t_check "B >= 32 lines carry the serial ceiling, a fraction" \
    test "$(awk '/^step / && / B=(32|64) / { for (i = 1; i <= NF; i++) if ($i ~ /^serial_ceiling=/) {
               x = substr($i, 16) + 0; if (x > 0 && x <= 1) n++ } } END { print n + 0 }' "$T_TMP/out")" = 2
t_check "summary lines (4 fp32, 2 half, 2 attention, 2 sessions)" \
    test "$(grep -c '^summary' "$T_TMP/out")" -ge 10
t_check "half: four batch sizes, four formats each" \
    test "$(grep -Ec '^half B=[0-9]+ f32_ms=[0-9.]+ f16kv_ms=[0-9.]+ f16_ms=[0-9.]+ f16w_all_ms=[0-9.]+ ' "$T_TMP/out")" = 4
t_check "half: the f16 weight-bytes bound" grep -Eq '^half f16_weight_bytes=[0-9]+ f16_bw_bound_ms=[0-9.]+' "$T_TMP/out"
t_check "attention read bandwidth for both K/V formats" \
    test "$(grep -Ec '^attention kv=f(32|16) .*read_gbs=[0-9.]+ frac_copy_bw=[0-9.]+' "$T_TMP/out")" = 2
t_check "both from attention phases timed in the decoder (phase_ms > 0)" \
    test "$(awk '/^attention / { for (i = 1; i <= NF; i++) if ($i ~ /^phase_ms=/ && substr($i, 10) + 0 > 0) n++ }
               END { print n + 0 }' "$T_TMP/out")" = 2
t_check "f16 K/V holds twice the sessions per GiB" \
    awk '/^sessions/ { split($2, k, "="); for (i = 1; i <= NF; i++) if ($i ~ /^sessions_per_gib=/) v[k[2]] = substr($i, 18) + 0 }
         END { exit !(v["f32"] > 0 && v["f16"] > 1.99 * v["f32"] && v["f16"] < 2.01 * v["f32"]) }' "$T_TMP/out"
read -r w0 f0 w2 f2 < <(awk '/^length/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    w[v["frame"]] = v["window_ms"]; f[v["frame"]] = v["full_ms"] }
    END { print w[300], f[300], w[10000], f[10000] }' "$T_TMP/out")
t_diag "window ${w0} -> ${w2} ms, full ${f0} -> ${f2} ms"
t_check "full policy: frame 10,000 slower than frame 300" \
    awk -v a="$f0" -v b="$f2" 'BEGIN { exit !(a > 0 && b > 2 * a) }'
# The window's two figures are a few hundred microseconds each; another
# process on the two cores (make test's own lanes, CI's neighbours) once
# took one of them past twice the other (CI, 2026-12-07: it has inflated
# both tenfold in one run here). A window that grew with length fails
# every run, so a failing comparison is measured once more, alone.
window_flat() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && b > 0 && b < 2 * a) }'; }
if ! window_flat "$w0" "$w2"; then
    t_diag "window ${w0} -> ${w2} ms: measuring again"
    MT_TESTBIN=$MT_TESTBIN bash "$MT_ROOT/bench/bench_step.sh" --quick --model synthetic:tiny \
        >"$T_TMP/out2" 2>>"$T_TMP/err"
    read -r w0 w2 < <(awk '/^length/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        w[v["frame"]] = v["window_ms"] } END { print w[300], w[10000] }' "$T_TMP/out2")
fi
t_check "window policy: frame 10,000 no slower than twice frame 300 (${w0} -> ${w2} ms)" \
    window_flat "$w0" "$w2"
t_done
