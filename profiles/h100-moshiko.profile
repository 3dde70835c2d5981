# h100-moshiko: a SIMULATED NVIDIA H100 (SXM5, 80 GB HBM3) serving
# Kyutai's Moshi LM (synthetic:moshiko) as the CUDA path runs it: the
# temporal transformer in bf16 with bf16 K/V (backend_cuda.c), the
# depformer in fp32 (depformer_cuda.c), the Mimi codec in fp32
# (mimi_cuda.c). Format: mt-profile(5).
#
# UNCALIBRATED. Every figure comes from a datasheet, from published
# achieved fractions of it, or from the model's shape; none is a
# measurement of this project's code on this device (the only device
# figures, H100 2026-12-05: 43.9 ms a frame at B = 1 with the depformer on
# the host, predate the CUDA depformer). A run on this profile is a
# simulation and every line says so. tests/gpu/run-lease.sh measures the
# replacements (mt-probe calibrate --device cuda) on the next lease.
name          = h100-moshiko
model         = synthetic:moshiko   # temporal shape: 32 layers, hidden 4096, 32 heads of 128, ffn 11264, text head 32000; 6,708,006,912 parameters (mt_model_params)

memory_bytes  = 80e9     # NVIDIA H100 SXM5 datasheet: 80 GB HBM3
reserve_bytes = 9.388e9  # 6e9 as h200-moshi7b (context, workspace, activations, slack) + 2.857e9: the depformer on the device in fp32 (714,350,592 parameters with its embedding tables) + 0.531e9: the temporal embeddings in bf16 (265.3 M parameters)
bandwidth     = 3.0e12   # estimate: about 90% of the datasheet's 3.35 TB/s, the fraction a large copy reaches on the H200 (4.3 of 4.8)
matrix_rate   = 780e12   # achieved: a large bf16 GEMM on random data runs at about 780 TFLOP/s (datasheet about 990 dense; the H100 SXM and the H200 share the GH100's tensor cores)
overhead_us   = 400      # assumption: about 12 kernel launches a layer x 32 layers at a few us each, plus one sync; not measured
weight_bytes  = 2        # bf16 weights: 13.416 GB
kv_bytes      = 2        # bf16 K/V: 524,288 bytes a position (32 layers x K,V x 32 heads x 128 x 2)
# K/V pool: 80e9 - 13.416e9 - 9.388e9 = 57.2e9 bytes: 6,818 blocks of 16 positions,
# less the codec's booking (64 sessions: 1,439,378,692 bytes; mt-probe predict
# --codec synthetic:mimi --profile h100-moshiko --max-sessions 64 prints it).
# At W = 252 + 4 sinks a session holds 16 blocks (134 MB).

# The codec (Mimi, 0.882 GFLOP a session-frame, encode + decode, plain fp32
# SGEMMs). ESTIMATES: the CUDA codec passed parity on an H100, untimed.
codec_rate        = 20e12  # estimate: 30% of the 67 TFLOP/s fp32 (non-tensor) peak, as mid-size convolutions at batch 8-64 reach with SGEMM
codec_overhead_us = 1000   # estimate: about 340 launches (im2col + SGEMM per convolution, about 12 kernels a transformer layer, 8 layers each way, the quantizer) at about 3 us

# The depformer (8 codebook steps a frame, each with its own weights, all
# sessions batched; depformer_cuda.c). From the shape; rate and launches
# ESTIMATES: the CUDA depformer passed parity (16/0), untimed.
depformer_params       = 666894336  # 8 steps x (depformer_in 1024x4096 + 6 layers x 12,845,056 + a 2048x1024 head); the embedding gathers read a row a session
depformer_weight_bytes = 4          # fp32 on the device: 2.668 GB read a frame
depformer_rate         = 20e12      # estimate: fp32 SGEMM (CUBLAS_COMPUTE_32F_PEDANTIC) at batch 8-64, as the codec
depformer_overhead_us  = 2000       # estimate: about 410 launches (8 steps x (6 layers x 8 + 3)) at about 3 us + 8 host round trips (tokens up, logits down, the host's sampler) of about 0.1 ms

jitter_sigma  = 0.03     # assumption: step-to-step spread of a few percent on a dedicated GPU
stall_prob    = 0.0005   # assumption: rare stalls (clock throttling, host preemption)
stall_ms      = 5        # assumption
seed          = 1
