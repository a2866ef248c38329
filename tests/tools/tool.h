/* What every test tool (amqp-tool, nats-tool, kafka-tool, redis-tool) and tools/kafka-mock
 * needs: dying with a message, a bounded number from the command line, a monotonic clock.
 * Include it once, after defining TOOL_NAME (e.g. "redis-tool") and TOOL_DIE_STATUS (the exit
 * status of die). */
#ifndef PB_TESTS_TOOL_H
#define PB_TESTS_TOOL_H

#include <errno.h>
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

#endif
