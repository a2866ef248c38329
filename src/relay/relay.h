/* The relay: committed events (poll or cdc capture, relay.capture) -> the sink (relay.sink),
 * until told to stop. */
#ifndef PB_RELAY_RELAY_H
#define PB_RELAY_RELAY_H

#include <signal.h>
#include <stdbool.h>

#include "common/err.h"
#include "config/config.h"

typedef struct pb_relay_opts {
    bool drain; /* return once every committed event is relayed (tests, one-shot jobs) */
    bool *config_error; /* optional: set when the error lies in the configuration (found before
                         * any connection), which the command reports as exit status 2 */
} pb_relay_opts_t;

/* Runs until *stop is set (the batch in flight is finished first) or, with drain, nothing is
 * pending. Waits (with backoff, logging what it waits for) while PostgreSQL or the broker is
 * unreachable. Serves /metrics meanwhile. Returns PB_OK on a clean stop, PB_FATAL on an error no
 * retry can fix (err). */
pb_status_t pb_relay_run(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                         volatile sig_atomic_t *stop, pb_error_t *err) PB_MUSTCHECK;

#endif
