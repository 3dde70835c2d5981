#!/usr/bin/env bash
# bench_codec.sh: Kyutai's Mimi codec (issue 35), synthetic:mimi (the
# published shape, 8 codebooks), encode and decode per session-frame at
# B = 1, 8, 32, 64 sessions per batch on one CPU thread, with its FLOP
# count per frame, the achieved GFLOP/s overall and per stage (SEANet,
# transformer, resampling convolutions, RVQ), beside this machine's sgemm
# on the same thread count measured in the same run (before each batch;
# the best of them is the denominator). The last line says how many
# sessions' codec one thread runs in real time (80 ms per frame).
# Target (reported, never asserted): the codec at >= 50% of the sgemm
# figure at B >= 8. BENCH_CODEC_ARGS adds mt-benchcodec options
# (--threads N, --frames F, --batches LIST). --threads N runs the codec
# on N threads of its own (mimi_batch_threads, OpenBLAS on one inside
# it, as in mt-serve) beside OpenBLAS's sgemm on N threads; issue 49's
# small-batch comparison: BENCH_CODEC_ARGS="--batches 1,2,8 --threads 2".
# The last lines (issue 49 item 4): the previous kernels (im2col + sgemm,
# dot8_multi) and the current ones (mimi_conv.c's direct convolution,
# mimi_skinny.c's 8-vector products) alternating frame by frame at
# B = 1, 2, 4 on 2 threads, medians (`compare` lines), and with one
# thread each encode op's CPU time on both (`layer` lines, B = 1 and 4)
# and each decode op's (`dlayer` lines); then (helper h-mimidec) the
# decoder's transposed convolutions before and after mimi_convtr.c alone
# (--old-tr), 2 threads, B = 1, 2, 4; then the transformers' fp32
# matrices against their 8-bit copies (--q8, as mt-serve --weights q8
# runs the codec), 2 threads, B = 1, 2, 4, 8, and one thread at B = 1.
set -u
cd "$(dirname "$0")/.."
H=${MT_TESTBIN:-build/tests}/mt-benchcodec
[ -x "$H" ] || { echo "bench_codec: $H not built (make build/tests/mt-benchcodec)" >&2; exit 1; }
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# shellcheck disable=SC2086
"$H" --batches 1,8,32,64 --frames 3 ${BENCH_CODEC_ARGS:-}
"$H" --compare --batches 1,2,4 --frames 10 --threads 2
"$H" --compare --layers --batches 1,4 --frames 5 --threads 1
"$H" --compare --old-tr --batches 1,2,4 --frames 10 --threads 2
"$H" --compare --q8 --batches 1,2,4,8 --frames 10 --threads 2
"$H" --compare --q8 --batches 1 --frames 10 --threads 1
