/* tokenizer.h: a text model's id -> piece table, read from a SentencePiece
 * .model file (the protobuf ModelProto Kyutai publishes beside its LM), so
 * that the text tokens a Kyutai model makes can be shown as text. Only the
 * pieces are read (no encoder, no normalizer): ids in, UTF-8 out. */
#ifndef MT_TOKENIZER_H
#define MT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct mt_tokenizer mt_tokenizer;

/* The largest .model file read, and the most pieces one may hold. */
#define MT_TOKENIZER_MAX_BYTES  (64u << 20)
#define MT_TOKENIZER_MAX_PIECES (1 << 22)
/* The longest piece, in bytes. */
#define MT_TOKENIZER_MAX_PIECE  4096

/* Loads a SentencePiece .model file (a regular file: a FIFO or device is
 * refused, not waited on). NULL on failure, with the reason in
 * mt_tokenizer_error() (of the calling thread). */
mt_tokenizer *mt_tokenizer_load(const char *path);
/* Why the calling thread's last mt_tokenizer_load failed. */
const char *mt_tokenizer_error(void);
/* mt_tokenizer_load with the reason in err[0..errlen). */
mt_tokenizer *mt_tokenizer_load_err(const char *path, char *err, size_t errlen);
/* The same from the file's bytes (len at most MT_TOKENIZER_MAX_BYTES). */
mt_tokenizer *mt_tokenizer_parse(const uint8_t *buf, size_t len, char *err, size_t errlen);

/* The number of pieces (ids 0 .. size-1). */
int mt_tokenizer_size(const mt_tokenizer *t);
/* Id's piece as UTF-8 with SentencePiece's word mark U+2581 turned into a
 * space (as Kyutai's server and clients show it); NULL for an id out of
 * range or a CONTROL piece (<s>, </s>). Byte pieces read "<0xNN>", as
 * SentencePiece's id_to_piece gives them. Valid until mt_tokenizer_free. */
const char *mt_tokenizer_piece(const mt_tokenizer *t, int id);
void mt_tokenizer_free(mt_tokenizer *t);

/* Whether Kyutai's server and clients show no text for a text token: ids 0
 * (end-of-text padding) and 3 (text padding), fixed in their code
 * (moshi/server.py, run_inference.py), whatever the tokenizer says. */
int mt_tokenizer_kyutai_silent(int32_t id);

#endif
