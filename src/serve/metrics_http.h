/* metrics_http.h: mt-serve's --metrics endpoint: a small HTTP/1.1 server
 * on its own thread answering GET (and HEAD) /metrics with the registry's
 * exposition (serve/metrics.h) and /health with "ok" or why not.
 *
 * Its own thread and poll loop, apart from the sessions' epoll loop: a
 * scraper, slow or hostile, can delay nothing but other scrapes. Every
 * connection is hostile: the request head is bounded (wire/http.h), the
 * whole exchange has a deadline, connections are capped (the oldest one
 * still sending its request makes room for a new one), one request per
 * connection (Connection: close).
 *
 * The address follows --listen's rules: off loopback it needs a token
 * (then /metrics wants "Authorization: Bearer TOKEN", as Prometheus sends
 * with its `authorization` setting) or insecure; /health never does.
 */
#ifndef MT_METRICS_HTTP_H
#define MT_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "serve/metrics.h"

typedef struct mt_metrics_http_opts {
    const char *addr;          /* HOST:PORT (port 0: any free one) */
    const char *token;         /* /metrics requires it as a bearer token;
                                  NULL: none */
    size_t      token_len;
    int         insecure;      /* allow a non-loopback addr without token */
    mt_metrics *metrics;
    /* /health: 0 healthy, or -1 with why (a failed decoder, ...) */
    int       (*health)(void *ctx, char *why, size_t whylen);
    void       *health_ctx;
    uint64_t    timeout_ns;    /* request read + answer written; 0: 5 s */
    int         max_conns;     /* 0: 16 */
    void      (*log)(void *ctx, const char *msg);
    void       *log_ctx;
} mt_metrics_http_opts;

typedef struct mt_metrics_http mt_metrics_http;

/* Binds addr and starts the thread. bound gets the address as bound.
 * 0, or -1 with err. */
int  mt_metrics_http_start(const mt_metrics_http_opts *o, mt_metrics_http **out,
                           char *bound, size_t boundcap, char *err, size_t errlen);
/* Stops the thread, closes every connection and the listener. */
void mt_metrics_http_stop(mt_metrics_http *h);

#endif
