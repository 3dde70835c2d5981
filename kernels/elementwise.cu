// elementwise.cu: the cheap per-element and per-row kernels of the CUDA
// decode step (RMSNorm, SwiGLU, the adapters' conversions, weight
// conversion and synthetic fill, the per-call rotary table). All arithmetic in fp32; bf16 only where
// a GEMM reads the result.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "block_reduce.cuh"
#include "mt_kernels.h"

static inline unsigned grid_for(size_t n, unsigned threads)
{
    size_t g = (n + threads - 1) / threads;
    return (unsigned)(g > 65535u * 16u ? 65535u * 16u : (g ? g : 1));
}

// One block per row; fp32 sum of squares reduced through shared memory.
__global__ void rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ w,
                               __nv_bfloat16 *__restrict__ out, int n, float eps)
{
    const float *xr = x + (size_t)blockIdx.x * n;
    __nv_bfloat16 *orow = out + (size_t)blockIdx.x * n;
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ss += xr[i] * xr[i];
    float r = rsqrtf(block_sum(ss) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        orow[i] = __float2bfloat16(xr[i] * r * w[i]);
}

extern "C" int mt_cu_rmsnorm(const float *x, const float *w, uint16_t *out, int rows,
                             int n, float eps, void *stream)
{
    rmsnorm_kernel<<<rows, 256, 0, (cudaStream_t)stream>>>(x, w, (__nv_bfloat16 *)out, n, eps);
    return (int)cudaGetLastError();
}

__global__ void swiglu_kernel(const float *__restrict__ gu, __nv_bfloat16 *__restrict__ out,
                              int rows, int ffn)
{
    size_t n = (size_t)rows * ffn;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / ffn, c = i % ffn;
        float g = gu[r * 2 * ffn + c], u = gu[r * 2 * ffn + ffn + c];
        out[i] = __float2bfloat16(g / (1.f + expf(-g)) * u);
    }
}

extern "C" int mt_cu_swiglu(const float *gu, uint16_t *out, int rows, int ffn, void *stream)
{
    size_t n = (size_t)rows * ffn;
    swiglu_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(gu, (__nv_bfloat16 *)out,
                                                                      rows, ffn);
    return (int)cudaGetLastError();
}

__global__ void pcm_to_bf16_kernel(const int16_t *__restrict__ pcm, __nv_bfloat16 *__restrict__ out,
                                   size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = __float2bfloat16(pcm[i] / 32768.0f);
}

extern "C" int mt_cu_pcm_to_bf16(const int16_t *pcm, uint16_t *out, size_t n, void *stream)
{
    pcm_to_bf16_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
        pcm, (__nv_bfloat16 *)out, n);
    return (int)cudaGetLastError();
}

__global__ void f32_to_pcm_kernel(const float *__restrict__ y, int16_t *__restrict__ pcm, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = fminf(1.f, fmaxf(-1.f, y[i]));
        pcm[i] = (int16_t)__float2int_rn(v * 32767.f);
    }
}

extern "C" int mt_cu_f32_to_pcm(const float *y, int16_t *pcm, size_t n, void *stream)
{
    f32_to_pcm_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(y, pcm, n);
    return (int)cudaGetLastError();
}

__global__ void embed_kernel(const __nv_bfloat16 *__restrict__ embed, const int32_t *__restrict__ tok,
                             float *__restrict__ x, int hidden)
{
    const __nv_bfloat16 *e = embed + (size_t)tok[blockIdx.x] * hidden;
    float *xr = x + (size_t)blockIdx.x * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
        xr[i] = __bfloat162float(e[i]);
}

extern "C" int mt_cu_embed(const uint16_t *embed, const int32_t *tok, float *x, int rows,
                           int hidden, void *stream)
{
    embed_kernel<<<rows, 256, 0, (cudaStream_t)stream>>>((const __nv_bfloat16 *)embed, tok, x,
                                                         hidden);
    return (int)cudaGetLastError();
}

__global__ void f32_to_bf16_kernel(const float *__restrict__ s, __nv_bfloat16 *__restrict__ d,
                                   size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __float2bfloat16(s[i]);
}

extern "C" int mt_cu_f32_to_bf16(const float *src, uint16_t *dst, size_t n, void *stream)
{
    f32_to_bf16_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
        src, (__nv_bfloat16 *)dst, n);
    return (int)cudaGetLastError();
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(__nv_bfloat16 *__restrict__ d, size_t n, uint64_t seed,
                                    float amp)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = splitmix64(seed ^ splitmix64(i));
        float u = (float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f; // [-1, 1)
        d[i] = __float2bfloat16(amp * u);
    }
}

extern "C" int mt_cu_fill_uniform_bf16(uint16_t *dst, size_t n, uint64_t seed, float std,
                                       void *stream)
{
    fill_uniform_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(
        (__nv_bfloat16 *)dst, n, seed, std * 1.7320508f);
    return (int)cudaGetLastError();
}

__global__ void fill_f32_kernel(float *__restrict__ d, size_t n, float v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = v;
}

extern "C" int mt_cu_fill_f32(float *dst, size_t n, float v, void *stream)
{
    fill_f32_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(dst, n, v);
    return (int)cudaGetLastError();
}

__global__ void fill_uniform_f32_kernel(float *__restrict__ d, size_t n, uint64_t seed, float amp)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint64_t h = splitmix64(seed ^ splitmix64(i));
        d[i] = amp * ((float)(h >> 40) * (1.0f / 8388608.0f) - 1.0f);
    }
}

extern "C" int mt_cu_fill_uniform_f32(float *dst, size_t n, uint64_t seed, float amp,
                                      void *stream)
{
    fill_uniform_f32_kernel<<<grid_for(n, 256), 256, 0, (cudaStream_t)stream>>>(dst, n, seed,
                                                                               amp);
    return (int)cudaGetLastError();
}

// One block per row: both angle sets of the row, in double as the CPU
// backend's table (rope_table in backend_cpu.c), stored as float.
__global__ void rope_table_kernel(const mt_cu_row *__restrict__ rows,
                                  const double *__restrict__ inv_freq, float *__restrict__ cs,
                                  int half)
{
    const mt_cu_row row = rows[blockIdx.x];
    float *o = cs + (size_t)blockIdx.x * 4 * half;
    for (int idx = threadIdx.x; idx < 2 * half; idx += blockDim.x) {
        const int v = idx / half, i = idx % half;
        double s, c;
        sincos((double)(v ? row.pos_sink : row.pos_abs) * inv_freq[i], &s, &c);
        o[(v * 2 + 0) * half + i] = (float)c;
        o[(v * 2 + 1) * half + i] = (float)s;
    }
}

extern "C" int mt_cu_rope_table(const mt_cu_row *rows, const double *inv_freq, float *cs,
                                int nrows, int head_dim, void *stream)
{
    rope_table_kernel<<<nrows, 64, 0, (cudaStream_t)stream>>>(rows, inv_freq, cs, head_dim / 2);
    return (int)cudaGetLastError();
}
