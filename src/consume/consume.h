/* `postbox consume`: broker -> inbox + SQL handler, exactly once in effect. */
#ifndef PB_CONSUME_CONSUME_H
#define PB_CONSUME_CONSUME_H

#include <signal.h>
#include <stdbool.h>

#include "common/err.h"
#include "config/config.h"

typedef struct pb_consume_opts {
    bool drain; /* return once the queue has nothing for us and no failed message waits */
    bool *config_error; /* optional: set when the error lies in the configuration (found before
                         * any connection), which the command reports as exit status 2 */
} pb_consume_opts_t;

/* Runs until *stop (the batch in flight is committed and acknowledged first) or, with drain,
 * the queue is empty. Waits with backoff while PostgreSQL or the broker is unreachable.
 * PB_FATAL for errors no retry fixes. */
pb_status_t pb_consume_run(const pb_config_t *cfg, const pb_consume_opts_t *opts,
                           volatile sig_atomic_t *stop, pb_error_t *err) PB_MUSTCHECK;

#endif
