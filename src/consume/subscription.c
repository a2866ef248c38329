#include "consume/subscription.h"

#include <stdio.h>
#include <string.h>

bool pb_subscription_waits_for_gaps(const pb_config_t *cfg, const pb_source_t *src, char *why,
                                    size_t n)
{
    if (strcmp(cfg->consume_wait_for_gaps, "always") == 0) {
        snprintf(why, n, "consume.wait_for_gaps = always");
        return true;
    }
    if (strcmp(cfg->consume_wait_for_gaps, "never") == 0) {
        snprintf(why, n, "consume.wait_for_gaps = never");
        return false;
    }
    if (cfg->consume_gap_timeout == 0) {
        snprintf(why, n, "consume.gap_timeout = 0");
        return false;
    }
    if (src->ops->takes_every_event)
        return src->ops->takes_every_event(src, why, n);
    snprintf(why, n, "the %s source cannot tell whether it receives every event of an "
                     "aggregate", src->ops->name);
    return false;
}
