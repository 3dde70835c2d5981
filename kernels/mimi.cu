/* mimi.cu: Mimi's CUDA kernels, the steps of the codec that are not GEMMs
 * (those are cuBLAS's, src/codec/mimi_cuda.c): im2col over each session's
 * left context, the convolution state updates, the transposed
 * convolutions' overlap-add, ELU, LayerNorm, GELU, rotary positions and
 * the ring attention of the transformers, and the RVQ's nearest centroid.
 * Each mirrors the CPU's arithmetic in mimi.c (fp32; LayerNorm's moments
 * in double), in another order of summation. */
#include "mimi_kernels.h"

#include <cuda_runtime.h>
#include <math.h>

namespace {

const int TPB = 256;

unsigned blocks_for(size_t n)
{
    size_t b = (n + TPB - 1) / TPB;
    return (unsigned)(b < 65535 ? (b ? b : 1) : 65535);
}

int launched() { return (int)cudaGetLastError(); }

#define GRID_LOOP(i, n) \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

__global__ void k_elu(float *dst, const float *src, size_t n)
{
    GRID_LOOP(i, n) {
        float x = src[i];
        dst[i] = x > 0.0f ? x : expm1f(x);
    }
}

__global__ void k_add(float *dst, const float *src, size_t n)
{
    GRID_LOOP(i, n) dst[i] += src[i];
}

__global__ void k_bias(float *Y, const float *bias, int cout, size_t N)
{
    GRID_LOOP(i, (size_t)cout * N) Y[i] = bias ? bias[i / N] : 0.0f;
}

__global__ void k_replicate(mt_cu_conv cv, float *st, size_t stride, const int32_t *slot,
                            const int32_t *first, int B, const float *X)
{
    const size_t Nin = (size_t)B * cv.tin;
    GRID_LOOP(i, (size_t)B * cv.cin * cv.ctx) {
        int j = (int)(i % cv.ctx);
        int ci = (int)((i / cv.ctx) % cv.cin);
        int b = (int)(i / ((size_t)cv.ctx * cv.cin));
        if (first[b])
            st[(size_t)slot[b] * stride + cv.st + (size_t)ci * cv.ctx + j] =
                X[(size_t)ci * Nin + (size_t)b * cv.tin];
    }
}

__global__ void k_im2col(mt_cu_conv cv, const float *st, size_t stride, const int32_t *slot, int B,
                         const float *X, float *col)
{
    const size_t Nin = (size_t)B * cv.tin, N = (size_t)B * cv.tout;
    GRID_LOOP(i, (size_t)cv.cin * cv.k * N) {
        size_t n = i % N, row = i / N;
        int ci = (int)(row / cv.k), kk = (int)(row % cv.k);
        int b = (int)(n / cv.tout), t = (int)(n % cv.tout);
        int p = t * cv.stride + kk * cv.dil;   /* step of context ++ X */
        col[i] = p < cv.ctx ? st[(size_t)slot[b] * stride + cv.st + (size_t)ci * cv.ctx + p]
                            : X[(size_t)ci * Nin + (size_t)b * cv.tin + (p - cv.ctx)];
    }
}

/* One thread per (session, channel), in place in ascending order: step j
 * reads tin + j, not yet overwritten. */
__global__ void k_conv_state(mt_cu_conv cv, float *st, size_t stride, const int32_t *slot, int B,
                             const float *X)
{
    const size_t Nin = (size_t)B * cv.tin;
    GRID_LOOP(i, (size_t)B * cv.cin) {
        int ci = (int)(i % cv.cin), b = (int)(i / cv.cin);
        float *sb = st + (size_t)slot[b] * stride + cv.st + (size_t)ci * cv.ctx;
        const float *xb = X + (size_t)ci * Nin + (size_t)b * cv.tin;
        for (int j = 0; j < cv.ctx; j++)
            sb[j] = cv.tin + j >= cv.ctx ? xb[cv.tin + j - cv.ctx] : sb[cv.tin + j];
    }
}

/* The taps of transposed output step j (within the frame and past it) of
 * channel co, session b. */
__device__ float convtr_taps(const mt_cu_conv &cv, const float *Z, const float *w, const float *X,
                             size_t N, int co, int b, int j)
{
    float acc = 0.0f;
    for (int kk = 0; kk < cv.k; kk++) {
        int r = j - kk;
        if (r < 0 || r % cv.stride)
            continue;
        int t = r / cv.stride;
        if (t >= cv.tin)
            continue;
        size_t n = (size_t)b * cv.tin + t;
        acc += cv.grouped ? w[(size_t)co * cv.k + kk] * X[(size_t)co * N + n]
                          : Z[((size_t)co * cv.k + kk) * N + n];
    }
    return acc;
}

/* One thread per (co, b, i < tout): output step i, and for i < ctx the
 * new overlap step tout + i, which replaces the pending one this thread
 * has just read (no other thread touches it). */
__global__ void k_convtr_ola(mt_cu_conv cv, float *st, size_t stride, const int32_t *slot, int B,
                             const float *Z, const float *w, const float *X, const float *bias,
                             float *Y)
{
    const size_t N = (size_t)B * cv.tin, Nout = (size_t)B * cv.tout;
    GRID_LOOP(idx, (size_t)cv.cout * Nout) {
        int co = (int)(idx / Nout);
        size_t n = idx % Nout;
        int b = (int)(n / cv.tout), i = (int)(n % cv.tout);
        float y = (bias ? bias[co] : 0.0f) + convtr_taps(cv, Z, w, X, N, co, b, i);
        if (i < cv.ctx) {
            float *sb = st + (size_t)slot[b] * stride + cv.st + (size_t)co * cv.ctx;
            y += sb[i];
            sb[i] = convtr_taps(cv, Z, w, X, N, co, b, cv.tout + i);
        }
        Y[idx] = y;
    }
}

__global__ void k_layer_norm(float *h, const float *x, const float *g, const float *bias, int d,
                             size_t N)
{
    GRID_LOOP(n, N) {
        double mean = 0, var = 0;
        for (int i = 0; i < d; i++)
            mean += x[(size_t)i * N + n];
        mean /= d;
        for (int i = 0; i < d; i++) {
            double v = x[(size_t)i * N + n] - mean;
            var += v * v;
        }
        var /= d;
        float inv = (float)(1.0 / sqrt(var + 1e-5));
        for (int i = 0; i < d; i++)
            h[(size_t)i * N + n] = ((float)(x[(size_t)i * N + n] - mean) * inv) * g[i] + bias[i];
    }
}

/* One thread per (column, head, pair): q and k rotated, k and v to the
 * ring. */
__global__ void k_rope_ring(float *qkv, float *st, size_t stride, const int32_t *slot,
                            const int64_t *pos0, int B, int T, int d, int hd, int cap, float scale,
                            size_t st_k, size_t st_v)
{
    const size_t N = (size_t)B * T;
    const int half = hd / 2, H = d / hd;
    GRID_LOOP(idx, N * H * half) {
        int i = (int)(idx % half);
        int h = (int)((idx / half) % H);
        size_t n = idx / ((size_t)half * H);
        int b = (int)(n / T), t = (int)(n % T);
        int64_t pos = pos0[b] + t;
        float freq = expf((float)i * scale);
        float a = freq * (float)pos;
        float cr = cosf(a), si = sinf(a);
        size_t r0 = (size_t)h * hd + 2 * i;
        float *q = qkv, *k = qkv + (size_t)d * N, *v = qkv + (size_t)2 * d * N;
        float qr = q[r0 * N + n], qi = q[(r0 + 1) * N + n];
        q[r0 * N + n] = qr * cr - qi * si;
        q[(r0 + 1) * N + n] = qr * si + qi * cr;
        float kr = k[r0 * N + n], ki = k[(r0 + 1) * N + n];
        float k0 = kr * cr - ki * si, k1 = kr * si + ki * cr;
        k[r0 * N + n] = k0;
        k[(r0 + 1) * N + n] = k1;
        size_t ring = (size_t)(pos % cap) * d + r0;
        float *sb = st + (size_t)slot[b] * stride;
        sb[st_k + ring] = k0;
        sb[st_k + ring + 1] = k1;
        sb[st_v + ring] = v[r0 * N + n];
        sb[st_v + ring + 1] = v[(r0 + 1) * N + n];
    }
}

const int ATT_THREADS = 128;

__device__ float block_reduce(float v, float *red, int is_max)
{
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            red[threadIdx.x] = is_max ? fmaxf(red[threadIdx.x], red[threadIdx.x + s])
                                      : red[threadIdx.x] + red[threadIdx.x + s];
        __syncthreads();
    }
    float r = red[0];
    __syncthreads();
    return r;
}

/* One block per (column, head); shared: q [hd], scores [cap],
 * reduction [ATT_THREADS]. A ring slot j holds the newest position
 * congruent to j, if written. */
__global__ void k_ring_attention(const float *qkv, float *att, const float *st, size_t stride,
                                 const int32_t *slot, const int64_t *pos0, int B, int T, int d,
                                 int hd, int cap, size_t st_k, size_t st_v)
{
    extern __shared__ float sh[];
    float *qs = sh, *score = sh + hd, *red = score + cap;
    const size_t N = (size_t)B * T;
    const int h = blockIdx.y;
    const size_t n = blockIdx.x;
    const int b = (int)(n / T), t = (int)(n % T);
    const float isq = 1.0f / sqrtf((float)hd);
    const float *rk = st + (size_t)slot[b] * stride + st_k, *rv = st + (size_t)slot[b] * stride + st_v;
    for (int e = threadIdx.x; e < hd; e += blockDim.x)
        qs[e] = qkv[((size_t)h * hd + e) * N + n];
    __syncthreads();
    int64_t p = pos0[b] + t, last = pos0[b] + T - 1, end = pos0[b] + T, end_idx = last % cap;
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < cap; j += blockDim.x) {
        int64_t dl = j - end_idx;
        int64_t pj = dl <= 0 ? last + dl : last + dl - cap;
        bool ok = j < end && pj >= 0 && p - pj >= 0 && p - pj < cap;
        float s = -INFINITY;
        if (ok) {
            const float *kr = rk + (size_t)j * d + (size_t)h * hd;
            float acc = 0.0f;
            for (int e = 0; e < hd; e++)
                acc += qs[e] * kr[e];
            s = acc * isq;
            mx = fmaxf(mx, s);
        }
        score[j] = s;
    }
    mx = block_reduce(mx, red, 1);
    float den = 0.0f;
    for (int j = threadIdx.x; j < cap; j += blockDim.x) {
        float e = score[j] == -INFINITY ? 0.0f : expf(score[j] - mx);
        score[j] = e;
        den += e;
    }
    den = block_reduce(den, red, 0);   /* its barrier also publishes score */
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < cap; j++)
            if (score[j] != 0.0f)
                acc += (score[j] / den) * rv[(size_t)j * d + (size_t)h * hd + e];
        att[((size_t)h * hd + e) * N + n] = acc;
    }
}

__global__ void k_scale_add(float *x, const float *h, const float *s, int d, size_t N)
{
    GRID_LOOP(i, (size_t)d * N) x[i] += (s ? s[i / N] : 1.0f) * h[i];
}

__global__ void k_gelu(float *x, size_t n)
{
    GRID_LOOP(i, n) {
        float z = x[i];
        x[i] = 0.5f * z * (1.0f + erff(z * 0.70710678118654752f));
    }
}

const int RVQ_THREADS = 256;

/* One block per session: each thread scans its bins ascending (strict <),
 * then the block takes the smallest distance, the lowest index on a tie:
 * the CPU's first minimum. */
__global__ void k_rvq_pick(const float *sc, const float *norm2, const float *cb, float *r,
                           int32_t *codes, int nq, int q, int bins, int qd, int B)
{
    __shared__ float bd[RVQ_THREADS];
    __shared__ int bi[RVQ_THREADS];
    const int b = blockIdx.x;
    float best = INFINITY;
    int idx = bins;
    for (int e = threadIdx.x; e < bins; e += blockDim.x) {
        float dist = norm2[e] - 2.0f * sc[(size_t)e * B + b];
        if (dist < best) {
            best = dist;
            idx = e;
        }
    }
    bd[threadIdx.x] = best;
    bi[threadIdx.x] = idx;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            float o = bd[threadIdx.x + s];
            int oi = bi[threadIdx.x + s];
            if (o < bd[threadIdx.x] || (o == bd[threadIdx.x] && oi < bi[threadIdx.x])) {
                bd[threadIdx.x] = o;
                bi[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    int code = bi[0] < bins ? bi[0] : 0;   /* all NaN: the CPU's 0 */
    if (threadIdx.x == 0)
        codes[(size_t)b * nq + q] = code;
    for (int e = threadIdx.x; e < qd; e += blockDim.x)
        r[(size_t)e * B + b] -= cb[(size_t)code * qd + e];
}

__global__ void k_dequant(const float *cb, const int32_t *codes, int nq, int q, int qd, int B,
                          float *sum)
{
    GRID_LOOP(i, (size_t)qd * B) {
        int b = (int)(i % B), e = (int)(i / B);
        sum[i] += cb[(size_t)codes[(size_t)b * nq + q] * qd + e];
    }
}

} // namespace

#define STREAM(s) ((cudaStream_t)(s))

extern "C" {

int mt_cu_mimi_elu(float *dst, const float *src, size_t n, void *stream)
{
    k_elu<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(dst, src, n);
    return launched();
}

int mt_cu_mimi_add(float *dst, const float *src, size_t n, void *stream)
{
    k_add<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(dst, src, n);
    return launched();
}

int mt_cu_mimi_bias(float *Y, const float *bias, int cout, size_t N, void *stream)
{
    k_bias<<<blocks_for((size_t)cout * N), TPB, 0, STREAM(stream)>>>(Y, bias, cout, N);
    return launched();
}

int mt_cu_mimi_replicate(const mt_cu_conv *cv, float *st, size_t stride, const int32_t *slot,
                         const int32_t *first, int B, const float *X, void *stream)
{
    size_t n = (size_t)B * cv->cin * cv->ctx;
    if (n == 0)
        return 0;
    k_replicate<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(*cv, st, stride, slot, first, B, X);
    return launched();
}

int mt_cu_mimi_im2col(const mt_cu_conv *cv, const float *st, size_t stride, const int32_t *slot,
                      int B, const float *X, float *col, void *stream)
{
    size_t n = (size_t)cv->cin * cv->k * B * cv->tout;
    k_im2col<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(*cv, st, stride, slot, B, X, col);
    return launched();
}

int mt_cu_mimi_conv_state(const mt_cu_conv *cv, float *st, size_t stride, const int32_t *slot,
                          int B, const float *X, void *stream)
{
    if (cv->ctx <= 0)
        return 0;
    size_t n = (size_t)B * cv->cin;
    k_conv_state<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(*cv, st, stride, slot, B, X);
    return launched();
}

int mt_cu_mimi_convtr_ola(const mt_cu_conv *cv, float *st, size_t stride, const int32_t *slot,
                          int B, const float *Z, const float *w, const float *X,
                          const float *bias, float *Y, void *stream)
{
    if (cv->ctx > cv->tout)
        return (int)cudaErrorInvalidValue;
    size_t n = (size_t)cv->cout * B * cv->tout;
    k_convtr_ola<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(*cv, st, stride, slot, B, Z, w, X,
                                                            bias, Y);
    return launched();
}

int mt_cu_mimi_layer_norm(float *h, const float *x, const float *g, const float *b, int d,
                          size_t N, void *stream)
{
    k_layer_norm<<<blocks_for(N), TPB, 0, STREAM(stream)>>>(h, x, g, b, d, N);
    return launched();
}

int mt_cu_mimi_rope_ring(float *qkv, float *st, size_t stride, const int32_t *slot,
                         const int64_t *pos0, int B, int T, int d, int hd, int cap,
                         double max_period, size_t st_k, size_t st_v, void *stream)
{
    float scale = (float)(-log(max_period) * 2 / hd);   /* as mimi.c's rope */
    size_t n = (size_t)B * T * (d / hd) * (hd / 2);
    k_rope_ring<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(qkv, st, stride, slot, pos0, B, T, d, hd,
                                                           cap, scale, st_k, st_v);
    return launched();
}

int mt_cu_mimi_ring_attention(const float *qkv, float *att, const float *st, size_t stride,
                              const int32_t *slot, const int64_t *pos0, int B, int T, int d,
                              int hd, int cap, size_t st_k, size_t st_v, void *stream)
{
    size_t shmem = ((size_t)hd + cap + ATT_THREADS) * sizeof(float);
    if (shmem > 48 * 1024)
        return (int)cudaErrorInvalidValue;
    dim3 grid((unsigned)((size_t)B * T), (unsigned)(d / hd));
    k_ring_attention<<<grid, ATT_THREADS, shmem, STREAM(stream)>>>(qkv, att, st, stride, slot, pos0,
                                                                   B, T, d, hd, cap, st_k, st_v);
    return launched();
}

int mt_cu_mimi_scale_add(float *x, const float *h, const float *s, int d, size_t N, void *stream)
{
    k_scale_add<<<blocks_for((size_t)d * N), TPB, 0, STREAM(stream)>>>(x, h, s, d, N);
    return launched();
}

int mt_cu_mimi_gelu(float *x, size_t n, void *stream)
{
    k_gelu<<<blocks_for(n), TPB, 0, STREAM(stream)>>>(x, n);
    return launched();
}

int mt_cu_mimi_rvq_pick(const float *sc, const float *norm2, const float *cb, float *r,
                        int32_t *codes, int nq, int q, int bins, int qd, int B, void *stream)
{
    k_rvq_pick<<<(unsigned)B, RVQ_THREADS, 0, STREAM(stream)>>>(sc, norm2, cb, r, codes, nq, q,
                                                                bins, qd, B);
    return launched();
}

int mt_cu_mimi_dequant(const float *cb, const int32_t *codes, int nq, int q, int qd, int B,
                       float *sum, void *stream)
{
    k_dequant<<<blocks_for((size_t)qd * B), TPB, 0, STREAM(stream)>>>(cb, codes, nq, q, qd, B, sum);
    return launched();
}

} // extern "C"
