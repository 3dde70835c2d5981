# h200-moshi7b-measured: the cuda backend's own steps on an NVIDIA H200
# (143771 MiB, driver 580.159.04), serving synthetic:moshi-7b at bf16 weights
# and bf16 K/V, fitted by `mt-probe calibrate --device cuda --memory 141e9
# --batches 1,16,64,128,256 --lengths 16,132,384,768 --reps 8` on
# 2026-12-04 17:09 UTC: 20 points, RMS relative residual 5.8% (worst -17% at
# B=256, 132 positions; every point below). Format: mt-profile(5).
# Against the datasheet profile h200-moshi7b: the fitted bandwidth is 86% of
# the 4.3 TB/s copy, the matrix rate 60% of the 780 TFLOP/s large GEMM (the
# GEMMs here have at most 256 rows), and the fixed cost per step 2.26 ms,
# not the 0.4 ms assumed there (about 32 x 12 kernel launches, no CUDA
# Graphs: backend_cuda.c). A simulation on this profile reproduces the fit,
# not the backend: believe it within the residual and the grid (B <= 256,
# 16..768 positions).
name          = h200-moshi7b-measured
model         = synthetic:moshi-7b
memory_bytes  = 141e9        # NVIDIA H200 datasheet: 141 GB HBM3e
reserve_bytes = 6e9          # assumption, as h200-moshi7b (calibrate's default 1/8 was not measured either)
bandwidth     = 3.71766e+12  # fitted
matrix_rate   = 4.68101e+14  # fitted
overhead_us   = 2262.06      # fitted
weight_bytes  = 2            # the cuda backend's weights (bf16)
kv_bytes      = 2            # the cuda backend's K/V (bf16)
jitter_sigma  = 0.004116     # measured: spread of log(step / median) over all points
stall_prob    = 0            # not measured
stall_ms      = 0
seed          = 1
# points: batch len measured_ms fitted_ms
#   1 16 5.4320 5.7578
#   1 132 5.5426 5.7742
#   1 384 5.6263 5.8097
#   1 768 5.6777 5.8639
#   16 16 5.6193 5.8065
#   16 132 5.9800 6.0682
#   16 384 6.6060 6.6368
#   16 768 7.5121 7.5033
#   64 16 6.1991 5.9622
#   64 132 7.1738 7.0091
#   64 384 9.1804 9.2836
#   64 768 12.1598 12.7495
#   128 16 6.9873 6.1698
#   128 132 8.8866 8.2637
#   128 384 12.8231 12.8127
#   128 768 18.7157 19.7444
#   256 16 9.3695 9.3695
#   256 132 12.9716 10.7729
#   256 384 20.6551 19.8708
#   256 768 31.9751 33.7342
