/* codec_cmd.c: `mt-probe codec`: the Mimi codec alone on a file, so an
 * operator can hear what it does to speech: audio -> codes (--encode),
 * codes -> audio (--decode), or audio -> codes -> audio (the default).
 *
 * The codes file is text (codec/codes_file.c reads and writes it). A last
 * partial frame of audio is padded with silence to a whole frame (and the
 * padding said); decoded audio is cut back to the input's length when the
 * codes file's header says it ("samples="). The steps: parse_args, run
 * (load_codes or load_audio, encode_all, then mt_codes_write_path or
 * decode_all), print_summary. */
#define _GNU_SOURCE
#include "cmd/codec_cmd.h"
#include "cmd/opt.h"
#include "client/audio_read.h"
#include "client/audio_write.h"
#include "client/resample.h"
#include "codec/codes_file.h"
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
    case 'e':
        if (!strcmp(arg, "signed-integer")) o->enc = ENC_SIGNED;
        else if (!strcmp(arg, "floating-point")) o->enc = ENC_FLOAT;
        else return mt_opt_bad(arg, "is not signed-integer or floating-point");
        return 0;
    case 'b': return mt_opt_int(arg, 16, 64, &o->bits);
    case OPT_BACKEND:
        return mimi_backend_parse(arg, &o->backend, NULL, 0) ? mt_opt_bad(arg, "is not cpu or cuda") : 0;
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

/* One run of the subcommand: what it read, made and measured. */
typedef struct codec_job {
    opts               o;
    const char        *in, *out;
    int                sub;       /* OUT's libsndfile subformat; 0: its extension's */
    mimi_model        *m;
    const mimi_config *mc;
    int                fs;        /* samples per frame */
    mimi_engine       *eng;       /* one session, slot 0 */
    float             *pcm;       /* [frames, fs] the input audio, padded */
    int32_t           *codes;     /* [frames, n_q_used] */
    long               frames, samples_in, samples_out, padded;
    double             busy;      /* codec seconds */
    char               err[1024];
} codec_job;

static const int slot0 = 0;

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

/* Options and operands into j. -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, codec_job *j)
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
    opts *o = &j->o;
    o->quality = mt_audio_quality_parse("medium");
    int c;
    optind = 1;
    while ((c = mt_opt_next(&cli, argc, argv, "c:n:e:b:h", longopts)) >= 0)
        if (one_option(o, c, optarg) != 0)
            return 2;
    if (c != MT_OPT_END)
        return mt_opt_status(c);
    if (o->mode < 0)
        return mt_opt_usage_error("--encode and --decode exclude each other");
    if (!o->codec)
        return mt_opt_usage_error("need -c CODEC");
    if (argc - optind != 2)
        return mt_opt_usage_error("need IN and OUT");
    j->in = argv[optind];
    j->out = argv[optind + 1];
    if (out_encoding(o, &j->sub) != 0)
        return 2;
    return -1;
}

/* --decode: the codes file IN; its codebooks decide the model's. */
static int load_codes(codec_job *j)
{
    mt_codes c;
    if (mt_codes_read_path(j->in, j->mc->bins, &c, j->err, sizeof j->err) != 0)
        return -1;
    j->codes = c.codes;
    j->frames = c.frames;
    j->samples_in = c.samples;
    if (mimi_set_codebooks(j->m, c.n, j->err, sizeof j->err) != 0)
        return -1;
    long fs = j->fs;
    if (j->samples_in > j->frames * fs || j->samples_in <= (j->frames - 1) * fs)
        j->samples_in = j->frames * fs;   /* the header disagrees: keep every frame */
    return 0;
}

/* Encode and round trip: the audio IN at the codec's rate, padded with
 * silence to whole frames. */
static int load_audio(codec_job *j)
{
    mt_audio a = {0}, r = {0};
    int rc = -1;
    if (mt_audio_read(j->in, &a, j->err, sizeof j->err) != 0)
        goto out;
    if (a.rate != j->mc->sample_rate) {
        if (mt_audio_resample(&a, j->mc->sample_rate, j->o.quality, &r, j->err, sizeof j->err) != 0)
            goto out;
        mt_audio_free(&a);
        a = r;
        memset(&r, 0, sizeof r);
    }
    j->samples_in = (long)a.frames;
    j->frames = (j->samples_in + j->fs - 1) / j->fs;
    j->padded = j->frames * (long)j->fs - j->samples_in;
    j->pcm = calloc((size_t)j->frames * j->fs, sizeof *j->pcm);
    j->codes = calloc((size_t)j->frames * j->mc->n_q_used, sizeof *j->codes);
    if (!j->pcm || !j->codes) {
        snprintf(j->err, sizeof j->err, "out of memory");
        goto out;
    }
    memcpy(j->pcm, a.samples, (size_t)j->samples_in * sizeof *j->pcm);
    rc = 0;
out:
    mt_audio_free(&a);
    mt_audio_free(&r);
    return rc;
}

/* Every frame of j->pcm into j->codes, one at a time as a session does. */
static int encode_all(codec_job *j)
{
    const int nq = j->mc->n_q_used;
    for (long f = 0; f < j->frames; f++)
        if (mimi_engine_encode(j->eng, &slot0, 1, j->pcm + (size_t)f * j->fs,
                               j->codes + (size_t)f * nq, j->err, sizeof j->err) != 0)
            return -1;
    return 0;
}

/* Every frame of j->codes decoded into the audio file OUT, cut back to
 * samples_in. busy: the codec's time, from t0, before the file's commit. */
static int decode_all(codec_job *j, double t0)
{
    const int nq = j->mc->n_q_used, fs = j->fs;
    float *outpcm = malloc((size_t)fs * sizeof *outpcm);      /* [fs] */
    int16_t *s16 = malloc((size_t)fs * sizeof *s16);          /* [fs] */
    mt_audio_writer *aw = NULL;
    int rc = -1;
    if (!outpcm || !s16) {
        snprintf(j->err, sizeof j->err, "out of memory");
        goto out;
    }
    /* float samples unless plain 16-bit: the codec's output itself */
    int fmt = 0, as_float = j->sub && j->sub != SF_FORMAT_PCM_16;
    if (!j->sub && mt_audio_format_for_path(j->out, &fmt, j->err, sizeof j->err) == 0)
        as_float = (fmt & SF_FORMAT_SUBMASK) == SF_FORMAT_FLOAT ||
                   (fmt & SF_FORMAT_SUBMASK) == SF_FORMAT_DOUBLE;
    if (mt_audio_writer_open_sub(j->out, j->mc->sample_rate, j->sub, &aw, j->err,
                                 sizeof j->err) != 0)
        goto out;
    for (long f = 0; f < j->frames; f++) {
        if (mimi_engine_decode(j->eng, &slot0, 1, j->codes + (size_t)f * nq, outpcm, j->err,
                               sizeof j->err) != 0)
            goto out;
        long keep = j->samples_in - f * (long)fs;
        if (keep > fs)
            keep = fs;
        mt_audio_to_s16(outpcm, s16, (size_t)keep);
        if (as_float ? mt_audio_writer_write_float(aw, outpcm, (size_t)keep, j->err, sizeof j->err)
                     : mt_audio_writer_write(aw, s16, (size_t)keep, j->err, sizeof j->err))
            goto out;
        j->samples_out += keep;
    }
    j->busy = (double)mt_clock_ns() * 1e-9 - t0;
    mt_audio_writer *w = aw;
    aw = NULL;
    if (mt_audio_writer_commit(w, j->err, sizeof j->err) != 0)
        goto out;
    rc = 0;
out:
    mt_audio_writer_abort(aw);
    free(outpcm);
    free(s16);
    return rc;
}

/* The one line on stdout that says what was done. */
static void print_summary(const codec_job *j)
{
    static const char *const modes[] = { "roundtrip", "encode", "decode" };
    const int mode = j->o.mode, nq = j->mc->n_q_used;
    long fin = mode == 2 ? 0 : (long)mimi_engine_frames_encoded(j->eng, slot0);
    long fout = mode == 1 ? j->frames : (long)mimi_engine_frames_decoded(j->eng, slot0);
    printf("codec mode=%s frames_in=%ld frames_out=%ld samples_in=%ld samples_out=%ld padded=%ld "
           "codebooks=%d state_bytes=%zu seconds=%.3f rtf=%.3f backend=%s\n",
           modes[mode], mode == 2 ? j->frames : fin, fout, j->samples_in, j->samples_out,
           j->padded, nq, mimi_state_bytes(j->m), j->busy,
           j->busy / (j->frames * (double)j->fs / j->mc->sample_rate),
           mimi_backend_name(j->o.backend));
}

/* Loads the codec and the input, runs the mode, writes OUT. 0, or -1. */
static int run(codec_job *j)
{
    if (mimi_load(j->o.codec, j->o.config, j->o.codebooks, &j->m, j->err, sizeof j->err) != 0)
        return -1;
    j->mc = mimi_model_config(j->m);
    j->fs = mimi_frame_size(j->mc);
    if ((j->o.mode == 2 ? load_codes(j) : load_audio(j)) != 0)
        return -1;
    if (mimi_engine_new(j->m, j->o.backend, 1, 1, &j->eng, j->err, sizeof j->err) != 0)
        return -1;
    double t0 = (double)mt_clock_ns() * 1e-9;
    if (j->o.mode != 2 && encode_all(j) != 0)
        return -1;
    if (j->o.mode == 1) {
        j->busy = (double)mt_clock_ns() * 1e-9 - t0;
        if (mt_codes_write_path(j->out, j->codes, j->mc->n_q_used, j->frames, j->samples_in,
                                j->mc->sample_rate, j->err, sizeof j->err) != 0)
            return -1;
    } else if (decode_all(j, t0) != 0) {
        return -1;
    }
    print_summary(j);
    return 0;
}

int mt_probe_codec_main(int argc, char **argv)
{
    codec_job j = {0};
    int st = parse_args(argc, argv, &j);
    if (st >= 0)
        return st;
    int rc = run(&j) == 0 ? 0 : 1;
    if (rc != 0)
        fprintf(stderr, "mt-probe codec: %s\n", j.err);
    free(j.pcm);
    free(j.codes);
    mimi_engine_free(j.eng);
    mimi_free(j.m);
    return rc;
}
