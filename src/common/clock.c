#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

int64_t pb_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t pb_wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void pb_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    /* an interrupting signal ends the sleep: the caller re-checks its stop flag */
    nanosleep(&ts, NULL);
}

struct timeval pb_ms_timeval(int64_t ms)
{
    if (ms < 0)
        ms = 0;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

void pb_format_utc_us(int64_t us, char *out, size_t n)
{
    time_t sec = (time_t)(us / 1000000);
    long frac = (long)(us % 1000000);
    if (frac < 0) {
        sec--;
        frac += 1000000;
    }
    struct tm tm;
    gmtime_r(&sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%06ldZ", frac);
}
