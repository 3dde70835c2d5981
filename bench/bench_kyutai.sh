#!/usr/bin/env bash
# bench_kyutai.sh: Kyutai's LM frame on the CPU by stage (issue 36). One run
# of mt-benchkyutai: synthetic:kyutai-small (Moshi's 16 codebooks, 8 made by
# the depformer, Moshi's delays, on a 256-wide 6-layer temporal transformer
# and a 4-layer depformer) at B = 1, 8, 32, window S=4 + W=60 full, sampling
# with LMGen's defaults; per stage the median of 20 frames: input
# embeddings, temporal transformer (the decoder's step), depformer,
# sampling; the per-session bytes (temporal K/V under the bound, depformer
# K/V and token rings). The codec (Mimi) is not in this figure yet.
# Asserts nothing.
set -u
cd "$(dirname "$0")/.."
TB=${MT_TESTBIN:-build/tests}
if [ ! -x "$TB/mt-benchkyutai" ]; then
    echo "bench_kyutai: $TB/mt-benchkyutai not built (make bench builds it)" >&2
    exit 1
fi
exec "$TB/mt-benchkyutai" -m synthetic:kyutai-small -b 1,8,32 -f 20 -S 4 -W 60
