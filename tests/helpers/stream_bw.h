/* stream_bw.h: the streaming passes behind the benchmarks' bandwidth
 * figures (mt-benchstep, mt-benchkyutai), so that every bound in
 * bench/RESULTS.md divides by the same figure: a copy of 256 MiB on T
 * threads counting the bytes read plus the bytes written, or a plain read
 * counting the bytes read. Included by one helper program each (static
 * functions); times with mt_clock_ns. */
#ifndef MT_TESTS_STREAM_BW_H
#define MT_TESTS_STREAM_BW_H

#include "util/clock.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* One thread's share of a streaming pass: a copy (dst set) or a read that
 * folds what it reads into a checksum (dst NULL; the checksum keeps the
 * loads live). The read must be bound by memory, not by the loop: a
 * floating-point sum of doubles is a chain of 4-cycle adds (without
 * -ffast-math the compiler may not reorder it), which measured below the
 * copy. So the read uses wide integer loads into eight independent xor
 * accumulators (1-cycle ops, many loads in flight): AVX-512 or AVX2 where
 * the CPU has them (checked at run time), 64-bit words elsewhere. Like
 * the step's own streams (weights, K/V pool) it reads 2 MiB pages and asks
 * for the lines READ_AHEAD bytes ahead: on the EPYC that lifted the plain
 * read from about 40 to about 60 GB/s on 2 threads; without them a loop
 * that only reads measured below the copy, and would understate what the
 * step's reads can reach. */
enum { READ_AHEAD = 8192 };
typedef struct { char *dst; const char *src; size_t n; uint64_t sum; } stream_arg;

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx512f"))) static uint64_t read_avx512(const char *p, size_t n)
{
    __m512i a[8];
    for (int j = 0; j < 8; j++)
        a[j] = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 512 <= n; i += 512) {
        for (int j = 0; j < 8; j++)
            __builtin_prefetch(p + i + READ_AHEAD + 64 * j);
        for (int j = 0; j < 8; j++)
            a[j] = _mm512_xor_si512(a[j], _mm512_loadu_si512((const void *)(p + i + 64 * j)));
    }
    for (int j = 1; j < 8; j++)
        a[0] = _mm512_xor_si512(a[0], a[j]);
    uint64_t w[8], s = 0;
    _mm512_storeu_si512((void *)w, a[0]);
    for (int j = 0; j < 8; j++)
        s ^= w[j];
    for (; i < n; i++)
        s += (unsigned char)p[i];
    return s;
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const char *p, size_t n)
{
    __m256i a[8];
    for (int j = 0; j < 8; j++)
        a[j] = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {
        for (int j = 0; j < 4; j++)
            __builtin_prefetch(p + i + READ_AHEAD + 64 * j);
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_xor_si256(a[j], _mm256_loadu_si256((const __m256i *)(p + i + 32 * j)));
    }
    for (int j = 1; j < 8; j++)
        a[0] = _mm256_xor_si256(a[0], a[j]);
    uint64_t w[4], s = 0;
    _mm256_storeu_si256((__m256i *)w, a[0]);
    for (int j = 0; j < 4; j++)
        s ^= w[j];
    for (; i < n; i++)
        s += (unsigned char)p[i];
    return s;
}
#endif

static uint64_t read_words(const char *p, size_t n)
{
    uint64_t a[8] = { 0 }, w, s = 0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 8; j++) {
            memcpy(&w, p + i + 8 * j, sizeof w);
            a[j] ^= w;
        }
    for (int j = 0; j < 8; j++)
        s ^= a[j];
    for (; i < n; i++)
        s += (unsigned char)p[i];
    return s;
}

static void *stream_main(void *p)
{
    stream_arg *a = p;
    if (a->dst) {
        memcpy(a->dst, a->src, a->n);
        return NULL;
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        a->sum = read_avx512(a->src, a->n);
    else if (__builtin_cpu_supports("avx2"))
        a->sum = read_avx2(a->src, a->n);
    else
#endif
        a->sum = read_words(a->src, a->n);
    return NULL;
}

/* The buffers of 256 MiB streaming passes: a copy (copy 1; bytes read +
 * bytes written) or a plain read (copy 0; bytes read), the ceiling of a
 * loop that only reads, such as the attention's K/V read. */
typedef struct stream_bufs { char *src, *dst; size_t n; int copy; } stream_bufs;

static void stream_close(stream_bufs *sb)
{
    free(sb->src);
    free(sb->dst);
    memset(sb, 0, sizeof *sb);
}

static int stream_open(stream_bufs *sb, int copy)
{
    size_t n = (size_t)256 << 20;
    /* the copy stays on malloc's pages (what it has always measured) */
    *sb = (stream_bufs){ copy ? malloc(n) : aligned_alloc((size_t)2 << 20, n),
                         copy ? malloc(n) : NULL, n, copy };
    if (!sb->src || (copy && !sb->dst)) {
        stream_close(sb);
        return -1;
    }
#ifdef MADV_HUGEPAGE
    if (!copy)
        (void)madvise(sb->src, n, MADV_HUGEPAGE);   /* a hint: 4 KiB pages if refused */
#endif
    memset(sb->src, 1, n);
    if (sb->dst)
        memset(sb->dst, 2, n);
    return 0;
}

/* GB/s of one pass on T threads; 0 if it could not run. */
static double stream_pass(stream_bufs *sb, int T)
{
    pthread_t th[64];
    stream_arg ar[64];
    int nt = T < 64 ? T : 64, started = 0;
    size_t n = sb->n;
    int64_t t0 = mt_clock_ns();
    for (int i = 0; i < nt; i++) {
        ar[i] = (stream_arg){ sb->dst ? sb->dst + n / nt * i : NULL, sb->src + n / nt * i,
                              n / nt, 0 };
        if (pthread_create(&th[i], NULL, stream_main, &ar[i]) != 0)
            break;
        started++;
    }
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (started < nt)
        return 0;
    return (sb->copy ? 2.0 : 1.0) * n / ((double)(mt_clock_ns() - t0) * 1e-9) / 1e9;
}

#endif
