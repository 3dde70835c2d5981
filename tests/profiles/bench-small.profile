# bench-small: h200-moshi7b (profiles/h200-moshi7b.profile) with its matrix
# rate divided by 120, for bench/bench_admit.sh MODE=sim (issue 24); a
# scaled device, not a real GPU. The H200 holds thousands of sessions of
# synthetic:moshi-7b in an 80 ms tick, more clients than a 2-core machine
# can run; with the matrix rate scaled down, a session costs 2 ms a step
# (2 x parameters flops at 6.5e12) and about 36 sessions fit. Everything
# else is the H200's, so the fixed cost of a round (the weights read in
# 3.0 ms, 0.4 ms of launches) is the same 4% of the period as on the H200:
# a catch-up round for a session left a frame behind costs what it would
# there. (Until 2026-12-05 bench-small read its weights at 1e12 B/s and
# spent 2 ms a round on launches: a round cost at least 15 ms, 19% of the
# period, and near the wall every catch-up round overran the tick.)
name          = bench-small
model         = synthetic:moshi-7b
memory_bytes  = 141e9
reserve_bytes = 6e9
bandwidth     = 4.3e12    # the H200's: weights read in 3.0 ms
matrix_rate   = 6.5e12    # the H200's 780e12 / 120: 2 ms a session
overhead_us   = 400       # the H200's
weight_bytes  = 2
kv_bytes      = 2
jitter_sigma  = 0.03
stall_prob    = 0.0005
stall_ms      = 5
seed          = 1
