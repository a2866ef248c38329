/* Time helpers: monotonic milliseconds for deadlines, wall clock for logs and AMQP timestamps. */
#ifndef PB_COMMON_CLOCK_H
#define PB_COMMON_CLOCK_H

#include <stdint.h>
#include <sys/time.h>

int64_t pb_monotonic_ms(void);
int64_t pb_wall_us(void);
/* Sleeps up to ms milliseconds; returns early when a signal arrives (so shutdown is prompt). */
void pb_sleep_ms(int64_t ms);
/* ms milliseconds as a struct timeval for select-style timeouts; a negative ms counts as 0. */
struct timeval pb_ms_timeval(int64_t ms);

#endif
