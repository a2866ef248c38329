/* Rate limit for a log record that can repeat at the rate of the traffic (a masking rule that
 * did not fit an event, a client closed for being slow): at most one record per interval, and
 * the records held back in between are counted, so the next one can say how many there were.
 * Not locked: each limiter belongs to one thread. */
#ifndef PB_COMMON_LOG_LIMIT_H
#define PB_COMMON_LOG_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pb_log_limit {
    int64_t every_ms; /* the interval; set it, the rest starts zeroed */
    int64_t next_ms;  /* the earliest time of the next record */
    bool started;
    uint64_t held;    /* records held back since the last one written */
} pb_log_limit_t;

/* Whether a record may be written at now_ms. When it may, *held_back gets the number of records
 * held back since the previous one (and the count starts again); when not, it is counted. */
bool pb_log_limit_pass(pb_log_limit_t *lim, int64_t now_ms, uint64_t *held_back);

#endif
