/* Waiting for a server: connect, and on a transient failure try again after a backoff delay
 * (exponential, with jitter, capped), logging what is waited for. One loop for the relay's sink,
 * the consumer's source and PostgreSQL connections. */
#ifndef PB_COMMON_RETRY_H
#define PB_COMMON_RETRY_H

#include <signal.h>
#include <stdint.h>

#include "common/err.h"

/* Sleeps ms milliseconds in short naps, returning early once *stop is set. */
void pb_nap(volatile sig_atomic_t *stop, int64_t ms);

typedef struct pb_retry {
    const char *fac;  /* log facility */
    const char *what; /* what is waited for, e.g. "the amqp broker" */
    int64_t cap_ms;   /* longest delay */
    volatile sig_atomic_t *stop;
    /* Optional (NULL: pb_nap): waits ms, doing upkeep meanwhile (e.g. keeping a replication
     * stream alive); an error ends the wait and the retries. */
    pb_status_t (*wait)(void *arg, int64_t ms, pb_error_t *err);
    void *wait_arg;
    int attempt; /* consecutive failures so far; reset by a success */
} pb_retry_t;

/* Calls connect(arg, err) until it returns PB_OK or PB_FATAL, waiting the backoff between
 * PB_TRANSIENT failures. PB_TRANSIENT only when *stop was set (or the wait failed). */
pb_status_t pb_retry_connect(pb_retry_t *r, pb_status_t (*connect)(void *arg, pb_error_t *err),
                             void *arg, pb_error_t *err) PB_MUSTCHECK;

#endif
