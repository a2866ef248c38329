/* Unit tests for the queue bound probe's reading of RabbitMQ's refusals
 * (pb_amqp_parse_inequivalent) and for its verdict in postbox check (pb_judge_amqp_queue_probed):
 * no network. The texts are RabbitMQ 3.10's own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "broker/amqp/queue_bound.h"
#include "check/judge.h"
#include "config/config.h"

#define PREFIX "probe queue: channel closed by rabbitmq: 406 PRECONDITION_FAILED - "

static void reads_typed_values(void **state)
{
    (void)state;
    pb_amqp_inequivalent_t a;
    assert_true(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but "
               "current is the value '604800000' of type 'signedint'", &a));
    assert_string_equal(a.name, "x-message-ttl");
    assert_int_equal(a.kind, AMQP_FIELD_KIND_I32);
    assert_int_equal(a.num, 604800000);
    assert_true(pb_amqp_arg_bounds_queue(a.name));

    assert_true(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-dead-letter-exchange' for queue 'q' in vhost '/': received "
               "none but current is the value 'it's dlx' of type 'longstr'", &a));
    assert_string_equal(a.name, "x-dead-letter-exchange");
    assert_int_equal(a.kind, AMQP_FIELD_KIND_UTF8);
    assert_string_equal(a.str, "it's dlx"); /* a quote inside the value */
    assert_false(pb_amqp_arg_bounds_queue(a.name));

    assert_true(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-single-active-consumer' for queue 'q' in vhost '/': received "
               "none but current is the value 'true' of type 'bool'", &a));
    assert_int_equal(a.kind, AMQP_FIELD_KIND_BOOLEAN);
    assert_true(a.flag);

    assert_true(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-max-length-bytes' for queue 'q' in vhost '/': received none "
               "but current is the value '1000' of type 'long'", &a));
    assert_int_equal(a.kind, AMQP_FIELD_KIND_I64);
    assert_int_equal(a.num, 1000);
    assert_true(pb_amqp_arg_bounds_queue(a.name));
}

static void reads_sent_values_and_flags(void **state)
{
    (void)state;
    pb_amqp_inequivalent_t a;
    assert_true(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-queue-type' for queue 'q' in vhost '/': received 'classic' "
               "but current is 'quorum'", &a));
    assert_string_equal(a.name, "x-queue-type");
    assert_int_equal(a.kind, AMQP_FIELD_KIND_UTF8);
    assert_string_equal(a.str, "quorum");

    assert_true(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but "
               "current is 'false'", &a));
    assert_string_equal(a.name, "durable");
    assert_int_equal(a.kind, AMQP_FIELD_KIND_BOOLEAN);
    assert_false(a.flag);
    assert_false(pb_amqp_arg_bounds_queue("durable"));
}

static void refuses_what_it_cannot_repeat(void **state)
{
    (void)state;
    pb_amqp_inequivalent_t a;
    assert_false(pb_amqp_parse_inequivalent("probe queue: channel closed by rabbitmq: 405 "
                                            "RESOURCE_LOCKED - cannot obtain exclusive access", &a));
    assert_false(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-args' for queue 'q' in vhost '/': received none but current "
               "is the value '[1,2]' of type 'array'", &a));
    assert_false(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received none but "
               "current is the value 'ten' of type 'signedint'", &a));
    assert_false(pb_amqp_parse_inequivalent(PREFIX "inequivalent arg 'x-max-length", &a));
    assert_false(pb_amqp_parse_inequivalent(
        PREFIX "inequivalent arg 'exclusive' for queue 'q' in vhost '/': received 'false' but "
               "current is 'maybe'", &a));
}

static const pb_check_finding_t *only(const pb_check_report_t *r)
{
    assert_int_equal(r->n, 1);
    return &r->items[0];
}

static void judges_the_probe(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_check_report_t r = {0};

    pb_judge_amqp_queue_probed(&r, "amqp.queue", PB_AMQP_QUEUE_BOUNDED, "x-max-length 10", &cfg);
    assert_int_equal(only(&r)->status, PB_CHECK_OK);
    assert_non_null(strstr(only(&r)->message, "x-max-length 10"));
    pb_check_report_free(&r);

    pb_judge_amqp_queue_probed(&r, "amqp.queue", PB_AMQP_QUEUE_UNBOUNDED, "no bound argument",
                               &cfg);
    assert_int_equal(only(&r)->status, PB_CHECK_WARN);
    assert_non_null(strstr(only(&r)->message, "grows without limit"));
    assert_non_null(strstr(only(&r)->hint, "allow_unlimited"));
    pb_check_report_free(&r);

    cfg.amqp_allow_unlimited = true;
    pb_judge_amqp_queue_probed(&r, "amqp.queue", PB_AMQP_QUEUE_UNBOUNDED, "no bound argument",
                               &cfg);
    assert_non_null(strstr(only(&r)->message, "allowed by amqp.allow_unlimited"));
    pb_check_report_free(&r);

    pb_judge_amqp_queue_probed(&r, "amqp.queue", PB_AMQP_QUEUE_BOUND_UNKNOWN, "405", &cfg);
    assert_int_equal(only(&r)->status, PB_CHECK_OK);
    assert_non_null(strstr(only(&r)->message, "could not be told"));
    pb_check_report_free(&r);
    pb_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_typed_values),
        cmocka_unit_test(reads_sent_values_and_flags),
        cmocka_unit_test(refuses_what_it_cannot_repeat),
        cmocka_unit_test(judges_the_probe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
