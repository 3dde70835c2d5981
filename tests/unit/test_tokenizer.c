/* test_tokenizer.c: src/model/tokenizer.c, the SentencePiece .model reader,
 * against SentencePiece's own reading of a real model
 * (tests/fixtures/kyutai_lm/tokenizer-tiny.{model,pieces}, made by
 * tests/fixtures/gen/gen_tokenizer.sh with spm_train and
 * python3-sentencepiece), every id; then hostile files, each refused with
 * a message. */
#include "tap.h"
#include "model/tokenizer.h"
#include "client/replay_transcript.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[1024] = ".";

/* The piece as SentencePiece returns it, U+2581 as a space. */
static void mark_to_space(char *s)
{
    char *o = s;
    for (char *p = s; *p; ) {
        if (!strncmp(p, "\xe2\x96\x81", 3)) {
            *o++ = ' ';
            p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
}

static void test_against_sentencepiece(void)
{
    char path[1200], err[512] = "";
    snprintf(path, sizeof path, "%s/tests/fixtures/kyutai_lm/tokenizer-tiny.model", root);
    mt_tokenizer *t = mt_tokenizer_load_err(path, err, sizeof err);
    if (!ok(t != NULL, "the fixture model loads (%s)", err))
        return;
    snprintf(path, sizeof path, "%s/tests/fixtures/kyutai_lm/tokenizer-tiny.pieces", root);
    FILE *f = fopen(path, "r");
    if (!ok(f != NULL, "SentencePiece's dump opens")) {
        mt_tokenizer_free(t);
        return;
    }
    char line[8192];
    int n = 0, same = 0, control = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        int id, ctl, off = 0;
        if (sscanf(line, "%d\t%d\t%n", &id, &ctl, &off) != 2 || off == 0 || id != n) {
            tap_diag("bad dump line %d: %s", n, line);
            break;
        }
        char *want = line + off;
        mark_to_space(want);
        const char *got = mt_tokenizer_piece(t, id);
        int match = ctl ? got == NULL : (got && !strcmp(got, want));
        if (!match)
            tap_diag("id %d: SentencePiece %s'%s', ours '%s'", id, ctl ? "(control) " : "",
                     want, got ? got : "(null)");
        same += match;
        control += ctl;
        n++;
    }
    fclose(f);
    ok(n == 40 && mt_tokenizer_size(t) == n,
       "as many pieces as SentencePiece reads (%d, ours %d), the tiny text card's 40", n,
       mt_tokenizer_size(t));
    ok(same == n, "every id's piece as SentencePiece's id_to_piece (%d of %d), "
       "%d control ids NULL", same, n, control);
    ok(control == 2, "the fixture has control pieces to check (<s>, </s>)");
    ok(mt_tokenizer_piece(t, 4) && !strcmp(mt_tokenizer_piece(t, 4), " "),
       "the word mark alone reads as one space");
    ok(!mt_tokenizer_piece(t, -1) && !mt_tokenizer_piece(t, n) &&
       !mt_tokenizer_piece(t, 1 << 30), "ids out of range give NULL");
    mt_tokenizer_free(t);

    /* the wrapper without an error buffer */
    ok(mt_tokenizer_load("/nonexistent/tok.model") == NULL &&
       strstr(mt_tokenizer_error(), "/nonexistent/tok.model") != NULL,
       "mt_tokenizer_load: NULL, the reason in mt_tokenizer_error (%s)", mt_tokenizer_error());
}

/* parse(buf) must fail with a message containing want. */
static void refused(const char *what, const uint8_t *buf, size_t len, const char *want)
{
    char err[512] = "";
    mt_tokenizer *t = mt_tokenizer_parse(buf, len, err, sizeof err);
    ok(t == NULL && strstr(err, want) != NULL, "%s: refused (%s)", what, err);
    mt_tokenizer_free(t);
}

static void test_hostile(void)
{
    /* a good one-piece model: field 1 { field 1 "ab", field 2 0.0f, field 3 1 } */
    static const uint8_t good[] = { 0x0a, 0x0b, 0x0a, 0x02, 'a', 'b', 0x15, 0, 0, 0, 0,
                                    0x18, 0x01 };
    char err[512] = "";
    mt_tokenizer *t = mt_tokenizer_parse(good, sizeof good, err, sizeof err);
    ok(t && mt_tokenizer_size(t) == 1 && !strcmp(mt_tokenizer_piece(t, 0), "ab"),
       "a hand-made one-piece model parses (%s)", err);
    mt_tokenizer_free(t);

    /* every truncation: a message, never a crash (a cut at the end of a
     * piece is a shorter model, the only prefix that may parse) */
    int bad = 0;
    for (size_t k = 0; k < sizeof good; k++) {
        t = mt_tokenizer_parse(good, k, err, sizeof err);
        bad += t != NULL;
        mt_tokenizer_free(t);
    }
    ok(bad == 0, "every truncation of a one-piece model refused (%d parsed)", bad);

    static const uint8_t overlong[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff, 0xff, 0xff, 0x01 };
    refused("an 11-byte varint", overlong, sizeof overlong, "overlong");
    static const uint8_t over64[] = { 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0x02 };
    refused("a varint past 64 bits", over64, sizeof over64, "overlong");
    static const uint8_t past_end[] = { 0x0a, 0x40, 0x0a, 0x02, 'a', 'b' };
    refused("a length past the end", past_end, sizeof past_end, "past the end");
    static const uint8_t huge_len[] = { 0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                        0xff, 0x7f };
    refused("a length near 2^63", huge_len, sizeof huge_len, "past the end");
    /* the piece's length fits the file but not its SentencePiece message */
    static const uint8_t nested[] = { 0x0a, 0x04, 0x0a, 0x05, 'a', 'b', 'c', 'd', 'e' };
    refused("a nested length past its message", nested, sizeof nested, "past the end");
    static const uint8_t group[] = { 0x0b, 0x0c };
    refused("a group (wire type 3)", group, sizeof group, "wire type 3");
    static const uint8_t field0[] = { 0x02, 0x00 };
    refused("field number 0", field0, sizeof field0, "field number 0");
    static const uint8_t no_piece[] = { 0x0a, 0x02, 0x18, 0x01 };
    refused("a SentencePiece without its piece", no_piece, sizeof no_piece, "no piece");
    static const uint8_t type7[] = { 0x0a, 0x06, 0x0a, 0x02, 'a', 'b', 0x18, 0x07 };
    refused("type 7", type7, sizeof type7, "type 7");
    static const uint8_t not_utf8[] = { 0x0a, 0x04, 0x0a, 0x02, 0xc3, 0x28 };
    refused("a piece that is not UTF-8", not_utf8, sizeof not_utf8, "UTF-8");
    static const uint8_t nul[] = { 0x0a, 0x04, 0x0a, 0x02, 'a', 0x00 };
    refused("a piece with a NUL", nul, sizeof nul, "NUL");
    static const uint8_t empty_piece[] = { 0x0a, 0x02, 0x0a, 0x00 };
    refused("an empty piece", empty_piece, sizeof empty_piece, "0 bytes");
    static const uint8_t piece_varint[] = { 0x0a, 0x02, 0x08, 0x01 };
    refused("a piece as a varint", piece_varint, sizeof piece_varint, "wire type 0");
    static const uint8_t trainer_only[] = { 0x12, 0x02, 0x08, 0x01 };
    refused("no pieces (a trainer spec alone)", trainer_only, sizeof trainer_only,
            "no pieces");
    refused("an empty file", good, 0, "no pieces");
    /* other fields of any wire type are skipped, at both levels */
    static const uint8_t skips[] = { 0x10, 0x01, 0x19, 1, 2, 3, 4, 5, 6, 7, 8, 0x25, 1, 2, 3, 4,
                                     0x0a, 0x08, 0x20, 0x05, 0x0a, 0x01, 'x', 0x2a, 0x01, 'y' };
    err[0] = '\0';
    t = mt_tokenizer_parse(skips, sizeof skips, err, sizeof err);
    ok(t && mt_tokenizer_size(t) == 1 && !strcmp(mt_tokenizer_piece(t, 0), "x"),
       "unknown fields of wire types 0, 1, 2, 5 skipped (%s)", err);
    mt_tokenizer_free(t);
    ok(mt_tokenizer_kyutai_silent(0) && mt_tokenizer_kyutai_silent(3) &&
       !mt_tokenizer_kyutai_silent(1) && !mt_tokenizer_kyutai_silent(4),
       "Kyutai's silent text ids: 0 and 3");
}

static void test_files(void)
{
    char dir[] = "/tmp/mt_tok_XXXXXX", p[256], err[512];
    if (!mkdtemp(dir)) {
        ok(0, "mkdtemp");
        return;
    }
    snprintf(p, sizeof p, "%s/fifo.model", dir);
    if (mkfifo(p, 0600) == 0) {
        err[0] = '\0';
        mt_tokenizer *t = mt_tokenizer_load_err(p, err, sizeof err);
        ok(t == NULL && strstr(err, "not a regular file"), "a FIFO refused, not waited on (%s)",
           err);
        mt_tokenizer_free(t);
        unlink(p);
    } else {
        tap_skip("mkfifo failed");
    }
    err[0] = '\0';
    mt_tokenizer *t = mt_tokenizer_load_err(dir, err, sizeof err);
    ok(t == NULL && strstr(err, "not a regular file"), "a directory refused (%s)", err);
    mt_tokenizer_free(t);
    /* past the size cap: a sparse file, never read */
    snprintf(p, sizeof p, "%s/big.model", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0 && ftruncate(fd, (off_t)MT_TOKENIZER_MAX_BYTES + 1) == 0) {
        err[0] = '\0';
        t = mt_tokenizer_load_err(p, err, sizeof err);
        ok(t == NULL && strstr(err, "more than"), "a file past the size cap refused (%s)", err);
        mt_tokenizer_free(t);
    } else {
        tap_skip("sparse file");
    }
    if (fd >= 0)
        close(fd);
    unlink(p);
    rmdir(dir);
}

/* mt-replay's transcript with a tokenizer (client/replay_transcript.c): pieces
 * joined, ids 0 and 3, control and out-of-range ids skipped, a frame with
 * no text no line, backslash and control bytes escaped. */
static void test_transcript(void)
{
    /* ids 0 "z", 1 control "<s>", 2 "a\\b", 3 "pad", 4 "x<TAB>y", 5 "<U+2581>hi" */
    static const uint8_t model[] = {
        0x0a, 0x03, 0x0a, 0x01, 'z',
        0x0a, 0x07, 0x0a, 0x03, '<', 's', '>', 0x18, 0x03,
        0x0a, 0x05, 0x0a, 0x03, 'a', '\\', 'b',
        0x0a, 0x05, 0x0a, 0x03, 'p', 'a', 'd',
        0x0a, 0x05, 0x0a, 0x03, 'x', '\t', 'y',
        0x0a, 0x07, 0x0a, 0x05, 0xe2, 0x96, 0x81, 'h', 'i',
    };
    char err[512] = "", path[] = "/tmp/mt_tok_tr_XXXXXX";
    mt_tokenizer *t = mt_tokenizer_parse(model, sizeof model, err, sizeof err);
    int fd = mkstemp(path);
    if (!ok(t && mt_tokenizer_size(t) == 6 && fd >= 0, "a six-piece model (%s)", err)) {
        mt_tokenizer_free(t);
        return;
    }
    close(fd);
    mt_transcript *tr = NULL;
    static const int32_t f1[] = { 5, 2, 4 }, f2[] = { 0, 1, 3, 99, -1 }, f3[] = { 5 };
    int rc = mt_transcript_open(path, t, &tr, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 0, 7, f1, 3, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 1, 8, f2, 5, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 0, 9, f3, 1, err, sizeof err);
    long lines = tr ? mt_transcript_lines(tr) : -1;
    rc = mt_transcript_close(tr, err, sizeof err) || rc;
    char got[256] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[n] = '\0';
    if (f)
        fclose(f);
    static const char want[] = "0 7  hia\\\\bx\\x09y\n0 9  hi\n";
    if (!ok(rc == 0 && lines == 2 && !strcmp(got, want),
            "transcript as text: pieces joined, 0/3/control/out-of-range skipped, "
            "escapes (%ld lines)", lines))
        tap_diag("got: %s", got);
    unlink(path);
    mt_tokenizer_free(t);
}

/* The text view (--text, mt_transcript_text): each session's pieces
 * joined across frames as SentencePiece joins them, the first word mark
 * dropped, one line a session, sessions in order, one without text none;
 * words (a ws:// server's) joined alike; no line file (path NULL). */
static void test_text_view(void)
{
    /* ids 0 "z", 1 "<U+2581>hel", 2 "lo", 3 "pad", 4 "<U+2581>you" (0 and 3:
     * Kyutai's padding, no text) */
    static const uint8_t model[] = {
        0x0a, 0x03, 0x0a, 0x01, 'z',
        0x0a, 0x08, 0x0a, 0x06, 0xe2, 0x96, 0x81, 'h', 'e', 'l',
        0x0a, 0x04, 0x0a, 0x02, 'l', 'o',
        0x0a, 0x05, 0x0a, 0x03, 'p', 'a', 'd',
        0x0a, 0x08, 0x0a, 0x06, 0xe2, 0x96, 0x81, 'y', 'o', 'u',
    };
    char err[512] = "", path[] = "/tmp/mt_tok_tv_XXXXXX";
    mt_tokenizer *t = mt_tokenizer_parse(model, sizeof model, err, sizeof err);
    int fd = mkstemp(path);
    if (!ok(t && fd >= 0, "a five-piece model (%s)", err)) {
        mt_tokenizer_free(t);
        return;
    }
    close(fd);
    mt_transcript *tr = NULL;
    static const int32_t a[] = { 1 }, b[] = { 2, 3 }, c[] = { 4 }, pad[] = { 3, 0 };
    int rc = mt_transcript_open(NULL, t, &tr, err, sizeof err);
    rc = rc || mt_transcript_text(tr, path, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 2, 1, a, 1, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 0, 1, c, 1, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 2, 2, b, 2, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 1, 1, pad, 2, err, sizeof err);
    rc = rc || mt_transcript_add(tr, 2, 3, c, 1, err, sizeof err);
    rc = rc || mt_transcript_add_words(tr, 3, 1, " ok", 3, err, sizeof err);
    rc = rc || mt_transcript_add_words(tr, 3, 2, " then", 5, err, sizeof err);
    long lines = tr ? mt_transcript_lines(tr) : -1;
    rc = mt_transcript_close(tr, err, sizeof err) || rc;
    char got[256] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    got[n] = '\0';
    if (f)
        fclose(f);
    static const char want[] = "0 you\n2 hello you\n3 ok then\n";
    if (!ok(rc == 0 && lines == 0 && !strcmp(got, want),
            "text view: words joined across frames, one line a session (%s)", err))
        tap_diag("got: %s", got);
    unlink(path);
    tr = NULL;
    ok(mt_transcript_open(NULL, t, &tr, err, sizeof err) == 0 &&
       mt_transcript_text(tr, "/nonexistent/dir/t.txt", err, sizeof err) != 0 &&
       strstr(err, "/nonexistent/dir/t.txt"), "text view: a bad path said at once (%s)", err);
    mt_transcript_close(tr, err, sizeof err);
    mt_tokenizer_free(t);
}

int main(void)
{
    const char *r = getenv("MT_ROOT");
    if (r)
        snprintf(root, sizeof root, "%s", r);
    test_against_sentencepiece();
    test_hostile();
    test_files();
    test_transcript();
    test_text_view();
    return tap_done();
}
