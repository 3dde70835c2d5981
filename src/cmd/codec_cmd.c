/* codec_cmd.c: `mt-probe codec`: the Mimi codec alone on a file, so an
 * operator can hear what it does to speech: audio -> codes (--encode),
 * codes -> audio (--decode), or audio -> codes -> audio (the default).
 *
 * The codes file is text: a header comment, then one line per 80 ms frame
 * with one integer per codebook:
 *     # mimi codes codebooks=8 frames=N samples=M sample_rate=24000
 *     1213 77 1904 ...
 * A last partial frame of audio is padded with silence to a whole frame
 * (and the padding said); decoded audio is cut back to the input's length
 * when the header says it ("samples="). */
#define _GNU_SOURCE
#include "cmd/codec_cmd.h"
#include "cmd/opt.h"
#include "client/audio_read.h"
#include "client/audio_write.h"
#include "client/resample.h"
#include "codec/mimi.h"
#include "codec/mimi_engine.h"
#include "util/clock.h"

#include <errno.h>
#include <sndfile.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
"usage: mt-probe codec -c CODEC [--encode | --decode] [options] IN OUT\n"
"\n"
"Kyutai's Mimi codec on a file: IN audio -> OUT codes (--encode), IN codes\n"
"-> OUT audio (--decode), or IN audio -> OUT audio through the codes (the\n"
"default), one frame of 1920 samples (80 ms at 24 kHz) at a time, as a\n"
"session streams it.\n"
"\n"
"  -c, --codec SPEC      a Mimi checkpoint (.safetensors, or a directory\n"
"                        with one and optionally config.json), or\n"
"                        synthetic:mimi / synthetic:mimi-tiny[:seed=N]\n"
"      --config FILE     Kyutai's configuration as JSON (default: the\n"
"                        directory's config.json, the checkpoint's\n"
"                        metadata, else the published Mimi)\n"
"  -n, --codebooks N     codebooks used (default 8; a codes file's header\n"
"                        decides for --decode)\n"
"      --encode          IN is audio, OUT the codes text\n"
"      --decode          IN is codes text, OUT audio\n"
"      --resample Q      converter when IN is not at the codec's rate:\n"
"                        best, medium, fastest (default medium)\n"
"      --backend B       cpu (default) or cuda (a GPU, through the CUDA\n"
"                        module)\n"
"  -e, --encoding ENC    OUT's samples, as sox names them: signed-integer\n"
"                        (default) or floating-point (the codec's output\n"
"                        unrounded, to compare below 16 bits' 3e-5)\n"
"  -b, --bits N          16 (default), 24 or 32 for signed-integer; 32\n"
"                        (default) or 64 for floating-point\n"
"  -h, --help            this help\n"
"      --version         print the version\n"
"\n"
"Audio is read by libsndfile (any rate, down-mixed to mono, resampled to\n"
"24 kHz) and written mono by the extension of OUT (16-bit unless -e/-b say\n"
"otherwise; .f32 and .f64 are sox's raw floating-point types). One line on\n"
"stdout says what was done: 'codec mode= frames_in= frames_out=\n"
"samples_in= samples_out= padded= codebooks= state_bytes= seconds= rtf=\n"
"backend=' (rtf: codec time over audio time). Exit status: 0 ok, 1 runtime\n"
"error, 2 usage.\n");
}

static const mt_cli cli = {
    "mt-probe codec", "mt-probe codec -c CODEC [--encode | --decode] [options] IN OUT", usage,
};

enum { OPT_ENCODE = 0x100, OPT_DECODE, OPT_CONFIG, OPT_RESAMPLE, OPT_BACKEND };
enum { ENC_DEFAULT = 0, ENC_SIGNED, ENC_FLOAT };

typedef struct opts {
    const char *codec, *config;
    int codebooks, mode, quality;   /* mode 0 round trip, 1 encode, 2 decode */
    int enc, bits;                  /* -e, -b: OUT's samples (0: the defaults) */
    mimi_backend backend;
} opts;

static int one_option(void *ctx, int c, const char *arg)
{
    opts *o = ctx;
    switch (c) {
    case 'c': o->codec = arg; return 0;
    case OPT_CONFIG: o->config = arg; return 0;
    case 'n': return mt_opt_int(arg, 1, 64, &o->codebooks);
    case OPT_ENCODE: o->mode = o->mode == 2 ? -1 : 1; return 0;
    case OPT_DECODE: o->mode = o->mode == 1 ? -1 : 2; return 0;
    case OPT_BACKEND:
        return mimi_backend_parse(arg, &o->backend, NULL, 0) ? mt_opt_bad(arg, "is not cpu or cuda") : 0;
    case 'e':
        if (!strcmp(arg, "signed-integer")) o->enc = ENC_SIGNED;
        else if (!strcmp(arg, "floating-point")) o->enc = ENC_FLOAT;
        else return mt_opt_bad(arg, "is not signed-integer or floating-point");
        return 0;
    case 'b': return mt_opt_int(arg, 16, 64, &o->bits);
    case OPT_RESAMPLE: {
        int q = mt_audio_quality_parse(arg);
        if (q < 0)
            return mt_opt_bad(arg, "is not best, medium, fastest, zoh or linear");
        o->quality = q;
        return 0;
    }
    }
    return -1;
}

/* Reads a codes file: frames x n codes, n from the first line (or the
 * header's codebooks=). samples: the header's samples=, else -1. */
static int read_codes(const char *path, int bins, int32_t **out, int *n_out, long *frames_out,
                      long *samples, char *err, size_t errlen)
{
    FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, frames = 0, room = 0;
    int n = 0, rc = -1;
    int32_t *codes = NULL;
    *samples = -1;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if ((size_t)len != strlen(line)) {
            snprintf(err, errlen, "%s:%ld: a NUL byte", path, lineno);
            goto done;
        }
        if (line[0] == '#') {
            const char *p = strstr(line, "codebooks=");
            if (p) {
                n = atoi(p + 10);
                if (n < 1 || n > 64) {
                    snprintf(err, errlen, "%s:%ld: codebooks= out of range", path, lineno);
                    goto done;
                }
            }
            p = strstr(line, "samples=");
            if (p) {
                char *end;
                errno = 0;
                long s = strtol(p + 8, &end, 10);
                if (errno || s < 0 || end == p + 8) {
                    snprintf(err, errlen, "%s:%ld: samples= is not a count", path, lineno);
                    goto done;
                }
                *samples = s;
            }
            continue;
        }
        int32_t row[65];
        int k = 0;
        char *p = line, *end;
        for (;;) {
            while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
                p++;
            if (!*p)
                break;
            errno = 0;
            long v = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\r' && *end != '\n')) {
                snprintf(err, errlen, "%s:%ld: not an integer code", path, lineno);
                goto done;
            }
            if (v < 0 || v >= bins) {
                snprintf(err, errlen, "%s:%ld: code %ld outside 0..%d", path, lineno, v, bins - 1);
                goto done;
            }
            if (k == 64) {
                snprintf(err, errlen, "%s:%ld: more than 64 codes", path, lineno);
                goto done;
            }
            row[k++] = (int32_t)v;
            p = end;
        }
        if (k == 0)
            continue;
        if (n == 0)
            n = k;
        if (k != n) {
            snprintf(err, errlen, "%s:%ld: %d codes, expected %d", path, lineno, k, n);
            goto done;
        }
        if (frames == room) {
            room = room ? 2 * room : 256;
            if (room > (1L << 26)) {
                snprintf(err, errlen, "%s: too many frames", path);
                goto done;
            }
            int32_t *nc = realloc(codes, (size_t)room * (size_t)n * sizeof *codes);
            if (!nc) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto done;
            }
            codes = nc;
        }
        memcpy(codes + (size_t)frames * n, row, (size_t)n * sizeof *row);
        frames++;
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error", path);
        goto done;
    }
    if (frames == 0) {
        snprintf(err, errlen, "%s: no frames of codes", path);
        goto done;
    }
    rc = 0;
done:
    free(line);
    if (f != stdin)
        fclose(f);
    if (rc == 0) {
        *out = codes;
        *n_out = n;
        *frames_out = frames;
    } else {
        free(codes);
    }
    return rc;
}

/* -e and -b into a libsndfile subformat (sox's pairs): 0, or -1 (said). */
static int out_encoding(const opts *o, int *sub)
{
    if (o->enc == ENC_FLOAT) {
        if (o->bits && o->bits != 32 && o->bits != 64)
            return mt_opt_usage_error("-e floating-point: -b 32 or 64, not %d", o->bits);
        *sub = o->bits == 64 ? SF_FORMAT_DOUBLE : SF_FORMAT_FLOAT;
        return 0;
    }
    if (o->bits && o->bits != 16 && o->bits != 24 && o->bits != 32)
        return mt_opt_usage_error("-e signed-integer: -b 16, 24 or 32, not %d", o->bits);
    if (o->enc == ENC_SIGNED || o->bits)
        *sub = o->bits == 24 ? SF_FORMAT_PCM_24 : o->bits == 32 ? SF_FORMAT_PCM_32
                                                                : SF_FORMAT_PCM_16;
    return 0;
}

int mt_probe_codec_main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"codec", required_argument, 0, 'c'},
        {"config", required_argument, 0, OPT_CONFIG},
        {"codebooks", required_argument, 0, 'n'},
        {"encode", no_argument, 0, OPT_ENCODE},
        {"decode", no_argument, 0, OPT_DECODE},
        {"resample", required_argument, 0, OPT_RESAMPLE},
        {"backend", required_argument, 0, OPT_BACKEND},
        {"encoding", required_argument, 0, 'e'},
        {"bits", required_argument, 0, 'b'},
        MT_OPT_COMMON,
        {0, 0, 0, 0},
    };
    opts o = { .quality = mt_audio_quality_parse("medium") };
    int c;
    optind = 1;
    while ((c = mt_opt_next(&cli, argc, argv, "c:n:e:b:h", longopts)) >= 0)
        if (one_option(&o, c, optarg) != 0)
            return 2;
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (o.mode < 0)
        return mt_opt_usage_error("--encode and --decode exclude each other");
    if (!o.codec)
        return mt_opt_usage_error("need -c CODEC");
    if (argc - optind != 2)
        return mt_opt_usage_error("need IN and OUT");
    const char *in = argv[optind], *outp = argv[optind + 1];
    int sub = 0;   /* OUT's libsndfile subformat; 0: its extension's */
    if (out_encoding(&o, &sub) != 0)
        return 2;
    const char *prog = "mt-probe codec";
    char err[1024];

    mimi_model *m = NULL;
    if (mimi_load(o.codec, o.config, o.codebooks, &m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    const mimi_config *mc = mimi_model_config(m);
    const int fs = mimi_frame_size(mc);
    int rc = 1;
    float *pcm = NULL, *outpcm = NULL;
    int32_t *codes = NULL;
    long frames = 0, samples_in = 0, samples_out = 0, padded = 0;
    mt_audio a = {0}, r = {0};
    mimi_engine *eng = NULL;   /* one session, slot 0 */
    const int slot0 = 0;
    FILE *cf = NULL;
    mt_audio_writer *aw = NULL;
    double t0 = 0, busy = 0;

    if (o.mode == 2) {
        int n;
        if (read_codes(in, mc->bins, &codes, &n, &frames, &samples_in, err, sizeof err) != 0)
            goto fail;
        if (mimi_set_codebooks(m, n, err, sizeof err) != 0)
            goto fail;
        if (samples_in > frames * (long)fs || samples_in <= (frames - 1) * (long)fs)
            samples_in = frames * (long)fs;   /* the header disagrees: keep every frame */
    } else {
        if (mt_audio_read(in, &a, err, sizeof err) != 0)
            goto fail;
        if (a.rate != mc->sample_rate) {
            if (mt_audio_resample(&a, mc->sample_rate, o.quality, &r, err, sizeof err) != 0)
                goto fail;
            mt_audio_free(&a);
            a = r;
            memset(&r, 0, sizeof r);
        }
        samples_in = (long)a.frames;
        frames = (samples_in + fs - 1) / fs;
        padded = frames * (long)fs - samples_in;
        pcm = calloc((size_t)frames * fs, sizeof *pcm);
        codes = calloc((size_t)frames * mc->n_q_used, sizeof *codes);
        if (!pcm || !codes) {
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        memcpy(pcm, a.samples, (size_t)samples_in * sizeof *pcm);
    }
    const int nq = mc->n_q_used;
    if (mimi_engine_new(m, o.backend, 1, 1, &eng, err, sizeof err) != 0)
        goto fail;
    t0 = (double)mt_clock_ns() * 1e-9;
    if (o.mode != 2)
        for (long f = 0; f < frames; f++)
            if (mimi_engine_encode(eng, &slot0, 1, pcm + (size_t)f * fs, codes + (size_t)f * nq, err,
                                   sizeof err) != 0)
                goto fail;
    if (o.mode == 1) {
        busy = (double)mt_clock_ns() * 1e-9 - t0;
        cf = strcmp(outp, "-") ? fopen(outp, "w") : stdout;
        if (!cf) {
            snprintf(err, sizeof err, "%s: %s", outp, strerror(errno));
            goto fail;
        }
        fprintf(cf, "# mimi codes codebooks=%d frames=%ld samples=%ld sample_rate=%d\n", nq, frames,
                samples_in, mc->sample_rate);
        for (long f = 0; f < frames; f++)
            for (int i = 0; i < nq; i++)
                fprintf(cf, "%d%c", codes[(size_t)f * nq + i], i + 1 < nq ? ' ' : '\n');
        int bad = ferror(cf);
        if (cf != stdout)
            bad |= fclose(cf) != 0;
        else
            bad |= fflush(cf) != 0;
        cf = NULL;
        if (bad) {
            snprintf(err, sizeof err, "%s: write error", outp);
            goto fail;
        }
        samples_out = 0;
    } else {
        outpcm = malloc((size_t)fs * sizeof *outpcm);
        int16_t *s16 = malloc((size_t)fs * sizeof *s16);
        if (!outpcm || !s16) {
            free(s16);
            snprintf(err, sizeof err, "out of memory");
            goto fail;
        }
        /* float samples unless plain 16-bit: the codec's output itself */
        int fmt = 0, as_float = sub && sub != SF_FORMAT_PCM_16;
        if (!sub && mt_audio_format_for_path(outp, &fmt, err, sizeof err) == 0)
            as_float = (fmt & SF_FORMAT_SUBMASK) == SF_FORMAT_FLOAT ||
                       (fmt & SF_FORMAT_SUBMASK) == SF_FORMAT_DOUBLE;
        if (mt_audio_writer_open_sub(outp, mc->sample_rate, sub, &aw, err, sizeof err) != 0) {
            free(s16);
            goto fail;
        }
        for (long f = 0; f < frames; f++) {
            if (mimi_engine_decode(eng, &slot0, 1, codes + (size_t)f * nq, outpcm, err, sizeof err) != 0) {
                free(s16);
                goto fail;
            }
            long keep = samples_in - f * (long)fs;
            if (keep > fs)
                keep = fs;
            mt_audio_to_s16(outpcm, s16, (size_t)keep);
            if (as_float ? mt_audio_writer_write_float(aw, outpcm, (size_t)keep, err, sizeof err)
                         : mt_audio_writer_write(aw, s16, (size_t)keep, err, sizeof err)) {
                free(s16);
                goto fail;
            }
            samples_out += keep;
        }
        free(s16);
        busy = (double)mt_clock_ns() * 1e-9 - t0;
        if (mt_audio_writer_commit(aw, err, sizeof err) != 0) {
            aw = NULL;
            goto fail;
        }
        aw = NULL;
    }
    {
        static const char *const modes[] = { "roundtrip", "encode", "decode" };
        long fin = o.mode == 2 ? 0 : (long)mimi_engine_frames_encoded(eng, slot0);
        long fout = o.mode == 1 ? frames : (long)mimi_engine_frames_decoded(eng, slot0);
        printf("codec mode=%s frames_in=%ld frames_out=%ld samples_in=%ld samples_out=%ld padded=%ld "
               "codebooks=%d state_bytes=%zu seconds=%.3f rtf=%.3f backend=%s\n",
               modes[o.mode], o.mode == 2 ? frames : fin, fout, samples_in, samples_out, padded, nq,
               mimi_state_bytes(m), busy, busy / (frames * (double)fs / mc->sample_rate),
               mimi_backend_name(o.backend));
    }
    rc = 0;
fail:
    if (rc != 0)
        fprintf(stderr, "%s: %s\n", prog, err);
    mt_audio_writer_abort(aw);
    mt_audio_free(&a);
    mt_audio_free(&r);
    free(pcm);
    free(outpcm);
    free(codes);
    mimi_engine_free(eng);
    mimi_free(m);
    return rc;
}
