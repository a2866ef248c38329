/* A rate limit for one repeating log line (a warning that input from outside can trigger at
 * will): at most one line per interval, each telling how many were skipped since the last. */
#ifndef PB_COMMON_LOG_LIMIT_H
#define PB_COMMON_LOG_LIMIT_H

#include <stdbool.h>
#include <stdint.h>

typedef struct pb_log_limit {
    int64_t interval_ms;
    int64_t last_ms;  /* when the last line went out (valid once logged) */
    bool logged;      /* a line went out already */
    uint64_t skipped; /* occurrences held back since that line */
} pb_log_limit_t;

/* A limiter letting one line through per interval_ms; the first occurrence always passes. */
void pb_log_limit_init(pb_log_limit_t *lim, int64_t interval_ms);

/* Records one occurrence at now_ms (monotonic). True when its line is to be written: then
 * *skipped receives how many occurrences were held back since the previous line, and the count
 * starts again. False: the occurrence is counted and nothing is to be written. */
bool pb_log_limit_pass(pb_log_limit_t *lim, int64_t now_ms, uint64_t *skipped);

#endif
