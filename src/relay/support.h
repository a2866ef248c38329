/* Pieces both relay loops (poll and cdc) share. */
#ifndef PB_RELAY_SUPPORT_H
#define PB_RELAY_SUPPORT_H

#include <signal.h>
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

#endif
