#include "common/backoff.h"

#include <stdbool.h>
#include <time.h>
#include <unistd.h>

int64_t pb_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms, double rnd)
{
    if (attempt < 1)
        attempt = 1;
    int64_t delay = base_ms;
    for (int i = 1; i < attempt && delay < cap_ms; i++)
        delay *= 2;
    if (delay > cap_ms)
        delay = cap_ms;
    if (rnd < 0)
        rnd = 0;
    if (rnd >= 1)
        rnd = 0.999999;
    /* equal jitter: half fixed, half random, never below base/2 */
    int64_t half = delay / 2;
    return half + (int64_t)((double)(delay - half) * rnd);
}

double pb_random_unit(void)
{
    /* xorshift64*: enough for jitter, no locking, no global libc state */
    static _Thread_local uint64_t state; /* per thread: the janitor and nats threads use it too */
    if (state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        state = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40) ^
                (uint64_t)(uintptr_t)&state; /* differs per thread */
        if (state == 0)
            state = 0x9e3779b97f4a7c15ULL;
    }
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    uint64_t r = state * 0x2545f4914f6cdd1dULL;
    return (double)(r >> 11) / (double)(1ULL << 53);
}
