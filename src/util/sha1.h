/* sha1.h: SHA-1 (FIPS 180-4) and base64 (RFC 4648), for the one place
 * the WebSocket handshake needs them: Sec-WebSocket-Accept (RFC 6455 4.2.2).
 * Not for anything that needs a secure hash. */
#ifndef MT_SHA1_H
#define MT_SHA1_H

#include <stddef.h>
#include <stdint.h>

/* out: the 20-byte digest of data[0..len) */
void mt_sha1(const void *data, size_t len, uint8_t out[20]);

/* base64 of in[0..len) into out (4 * ceil(len / 3) + 1 bytes, NUL
 * included). Returns the length written without the NUL. */
size_t mt_base64(const uint8_t *in, size_t len, char *out);

#endif
