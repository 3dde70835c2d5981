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
set -u
cd "$(dirname "$0")/.."
TB=${MT_TESTBIN:-build/tests}
if [ ! -x "$TB/mt-benchstep" ]; then
    echo "bench_step: $TB/mt-benchstep not built (make bench builds it)" >&2
    exit 1
fi
# OpenBLAS misdetects some virtual CPUs and falls back to SSE3 kernels;
# name the core it should use unless the caller already did.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
    if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ) cpu=\"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\" load=\"$(cut -d' ' -f1-3 /proc/loadavg)\""
out=$("$TB/mt-benchstep" "$@") || { echo "$out"; exit 1; }
echo "$out"
# Summary against the targets, from the figures of this run.
echo "$out" | awk '
/^machine/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
/^step / { for (i = 1; i <= NF; i++) { split($i, kv, "="); s[kv[1]] = kv[2] }
           if (s["B"] >= 32) printf "summary B=%d %.0f%% of sgemm peak (target 60%%; at best %.0f%% with GEMMs at the peak and the K/V read at the copy bandwidth, one after the other)\n", s["B"], 100 * s["frac_peak"], 100 * s["serial_ceiling"];
           if (s["B"] == 1) printf "summary B=1 step %.2fx the bandwidth bound (target <= 1.5x)\n", s["step_over_bound"] }
/^length/ { for (i = 1; i <= NF; i++) { split($i, kv, "="); l[kv[1]] = kv[2] }
            if (l["frame"] == 300) { w0 = l["window_ms"]; f0 = l["full_ms"] }
            if (l["frame"] == 10000) printf "summary window frame 10000 / frame 300 = %.3f (target within 5%%); full = %.2f\n", l["window_ms"] / w0, l["full_ms"] / f0 }'
