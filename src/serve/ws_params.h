/* ws_params.h: the sampling settings Kyutai's clients send as URL
 * parameters on /api/chat (their web client's Settings panel; Kyutai's
 * Rust server reads the same names), read into the session's HELLO.
 *
 * Honoured, range-checked (a value out of range or not a number refuses
 * the connection, naming the parameter):
 *   text_temperature, audio_temperature   0..10 (0: greedy)
 *   text_topk, audio_topk                 0..65536 (0: every token)
 *   text_seed, audio_seed                 0..2^64-1: one generator draws
 *       both streams here, so the session's seed is text_seed, audio_seed,
 *       or both mixed (text_seed xor audio_seed rotated by 32 bits); 0
 *       leaves the server's --seed.
 * Not implemented, ignored and named (the caller logs them): pad_mult,
 * repetition_penalty, repetition_penalty_context, and any other name but
 * the auth ones (auth_id, worker_auth_id). */
#ifndef MT_WS_PARAMS_H
#define MT_WS_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include "wire/frame.h"

/* query: the part after '?' (may be empty). Sets h's sampling block
 * (smp_mask and values) and *seed (0: none given). said: the honoured
 * ones "name=value ..." for the log; ignored: the names not honoured,
 * comma-separated (both may be cut short at their caps). 0, or -1 with
 * why ("text_temperature=11: outside 0..10"). */
int mt_ws_chat_params(const char *query, mt_hello *h, uint64_t *seed, char *said,
                      size_t saidcap, char *ignored, size_t igncap, char *why,
                      size_t whycap);

#endif
