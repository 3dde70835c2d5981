# h100-stt-1b: a SIMULATED NVIDIA H100 (SXM5, 80 GB HBM3) serving the
# shape of Kyutai's stt-1b-en_fr (synthetic:stt-1b: 16 layers of 2048, no
# depformer, text only) as the CUDA path would run it: the temporal
# transformer in bf16 with bf16 K/V, the Mimi codec in fp32. Every device
# figure is h100-moshiko's (the same card, the same kernels); only the
# model, the reserve (no depformer) and the depformer lines differ.
# Format: mt-profile(5).
#
# UNCALIBRATED, as h100-moshiko: every figure comes from a datasheet, from
# published achieved fractions of it, or from the model's shape; none is
# a measurement of this project's code on this device. A run on this
# profile is a simulation and every line says so. Issue 53's streams per
# H100 (bench/bench_stt.sh) are read from it.
name          = h100-stt-1b
model         = synthetic:stt-1b   # temporal shape: 16 layers, hidden 2048, 16 heads of 128, ffn 5632, text head 8000
memory_bytes  = 80e9     # NVIDIA H100 SXM5 datasheet: 80 GB HBM3
reserve_bytes = 6.3e9    # 6e9 as h200-moshi7b (context, workspace, activations, slack) + 0.3e9: the input embeddings in bf16 (32 codebooks x 2049 x 2048 + text 8001 x 2048: 150.6 M parameters); no depformer
bandwidth     = 3.0e12   # estimate: about 90% of the datasheet's 3.35 TB/s, the fraction a large copy reaches on the H200 (4.3 of 4.8)
matrix_rate   = 780e12   # achieved: a large bf16 GEMM on random data runs at about 780 TFLOP/s (datasheet about 990 dense; the H100 SXM and the H200 share the GH100's tensor cores)
overhead_us   = 200      # assumption: h100-moshiko's 400 us for 32 layers, halved for 16; not measured
weight_bytes  = 2        # bf16 weights
kv_bytes      = 2        # bf16 K/V: 131,072 bytes a position (16 layers x K,V x 16 heads x 128 x 2)

# The codec (Mimi, 0.882 GFLOP a session-frame, encode + decode, plain fp32
# SGEMMs). ESTIMATES: the CUDA codec passed parity on an H100, untimed.
codec_rate        = 20e12  # estimate: 30% of the 67 TFLOP/s fp32 (non-tensor) peak, as mid-size convolutions at batch 8-64 reach with SGEMM
codec_overhead_us = 1000   # estimate: about 340 launches (im2col + SGEMM per convolution, about 12 kernels a transformer layer, 8 layers each way, the quantizer) at about 3 us

jitter_sigma  = 0.03     # assumption: step-to-step spread of a few percent on a dedicated GPU
stall_prob    = 0.0005   # assumption: rare stalls (clock throttling, host preemption)
stall_ms      = 5        # assumption
seed          = 1
