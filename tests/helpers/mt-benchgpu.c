/* mt-benchgpu.c: the CUDA backend's benchmark (make bench-gpu), figures
 * and ratios measured in one run on the GPU it runs on:
 *   - device copy bandwidth (cudaMemcpy device to device, read + write)
 *   - bf16 tensor peak (a large cublasGemmEx, bf16 in, fp32 accumulate)
 *   - windowed-sink attention alone (kernels/attention.cu) at several B:
 *     KV bytes read / time, as a fraction of the copy bandwidth
 *   - the whole step vs B (1 .. the pool's capacity) with every session at
 *     steady state (ring full): step time, fraction of the bandwidth bound
 *     (weight bytes + KV bytes read per step over the measured bandwidth),
 *     fraction of the measured tensor peak, and the largest B whose step
 *     stays under the budget (80 ms).
 * Sessions are put at steady state by setting their length; the cache,
 * the queries of the attention-alone runs and the audio input are random
 * (never zeros: zeros hide outputs a kernel failed to write, and a
 * product of zeros can run faster than real data). The copy of the
 * outputs back to the caller (logits: B x vocab floats) is reported
 * separately (out_copy_ms, through the backend's pinned buffer).
 * Synthetic models are loaded shape-only: the backend makes the weights on
 * the device.
 */
#include "decode/backend.h"
#include "test_util.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef MT_HAVE_CUDA
int main(void)
{
    fprintf(stderr, "mt-benchgpu: built without CUDA (no nvcc at build time)\n");
    return 1;
}
#else
#include "../../kernels/mt_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "mt-benchgpu: %s: %s\n", #call, cudaGetErrorString(e_));    \
            return -1;                                                                  \
        }                                                                               \
    } while (0)

/* Ends a timed run begun by recording e0: waits for it and, when keep is
 * set (the warm-up run is not), makes *best the shorter of it and the run. */
static int time_run(cudaEvent_t e0, cudaEvent_t e1, int keep, float *best)
{
    float ms;
    CK(cudaEventRecord(e1, 0));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (keep && ms < *best)
        *best = ms;
    return 0;
}

/* Device copy bandwidth in bytes/s (each byte counted read and written). */
static int measure_bw(double *bw)
{
    size_t n = (size_t)2 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice));
    float best = 1e30f;
    for (int i = 0; i < 5; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, 0));
        if (time_run(e0, e1, 1, &best) != 0)
            return -1;
    }
    *bw = 2.0 * n / (best * 1e-3);
    cudaFree(a);
    cudaFree(b);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

/* bf16 tensor throughput in FLOP/s of an 8192^3 GEMM on random data,
 * fp32 accumulation and output (as the step's GEMMs). */
static int measure_peak(double *flops)
{
    const int n = 8192;
    void *a, *b, *c;
    CK(cudaMalloc(&a, (size_t)n * n * 2));
    CK(cudaMalloc(&b, (size_t)n * n * 2));
    CK(cudaMalloc(&c, (size_t)n * n * 4));
    /* random values: a product of zeros runs faster than real data */
    if (mt_cu_fill_uniform_bf16(a, (size_t)n * n, 1, 1.0f, 0) ||
        mt_cu_fill_uniform_bf16(b, (size_t)n * n, 2, 1.0f, 0)) {
        fprintf(stderr, "mt-benchgpu: fill failed\n");
        return -1;
    }
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "mt-benchgpu: cublasCreate failed\n");
        return -1;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const float one = 1, zero = 0;
    float best = 1e30f;
    for (int i = 0; i < 6; i++) {
        CK(cudaEventRecord(e0, 0));
        cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a,
                                        CUDA_R_16BF, n, b, CUDA_R_16BF, n, &zero, c,
                                        CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (s != CUBLAS_STATUS_SUCCESS) {
            fprintf(stderr, "mt-benchgpu: cublasGemmEx failed (%d)\n", (int)s);
            return -1;
        }
        if (time_run(e0, e1, i > 0, &best) != 0)
            return -1;
    }
    *flops = 2.0 * n * n * n / (best * 1e-3);
    cublasDestroy(h);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

/* Attention kernel alone, one layer, B sessions at steady state. */
static int bench_attention(const mt_config *c, int S, int W, int B, double bw, const char *tag)
{
    mt_cu_dims d = { 1, c->heads, c->kv_heads, c->head_dim };
    const int nslots = S + W, nb = (nslots + MT_KV_BLOCK - 1) / MT_KV_BLOCK;
    const size_t hd = (size_t)c->head_dim;
    size_t blk_elems = (size_t)2 * c->kv_heads * MT_KV_BLOCK * hd;
    size_t pool_bytes = (size_t)B * nb * blk_elems * 2;
    void *pool, *q, *part, *out, *rows_d, *tab_d;
    CK(cudaMalloc(&pool, pool_bytes));
    CK(cudaMalloc(&q, (size_t)B * 2 * c->heads * hd * 4));
    /* random keys, values and queries (scaled as the backend's: log2(e)/sqrt(D)) */
    if (mt_cu_fill_uniform_bf16(pool, pool_bytes / 2, 11, 1.0f, 0) ||
        mt_cu_fill_uniform_f32(q, (size_t)B * 2 * c->heads * hd, 12, 1.0f, 0)) {
        fprintf(stderr, "mt-benchgpu: fill failed\n");
        return -1;
    }
    CK(cudaMalloc(&part, (size_t)B * c->heads * MT_CU_MAX_SPLITS * (hd + 2) * 4));
    CK(cudaMalloc(&out, (size_t)B * c->heads * hd * 2));
    CK(cudaMalloc(&rows_d, (size_t)B * sizeof(mt_cu_row)));
    CK(cudaMalloc(&tab_d, (size_t)B * nb * 4));
    mt_cu_row *rows = calloc((size_t)B, sizeof *rows);
    int32_t *tab = calloc((size_t)B * nb, sizeof *tab);
    if (!rows || !tab)
        return -1;
    for (int i = 0; i < B * nb; i++)
        tab[i] = (i * 7919) % (B * nb); /* scattered blocks, as a real pool */
    for (int r = 0; r < B; r++)
        rows[r] = (mt_cu_row){ .table_off = r * nb, .nslots = nslots, .write_slot = S,
                               .pos_abs = 20000, .pos_sink = nslots - 1, .sink = S };
    CK(cudaMemcpy(rows_d, rows, (size_t)B * sizeof *rows, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(tab_d, tab, (size_t)B * nb * 4, cudaMemcpyHostToDevice));
    int nsm = 0;
    CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
    /* the backend's split plan (cuda_backend.c plan_splits) */
    int ring = nslots - S, per = B * c->kv_heads, ns = (nsm * 8 + per - 1) / per;
    if (ns > (ring + 63) / 64) ns = (ring + 63) / 64;
    if (ns > MT_CU_MAX_SPLITS) ns = MT_CU_MAX_SPLITS;
    if (ns < 1) ns = 1;
    int chunk = (ring + ns - 1) / ns;
    ns = (ring + chunk - 1) / chunk;
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = 1e30f;
    for (int i = 0; i < 8; i++) {
        CK(cudaEventRecord(e0, 0));
        int rc = mt_cu_attention(q, rows_d, tab_d, pool, part, out, B, 0, ns, chunk, d, 0);
        if (rc) {
            fprintf(stderr, "mt-benchgpu: attention: %s\n", cudaGetErrorString((cudaError_t)rc));
            return -1;
        }
        if (time_run(e0, e1, i > 0, &best) != 0)
            return -1;
    }
    double bytes = (double)B * nslots * c->kv_heads * hd * 2 * 2;
    double t = best * 1e-3;
    printf("attention model=%s B=%d S=%d W=%d splits=%d chunk=%d us=%.1f kv_bytes=%.0f GBps=%.0f bw_frac=%.3f\n",
           tag, B, S, W, ns, chunk, t * 1e6, bytes, bytes / t / 1e9, bytes / t / bw);
    free(rows);
    free(tab);
    cudaFree(pool); cudaFree(q); cudaFree(part); cudaFree(out); cudaFree(rows_d); cudaFree(tab_d);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return 0;
}

/* Bytes of bf16 weights one step reads (adapters: those the input uses). */
static double weight_bytes(const mt_config *c, int tokens)
{
    double H = c->hidden, qd = (double)c->heads * c->head_dim,
           kvd = (double)c->kv_heads * c->head_dim;
    double per_layer = (qd + 2 * kvd) * H + H * qd + 3.0 * c->ffn * H;
    double ad = tokens ? (double)c->vocab * H : 2.0 * H * c->frame_samples;
    return 2.0 * (c->layers * per_layer + ad);
}

static double matmul_flops(const mt_config *c, int tokens)
{
    return weight_bytes(c, tokens); /* 2 FLOPs per weight, 2 bytes per weight */
}

static int bench_model(const char *spec, int S, int W, double budget_ms, int maxb_cap,
                       double bw, double peak)
{
    char err[512];
    mt_model *m = NULL;
    if (mt_model_load(spec, MT_MODEL_SHAPE_ONLY, &m, err, sizeof err)) {
        fprintf(stderr, "mt-benchgpu: %s\n", err);
        return -1;
    }
    const mt_config *c = &m->cfg;
    const int tokens = !c->has_audio && c->has_tokens;
    for (int B = 1; B <= 64; B *= 2)
        if (bench_attention(c, S, W, B, bw, spec))
            return -1;

    mt_kv_params kp = { .policy = MT_KV_WINDOW, .sink = S, .window = W, .rope = MT_ROPE_CACHE };
    mt_kv_pool *pool = NULL;
    mt_backend *be = NULL;
    mt_decoder_opts o = { .device = MT_DEV_CUDA, .max_batch = maxb_cap, .kv = kp };
    double t0 = now_s();
    /* the backend first: it measures the room left after its weights,
     * activations and warm-up step, less its reserve (backend.h) */
    if (mt_cuda_backend_create(m, &o, &be, err, sizeof err)) {
        fprintf(stderr, "mt-benchgpu: %s: %s\n", spec, err);
        return -1;
    }
    kp.position_bytes = mt_decoder_position_bytes(c, be->kv_elem_bytes);
    size_t bound = mt_kv_bound_bytes(&kp);
    size_t cap_room = be->kv_room_bytes / 100 * MT_DECODER_AUTO_POOL_PCT / bound;
    int cap = cap_room > (size_t)maxb_cap ? maxb_cap : (int)cap_room;
    printf("memory model=%s room_GiB=%.2f reserve_GiB=%.2f session_GiB=%.3f sessions_fit=%zu\n",
           spec, be->kv_room_bytes / (double)(1 << 30), be->kv_reserve_bytes / (double)(1 << 30),
           bound / (double)(1 << 30), cap_room);
    if (cap < 1) {
        fprintf(stderr, "mt-benchgpu: %s: no session fits\n", spec);
        be->destroy(be);
        return -1;
    }
    kp.budget_bytes = (size_t)cap * bound;
    if (mt_backend_pool_create(be, c, &kp, &pool, err, sizeof err) ||
        mt_cuda_backend_fill_kv_random(be, 13, err, sizeof err)) {
        fprintf(stderr, "mt-benchgpu: %s: %s\n", spec, err);
        return -1;
    }
    printf("model=%s layers=%d hidden=%d heads=%d kv_heads=%d head_dim=%d ffn=%d input=%s weights_GiB=%.2f kv_per_session_MiB=%.1f capacity=%d create_s=%.1f\n",
           spec, c->layers, c->hidden, c->heads, c->kv_heads, c->head_dim, c->ffn,
           tokens ? "tokens" : "audio", weight_bytes(c, tokens) / (1 << 30),
           bound / (double)(1 << 20), cap, now_s() - t0);

    mt_kv_seq **seqs = calloc((size_t)cap, sizeof *seqs);
    int32_t *tok = calloc((size_t)cap, sizeof *tok);
    int16_t *pin = calloc((size_t)cap * c->frame_samples, sizeof *pin);
    int16_t *pout = calloc((size_t)cap * c->frame_samples, sizeof *pout);
    float *logits = tokens ? calloc((size_t)cap * c->vocab, sizeof *logits) : NULL;
    if (!seqs || !tok || !pin || !pout || (tokens && !logits))
        return -1;
    uint64_t rs = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < (size_t)cap * c->frame_samples; i++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        pin[i] = (int16_t)((rs >> 33) % 16001) - 8000; /* random, about -12 dBFS */
    }
    int nopen = 0, best_b = 0;
    int Bs[32], nb = 0;
    static const int grid[] = { 1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 512 };
    for (size_t i = 0; i < sizeof grid / sizeof grid[0] && grid[i] < cap; i++)
        Bs[nb++] = grid[i];
    Bs[nb++] = cap; /* the pool's capacity, always measured */
    for (int bi = 0; bi < nb; bi++) {
        int B = Bs[bi];
        while (nopen < B) {
            if (mt_kv_seq_open(pool, &seqs[nopen])) {
                fprintf(stderr, "mt-benchgpu: pool full at %d sessions\n", nopen);
                return -1;
            }
            seqs[nopen]->len = S + W + 1000; /* steady state: ring full */
            tok[nopen] = (int32_t)((nopen * 7919LL + 17) % (c->vocab > 0 ? c->vocab : 1));
            nopen++;
        }
        mt_step_io io = test_step_io(!tokens, pin, pout, tok, logits);
        double best = 1e30, copy_ms = 0;
        for (int it = 0; it < 7; it++) {
            for (int i = 0; i < B; i++)
                if (mt_kv_reserve(pool, seqs[i], 1))
                    return -1;
            double a = now_s();
            if (be->step(be, B, seqs, &io, err, sizeof err)) {
                fprintf(stderr, "mt-benchgpu: step B=%d: %s\n", B, err);
                return -1;
            }
            double t = now_s() - a;
            for (int i = 0; i < B; i++)
                seqs[i]->len++;
            if (it >= 2 && t < best) {
                best = t;
                copy_ms = be->out_copy_ms;
            }
        }
        int nslots = S + W;
        double kvb = (double)B * nslots * kp.position_bytes;
        double bytes = weight_bytes(c, tokens) + kvb;
        double flops = B * matmul_flops(c, tokens) +
                       4.0 * B * nslots * c->heads * c->head_dim * c->layers;
        printf("step model=%s S=%d W=%d B=%d ms=%.3f out_copy_ms=%.3f weight_GB=%.2f kv_GB=%.2f bound_ms=%.3f bw_frac=%.3f tflops=%.1f peak_frac=%.3f\n",
               spec, S, W, B, best * 1e3, copy_ms, weight_bytes(c, tokens) / 1e9, kvb / 1e9,
               bytes / bw * 1e3, bytes / bw / best, flops / best / 1e12, flops / best / peak);
        fflush(stdout);
        if (best * 1e3 < budget_ms)
            best_b = B;
        if (best * 1e3 > 2 * budget_ms || B == cap)
            break;
    }
    printf("result model=%s S=%d W=%d largest_B_under_%.0fms=%d capacity=%d\n", spec, S, W,
           budget_ms, best_b, cap);
    for (int i = 0; i < nopen; i++)
        mt_kv_seq_close(pool, seqs[i]);
    be->destroy(be);
    mt_kv_pool_free(pool);
    mt_model_free(m);
    free(seqs); free(tok); free(pin); free(pout); free(logits);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mt-benchgpu [--model SPEC]... [--sink S] [--window W] [--budget-ms MS] [--max-batch N]\n"
               "  default: synthetic:moshi-7b and synthetic:llama-3.2-1b, S=4 W=3000, 80 ms\n");
}

int main(int argc, char **argv)
{
    const char *models[8];
    int nm = 0, S = 4, W = 3000, maxb = 512;
    double budget = 80;
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' }, { "sink", required_argument, 0, 's' },
        { "window", required_argument, 0, 'w' }, { "budget-ms", required_argument, 0, 'b' },
        { "max-batch", required_argument, 0, 'n' }, { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 } };
    int ch;
    while ((ch = getopt_long(argc, argv, "m:s:w:b:n:h", opts, NULL)) != -1) {
        switch (ch) {
        case 'm': if (nm < 8) models[nm++] = optarg; break;
        case 's': S = atoi(optarg); break;
        case 'w': W = atoi(optarg); break;
        case 'b': budget = atof(optarg); break;
        case 'n': maxb = atoi(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (S < 0 || W < 1 || maxb < 1 || budget <= 0) {
        usage(stderr);
        return 2;
    }
    if (nm == 0) {
        models[nm++] = "synthetic:moshi-7b";
        models[nm++] = "synthetic:llama-3.2-1b";
    }
    char why[256];
    if (!mt_cuda_available(why, sizeof why)) {
        fprintf(stderr, "mt-benchgpu: %s\n", why);
        return 1;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess)
        return 1;
    double bw, peak;
    if (measure_bw(&bw) || measure_peak(&peak))
        return 1;
    printf("device name=\"%s\" sms=%d mem_GiB=%.1f copy_GBps=%.0f bf16_tflops=%.0f\n", p.name,
           p.multiProcessorCount, p.totalGlobalMem / (double)(1 << 30), bw / 1e9, peak / 1e12);
    int rc = 0;
    for (int i = 0; i < nm; i++)
        if (bench_model(models[i], S, W, budget, maxb, bw, peak))
            rc = 1;
    return rc;
}
#endif
