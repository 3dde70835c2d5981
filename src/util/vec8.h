/* vec8.h: eight-float GCC vector helpers shared by the CPU kernels (the
 * decoder's attention in decode/backend_cpu.c, the codec in codec/mimi.c).
 *
 * A v8f is one AVX register in a function's x86-64-v3 clone (chosen at
 * load time by the CPU), two SSE registers in its default clone. Helpers
 * are always inlined, so the clone's copy is the one that runs: one left
 * out of line is compiled for the default target only. What takes or
 * returns a vector is a macro, not a function: clang checks a function's
 * vector ABI in the default clone before inlining it, and refuses a
 * 32-byte vector argument there. */
#ifndef MT_VEC8_H
#define MT_VEC8_H

#include <stdint.h>
#include <string.h>

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint32_t v8u __attribute__((vector_size(32)));
/* halves of a v8f widened to double (sums exact or in double's order) */
typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

#define VINLINE static inline __attribute__((always_inline))

#define load8(p) ({ v8f l8_; memcpy(&l8_, (p), sizeof l8_); l8_; })
#define store8(p, v) do { v8f s8_ = (v); memcpy((p), &s8_, sizeof s8_); } while (0)
#define splat8(a) ((v8f){ (a), (a), (a), (a), (a), (a), (a), (a) })

/* a . b over n floats: two accumulators, summed pairwise at the end */
VINLINE float dot8(const float *a, const float *b, int n)
{
    v8f s0 = { 0 }, s1 = { 0 };
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 += load8(a + i) * load8(b + i);
        s1 += load8(a + i + 8) * load8(b + i + 8);
    }
    for (; i + 8 <= n; i += 8)
        s0 += load8(a + i) * load8(b + i);
    s0 += s1;
    float s = ((s0[0] + s0[4]) + (s0[1] + s0[5])) + ((s0[2] + s0[6]) + (s0[3] + s0[7]));
    for (; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* out[j] = w . v_j, j < nv <= DOT8_MULTI_MAX, over K floats (v_j = v +
 * j ldv): one pass over the row w for all the vectors. Call it with a
 * constant nv, so that the sums stay in registers. */
enum { DOT8_MULTI_MAX = 2 };
VINLINE void dot8_multi(const float *w, const float *v, size_t ldv, int nv, int K, float *out)
{
    v8f s0[DOT8_MULTI_MAX] = { { 0 } }, s1[DOT8_MULTI_MAX] = { { 0 } };
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        v8f w0 = load8(w + k), w1 = load8(w + k + 8);
        for (int j = 0; j < nv; j++) {
            s0[j] += w0 * load8(v + j * ldv + k);
            s1[j] += w1 * load8(v + j * ldv + k + 8);
        }
    }
    for (; k + 8 <= K; k += 8) {
        v8f w0 = load8(w + k);
        for (int j = 0; j < nv; j++)
            s0[j] += w0 * load8(v + j * ldv + k);
    }
    for (int j = 0; j < nv; j++) {
        v8f a = s0[j] + s1[j];
        float s = ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
        for (int i = k; i < K; i++)
            s += w[i] * v[j * ldv + i];
        out[j] = s;
    }
}

/* e^x for x <= 0 (softmax's shifted scores), 8 at a time: Cephes' expf
 * (x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for e^r, 2^n
 * put in the exponent bits), relative error about 2e-7, a few fp32 ulps.
 * x is clamped below at -87 (2^n stays normal): a weight under e^-87 =
 * 1.6e-38 comes out as 1.6e-38, nothing beside the maximum's 1. */
VINLINE v8f exp8(v8f x)
{
    const v8f lo = splat8(-87.0f), magic = splat8(12582912.0f);   /* 1.5 * 2^23 */
    v8i under = x < lo;
    x = (v8f)(((v8i)x & ~under) | ((v8i)lo & under));
    v8f t = x * splat8(1.44269504088896341f) + magic;   /* round(x / ln2) + magic */
    v8f nf = t - magic;
    v8f r = x - nf * splat8(0.693359375f);
    r = r - nf * splat8(-2.12194440e-4f);
    v8f p = splat8(1.9875691500e-4f);
    p = p * r + splat8(1.3981999507e-3f);
    p = p * r + splat8(8.3334519073e-3f);
    p = p * r + splat8(4.1665795894e-2f);
    p = p * r + splat8(1.6666665459e-1f);
    p = p * r + splat8(5.0000001201e-1f);
    p = p * (r * r) + r + splat8(1.0f);
    v8u n = (v8u)t - (v8u)magic;          /* n in the low bits, mod 2^32 */
    v8u two_n = (n + 127u) << 23;
    return p * (v8f)two_n;
}

/* out[0..n) += the sum over t < rows, in order, of w[t] v_t[0..n) (v_t =
 * v + t ldv): 32 columns at a time in four accumulators held over all the
 * rows (out read and written once a call, not once a row), then 8, then
 * one; each column's sum in the same order (axpy8's arithmetic, row by
 * row). */
VINLINE void wsum_rows(float *out, int n, const float *w, const float *v, size_t ldv, int rows)
{
    int c = 0;
    for (; c + 32 <= n; c += 32) {
        v8f a0 = load8(out + c), a1 = load8(out + c + 8);
        v8f a2 = load8(out + c + 16), a3 = load8(out + c + 24);
        for (int t = 0; t < rows; t++) {
            const float *vr = v + (size_t)t * ldv + c;
            v8f b = splat8(w[t]);
            a0 += b * load8(vr);
            a1 += b * load8(vr + 8);
            a2 += b * load8(vr + 16);
            a3 += b * load8(vr + 24);
        }
        store8(out + c, a0);
        store8(out + c + 8, a1);
        store8(out + c + 16, a2);
        store8(out + c + 24, a3);
    }
    for (; c + 8 <= n; c += 8) {
        v8f a0 = load8(out + c);
        for (int t = 0; t < rows; t++)
            a0 += splat8(w[t]) * load8(v + (size_t)t * ldv + c);
        store8(out + c, a0);
    }
    for (; c < n; c++)
        for (int t = 0; t < rows; t++)
            out[c] += w[t] * v[(size_t)t * ldv + c];
}

/* y += a x over n floats */
VINLINE void axpy8(float *y, float a, const float *x, int n)
{
    v8f av = splat8(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        store8(y + i, load8(y + i) + av * load8(x + i));
    for (; i < n; i++)
        y[i] += a * x[i];
}

#endif
