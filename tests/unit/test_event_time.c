/* Unit tests for an event's times (common/event.h): whether it expired, the lifetime it has left
 * for a broker's per-message TTL (RabbitMQ's expiration), when it became publishable, and how
 * times before 1970 are taken. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/event.h"

#define NOW INT64_C(1796036614000000) /* 2026-12-01 */

static void expiry(void **state)
{
    (void)state;
    pb_event_t ev = {0};
    assert_false(pb_event_expired(&ev, NOW)); /* none: never */
    ev.expires_at_us = NOW + 1;
    assert_false(pb_event_expired(&ev, NOW));
    ev.expires_at_us = NOW;
    assert_true(pb_event_expired(&ev, NOW)); /* at its expiry it is past it */
    ev.expires_at_us = 1;
    assert_true(pb_event_expired(&ev, NOW));
}

static void lifetime_left(void **state)
{
    (void)state;
    pb_event_t ev = {0};
    assert_int_equal(pb_event_ttl_ms(&ev, NOW), -1); /* no TTL to send */
    ev.expires_at_us = NOW + 60000000;
    assert_int_equal(pb_event_ttl_ms(&ev, NOW), 60000);
    /* rounded down: a broker dropping it after that many ms never holds it past its expiry */
    ev.expires_at_us = NOW + 1999;
    assert_int_equal(pb_event_ttl_ms(&ev, NOW), 1);
    ev.expires_at_us = NOW + 999;
    assert_int_equal(pb_event_ttl_ms(&ev, NOW), 0);
    ev.expires_at_us = NOW;
    assert_int_equal(pb_event_ttl_ms(&ev, NOW), 0);
    ev.expires_at_us = NOW - 5000000;
    assert_int_equal(pb_event_ttl_ms(&ev, NOW), 0);
    /* beyond RabbitMQ's limit (2^32 - 1 ms, some 49.7 days): the sink sends none */
    ev.expires_at_us = NOW + (PB_AMQP_MAX_TTL_MS + 1) * 1000;
    assert_true(pb_event_ttl_ms(&ev, NOW) > PB_AMQP_MAX_TTL_MS);
    ev.expires_at_us = NOW + PB_AMQP_MAX_TTL_MS * 1000;
    assert_true(pb_event_ttl_ms(&ev, NOW) == PB_AMQP_MAX_TTL_MS);
}

static void due_time(void **state)
{
    (void)state;
    pb_event_t ev = {.created_at_us = NOW};
    assert_true(pb_event_due_us(&ev) == NOW);
    ev.available_at_us = NOW - 1000; /* available before its commit: due at its commit */
    assert_true(pb_event_due_us(&ev) == NOW);
    ev.available_at_us = NOW + 86400000000;
    assert_true(pb_event_due_us(&ev) == NOW + 86400000000);
}

static void times_before_1970(void **state)
{
    (void)state;
    pb_event_t ev = {.available_at_us = -5, .expires_at_us = -5};
    pb_event_fix_times(&ev);
    assert_true(ev.available_at_us == 0); /* long due */
    assert_true(ev.expires_at_us == 1);   /* long past, not "never" */
    assert_true(pb_event_expired(&ev, NOW));
    pb_event_t none = {0};
    pb_event_fix_times(&none);
    assert_true(none.available_at_us == 0 && none.expires_at_us == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(expiry),
        cmocka_unit_test(lifetime_left),
        cmocka_unit_test(due_time),
        cmocka_unit_test(times_before_1970),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
