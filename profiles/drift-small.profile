# drift-small: a made-up device for tests/integration/admit_shed.sh (issue 24),
# not a real GPU. Sized so that tens of sessions of synthetic:moshi-7b fill
# an 80 ms tick (a test on a 2-core machine cannot run hundreds of clients),
# and compute-bound (2 x parameters flops a session a step, 2 ms at this
# matrix_rate), so that the capacity schedule's drop of both the bandwidth
# and the matrix rate to 0.7 makes every step 1.43 x longer: about 36
# sessions fit before the drop (p99 under 80 ms), about 26 after.
name          = drift-small
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
schedule      = 12s bandwidth*0.7
schedule      = 12s matrix_rate*0.7
