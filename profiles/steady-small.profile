# steady-small: a made-up device for tests/integration/admit_closedloop.sh,
# not a real GPU. drift-small without its capacity drop: synthetic:moshi-7b
# on a device where a step costs 2 ms of overhead plus 2 ms of compute a
# session (the weights, read in 13 ms, are hidden under the flops from 7
# sessions up), so about 38 sessions fit an 80 ms tick whatever this
# machine's own speed: the wall the test's sweep finds is the device's,
# and the sim only sleeps, so the test costs the host little CPU.
name          = steady-small
model         = synthetic:moshi-7b
memory_bytes  = 141e9
reserve_bytes = 6e9
bandwidth     = 1.0e12
matrix_rate   = 6.5e12
overhead_us   = 2000
weight_bytes  = 2
kv_bytes      = 2
jitter_sigma  = 0.03
stall_prob    = 0.0005
stall_ms      = 5
seed          = 1
