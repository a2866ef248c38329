/* What every test tool (amqp-tool, nats-tool, kafka-tool, redis-tool) and tools/kafka-mock
 * needs: dying with a message, a bounded number from the command line, a monotonic clock.
 * Include it once, after defining TOOL_NAME (e.g. "redis-tool") and TOOL_DIE_STATUS (the exit
 * status of die). */
#ifndef PB_TESTS_TOOL_H
#define PB_TESTS_TOOL_H

#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: ", TOOL_NAME);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(TOOL_DIE_STATUS);
}

__attribute__((unused)) static long parse_long(const char *s, const char *what, long min,
                                               long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        die("%s must be an integer in %ld..%ld, got '%s'", what, min, max, s);
    return v;
}

__attribute__((unused)) static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Paced publishers (publish-raw --rate): per-message latencies in seconds, summarised. */
typedef struct {
    double p50, p99, p999, max; /* milliseconds */
} lat_summary_t;

__attribute__((unused)) static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts lat (n > 0) and takes nearest-rank percentiles (the ceil(n * p)-th smallest), as
 * bench/relay-cdc's awk does for the relay's latencies, so the two are read the same way. */
__attribute__((unused)) static lat_summary_t lat_summarise(double *lat, size_t n)
{
    qsort(lat, n, sizeof *lat, cmp_double);
    const double ps[3] = {0.50, 0.99, 0.999};
    double v[3];
    for (int k = 0; k < 3; k++) {
        size_t r = (size_t)((double)n * ps[k] + 0.999999);
        v[k] = lat[(r < 1 ? 1 : r > n ? n : r) - 1] * 1000.0;
    }
    return (lat_summary_t){v[0], v[1], v[2], lat[n - 1] * 1000.0};
}

/* Sleeps until the monotonic time t (now_s's clock). */
__attribute__((unused)) static void sleep_until(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

#endif
