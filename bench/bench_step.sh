#!/usr/bin/env bash
# bench_step.sh: the CPU decoder step (issue 3). One run of mt-benchstep
# measures this machine's sgemm peak and copy bandwidth, then the step of
# synthetic:small at B = 1, 8, 32, 64 (window S=4, W=256) with its fraction
# of each bound, and step time against length for the window and full
# policies side by side (the window's lengths timed step by step in turn,
# median of 100 steps each, so the machine's drift lands on all three).
# Targets (reported, never asserted): >= 60% of the sgemm peak at B >= 32
# (beside it, the serial ceiling: the most a step could reach with its
# GEMMs at the peak and its K/V read at the copy bandwidth); B=1 within
# 1.5x of weight bytes / bandwidth; window flat (within 5%) from frame 300
# to 10,000.
# Half precision (issue 21), same run: "half B=..." lines put the K/V and
# weight formats side by side (f32 = both fp32; f16kv = f16 cache, fp32
# weights; f16 = both f16, the f16 weight product up to its crossover;
# f16w_all = the f16 product at every batch, to locate the crossover),
# "attention" lines the K/V read bandwidth at B = 64 (the bytes a step's
# attention reads over the time its attention phases take, timed inside
# the decoder; beside it, diff_*: the same from the difference of two
# step timings, W = 256 against W = 16), "sessions" lines the sessions
# per GiB of pool. Targets: B=1 f16 weights within 1.2x of the f16
# weight-bytes bound and >= 1.6x faster than fp32 weights; B=64 f16 cache
# >= 1.3x faster than fp32; attention read >= 80% of the copy bandwidth.
# The machine line also gives a plain streaming read's bandwidth (bytes
# read only; the copy counts each byte read and written), the ceiling of a
# loop that only reads. Both bandwidths are the best of many 256 MiB
# passes: 12 just before the step timings, 12 just after them and (the
# copy) one between each round of the B = 1 timings, so that the steps
# and the passes see the same moments of this shared machine's load; a
# burst of other load lowers one set, not the figure. "bandwidth" lines
# give each set's best, the median and the slowest pass: how much the
# load moved them. `bash bench/bench_step.sh --half-only` runs the
# half-precision and attention figures alone.
set -u
cd "$(dirname "$0")/.."
TB=${MT_TESTBIN:-build/tests}
. bench/lib.sh
bench_need bench_step "$TB/mt-benchstep"
# OpenBLAS misdetects some virtual CPUs and falls back to SSE3 kernels;
# name the core it should use unless the caller already did. A caller's
# choice is kept, and said when it is not the CPU's widest: every B >= 8
# figure (the sgemm peak, the f32 GEMMs, and so the f16 cache's ratio at
# B = 64) depends on it. On the 2-core EPYC the SkylakeX kernels measured
# a sgemm peak of 340-367 GFLOP/s against 175-212 for Haswell's, and the
# B = 64 f16 cache ratio 1.35-1.49x against 1.24-1.28x (bench/RESULTS.md).
best_core=
if grep -qw avx512f /proc/cpuinfo; then best_core=SkylakeX
elif grep -qw avx2 /proc/cpuinfo; then best_core=Haswell; fi
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    [ -n "$best_core" ] && export OPENBLAS_CORETYPE=$best_core
elif [ -n "$best_core" ] && [ "$OPENBLAS_CORETYPE" != "$best_core" ]; then
    echo "note OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE from the environment is kept; this CPU runs $best_core kernels (unset it for them)"
fi
echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ) cpu=\"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\" load=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
out=$("$TB/mt-benchstep" "$@") || { echo "$out"; exit 1; }
echo "$out"
# Summary against the targets, from the figures of this run.
echo "$out" | awk '
/^machine/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
/^bandwidth/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); bw[kv[1]] = kv[2] }
               during = bw["during_gbs"] > 0 ? sprintf(", during %.1f", bw["during_gbs"]) : ""
               printf "summary bandwidth %s %.1f GB/s, best of %d passes (sets: before %.1f%s, after %.1f; median %.1f, slowest %.1f: the best %.0f%% above the median)\n", $2, bw["best_gbs"], bw["passes"], bw["before_gbs"], during, bw["after_gbs"], bw["median_gbs"], bw["min_gbs"], 100 * (bw["best_gbs"] / bw["median_gbs"] - 1) }
/^step / { for (i = 1; i <= NF; i++) { split($i, kv, "="); s[kv[1]] = kv[2] }
           if (s["B"] >= 32) printf "summary B=%d %.0f%% of sgemm peak (target 60%%; at best %.0f%% with GEMMs at the peak and the K/V read at the copy bandwidth, one after the other)\n", s["B"], 100 * s["frac_peak"], 100 * s["serial_ceiling"];
           if (s["B"] == 1) printf "summary B=1 step %.2fx the bandwidth bound (target <= 1.5x)\n", s["step_over_bound"] }
/^half f16_weight_bytes/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); hb[kv[1]] = kv[2] } }
/^half B=/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); h[kv[1]] = kv[2] }
             if (h["B"] == 1) printf "summary half B=1 f16 weights %.2fx the f16 bandwidth bound (target <= 1.2x), %.2fx faster than fp32 weights (target >= 1.6x)\n", h["f16_over_bound"], h["weights_speedup"];
             if (h["B"] == 64) printf "summary half B=64 f16 cache %.2fx faster than fp32 (target >= 1.3x)\n", h["kv_speedup"];
             if (h["f16_product_wins"] == 1 && !lost) xo = h["B"]; else lost = 1 }
/^attention/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); a[kv[1]] = kv[2] }
               printf "summary attention kv=%s read %.1f GB/s = %.0f%% of the copy bandwidth (target >= 80%%), %.0f%% of a plain streaming read; by the W=%s difference %.0f%% of the copy\n", a["kv"], a["read_gbs"], 100 * a["frac_copy_bw"], 100 * a["frac_read_bw"], a["diff_W"], 100 * a["diff_frac_copy_bw"] }
/^sessions/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); se[kv[1]] = kv[2] }
              printf "summary sessions kv=%s %.0f per GiB of pool\n", se["kv"], se["sessions_per_gib"] }
/^length/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); l[kv[1]] = kv[2] }
            if (l["frame"] == 300) { w0 = l["window_ms"]; f0 = l["full_ms"] }
            if (l["frame"] == 10000) printf "summary window frame 10000 / frame 300 = %.3f (target within 5%%); full = %.2f\n", l["window_ms"] / w0, l["full_ms"] / f0 }
END { if (xo) printf "summary half f16 weight product faster than sgemm at B=1 up to B=%d (of 1, 8, 32, 64; the backend uses it up to 8)\n", xo
      else print "summary half f16 weight product slower than sgemm already at B=1 in this run" }'
