/* Time helpers: monotonic milliseconds for deadlines, wall clock for logs and AMQP timestamps. */
#ifndef PB_COMMON_CLOCK_H
#define PB_COMMON_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

int64_t pb_monotonic_ms(void);
int64_t pb_wall_us(void);
/* Sleeps up to ms milliseconds; returns early when a signal arrives (so shutdown is prompt). */
void pb_sleep_ms(int64_t ms);
/* ms milliseconds as a struct timeval for select-style timeouts; a negative ms counts as 0. */
struct timeval pb_ms_timeval(int64_t ms);

/* us microseconds since the epoch as ISO 8601 UTC with microseconds, "2026-12-01T11:00:00.123456Z"
 * (how every sink writes an event's created_at as text); n >= PB_UTC_TEXT_LEN. */
#define PB_UTC_TEXT_LEN 32
void pb_format_utc_us(int64_t us, char *out, size_t n);

#endif
