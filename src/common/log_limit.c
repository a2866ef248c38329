#include "common/log_limit.h"

bool pb_log_limit_pass(pb_log_limit_t *lim, int64_t now_ms, uint64_t *held_back)
{
    if (lim->started && now_ms < lim->next_ms) {
        lim->held++;
        return false;
    }
    *held_back = lim->held;
    lim->held = 0;
    lim->started = true;
    lim->next_ms = now_ms + lim->every_ms;
    return true;
}
