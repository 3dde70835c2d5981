# h200-moshiko: a simulated NVIDIA H200 (SXM, 141 GB HBM3e) serving the
# temporal transformer of Kyutai's Moshi LM (synthetic:moshiko) at bf16
# weights and bf16 K/V. Format: mt-profile(5).
#
# The device figures are h200-moshi7b's (the datasheet and published
# achieved fractions, not a measurement on this project's code): a run on
# this profile is a simulation and every line says so. What it times is
# the temporal step and the Mimi codec (codec_rate, codec_overhead_us
# below: ESTIMATES); the depformer, the embeddings and the sampling run on
# the host (speech/kyutai.c). Their weights are in the reserve, as they
# would be on the device. The codec's fp32 weights (96.2 M parameters,
# 384,605,444 bytes) and every session's state (16,480,832 bytes for
# synthetic:mimi at 8 codebooks) are booked by the simulator itself from
# the codec served (mt-profile(5)), not in the reserve.
name          = h200-moshiko
model         = synthetic:moshiko   # temporal shape: 32 layers, hidden 4096, 32 heads of 128, ffn 11264, text head 32000; 6,708,006,912 parameters (mt_model_params)

memory_bytes  = 141e9    # NVIDIA H200 datasheet: 141 GB HBM3e
reserve_bytes = 7.96e9   # 6e9 as h200-moshi7b (context, workspace, activations, slack) + 1.96e9: the depformer, embeddings and heads in bf16 (979.7 M parameters)
bandwidth     = 4.3e12   # achieved: a large device-to-device copy moves about 4.3 TB/s (datasheet peak 4.8 TB/s)
matrix_rate   = 780e12   # achieved: a large bf16 GEMM on random data runs at about 780 TFLOP/s (datasheet about 990 dense)
overhead_us   = 400      # assumption: about 12 kernel launches a layer x 32 layers at a few us each, plus one sync; not measured
weight_bytes  = 2        # bf16 weights: 13.416 GB
kv_bytes      = 2        # bf16 K/V: 524,288 bytes a position (32 layers x K,V x 32 heads x 128 x 2)
# K/V pool: 141e9 - 13.416e9 - 7.96e9 = 119.6e9 bytes: 14,260 blocks of 16 positions,
# less the codec's booking (64 sessions: 1,439,378,692 bytes; mt-probe predict
# --codec synthetic:mimi --profile h200-moshiko --max-sessions 64 prints it)

# The codec (Mimi, 0.882 GFLOP a session-frame, encode + decode, on the CUDA
# codec's plain fp32 SGEMMs, mimi_cuda.c). ESTIMATES, not measurements: no
# timing of the CUDA codec exists yet (its parity test ran on an H100, untimed).
codec_rate        = 20e12  # estimate: 30% of the H200's 67 TFLOP/s fp32 (non-tensor) peak, as mid-size convolutions at batch 8-64 reach with SGEMM
codec_overhead_us = 1000   # estimate: about 340 launches (im2col + SGEMM per convolution, about 12 kernels a transformer layer, 8 layers each way, the quantizer) at about 3 us

jitter_sigma  = 0.03     # assumption: step-to-step spread of a few percent on a dedicated GPU
stall_prob    = 0.0005   # assumption: rare stalls (clock throttling, host preemption)
stall_ms      = 5        # assumption
seed          = 1
