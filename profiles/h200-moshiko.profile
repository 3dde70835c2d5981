# h200-moshiko: a simulated NVIDIA H200 (SXM, 141 GB HBM3e) serving the
# temporal transformer of Kyutai's Moshi LM (synthetic:moshiko) at bf16
# weights and bf16 K/V. Format: mt-profile(5).
#
# The device figures are h200-moshi7b's (the datasheet and published
# achieved fractions, not a measurement on this project's code): a run on
# this profile is a simulation and every line says so. What it times is
# the temporal step only; the depformer, the embeddings and the sampling
# run on the host (decode/kyutai.c) and the Mimi codec is not in it. Their
# weights are in the reserve, as they would be on the device.
name          = h200-moshiko
model         = synthetic:moshiko   # temporal shape: 32 layers, hidden 4096, 32 heads of 128, ffn 11264, text head 32000; 6,708,006,912 parameters (mt_model_params)

memory_bytes  = 141e9    # NVIDIA H200 datasheet: 141 GB HBM3e
reserve_bytes = 7.96e9   # 6e9 as h200-moshi7b (context, workspace, activations, slack) + 1.96e9: the depformer, embeddings and heads in bf16 (979.7 M parameters)
bandwidth     = 4.3e12   # achieved: a large device-to-device copy moves about 4.3 TB/s (datasheet peak 4.8 TB/s)
matrix_rate   = 780e12   # achieved: a large bf16 GEMM on random data runs at about 780 TFLOP/s (datasheet about 990 dense)
overhead_us   = 400      # assumption: about 12 kernel launches a layer x 32 layers at a few us each, plus one sync; not measured
weight_bytes  = 2        # bf16 weights: 13.416 GB
kv_bytes      = 2        # bf16 K/V: 524,288 bytes a position (32 layers x K,V x 32 heads x 128 x 2)
# K/V pool: 141e9 - 13.416e9 - 7.96e9 = 119.6e9 bytes: 14,260 blocks of 16 positions

jitter_sigma  = 0.03     # assumption: step-to-step spread of a few percent on a dedicated GPU
stall_prob    = 0.0005   # assumption: rare stalls (clock throttling, host preemption)
stall_ms      = 5        # assumption
seed          = 1
