/* mimi_elt.c: Mimi's elementwise functions, ELU and GELU, 8 lanes at a
 * time with GCC's vector extension (util/vec8.h); mimi.c runs them over
 * ranges of the activations on its threads. Also the transformer's
 * row-wise LayerNorm and rotary embedding. */
#include "codec/mimi_impl.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "util/vec8.h"

/* ELU (alpha 1): x > 0 ? x : expm1(x), 8 lanes at a time with GCC's vector
 * extension (one AVX register in the x86-64-v3 clone chosen at load time,
 * two SSE ones in the default clone; libm's expm1f was a fifth of the
 * codec's time): x = n ln2 + r with |r| <= ln2/2 (Cody-Waite, ln2 in two
 * parts), expm1(r) by its Taylor polynomial to r^7 (truncation 2e-9
 * relative), then expm1(x) = 2^n expm1(r) + (2^n - 1); within 2 ulp of
 * expm1f over [-87, 0] (below, -1 to the float), checked by test_mimi.
 * The last n % 8 go through the same lanes (padded), so an element's
 * value depends on it alone, not on where a call starts or ends: the
 * direct convolution applies it to its input as it pads it (mimi_conv.c),
 * in other runs than the ELU pass would. dst may be src. */
/* m ? a : b, lane by lane, m all-ones or 0 */
#define v8_sel(m, a, b) ((v8f)(((v8i)(a) & (m)) | ((v8i)(b) & ~(m))))

__attribute__((target_clones("arch=x86-64-v3", "default")))
void mimi_elu(float *dst, const float *src, size_t n)
{
    const v8f lo = { -87, -87, -87, -87, -87, -87, -87, -87 }, zero = { 0 };
    float tail[8] = { 0 };
    for (size_t i = 0; i < n; i += 8) {
        const int part = n - i < 8;   /* the last n % 8: through tail[] */
        if (part)
            memcpy(tail, src + i, (n - i) * sizeof(float));
        v8f x = load8(part ? tail : src + i);
        v8f xn = v8_sel(x < lo, lo, x);
        xn = v8_sel(xn > zero, zero, xn);
        v8f t = xn * 1.44269504088896341f;
        v8f fn = (t + 12582912.0f) - 12582912.0f;   /* round to nearest */
        v8f r = (xn - fn * 0.693145751953125f) - fn * 1.428606765330187e-06f;
        v8f p = r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
                r * (1.0f / 720 + r * (1.0f / 5040)))))));
        v8i e = (__builtin_convertvector(fn, v8i) + 127) << 23;
        v8f sc = (v8f)e;
        v8f y = v8_sel(x > zero, x, sc * p + (sc - 1.0f));
        if (part) {
            store8(tail, y);
            memcpy(dst + i, tail, (n - i) * sizeof(float));
        } else {
            store8(dst + i, y);
        }
    }
}

/* e^x for x <= 0, 8 at a time: Cephes' expf (x = n ln2 + r with |r| <=
 * ln2/2, a degree-6 polynomial for e^r, 2^n put in the exponent bits),
 * relative error about 2e-7; x clamped below at -87 (2^n stays normal). */
#define exp8(x_) ({                                                          \
    v8f x8_ = (x_);                                                         \
    x8_ = v8_sel(x8_ < splat8(-87.0f), splat8(-87.0f), x8_);                \
    v8f t8_ = x8_ * splat8(1.44269504088896341f) + splat8(12582912.0f);    \
    v8f n8_ = t8_ - splat8(12582912.0f);   /* round(x / ln2); 1.5 * 2^23 */ \
    v8f r8_ = x8_ - n8_ * splat8(0.693359375f);                             \
    r8_ = r8_ - n8_ * splat8(-2.12194440e-4f);                              \
    v8f p8_ = splat8(1.9875691500e-4f);                                     \
    p8_ = p8_ * r8_ + splat8(1.3981999507e-3f);                             \
    p8_ = p8_ * r8_ + splat8(8.3334519073e-3f);                             \
    p8_ = p8_ * r8_ + splat8(4.1665795894e-2f);                             \
    p8_ = p8_ * r8_ + splat8(1.6666665459e-1f);                             \
    p8_ = p8_ * r8_ + splat8(5.0000001201e-1f);                             \
    p8_ = p8_ * (r8_ * r8_) + r8_ + splat8(1.0f);                           \
    v8i e8_ = (v8i)t8_ - (v8i)splat8(12582912.0f);   /* n in the low bits */\
    p8_ * (v8f)((e8_ + 127) << 23);                                         \
})

/* GELU (exact form): x * (1 + erf(x / sqrt 2)) / 2 in place, 8 lanes at a
 * time (libm's erff was a fortieth of the codec's time). erf(a) for
 * |a| < 0.875 is a * P(a^2), P of degree 6 (relative error 7e-10); above,
 * 1 - e^Q(|a| - 2.5) with Q of degree 9 fitting log erfc over [0.875, 4]
 * (3.8e-8 in the log), and 1 from 4 on, where erff is 1 too; both fitted
 * by least squares in float64. Within 4e-7 of the erf form times
 * max(1, |x|) over [-20, 20], checked by test_mimi. */
__attribute__((target_clones("arch=x86-64-v3", "default")))
void mimi_gelu(float *x, size_t n)
{
    static const float P[7] = { 1.128379167e+00f, -3.761263689e-01f, 1.128374661e-01f,
                                -2.686239949e-02f, 5.208938301e-03f, -8.238105625e-04f,
                                8.799593722e-05f };
    static const float Q[10] = { -7.806815278e+00f, -5.352680721e+00f, -9.438936294e-01f,
                                 -1.085830318e-02f, 2.165130732e-03f, -4.204519530e-04f,
                                 7.741855308e-05f, -1.314621355e-05f, 1.608188980e-06f,
                                 -2.880277838e-08f };
    const v8i sign = { INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN,
                       INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN };
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        v8f z = load8(x + i);
        v8f a = z * splat8(0.70710678118654752f);
        v8f t = (v8f)((v8i)a & ~sign);
        v8f s = a * a;
        v8f ps = splat8(P[6]);
        for (int j = 5; j >= 0; j--)
            ps = ps * s + splat8(P[j]);
        ps = ps * a;
        v8f u = v8_sel(t > splat8(4.0f), splat8(4.0f), t) - splat8(2.5f);
        v8f q = splat8(Q[9]);
        for (int j = 8; j >= 0; j--)
            q = q * u + splat8(Q[j]);
        v8f pl = splat8(1.0f) - exp8(q);
        pl = v8_sel(t >= splat8(4.0f), splat8(1.0f), pl);
        pl = (v8f)((v8i)pl | ((v8i)a & sign));
        v8f e = v8_sel(t < splat8(0.875f), ps, pl);
        store8(x + i, splat8(0.5f) * z * (splat8(1.0f) + e));
    }
    for (; i < n; i++)
        x[i] = 0.5f * x[i] * (1.0f + erff(x[i] * 0.70710678118654752f));
}

/* h [N][d] = LayerNorm(x [N][d]) with gain g and bias, eps 1e-5. The
 * mean and the variance in double, each in 8 running sums (sum l:
 * elements l, l + 8, ...) added in a fixed tree; the three passes eight
 * lanes at a time in the x86-64-v3 clone. Scalar, with one chain of
 * dependent adds a pass, the two LayerNorms were a tenth of a codec
 * transformer layer at B = 8 (bench/RESULTS.md, 2026-12-07). */
/* x [8] as two four-double vectors, less m */
#define LN_HALVES(x, m, lo, hi)                                                              \
    do {                                                                                     \
        v4f a_, b_;                                                                          \
        memcpy(&a_, (x), sizeof a_);                                                         \
        memcpy(&b_, (x) + 4, sizeof b_);                                                     \
        (lo) = __builtin_convertvector(a_, v4d) - (m);                                       \
        (hi) = __builtin_convertvector(b_, v4d) - (m);                                       \
    } while (0)

/* the 8 sums' fixed tree (a macro: a function taking vectors would be
 * called across the clones' vector ABIs, as util/vec8.h says) */
#define TREE8(lo, hi) \
    (((lo)[0] + (lo)[1]) + ((lo)[2] + (lo)[3])) + (((hi)[0] + (hi)[1]) + ((hi)[2] + (hi)[3]))

__attribute__((target_clones("arch=x86-64-v3", "default")))
void mimi_layer_norm(float *h, const float *x, const float *g, const float *bias, int d, size_t N)
{
    for (size_t n = 0; n < N; n++) {
        const float *xr = x + n * d;
        float *hr = h + n * d;
        const v4d zero = { 0, 0, 0, 0 };
        v4d slo = zero, shi = zero, lo, hi;
        int i = 0;
        for (; i + 8 <= d; i += 8) {
            LN_HALVES(xr + i, zero, lo, hi);
            slo += lo;
            shi += hi;
        }
        double tail = 0;
        for (int k = i; k < d; k++)
            tail += xr[k];
        double mean = (TREE8(slo, shi) + tail) / d;
        const v4d m4 = { mean, mean, mean, mean };
        slo = shi = zero;
        for (i = 0; i + 8 <= d; i += 8) {
            LN_HALVES(xr + i, m4, lo, hi);
            slo += lo * lo;
            shi += hi * hi;
        }
        tail = 0;
        for (int k = i; k < d; k++)
            tail += (xr[k] - mean) * (xr[k] - mean);
        double var = (TREE8(slo, shi) + tail) / d;
        float inv = (float)(1.0 / sqrt(var + 1e-5));
        const v8f inv8 = splat8(inv);
        for (i = 0; i + 8 <= d; i += 8) {
            LN_HALVES(xr + i, m4, lo, hi);
            v4f a = __builtin_convertvector(lo, v4f), b = __builtin_convertvector(hi, v4f);
            v8f c;
            memcpy(&c, &a, sizeof a);
            memcpy((float *)&c + 4, &b, sizeof b);
            store8(hr + i, (c * inv8) * load8(g + i) + load8(bias + i));
        }
        for (; i < d; i++)
            hr[i] = ((float)(xr[i] - mean) * inv) * g[i] + bias[i];
    }
}

/* x [N][d] += ls * h [N][d] (ls NULL: 1), eight lanes at a time. */
__attribute__((target_clones("arch=x86-64-v3", "default")))
void mimi_residual(float *x, const float *h, const float *ls, int d, size_t N)
{
    for (size_t n = 0; n < N; n++) {
        float *xr = x + n * d;
        const float *hr = h + n * d;
        int i = 0;
        if (ls) {
            for (; i + 8 <= d; i += 8)
                store8(xr + i, load8(xr + i) + load8(ls + i) * load8(hr + i));
            for (; i < d; i++)
                xr[i] += ls[i] * hr[i];
        } else {
            for (; i + 8 <= d; i += 8)
                store8(xr + i, load8(xr + i) + load8(hr + i));
            for (; i < d; i++)
                xr[i] += hr[i];
        }
    }
}

/* The rotary angles of one position: cs, sn [hd/2], frequency i being
 * max_period^(-2i/hd). */
void mimi_rope_table(float *cs, float *sn, int hd, int64_t pos, double max_period)
{
    float scale = (float)(-log(max_period) * 2 / hd);
    for (int i = 0; i < hd / 2; i++) {
        float a = expf((float)i * scale) * (float)pos;
        cs[i] = cosf(a);
        sn[i] = sinf(a);
    }
}

/* Rotates the (2i, 2i+1) pairs of every head of one row of d. */
void mimi_rope_row(float *q, const float *cs, const float *sn, int d, int hd)
{
    for (int h = 0; h < d / hd; h++)
        for (int i = 0; i < hd / 2; i++) {
            float *re = q + (size_t)h * hd + 2 * i, *im = re + 1;
            float r = *re, m = *im;
            *re = r * cs[i] - m * sn[i];
            *im = r * sn[i] + m * cs[i];
        }
}
