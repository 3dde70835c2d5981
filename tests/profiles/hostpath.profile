# hostpath: a simulated device whose step costs next to nothing (an H200
# a thousand times faster), for bench/bench_hostpath.sh: what is measured
# is mt-serve's host path (sockets, the I/O loop, the queues), not the
# step. Labelled simulated wherever its figures appear.
name          = hostpath
model         = synthetic:echo
memory_bytes  = 141e9
reserve_bytes = 6e9
bandwidth     = 4.3e15
matrix_rate   = 7.8e17
overhead_us   = 0
weight_bytes  = 2
kv_bytes      = 2
jitter_sigma  = 0
stall_prob    = 0
stall_ms      = 0
seed          = 1
