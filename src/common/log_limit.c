#include "common/log_limit.h"

void pb_log_limit_init(pb_log_limit_t *lim, int64_t interval_ms)
{
    lim->interval_ms = interval_ms;
    lim->last_ms = 0;
    lim->logged = false;
    lim->skipped = 0;
}

bool pb_log_limit_pass(pb_log_limit_t *lim, int64_t now_ms, uint64_t *skipped)
{
    if (lim->logged && now_ms - lim->last_ms < lim->interval_ms) {
        lim->skipped++;
        return false;
    }
    *skipped = lim->skipped;
    lim->skipped = 0;
    lim->logged = true;
    lim->last_ms = now_ms;
    return true;
}
