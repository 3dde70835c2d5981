/* mt-benchq8.c: the 8-bit product of --weights q8 (cpu_q8.h) by itself,
 * its float kernels and its integer one (AVX-512 VNNI, cpu_q8_vnni.c)
 * side by side in one process, so that the machine's drift falls on both,
 * each on the two layouts of cpu_q8.h (rows one after the other, the
 * layout before, and groups of 8 rows: layout=rows, layout=groups).
 * For each B (rows of activations): a product of B rows by an N x K
 * matrix of 8-bit weights (default 2048 x 2048 per matrix, the stt-1b
 * temporal's width), over enough matrices that the weights (default
 * 256 MiB) are read from memory, not cache; split by weight rows over T
 * threads as the CPU backend splits it. Per kernel and B: the best and the
 * median of R rounds (each round every matrix once, kernels alternating
 * and layouts round by round), ms a pass and the weight-read rate (GB/s: bytes + scales
 * over the time), and the mean CPU time a pass (cpu_ms: every thread's). Prints logfmt lines; asserts nothing.
 *
 * layout=lanes: cpu_q8.h's lane groups of 16 rows (the integer kernel
 * only; -p lists prefetch distances in bytes, one variant each, -1 the
 * kernel's default); layout=read: the plain read of the same bytes and
 * scales on the same threads (the memory's rate in the same run). -l
 * picks the layouts (default rows,groups,lanes,read). -O adds the
 * integer kernel on groups with the prefetch leads before 2026-12-07
 * (pf=-2: 8 KiB on into L1, no line into L2; cpu_q8_vnni.c).
 *
 * -H: the weights on 2 MiB pages (transparent huge pages asked by
 * madvise), as the CPU backend keeps its q8 copy (backend_cpu_setup.c).
 *
 * usage: mt-benchq8 [-b 1,2,4,8] [-l rows,groups,lanes,read] [-p PF,..] [-N 2048] [-K 2048]
 *                   [-M MiB] [-t THREADS] [-r ROUNDS] [-H] [-O]
 */
#include "decode/cpu_q8.h"
#include "decode/cpu_q8_vnni.h"
#include "util/clock.h"
#include "helpers/median.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <getopt.h>
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NVAR = 10 };   /* (kernels, layout) variants at most */

typedef struct {
    int B, N, K, mats, lo, hi;
    const float *X;     /* [B, K] */
    const int8_t *q;    /* [mats][N, K] */
    const float *s;     /* [mats][N, K / 32] */
    float *Y;           /* [B, N] */
} part;

/* The memory read bound in the same run: each thread's share of every
 * matrix's bytes and scales read by 32-byte loads (layout=read). */
static int read_only;
static int cur_layout;   /* the variant's layout (cpu_q8.h): the bytes are read as it says */
static volatile uint64_t read_sink;

__attribute__((target("avx2"))) static void read_part(const part *p)
{
    const int nb = p->K / MT_Q8_BLOCK;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (int m = 0; m < p->mats; m++) {
        const int8_t *q = p->q + (size_t)m * p->N * p->K + (size_t)p->lo * p->K;
        const size_t n = (size_t)(p->hi - p->lo) * p->K;
        for (size_t i = 0; i + 128 <= n; i += 128) {
            a0 = _mm256_xor_si256(a0, _mm256_loadu_si256((const __m256i *)(q + i)));
            a1 = _mm256_xor_si256(a1, _mm256_loadu_si256((const __m256i *)(q + i + 32)));
            a2 = _mm256_xor_si256(a2, _mm256_loadu_si256((const __m256i *)(q + i + 64)));
            a3 = _mm256_xor_si256(a3, _mm256_loadu_si256((const __m256i *)(q + i + 96)));
        }
        const float *s = p->s + (size_t)m * p->N * nb + (size_t)p->lo * nb;
        for (size_t i = 0; i + 8 <= (size_t)(p->hi - p->lo) * nb; i += 8)
            a0 = _mm256_xor_si256(a0, _mm256_loadu_si256((const __m256i *)(s + i)));
    }
    a0 = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    read_sink = (uint64_t)_mm256_extract_epi64(a0, 0);
}

static void *run_part(void *arg)
{
    const part *p = arg;
    if (read_only) {
        read_part(p);
        return NULL;
    }
    const int nb = p->K / MT_Q8_BLOCK;
    for (int m = 0; m < p->mats; m++)
        mt_q8_gemm_rows(cur_layout, p->B, p->lo, p->hi, p->N, p->K, p->X, p->K,
                        p->q + (size_t)m * p->N * p->K,
                        p->s + (size_t)m * p->N * nb, 0.0f, p->Y + p->lo, p->N);
    return NULL;
}

/* The process's CPU time (every thread's, user + system), ms: on a shared
 * machine the work a pass did, whatever share of the cores it got. */
static double cpu_ms(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0;
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

/* One pass over every matrix on T threads; ms. */
static double pass(part *parts, int T)
{
    pthread_t th[16];
    uint64_t t0 = mt_clock_ns();
    for (int t = 1; t < T; t++)
        if (pthread_create(&th[t], NULL, run_part, &parts[t]) != 0)
            return -1;
    run_part(&parts[0]);
    for (int t = 1; t < T; t++)
        pthread_join(th[t], NULL);
    return (double)(mt_clock_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
    int N = 2048, K = 2048, mib = 256, T = 2, R = 15, huge = 0, old_pf = 0, c;
    char blist[64] = "1,2,4,8", llist[64] = "rows,groups,lanes,read", plist[64] = "-1";
    while ((c = getopt(argc, argv, "b:l:p:N:K:M:t:r:HO")) != -1) {
        switch (c) {
        case 'b': snprintf(blist, sizeof blist, "%s", optarg); break;
        case 'l': snprintf(llist, sizeof llist, "%s", optarg); break;
        case 'p': snprintf(plist, sizeof plist, "%s", optarg); break;
        case 'N': N = atoi(optarg); break;
        case 'K': K = atoi(optarg); break;
        case 'M': mib = atoi(optarg); break;
        case 't': T = atoi(optarg); break;
        case 'r': R = atoi(optarg); break;
        case 'H': huge = 1; break;
        case 'O': old_pf = 1; break;
        default:
            fprintf(stderr, "usage: mt-benchq8 [-b 1,2,4,8] [-l rows,groups,lanes,read] [-p PF,..] [-N n] [-K k] "
                            "[-M MiB] [-t T] [-r R] [-H] [-O]\n");
            return 2;
        }
    }
    if (N < 1 || K < MT_Q8_BLOCK || K % MT_Q8_BLOCK || mib < 1 || T < 1 || T > 16 || R < 1 ||
        R > 1000) {
        fprintf(stderr, "mt-benchq8: bad size (K a multiple of 32, 1..16 threads)\n");
        return 2;
    }
    const int nb = K / MT_Q8_BLOCK;
    const double mat_bytes = (double)N * K + 4.0 * N * nb;
    int mats = (int)((double)mib * 1048576.0 / mat_bytes);
    mats = mats < 1 ? 1 : mats;
    /* 64-byte aligned, as the backend's streamed copy is (a row of K a
     * multiple of 64 then starts a cache line) */
    size_t qbytes = ((size_t)mats * N * K + 63) / 64 * 64;
    int8_t *q = NULL;
    if (huge) {
        const size_t page = (size_t)2 << 20;
        qbytes = (qbytes + page - 1) / page * page;
        if (posix_memalign((void **)&q, page, qbytes) != 0)
            q = NULL;
#ifdef MADV_HUGEPAGE
        if (q && madvise(q, qbytes, MADV_HUGEPAGE) != 0)
            fprintf(stderr, "mt-benchq8: no huge pages (madvise refused): 4 KiB pages\n");
#endif
    } else {
        q = aligned_alloc(64, qbytes);
    }
    float *s = malloc(sizeof(float) * (size_t)mats * N * nb);
    float *X = malloc(sizeof(float) * 64 * K), *Y = malloc(sizeof(float) * 64 * N);
    double *ms = malloc(sizeof(double) * NVAR * R);
    double cpu[NVAR];
    if (!q || !s || !X || !Y || !ms) {
        fprintf(stderr, "mt-benchq8: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)mats * N * K; i++)
        q[i] = (int8_t)((i * 2654435761u >> 13) % 255 - 127);
    for (size_t i = 0; i < (size_t)mats * N * nb; i++)
        s[i] = 1e-3f * (float)(1 + i % 7);
    for (int i = 0; i < 64 * K; i++)
        X[i] = (float)((i * 40503u >> 7) % 2001) / 1000.0f - 1.0f;
    const int top = mt_q8_init();
    mt_q8_vnni_rows(1);   /* the integer kernel at every B (mt_q8_gemm hands it 4+ rows) */
    /* the variants: (kernels, layout) pairs, those of the layouts asked;
     * lanes only with the integer kernel (the float ones read it through a
     * portable loop, cpu_q8.h) */
    static const char *const name[] = { "portable", "avx2", "avx512", "vnni" };
    static const char *const lname[] = { "rows", "groups", "lanes", "read" };
    int vlev[NVAR], vlay[NVAR], vpf[NVAR], nv = 0;
    for (int l = 0; l < NVAR; l++)
        vpf[l] = -1;
    if (strstr(llist, "read"))   /* the plain read of the same bytes */
        vlev[nv] = top, vlay[nv++] = 3;
    for (int lay = MT_Q8_ROWS; lay <= MT_Q8_LANES; lay++) {
        if (!strstr(llist, lname[lay]))
            continue;
        if (lay != MT_Q8_LANES || top < 3)
            vlev[nv] = top >= 2 ? 2 : top, vlay[nv++] = lay;
        if (top == 3 && lay != MT_Q8_LANES)
            vlev[nv] = 3, vlay[nv++] = lay;
        if (top == 3 && lay == MT_Q8_GROUPS && old_pf)   /* pf=-2: the leads before */
            vlev[nv] = 3, vpf[nv] = -2, vlay[nv++] = lay;
        /* lanes: one variant a prefetch distance of -p (bytes; -1 the default) */
        for (char *pf = plist; top == 3 && lay == MT_Q8_LANES && pf && nv < NVAR;
             pf = strchr(pf, ',') ? strchr(pf, ',') + 1 : NULL)
            vlev[nv] = 3, vpf[nv] = atoi(pf), vlay[nv++] = lay;
    }
    for (char *tok = strtok(blist, ","); tok; tok = strtok(NULL, ",")) {
        int B = atoi(tok);
        if (B < 1 || B > 64)
            continue;
        part parts[16];
        for (int t = 0; t < T; t++)
            parts[t] = (part){ B, N, K, mats, (int)((long)N * t / T), (int)((long)N * (t + 1) / T),
                               X, q, s, Y };
        /* the bytes are arbitrary, valid in every layout */
        for (int l = 0; l < nv; l++) {   /* warm-up */
            mt_q8_select(vlev[l]);
            cur_layout = vlay[l] < 3 ? vlay[l] : 0;
            read_only = vlay[l] == 3;
            mt_q8_lanes_ahead(vpf[l] < -1 ? -1 : vpf[l]);
            mt_q8_group_ahead(vpf[l] == -2 ? 8192 : -1, vpf[l] == -2 ? 0 : -1);
            pass(parts, T);
        }
        for (int l = 0; l < nv; l++)
            cpu[l] = 0;
        for (int r = 0; r < R; r++)
            for (int l = 0; l < nv; l++) {
                mt_q8_select(vlev[l]);
                cur_layout = vlay[l] < 3 ? vlay[l] : 0;
                read_only = vlay[l] == 3;
                mt_q8_lanes_ahead(vpf[l] < -1 ? -1 : vpf[l]);
                mt_q8_group_ahead(vpf[l] == -2 ? 8192 : -1, vpf[l] == -2 ? 0 : -1);
                double c0 = cpu_ms();
                ms[l * R + r] = pass(parts, T);
                cpu[l] += cpu_ms() - c0;
            }
        for (int l = 0; l < nv; l++) {
            qsort(ms + l * R, (size_t)R, sizeof(double), cmp_d);
            double best = ms[l * R], med = ms[l * R + R / 2];
            printf("q8_gemm kernels=%s layout=%s pf=%d pages=%s B=%d N=%d K=%d mats=%d threads=%d rounds=%d "
                   "best_ms=%.3f median_ms=%.3f best_gbs=%.2f median_gbs=%.2f cpu_ms=%.3f\n",
                   vlay[l] == 3 ? "none" : name[vlev[l]], lname[vlay[l]], vpf[l], huge ? "2MiB" : "4KiB", B, N, K,
                   mats, T, R, best, med,
                   mats * mat_bytes / best / 1e6, mats * mat_bytes / med / 1e6, cpu[l] / R);
        }
    }
    free(q); free(s); free(X); free(Y); free(ms);
    return 0;
}
