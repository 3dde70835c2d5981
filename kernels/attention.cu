// attention.cu: rotary + KV append, and the windowed-sink decode attention.
//
// Why keys are stored rotated by absolute position in every mode: in the
// window policy with cache rope (StreamingLLM), a ring key's rotary
// position is its index in the kept cache, S + (p - first), and the query's
// is S + (q - first); the difference is q - p, the same as with absolute
// positions, and rotary scores depend only on that difference. Only the
// sinks differ: their index is p, the query's index n-1. So one stored key
// serves both modes, and the query is rotated twice (mt_cu_row.pos_abs for
// the ring, pos_sink for the sinks). Exact in real arithmetic.
//
// Why the kernel reads slots in storage order: softmax attention is a sum
// over keys, so the wrap point of the ring does not matter once each key
// has its rotation; the visible slots are exactly 0..nslots-1 (sinks, then
// the ring, filled in order and overwritten in place).
//
// Attention grid: (split, kv head, row). A block of 4 warps reads each key
// once for all G = heads/kv_heads query heads of the kv head (GQA). A key
// row of D bf16 is read by T lanes with 16 bytes each (T = next power of two
// of D/8), so one warp covers 32/T keys per load. Online softmax in fp32,
// base 2 (queries carry log2(e)/sqrt(D)). Splits partition the ring slots
// (flash-decoding); split 0 also takes the sinks; a combine kernel merges
// the splits' (max, sum, acc) partials.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>
#include <stdint.h>
#include <stdio.h>

#include "decode/kv.h"
#include "mt_kernels.h"

#define ATT_THREADS 128
#define ATT_WARPS (ATT_THREADS / 32)
#define MAX_HEAD_DIM 256

// ---- rotary + append ------------------------------------------------------

__global__ void rope_append_kernel(const float *__restrict__ qkv, const mt_cu_row *__restrict__ rows,
                                   const int32_t *__restrict__ tables, __nv_bfloat16 *__restrict__ pool,
                                   float *__restrict__ qrot, const float *__restrict__ rope_cs,
                                   int layer, int L, int H, int Hkv, int D)
{
    const int r = blockIdx.x;
    const mt_cu_row row = rows[r];
    const int half = D / 2, qkv_dim = (H + 2 * Hkv) * D;
    const float *q = qkv + (size_t)r * qkv_dim;
    const float *k = q + (size_t)H * D;
    const float *v = k + (size_t)Hkv * D;
    const float qscale = 1.4426950408889634f / sqrtf((float)D);
    // the call's table (mt_cu_rope_table): [ring | sink][cos | sin][half]
    const float *ca_t = rope_cs + (size_t)r * 4 * half, *sa_t = ca_t + half;
    const float *cs_t = ca_t + 2 * half, *ss_t = ca_t + 3 * half;

    const size_t head_stride = (size_t)MT_KV_BLOCK * D;
    const size_t kv_off = (size_t)Hkv * head_stride;
    const int32_t blk = tables[row.table_off + row.write_slot / MT_KV_BLOCK];
    __nv_bfloat16 *kdst = pool + ((size_t)blk * L + layer) * 2 * kv_off +
                          (size_t)(row.write_slot % MT_KV_BLOCK) * D;

    for (int idx = threadIdx.x; idx < H * half; idx += blockDim.x) {
        int h = idx / half, i = idx % half;
        float a = q[h * D + i], b = q[h * D + i + half];
        const float ca = ca_t[i], sa = sa_t[i], cs = cs_t[i], ss = ss_t[i];
        float *o0 = qrot + ((size_t)(r * 2 + 0) * H + h) * D;
        float *o1 = qrot + ((size_t)(r * 2 + 1) * H + h) * D;
        o0[i] = (a * ca - b * sa) * qscale;
        o0[i + half] = (b * ca + a * sa) * qscale;
        o1[i] = (a * cs - b * ss) * qscale;
        o1[i + half] = (b * cs + a * ss) * qscale;
    }
    for (int idx = threadIdx.x; idx < Hkv * half; idx += blockDim.x) {
        int g = idx / half, i = idx % half;
        float a = k[g * D + i], b = k[g * D + i + half];
        const float c = ca_t[i], s = sa_t[i];
        __nv_bfloat16 *kd = kdst + (size_t)g * head_stride;
        kd[i] = __float2bfloat16(a * c - b * s);
        kd[i + half] = __float2bfloat16(b * c + a * s);
    }
    for (int idx = threadIdx.x; idx < Hkv * D; idx += blockDim.x) {
        int g = idx / D, i = idx % D;
        kdst[kv_off + (size_t)g * head_stride + i] = __float2bfloat16(v[idx]);
    }
}

extern "C" int mt_cu_rope_append(const float *qkv, const mt_cu_row *rows, const int32_t *tables,
                                 uint16_t *pool, float *qrot, const float *rope_cs, int nrows,
                                 int layer, mt_cu_dims d, void *stream)
{
    rope_append_kernel<<<nrows, 128, 0, (cudaStream_t)stream>>>(
        qkv, rows, tables, (__nv_bfloat16 *)pool, qrot, rope_cs, layer, d.layers, d.heads,
        d.kv_heads, d.head_dim);
    return (int)cudaGetLastError();
}

// ---- attention ---------------------------------------------------------------

__device__ __forceinline__ void bf16x8_to_f32(uint4 u, float *f)
{
    const __nv_bfloat162 *p = (const __nv_bfloat162 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 t = __bfloat1622float2(p[i]);
        f[2 * i] = t.x;
        f[2 * i + 1] = t.y;
    }
}

// Weight of a partial with max m when the merged max is M (0 for an empty one).
__device__ __forceinline__ float rescale(float m, float M)
{
    return m == -CUDART_INF_F ? 0.f : exp2f(m - M);
}

// One key (its 8 dims held by this lane) into the running softmax state of
// the group's G query heads. Every lane of the warp must call it (shuffles);
// valid says whether this lane's key exists.
template <int MAXG>
__device__ __forceinline__ void online_update(const float (&q)[MAXG][8], uint4 ku, uint4 vu,
                                              bool valid, int G, int T, float (&m)[MAXG],
                                              float (&l)[MAXG], float (&acc)[MAXG][8])
{
    float kf[8], vf[8];
    bf16x8_to_f32(ku, kf);
    bf16x8_to_f32(vu, vf);
#pragma unroll
    for (int g = 0; g < MAXG; g++) {
        if (g >= G)
            break;
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            s = fmaf(q[g][i], kf[i], s);
        for (int o = T / 2; o; o >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, o);
        if (valid) {
            float mn = fmaxf(m[g], s);
            float c = rescale(m[g], mn), pw = exp2f(s - mn);
            l[g] = l[g] * c + pw;
#pragma unroll
            for (int i = 0; i < 8; i++)
                acc[g][i] = fmaf(acc[g][i], c, pw * vf[i]);
            m[g] = mn;
        }
    }
}

/* One (split, kv head, row) block of the split attention. It stays one
 * function over 100 lines on purpose (tools/longfuncs.sh allows it): its
 * phases (the query into registers, the walk over the sinks and the ring's
 * chunk, the key groups' merge by shuffles, the warps' merge in shared
 * memory around the barrier, the partial out) all work on the same
 * registers (acc, m, l); device functions would take them all by
 * reference and hide which phase the barrier separates. */
template <int MAXG>
__global__ void __launch_bounds__(ATT_THREADS)
attn_split_kernel(const float *__restrict__ qrot, const mt_cu_row *__restrict__ rows,
                  const int32_t *__restrict__ tables, const __nv_bfloat16 *__restrict__ pool,
                  float *__restrict__ part, int layer, int nsplit, int chunk, int L, int H,
                  int Hkv, int D, int T, int row0)
{
    const int split = blockIdx.x, kvh = blockIdx.y, r = row0 + (int)blockIdx.z;
    const int G = H / Hkv;
    const mt_cu_row row = rows[r];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gl = lane & (T - 1), grp = lane / T, NG = 32 / T;
    const int d0 = gl * 8;
    const bool act = d0 < D;
    const int nsink = min(row.sink, row.nslots);
    const int ring_lo = nsink + split * chunk;
    const int ring_hi = min(row.nslots, ring_lo + chunk);

    const size_t head_stride = (size_t)MT_KV_BLOCK * D;
    const size_t kv_off = (size_t)Hkv * head_stride;
    const size_t blk_stride = (size_t)L * 2 * kv_off;
    const __nv_bfloat16 *lbase = pool + (size_t)layer * 2 * kv_off + (size_t)kvh * head_stride +
                                 (act ? d0 : 0);
    const int32_t *tab = tables + row.table_off;

    float q[MAXG][8], acc[MAXG][8], m[MAXG], l[MAXG];
#pragma unroll
    for (int g = 0; g < MAXG; g++) {
        m[g] = -CUDART_INF_F;
        l[g] = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++)
            acc[g][i] = 0.f;
    }

    for (int ph = 0; ph < 2; ph++) {
        // phase 0: the sinks (split 0 only) with the sink query; 1: ring chunk
        int lo = ph == 0 ? 0 : ring_lo;
        int hi = ph == 0 ? (split == 0 ? nsink : 0) : ring_hi;
        if (lo >= hi)
            continue;
        const int variant = ph == 0 ? 1 : 0;
#pragma unroll
        for (int g = 0; g < MAXG; g++) {
            const float *qs = qrot + ((size_t)(r * 2 + variant) * H + kvh * G + g) * D + d0;
#pragma unroll
            for (int i = 0; i < 8; i++)
                q[g][i] = (g < G && act) ? qs[i] : 0.f;
        }
        // Two keys per group in flight per iteration (both loads issued
        // before either is used), for more bytes in flight per warp.
        const int stride = ATT_WARPS * NG;
        for (int base = lo + warp * NG; base < hi; base += 2 * stride) { // warp-uniform
            const int j0 = base + grp, j1 = base + stride + grp;
            uint4 ku0 = make_uint4(0, 0, 0, 0), vu0 = ku0, ku1 = ku0, vu1 = ku0;
            if (j0 < hi && act) {
                const __nv_bfloat16 *p = lbase + (size_t)tab[j0 / MT_KV_BLOCK] * blk_stride +
                                         (size_t)(j0 % MT_KV_BLOCK) * D;
                ku0 = __ldg((const uint4 *)p);
                vu0 = __ldg((const uint4 *)(p + kv_off));
            }
            if (j1 < hi && act) {
                const __nv_bfloat16 *p = lbase + (size_t)tab[j1 / MT_KV_BLOCK] * blk_stride +
                                         (size_t)(j1 % MT_KV_BLOCK) * D;
                ku1 = __ldg((const uint4 *)p);
                vu1 = __ldg((const uint4 *)(p + kv_off));
            }
            online_update<MAXG>(q, ku0, vu0, j0 < hi, G, T, m, l, acc);
            online_update<MAXG>(q, ku1, vu1, j1 < hi, G, T, m, l, acc);
        }
    }

    // merge the key groups of the warp (lanes with the same gl)
    for (int o = T; o < 32; o <<= 1) {
#pragma unroll
        for (int g = 0; g < MAXG; g++) {
            float mo = __shfl_xor_sync(0xffffffffu, m[g], o);
            float lo_ = __shfl_xor_sync(0xffffffffu, l[g], o);
            float M = fmaxf(m[g], mo);
            float c1 = rescale(m[g], M), c2 = rescale(mo, M);
            l[g] = l[g] * c1 + lo_ * c2;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], o);
                acc[g][i] = acc[g][i] * c1 + ao * c2;
            }
            m[g] = M;
        }
    }

    // merge the warps through shared memory
    __shared__ float s_acc[ATT_WARPS][MAXG][MAX_HEAD_DIM];
    __shared__ float s_m[ATT_WARPS][MAXG], s_l[ATT_WARPS][MAXG];
    if (grp == 0) {
#pragma unroll
        for (int g = 0; g < MAXG; g++) {
            if (act)
#pragma unroll
                for (int i = 0; i < 8; i++)
                    s_acc[warp][g][d0 + i] = acc[g][i];
            if (lane == 0) {
                s_m[warp][g] = m[g];
                s_l[warp][g] = l[g];
            }
        }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < G * D; idx += ATT_THREADS) {
        const int g = idx / D, dd = idx % D;
        float M = -CUDART_INF_F;
        for (int w = 0; w < ATT_WARPS; w++)
            M = fmaxf(M, s_m[w][g]);
        float A = 0.f, Ls = 0.f;
        for (int w = 0; w < ATT_WARPS; w++) {
            float c = rescale(s_m[w][g], M);
            A += s_acc[w][g][dd] * c;
            Ls += s_l[w][g] * c;
        }
        float *pp = part + (((size_t)r * H + kvh * G + g) * nsplit + split) * (D + 2);
        pp[dd] = A;
        if (dd == 0) {
            pp[D] = M;
            pp[D + 1] = Ls;
        }
    }
}

__global__ void attn_combine_kernel(const float *__restrict__ part, __nv_bfloat16 *__restrict__ out,
                                    int H, int D, int nsplit, int row0)
{
    const int h = blockIdx.x, r = row0 + (int)blockIdx.y;
    const float *pp = part + ((size_t)r * H + h) * nsplit * (D + 2);
    float M = -CUDART_INF_F;
    for (int s = 0; s < nsplit; s++)
        M = fmaxf(M, pp[(size_t)s * (D + 2) + D]);
    float Ls = 0.f;
    for (int s = 0; s < nsplit; s++)
        Ls += pp[(size_t)s * (D + 2) + D + 1] * rescale(pp[(size_t)s * (D + 2) + D], M);
    const float inv = Ls > 0.f ? 1.f / Ls : 0.f;
    for (int dd = threadIdx.x; dd < D; dd += blockDim.x) {
        float A = 0.f;
        for (int s = 0; s < nsplit; s++)
            A += pp[(size_t)s * (D + 2) + dd] * rescale(pp[(size_t)s * (D + 2) + D], M);
        out[((size_t)r * H + h) * D + dd] = __float2bfloat16(A * inv);
    }
}

static int lanes_per_key(int D)
{
    int t = 1;
    while (t * 8 < D)
        t *= 2;
    return t;
}

extern "C" int mt_cu_attention_supported(mt_cu_dims d, char *why, size_t whylen)
{
    if (d.head_dim <= 0 || d.head_dim % 8 || d.head_dim > MAX_HEAD_DIM) {
        snprintf(why, whylen, "head_dim %d: the CUDA attention needs a multiple of 8 up to %d",
                 d.head_dim, MAX_HEAD_DIM);
        return -1;
    }
    if (d.kv_heads <= 0 || d.heads % d.kv_heads || d.heads / d.kv_heads > 8) {
        snprintf(why, whylen, "%d heads over %d kv heads: the CUDA attention takes groups of 1..8",
                 d.heads, d.kv_heads);
        return -1;
    }
    return 0;
}

// Rows run in tiles of at most GRID_YZ_MAX: the row is the grid's z (split)
// or y (combine) dimension, which CUDA caps at 65,535, and max_batch may
// be 65,536 (the decoder's limit).
#define GRID_YZ_MAX 65535

extern "C" int mt_cu_attention(const float *qrot, const mt_cu_row *rows, const int32_t *tables,
                               const uint16_t *pool, float *part, uint16_t *out, int nrows,
                               int layer, int nsplit, int chunk, mt_cu_dims d, void *stream)
{
    cudaStream_t st = (cudaStream_t)stream;
    const int G = d.heads / d.kv_heads, T = lanes_per_key(d.head_dim);
    const __nv_bfloat16 *pl = (const __nv_bfloat16 *)pool;
    for (int row0 = 0; row0 < nrows; row0 += GRID_YZ_MAX) {
        const int n = nrows - row0 < GRID_YZ_MAX ? nrows - row0 : GRID_YZ_MAX;
        dim3 grid((unsigned)nsplit, (unsigned)d.kv_heads, (unsigned)n);
#define MT_ATT_LAUNCH(MG)                                                                  \
    attn_split_kernel<MG><<<grid, ATT_THREADS, 0, st>>>(qrot, rows, tables, pl, part, layer, \
                                                        nsplit, chunk, d.layers, d.heads,  \
                                                        d.kv_heads, d.head_dim, T, row0)
        if (G <= 1)
            MT_ATT_LAUNCH(1);
        else if (G <= 2)
            MT_ATT_LAUNCH(2);
        else if (G <= 4)
            MT_ATT_LAUNCH(4);
        else
            MT_ATT_LAUNCH(8);
#undef MT_ATT_LAUNCH
        int rc = (int)cudaGetLastError();
        if (rc)
            return rc;
        attn_combine_kernel<<<dim3((unsigned)d.heads, (unsigned)n), 128, 0, st>>>(
            part, (__nv_bfloat16 *)out, d.heads, d.head_dim, nsplit, row0);
        rc = (int)cudaGetLastError();
        if (rc)
            return rc;
    }
    return 0;
}
