# bench-small: a made-up device for bench/bench_admit.sh MODE=sim (issue 24),
# not a real GPU. Sized so that tens of sessions of synthetic:moshi-7b fill
# an 80 ms tick (a test on a 2-core machine cannot run hundreds of clients),
# and compute-bound (2 x parameters flops a session a step, 2 ms at this
# matrix_rate); drift-small.profile without its capacity schedule: about
# 36 sessions fit an 80 ms tick. Noise (jitter, stalls) on.
name          = bench-small
model         = synthetic:moshi-7b
memory_bytes  = 141e9
reserve_bytes = 6e9
bandwidth     = 1.0e12    # weights read in 13 ms: under the flops from 7 sessions up
matrix_rate   = 6.5e12    # 2 ms a session
overhead_us   = 2000
weight_bytes  = 2
kv_bytes      = 2
jitter_sigma  = 0.03
stall_prob    = 0.0005
stall_ms      = 5
seed          = 1
