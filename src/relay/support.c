#include "relay/support.h"

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"

void pb_nap(volatile sig_atomic_t *stop, int64_t ms)
{
    int64_t until = pb_monotonic_ms() + ms;
    while (!*stop) {
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            break;
        pb_sleep_ms(left < 200 ? left : 200);
    }
}

pb_status_t pb_connect_sink(pb_sink_t *snk, int *attempt, int64_t cap_ms,
                            volatile sig_atomic_t *stop, pb_error_t *err)
{
    while (!*stop) {
        pb_status_t st = snk->ops->connect(snk, err);
        if (st == PB_OK) {
            if (*attempt)
                log_info("relay", "%s sink connected after %d attempts", snk->ops->name, *attempt + 1);
            *attempt = 0;
            return PB_OK;
        }
        if (st == PB_FATAL)
            return st;
        (*attempt)++;
        int64_t delay = pb_backoff_ms(*attempt, 200, cap_ms, pb_random_unit());
        log_warn("relay", "waiting for the %s broker (attempt %d, next in %lld ms): %s",
                 snk->ops->name, *attempt, (long long)delay, err->msg);
        pb_nap(stop, delay);
    }
    return pb_fail(err, PB_TRANSIENT, "interrupted while waiting for the broker");
}

#define TOTALS_LOG_INTERVAL_MS 10000

void pb_relay_totals_log(pb_relay_totals_t *t, const char *fac, bool force)
{
    int64_t now = pb_monotonic_ms();
    if (!force && now - t->logged_at < TOTALS_LOG_INTERVAL_MS)
        return;
    uint64_t delta = t->published - t->logged_published;
    double secs = (double)(now - t->logged_at) / 1000.0;
    if (delta || force)
        log_info(fac, "published %llu events in %.1f s (%.0f/s); totals: published %llu, "
                      "retried %llu, dead-lettered %llu",
                 (unsigned long long)delta, secs, secs > 0 ? (double)delta / secs : 0.0,
                 (unsigned long long)t->published, (unsigned long long)t->retried,
                 (unsigned long long)t->dead);
    t->logged_published = t->published;
    t->logged_at = now;
}
