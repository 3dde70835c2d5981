// sample.cu: Kyutai's token sampling on the device, one block a row, the
// same draw as decode/kyutai.c's host sampler (sample()): greedy (the
// first index of the largest logit), or softmax(l / temp) over the top k
// (the total order: larger logit first, the lower index on ties) and
// Kyutai's exponential race: for each candidate in ascending index order,
// u from the row's own xoshiro256** state (util/rng.h, advanced in place),
// v = exp((l - max) / temp) / -log(1 - u), the first largest v wins. In
// double, as the host; exp and log may differ from glibc's in the last
// bit, which moves a draw only at a near tie.
#include "sample_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

namespace {

const int THREADS = 256;

__device__ __forceinline__ unsigned long long rotl(unsigned long long x, int k)
{
    return (x << k) | (x >> (64 - k));
}

// mt_rng_next and mt_rng_uniform (util/rng.h, rng.c), on s[4].
__device__ double uniform(unsigned long long *s)
{
    unsigned long long result = rotl(s[1] * 5ull, 7) * 9ull;
    unsigned long long t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(result >> 11) * 0x1.0p-53;
}

// j ranks before i: a larger logit, or the same and a lower index
__device__ __forceinline__ bool better(const float *l, int j, int i)
{
    return l[j] > l[i] || (l[j] == l[i] && j < i);
}

// Row r of logits [B][n] -> tok[r] and out[r * out_stride]. Shared: the
// row (n floats), its candidate flags (n bytes), the reduction.
__global__ void k_sample(const float *logits, int n, const mt_cu_samp *sp,
                         unsigned long long *rng, int32_t *tok, int32_t *out, int out_stride)
{
    extern __shared__ float row[];
    unsigned char *sel = (unsigned char *)(row + n);
    __shared__ float red_v[THREADS];
    __shared__ int red_i[THREADS];
    const int r = blockIdx.x, t = threadIdx.x;
    const float *l = logits + (size_t)r * n;
    for (int i = t; i < n; i += blockDim.x)
        row[i] = l[i];
    __syncthreads();
    // the largest logit, the lowest index on ties (greedy's answer, and
    // the softmax's max)
    float bv = -INFINITY;
    int bi = n;
    for (int i = t; i < n; i += blockDim.x)
        if (row[i] > bv || (row[i] == bv && i < bi)) {
            bv = row[i];
            bi = i;
        }
    red_v[t] = bv;
    red_i[t] = bi;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s && (red_v[t + s] > red_v[t] ||
                      (red_v[t + s] == red_v[t] && red_i[t + s] < red_i[t]))) {
            red_v[t] = red_v[t + s];
            red_i[t] = red_i[t + s];
        }
        __syncthreads();
    }
    const mt_cu_samp p = sp[r];
    if (p.greedy || !(p.temp > 0.0f)) {
        if (t == 0) {
            tok[r] = red_i[0];
            out[(size_t)r * out_stride] = red_i[0];
        }
        return;
    }
    const int k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
    for (int i = t; i < n; i += blockDim.x) {
        int rank = 0;
        for (int j = 0; j < n && rank < k; j++)
            rank += better(row, j, i);
        sel[i] = rank < k;
    }
    __syncthreads();
    if (t != 0)
        return;
    const double m = (double)red_v[0];
    unsigned long long s[4];
    for (int i = 0; i < 4; i++)
        s[i] = rng[(size_t)r * 4 + i];
    double bestv = -1;
    int best = 0;
    for (int i = 0; i < n; i++) {
        if (!sel[i])
            continue;
        double pr = exp(((double)row[i] - m) / (double)p.temp);
        double e = -log(1.0 - uniform(s));
        double v = pr / (e > 0 ? e : 1e-300);
        if (v > bestv) {
            bestv = v;
            best = i;
        }
    }
    for (int i = 0; i < 4; i++)
        rng[(size_t)r * 4 + i] = s[i];
    tok[r] = best;
    out[(size_t)r * out_stride] = best;
}

} // namespace

extern "C" int mt_cu_sample_max_n(void)
{
    return (46 * 1024) / (int)(sizeof(float) + 1);   /* 48 KiB less the reduction arrays */
}

extern "C" int mt_cu_sample(const float *logits, int B, int n, const mt_cu_samp *sp,
                            unsigned long long *rng, int32_t *tok, int32_t *out, int out_stride,
                            void *stream)
{
    if (n < 1 || n > mt_cu_sample_max_n())
        return (int)cudaErrorInvalidValue;
    size_t shmem = (size_t)n * (sizeof(float) + 1);
    k_sample<<<(unsigned)B, THREADS, shmem, (cudaStream_t)stream>>>(logits, n, sp, rng, tok, out,
                                                                   out_stride);
    return (int)cudaGetLastError();
}
