/* depformer.cu: the depformer's CUDA kernels (the steps of depformer.c
 * that are not GEMMs): RMSNorm in fp32, the token embeddings, the
 * per-frame attention over steps 0..k, the gated SiLU. */
#include "depformer_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

namespace {

const int THREADS = 128;

int launched() { return (int)cudaGetLastError(); }

/* One block per row. */
__global__ void k_rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    __shared__ float red[THREADS];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *o = out + (size_t)blockIdx.x * n;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    red[threadIdx.x] = ss;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    float inv = 1.0f / sqrtf(eps + red[0] / (float)n);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = xr[i] * (w[i] * inv);
}

__global__ void k_add_emb(float *x, const float *table, const int32_t *tok, int n)
{
    int32_t t = tok[blockIdx.x];
    if (t < 0)
        return;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        x[(size_t)blockIdx.x * n + i] += table[(size_t)t * n + i];
}

/* One block per (row, head); shared: score [Q]. */
__global__ void k_attention(const float *qkv, float *kv, float *att, int Q, int dd, int nh, int k)
{
    extern __shared__ float score[];
    const int r = blockIdx.x, h = blockIdx.y, hd = dd / nh;
    const float *q = qkv + (size_t)r * 3 * dd;
    float *kr = kv + (size_t)r * 2 * Q * dd, *vr = kr + (size_t)Q * dd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        kr[(size_t)k * dd + h * hd + i] = q[dd + h * hd + i];
        vr[(size_t)k * dd + h * hd + i] = q[2 * dd + h * hd + i];
    }
    __syncthreads();
    const float scale = 1.0f / sqrtf((float)hd);
    for (int t = threadIdx.x; t <= k; t += blockDim.x) {
        float s = 0.0f;
        for (int i = 0; i < hd; i++)
            s += q[h * hd + i] * kr[(size_t)t * dd + h * hd + i];
        score[t] = s * scale;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = -INFINITY, sum = 0.0f;
        for (int t = 0; t <= k; t++)
            m = fmaxf(m, score[t]);
        for (int t = 0; t <= k; t++) {
            score[t] = expf(score[t] - m);
            sum += score[t];
        }
        score[Q] = sum;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        float a = 0.0f;
        for (int t = 0; t <= k; t++)
            a += score[t] * vr[(size_t)t * dd + h * hd + i];
        att[(size_t)r * dd + h * hd + i] = a / score[Q];
    }
}

__global__ void k_swiglu(float *gu, int B, int F)
{
    size_t n = (size_t)B * F;
    for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (size_t)gridDim.x * blockDim.x) {
        size_t r = j / F, i = j % F;
        float *g = gu + r * 2 * F;
        float a = g[i];
        g[i] = a / (1.0f + expf(-a)) * g[F + i];
    }
}

} // namespace

#define STREAM(s) ((cudaStream_t)(s))

extern "C" {

int mt_cu_dep_rmsnorm(float *out, const float *x, const float *w, int B, int n, float eps,
                      void *stream)
{
    k_rmsnorm<<<(unsigned)B, THREADS, 0, STREAM(stream)>>>(out, x, w, n, eps);
    return launched();
}

int mt_cu_dep_add_emb(float *x, const float *table, const int32_t *tok, int B, int n, void *stream)
{
    k_add_emb<<<(unsigned)B, THREADS, 0, STREAM(stream)>>>(x, table, tok, n);
    return launched();
}

int mt_cu_dep_attention(const float *qkv, float *kv, float *att, int B, int Q, int dd, int nh,
                        int k, void *stream)
{
    dim3 grid((unsigned)B, (unsigned)nh);
    k_attention<<<grid, THREADS, (size_t)(Q + 1) * sizeof(float), STREAM(stream)>>>(qkv, kv, att, Q,
                                                                                  dd, nh, k);
    return launched();
}

int mt_cu_dep_swiglu(float *gu, int B, int F, void *stream)
{
    size_t n = (size_t)B * F, b = (n + 255) / 256;
    k_swiglu<<<(unsigned)(b < 65535 ? (b ? b : 1) : 65535), 256, 0, STREAM(stream)>>>(gu, B, F);
    return launched();
}

} // extern "C"
