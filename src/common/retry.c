#include "common/retry.h"

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"

#define FIRST_DELAY_MS 200

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

pb_status_t pb_retry_connect(pb_retry_t *r, pb_status_t (*connect)(void *arg, pb_error_t *err),
                             void *arg, pb_error_t *err)
{
    while (!*r->stop) {
        pb_status_t st = connect(arg, err);
        if (st == PB_OK) {
            if (r->attempt)
                log_info(r->fac, "connected to %s after %d attempts", r->what, r->attempt + 1);
            r->attempt = 0;
            return PB_OK;
        }
        if (st == PB_FATAL)
            return st;
        r->attempt++;
        int64_t delay = pb_backoff_ms(r->attempt, FIRST_DELAY_MS, r->cap_ms, pb_random_unit());
        log_warn(r->fac, "waiting for %s (attempt %d, next in %lld ms): %s", r->what, r->attempt,
                 (long long)delay, err->msg);
        if (!r->wait) {
            pb_nap(r->stop, delay);
            continue;
        }
        pb_error_t why;
        if ((st = r->wait(r->wait_arg, delay, &why)) != PB_OK) {
            *err = why;
            return st;
        }
    }
    return pb_fail(err, PB_TRANSIENT, "interrupted while waiting for %s", r->what);
}
