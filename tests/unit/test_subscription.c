/* Unit tests for consume/subscription.c and each source's takes_every_event: a consumer waits
 * for a missing aggregate_sequence only when its subscription can receive every event of an
 * aggregate, judged from the configuration (sources are made, never connected). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "common/log.h"
#include "consume/subscription.h"

static bool waits(const char *source, const char *const *settings)
{
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_error_t err;
    assert_int_equal(pb_config_set(&cfg, "consume.source", source, PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "redis.streams", "postbox:order", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "kafka.topics", "order", PB_CFG_CLI, &err), PB_OK);
    for (size_t i = 0; settings && settings[i]; i += 2)
        assert_int_equal(pb_config_set(&cfg, settings[i], settings[i + 1], PB_CFG_CLI, &err), PB_OK);
    pb_source_t *src = NULL;
    assert_int_equal(pb_source_new(&cfg, &src, &err), PB_OK);
    char why[400];
    bool w = pb_subscription_waits_for_gaps(&cfg, src, why, sizeof why);
    assert_true(strlen(why) > 0);
    pb_source_free(src);
    pb_config_free(&cfg);
    return w;
}

static void every_source_by_default_takes_every_event(void **state)
{
    (void)state;
    assert_true(waits("amqp", NULL));
    assert_true(waits("nats", NULL));
    assert_true(waits("redis", NULL));
    assert_true(waits("kafka", NULL));
}

static void filtered_subscriptions_do_not_wait(void **state)
{
    (void)state;
    const char *amqp_by_type[] = {"amqp.bindings", "order.paid.v1", NULL};
    const char *amqp_undeclared[] = {"amqp.queue_declare", "false", NULL};
    const char *amqp_fanout[] = {"amqp.exchange_type", "fanout", "amqp.bindings", "x", NULL};
    const char *nats_filter[] = {"nats.filter_subject", "postbox.order.paid.v1", NULL};
    const char *nats_whole[] = {"nats.filter_subject", "postbox.>", NULL};
    const char *redis_by_type[] = {"redis.stream", "{aggregate_type}.{event_type}", NULL};
    const char *kafka_by_type[] = {"kafka.topic", "{event_type}", NULL};
    assert_false(waits("amqp", amqp_by_type));
    assert_false(waits("amqp", amqp_undeclared));
    assert_true(waits("amqp", amqp_fanout));
    assert_false(waits("nats", nats_filter));
    assert_true(waits("nats", nats_whole));
    assert_false(waits("redis", redis_by_type));
    assert_false(waits("kafka", kafka_by_type));
}

static void the_setting_overrides_the_judgement(void **state)
{
    (void)state;
    const char *always[] = {"amqp.bindings", "order.paid.v1", "consume.wait_for_gaps", "always", NULL};
    const char *never[] = {"consume.wait_for_gaps", "never", NULL};
    const char *no_timeout[] = {"consume.gap_timeout", "0", NULL};
    assert_true(waits("amqp", always));
    assert_false(waits("nats", never));
    assert_false(waits("kafka", no_timeout));
}

int main(void)
{
    pb_log_set_level("error");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_source_by_default_takes_every_event),
        cmocka_unit_test(filtered_subscriptions_do_not_wait),
        cmocka_unit_test(the_setting_overrides_the_judgement),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
