/* Exponential backoff with jitter for publish retries and reconnects. */
#ifndef PB_COMMON_BACKOFF_H
#define PB_COMMON_BACKOFF_H

#include <stdint.h>

/* Delay before retry number `attempt` (1 = first retry): min(cap, base * 2^(attempt-1)),
 * scaled by a random factor in [0.5, 1.0] ("equal jitter") so that relays restarted together do
 * not retry in lockstep. rnd is a uniform value in [0, 1). */
int64_t pb_backoff_ms(int attempt, int64_t base_ms, int64_t cap_ms, double rnd);

/* A random value in [0, 1) from a per-thread generator seeded from the clock and pid. */
double pb_random_unit(void);

#endif
