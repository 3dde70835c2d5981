/* qwen.cu: the Qwen-family additions to the attention input, between the
 * q|k|v projection and the rotary + KV append: the q/k/v biases (Qwen2)
 * and the per-head RMSNorm of q and k (Qwen3), in place on the fp32 qkv
 * rows, so that rope_append sees what HuggingFace's Qwen2/Qwen3 attention
 * rotates. */
#include "block_reduce.cuh"
#include "mt_kernels.h"

#include <cuda_runtime.h>

/* One block per (row, head of q|k|v); blockDim a multiple of 32, <= 1024. */
__global__ void qwen_qkv_kernel(float *__restrict__ qkv, const float *__restrict__ bias,
                                const float *__restrict__ qk_norm, int heads, int kv_heads,
                                int hd, float eps)
{
    const int row = blockIdx.x, h = blockIdx.y, qkv_dim = (heads + 2 * kv_heads) * hd;
    float *v = qkv + (size_t)row * qkv_dim + (size_t)h * hd;
    if (bias)
        for (int i = threadIdx.x; i < hd; i += blockDim.x)
            v[i] += bias[(size_t)h * hd + i];
    /* q heads use the q weight, k heads the k weight; v heads are not normed */
    if (!qk_norm || h >= heads + kv_heads)
        return;
    const float *w = qk_norm + (h < heads ? 0 : hd);
    float ss = 0.f;
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        ss += v[i] * v[i];
    float r = rsqrtf(block_sum(ss) / hd + eps);
    for (int i = threadIdx.x; i < hd; i += blockDim.x)
        v[i] = v[i] * r * w[i];
}

extern "C" int mt_cu_qwen_qkv(float *qkv, const float *bias, const float *qk_norm, int rows,
                              int heads, int kv_heads, int head_dim, float eps, void *stream)
{
    if (rows < 1 || (!bias && !qk_norm))
        return 0;
    int threads = head_dim >= 128 ? 128 : 32;
    dim3 grid((unsigned)rows, (unsigned)(heads + 2 * kv_heads));
    qwen_qkv_kernel<<<grid, threads, 0, (cudaStream_t)stream>>>(qkv, bias, qk_norm, heads,
                                                                kv_heads, head_dim, eps);
    return (int)cudaGetLastError();
}
