# h200-moshi7b: a simulated NVIDIA H200 (SXM, 141 GB HBM3e) serving
# synthetic:moshi-7b at bf16 weights and bf16 K/V. Format: mt-profile(5).
#
# These figures come from the datasheet and from published achieved
# fractions of it, not from a measurement on this project's code: a run on
# this profile is a simulation and every line mt-serve prints says so.
# Replace them with `mt-probe calibrate --device cuda` when a GPU is lent.
name          = h200-moshi7b
model         = synthetic:moshi-7b   # shape: 32 layers, hidden 4096, 32 heads, 32 K/V heads of 128; 6,492,000,256 parameters (mt_model_params)

memory_bytes  = 141e9    # NVIDIA H200 datasheet: 141 GB HBM3e
reserve_bytes = 6e9      # assumption: CUDA context, cuBLAS workspace, activations of a 4096-row batch, allocator slack
bandwidth     = 4.3e12   # achieved: a large device-to-device copy moves about 4.3 TB/s (datasheet peak 4.8 TB/s)
matrix_rate   = 780e12   # achieved: a large bf16 GEMM on random data runs at about 780 TFLOP/s (datasheet about 990 dense)
overhead_us   = 400      # assumption: about 12 kernel launches a layer x 32 layers at a few us each, plus one sync; not measured
weight_bytes  = 2        # bf16 weights: 12.984 GB
kv_bytes      = 2        # bf16 K/V: 524,288 bytes a position (32 layers x K,V x 32 heads x 128 x 2)
# K/V pool: 141e9 - 12.984e9 - 6e9 = 122.0e9 bytes: 14,545 blocks of 16 positions

jitter_sigma  = 0.03     # assumption: step-to-step spread of a few percent on a dedicated GPU
stall_prob    = 0.0005   # assumption: rare stalls (clock throttling, host preemption)
stall_ms      = 5        # assumption
seed          = 1

# A capacity schedule, for testing controllers against a machine that
# changes (none in the shipped profile; an example):
# schedule = 120s bandwidth*0.8
