/* test_endpoint.c: issue 23's wire pieces: HELLO's optional token (after
 * a NUL that ends the model name), the constant-time token comparison,
 * the token file, and HOST:PORT parsing (src/wire/endpoint.c, frame.c). */
#include "wire/endpoint.h"
#include "wire/frame.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_hello_token(void)
{
    mt_hello h, u;
    uint8_t buf[MT_HELLO_MAX];
    memset(&h, 0, sizeof h);
    h.sample_rate = 24000;
    h.frame_samples = 1920;
    h.channels = 1;
    h.encoding = MT_ENC_PCM_S16LE;
    snprintf(h.model, sizeof h.model, "moshi");
    long n0 = mt_hello_encode(&h, buf, sizeof buf);
    is_int(n0, 17, "no token: the version-1 payload, unchanged");
    memcpy(h.token, "s3cret-token-0123", 17);
    h.token_len = 17;
    long n = mt_hello_encode(&h, buf, sizeof buf);
    is_int(n, 17 + 1 + 17, "token: NUL then the token after the name");
    ok(buf[17] == 0, "the NUL ends the name");
    memset(&u, 0xAB, sizeof u);
    is_int(mt_hello_decode(buf, (size_t)n, &u), 0, "decodes");
    is_str(u.model, "moshi", "name read back");
    ok(u.token_len == 17 && memcmp(u.token, h.token, 17) == 0, "token read back");
    memset(&u, 0xAB, sizeof u);
    mt_hello_decode(buf, (size_t)n0, &u);
    is_int(u.token_len, 0, "a payload without a NUL has no token");

    /* the decoder's refusals */
    buf[17 + 1 + 3] = ' ';
    is_int(mt_hello_decode(buf, (size_t)n, &u), MT_FERR_PAYLOAD, "a space in the token refused");
    is_int(mt_hello_decode(buf, 18, &u), MT_FERR_PAYLOAD, "an empty token refused");
    uint8_t big[MT_HELLO_MAX + 8];
    memcpy(big, buf, 17);
    big[17] = 0;
    memset(big + 18, 'a', MT_TOKEN_MAX + 1);
    is_int(mt_hello_decode(big, 18 + MT_TOKEN_MAX, &u), 0, "a token of MT_TOKEN_MAX bytes reads");
    is_int(mt_hello_decode(big, 18 + MT_TOKEN_MAX + 1, &u), MT_FERR_PAYLOAD, "one more byte refused");
    memset(big + 12, 'n', 70);
    is_int(mt_hello_decode(big, 12 + 70, &u), MT_FERR_PAYLOAD,
           "a name over 63 bytes refused (the payload limit grew, the name's did not)");
    h.token_len = 3;
    memcpy(h.token, "a b", 3);
    is_int(mt_hello_encode(&h, buf, sizeof buf), MT_FERR_ARG, "the encoder refuses a bad token");
}

static void test_token_equal(void)
{
    ok(mt_token_equal("abcdefghijklmnop", 16, "abcdefghijklmnop", 16), "equal");
    ok(!mt_token_equal("abcdefghijklmnop", 16, "abcdefghijklmnoq", 16), "last byte differs");
    ok(!mt_token_equal("abcdefghijklmnop", 16, "abcdefghijklmno", 15), "prefix is not equal");
    ok(!mt_token_equal("", 0, "abcdefghijklmnop", 16), "empty is not equal");
}

static void test_token_file(void)
{
    char path[] = "/tmp/mt-tok-XXXXXX", tok[MT_TOKEN_MAX + 1], err[256];
    size_t len = 0;
    int fd = mkstemp(path);
    ok(fd >= 0, "temp file");
    const char *text = "  Zm9vYmFyYmF6cXV1eDEyMzQ1Njc4  \nsecond line\n";
    ok(write(fd, text, strlen(text)) == (ssize_t)strlen(text), "written");
    close(fd);
    is_int(mt_token_read(path, tok, sizeof tok, &len, err, sizeof err), 0, "reads");
    is_str(tok, "Zm9vYmFyYmF6cXV1eDEyMzQ1Njc4", "first line, blanks trimmed");
    is_int((int)len, 28, "its length");
    FILE *f = fopen(path, "w");
    fputs("short\n", f);
    fclose(f);
    is_int(mt_token_read(path, tok, sizeof tok, &len, err, sizeof err), -1, "a short token refused");
    like(err, "16 to 128 bytes", "saying how long it must be");
    unlink(path);
    is_int(mt_token_read(path, tok, sizeof tok, &len, err, sizeof err), -1, "a missing file refused");
}

static void test_hostport(void)
{
    char h[64], p[16], err[128];
    is_int(mt_hostport_split("127.0.0.1:7000", h, sizeof h, p, sizeof p, err, sizeof err), 0, "v4");
    ok(!strcmp(h, "127.0.0.1") && !strcmp(p, "7000"), "v4 split");
    is_int(mt_hostport_split("[::1]:80", h, sizeof h, p, sizeof p, err, sizeof err), 0, "v6");
    ok(!strcmp(h, "::1") && !strcmp(p, "80"), "v6 split");
    is_int(mt_hostport_split("*:9", h, sizeof h, p, sizeof p, err, sizeof err), 0, "wildcard");
    is_int(mt_hostport_split("::1:80", h, sizeof h, p, sizeof p, err, sizeof err), -1,
           "v6 without brackets refused");
    like(err, "brackets", "saying to use brackets");
    is_int(mt_hostport_split("host", h, sizeof h, p, sizeof p, err, sizeof err), -1, "no port refused");
    is_int(mt_hostport_split("host:99999", h, sizeof h, p, sizeof p, err, sizeof err), -1, "port > 65535 refused");
    is_int(mt_hostport_split("host:8x", h, sizeof h, p, sizeof p, err, sizeof err), -1, "bad port refused");
    ok(mt_endpoint_is_tcp("tcp:a:1") && !mt_endpoint_is_tcp("/tmp/tcp:x"), "tcp: prefix only");
}

int main(void)
{
    test_hello_token();
    test_token_equal();
    test_token_file();
    test_hostport();
    return tap_done();
}
