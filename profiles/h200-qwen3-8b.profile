# h200-qwen3-8b: a simulated NVIDIA H200 (SXM, 141 GB HBM3e) serving
# synthetic:qwen3-8b (the LLM of MiniCPM-o 4.5) at bf16 weights and bf16
# K/V. Format: mt-profile(5).
#
# These figures come from the datasheet and from published achieved
# fractions of it, not from a measurement on this project's code: a run on
# this profile is a simulation and every line mt-serve prints says so.
# Replace them with `mt-probe calibrate --device cuda` when a GPU is lent.
name          = h200-qwen3-8b
model         = synthetic:qwen3-8b   # shape: 36 layers, hidden 4096, 32 heads, 8 K/V heads of 128 (head_dim explicit), ffn 12288, vocab 151936 (untied), q/k norms; 8,206,464,000 parameters (mt_model_params: HuggingFace's 8,190,735,360 + our audio adapter)

memory_bytes  = 141e9    # NVIDIA H200 datasheet: 141 GB HBM3e
reserve_bytes = 6e9      # assumption, as h200-moshi7b: CUDA context, cuBLAS workspace, activations of a 4096-row batch, allocator slack
bandwidth     = 4.3e12   # achieved: a large device-to-device copy moves about 4.3 TB/s (datasheet peak 4.8 TB/s)
matrix_rate   = 780e12   # achieved: a large bf16 GEMM on random data runs at about 780 TFLOP/s (datasheet about 990 dense)
overhead_us   = 450      # assumption: about 13 kernel launches a layer (12 + the q/k norm kernel) x 36 layers at a few us each, plus one sync; scaled from h200-moshi7b's 400 for 32 layers; not measured
weight_bytes  = 2        # bf16 weights: 16.413 GB
kv_bytes      = 2        # bf16 K/V: 147,456 bytes a position (36 layers x K,V x 8 heads x 128 x 2)
# K/V pool: 141e9 - 16.413e9 - 6e9 = 118.59e9 bytes: 50,263 blocks of 16 positions

jitter_sigma  = 0.03     # assumption: step-to-step spread of a few percent on a dedicated GPU
stall_prob    = 0.0005   # assumption: rare stalls (clock throttling, host preemption)
stall_ms      = 5        # assumption
seed          = 1
