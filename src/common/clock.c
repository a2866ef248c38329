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

/* The civil date of a day count since 1970-01-01 (Howard Hinnant's days_from_civil inverse, exact
 * for the proleptic Gregorian calendar). */
static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);                          /* [0, 146096] */
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* [0, 365] */
    unsigned mp = (5 * doy + 2) / 153;                                    /* [0, 11] */
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static char *put2(char *p, unsigned v)
{
    p[0] = (char)('0' + v / 10);
    p[1] = (char)('0' + v % 10);
    return p + 2;
}

/* Written by hand, not with gmtime_r and strftime: every sink formats an event's created_at per
 * message (NATS header, Redis field, CloudEvents time), and this is a few dozen instructions. */
void pb_format_utc_us(int64_t us, char *out, size_t n)
{
    int64_t sec = us / 1000000;
    int64_t frac = us % 1000000;
    if (frac < 0) {
        sec--;
        frac += 1000000;
    }
    int64_t days = sec / 86400, sod = sec % 86400;
    if (sod < 0) {
        days--;
        sod += 86400;
    }
    int64_t y;
    unsigned mo, d;
    civil_from_days(days, &y, &mo, &d);
    if (y < 0 || y > 9999 || n < PB_UTC_TEXT_LEN) { /* a year RFC 3339 cannot write; short out */
        snprintf(out, n, "%04lld-%02u-%02uT%02u:%02u:%02u.%06lldZ", (long long)y, mo, d,
                 (unsigned)(sod / 3600), (unsigned)(sod / 60 % 60), (unsigned)(sod % 60),
                 (long long)frac);
        return;
    }
    char *p = out;
    p = put2(p, (unsigned)(y / 100));
    p = put2(p, (unsigned)(y % 100));
    *p++ = '-';
    p = put2(p, mo);
    *p++ = '-';
    p = put2(p, d);
    *p++ = 'T';
    p = put2(p, (unsigned)(sod / 3600));
    *p++ = ':';
    p = put2(p, (unsigned)(sod / 60 % 60));
    *p++ = ':';
    p = put2(p, (unsigned)(sod % 60));
    *p++ = '.';
    unsigned f = (unsigned)frac;
    for (int i = 5; i >= 0; i--) {
        p[i] = (char)('0' + f % 10);
        f /= 10;
    }
    p += 6;
    *p++ = 'Z';
    *p = '\0';
}
