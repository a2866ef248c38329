/* Pieces both relay loops (poll and cdc) share. */
#ifndef PB_RELAY_SUPPORT_H
#define PB_RELAY_SUPPORT_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "sink/sink.h"

/* Sleeps ms milliseconds in short naps, returning early once *stop is set. */
void pb_nap(volatile sig_atomic_t *stop, int64_t ms);

/* Connects the sink, retrying transient failures with backoff (capped at cap_ms) and logging
 * what it waits for. *attempt counts consecutive failures across calls (0 after success).
 * PB_FATAL for what no retry fixes; PB_TRANSIENT only when interrupted by *stop. */
pb_status_t pb_connect_sink(pb_sink_t *snk, int *attempt, int64_t cap_ms,
                            volatile sig_atomic_t *stop, pb_error_t *err) PB_MUSTCHECK;

/* Event totals of a relay and the periodic log line about them. */
typedef struct pb_relay_totals {
    uint64_t published, retried, dead;
    uint64_t logged_published; /* published at the last log line */
    int64_t logged_at;         /* monotonic ms of the last log line */
} pb_relay_totals_t;

/* Logs throughput since the last line and the totals, at most every 10 s unless force. */
void pb_relay_totals_log(pb_relay_totals_t *t, const char *fac, bool force);

#endif
