#!/usr/bin/env bash
# bench_kyutai.sh: Kyutai's speech frame on the CPU by stage, each stage
# against its bound (issues 36, 49). mt-benchkyutai on
# synthetic:kyutai-small (Moshi's 16 codebooks, 8 made by the depformer,
# Moshi's delays, on a 256-wide 6-layer temporal transformer and a 4-layer
# depformer) with the Mimi codec (synthetic:mimi, the published shape) at
# B = 1, 8, 32, 64, window S=4 + W=60 full, sampling with LMGen's defaults:
#   kyutai lines: per stage the median of 20 frames (embeddings, temporal,
#     depformer, sampling) and the frame's CPU time (every thread's);
#   frame lines: mimi_enc, embed, temporal, dep, sample, mimi_dec and the
#     whole frame: STAGE_ms, STAGE_bound_ms (the larger of bytes over the
#     copy bandwidth and FLOPs over the sgemm rate, both measured in this
#     run before each B), STAGE_ratio; frame_bound_ms is the stages' sum;
#   depformer_old_vs_new lines: the depformer as it was before issue 49
#     (one thread, fp32) run after the new one on the same B.
# Then f16 weights at B = 1, 8; then q8 weights at B = 1, 8, 32, 64 with
# the codec and the old depformer beside, and again with the K/V in f16 as
# mt-serve keeps it (-k f16); then the bounds alone (-P, shape-only) of
# Kyutai's published stt-1b (Kyutai's ring of 750 frames, f16 weights) and
# 2B Moshi (S=4 + W=252, f16 weights) on this machine's figures.
# Then what would make them fit (issue 49): synthetic:stt-1b measured with
# Kyutai's ring (S=0 + W=750) at B = 1, 2, 4 with f16 and then 8-bit (q8)
# weights, Mimi's encoder beside it; synthetic:moshi-2b's temporal alone
# (-T: its whole fp32 copy is over the host limit, its temporal is not)
# at B = 1 with q8 weights; its depformer on the host at B = 1, 2 with q8
# weights (-D host, the temporal on a placeholder simulated device).
# Then stt-1b's step as mt-serve's tick takes it (-L: mt_speech_step on
# mt-serve's K/V and max batch, PCM in, q8 weights) at B = 1 to 4: served
# lines, the Mimi encode and LM stages, the step's wall and CPU time.
# Asserts nothing.
set -u
cd "$(dirname "$0")/.."
TB=${MT_TESTBIN:-build/tests}
if [ ! -x "$TB/mt-benchkyutai" ]; then
    echo "bench_kyutai: $TB/mt-benchkyutai not built (make bench builds it)" >&2
    exit 1
fi
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%FT%TZ)"
"$TB/mt-benchkyutai" -m synthetic:kyutai-small -b 1,8,32,64 -f 20 -S 4 -W 60 \
    -c synthetic:mimi -F 3 -O || exit 1
"$TB/mt-benchkyutai" -m synthetic:kyutai-small -b 1,8 -f 20 -S 4 -W 60 -w f16 || exit 1
# The same frame with 8-bit weights (at every batch where the integer
# product serves; the q8 products' bound over its own rate, q8_gops), the
# depformer old (one thread, fp32) and new side by side again.
"$TB/mt-benchkyutai" -m synthetic:kyutai-small -b 1,8,32,64 -f 20 -S 4 -W 60 -w q8 \
    -c synthetic:mimi -F 3 -O || exit 1
# and with the temporal K/V in half precision, as mt-serve keeps it by
# default (--kv-dtype f16; the lines say kv=f16, the bound counts 2 bytes a
# value)
"$TB/mt-benchkyutai" -m synthetic:kyutai-small -b 1,8,32,64 -f 20 -S 4 -W 60 -w q8 -k f16 \
    -c synthetic:mimi -F 3 || exit 1
"$TB/mt-benchkyutai" -m synthetic:stt-1b -b 1,2,4,8 -S 0 -W 750 -w f16 -c synthetic:mimi -P || exit 1
"$TB/mt-benchkyutai" -m synthetic:moshi-2b -b 1,2 -S 4 -W 252 -w f16 -c synthetic:mimi -P || exit 1
# and at q8 (the bytes a frame 0.56 of f16's): whether the 2B Moshi fits
# under 80 ms at its bound on this machine
"$TB/mt-benchkyutai" -m synthetic:moshi-2b -b 1,2 -S 4 -W 252 -w q8 -c synthetic:mimi -P || exit 1
for w in f16 q8; do
    "$TB/mt-benchkyutai" -m synthetic:stt-1b -b 1,2,4 -f 10 -S 0 -W 750 -w $w \
        -c synthetic:mimi -F 5 || exit 1
done
"$TB/mt-benchkyutai" -m synthetic:moshi-2b -b 1 -f 10 -S 4 -W 252 -w q8 -T || exit 1
# synthetic:moshi-2b's depformer (16 steps of its own weights) measured on
# this host with q8 weights: -D host beside a temporal on a throwaway
# SIMULATED device (made-up numbers; the line's temporal_ms is that
# device's and says device=sim:...), since the whole fp32 copy is over the
# host limit and the depformer's side tensors alone are not.
prof=$(mktemp "${TMPDIR:-/tmp}/moshi-2b-placeholder.XXXXXX") || exit 1
cat >"$prof" <<'PROF'
name = placeholder-moshi-2b
model = synthetic:moshi-2b
memory_bytes = 80e9
reserve_bytes = 6e9
bandwidth = 3e12
matrix_rate = 780e12
overhead_us = 400
weight_bytes = 2
kv_bytes = 2
PROF
"$TB/mt-benchkyutai" -m synthetic:moshi-2b -d "sim:$prof" -D host -b 1,2 -f 10 -S 4 -W 20 -w q8
rc=$?
rm -f "$prof"
[ $rc = 0 ] || exit 1
"$TB/mt-benchkyutai" -m synthetic:stt-1b -b 1,2,3,4 -f 20 -w q8 -c synthetic:mimi -L
