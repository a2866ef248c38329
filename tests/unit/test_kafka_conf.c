/* Kafka without a broker: kafka.* properties in the config (stored, checked by librdkafka, secrets
 * redacted), the properties the sink forces, the classes of librdkafka's errors and the sink's
 * topic check. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker/kafka/conf.h"
#include "config/config.h"
#include "sink/sink.h"

static void set_ok(pb_config_t *cfg, const char *name, const char *value)
{
    pb_error_t err;
    assert_int_equal(pb_config_set(cfg, name, value, PB_CFG_CLI, &err), PB_OK);
}

static void properties_are_kept_in_order(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.brokers", "a:1,b:2"); /* an option, not a property */
    set_ok(&cfg, "kafka.security.protocol", "SASL_SSL");
    set_ok(&cfg, "kafka.linger.ms", "5");
    set_ok(&cfg, "kafka.security.protocol", "SSL"); /* replaces, keeps its place */
    assert_string_equal(cfg.kafka_brokers, "a:1,b:2");
    assert_int_equal(cfg.n_kafka_props, 2);
    assert_string_equal(cfg.kafka_prop_keys[0], "security.protocol");
    assert_string_equal(cfg.kafka_prop_values[0], "SSL");
    assert_string_equal(cfg.kafka_prop_keys[1], "linger.ms");
    pb_error_t err;
    assert_int_equal(pb_config_set(&cfg, "kafka.bad name", "1", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "kafka.bad name"));
    /* other sections keep refusing unknown keys */
    assert_int_equal(pb_config_set(&cfg, "nats.linger.ms", "1", PB_CFG_CLI, &err), PB_FATAL);
    pb_config_free(&cfg);
    assert_int_equal(cfg.n_kafka_props, 0);
}

static void secrets_are_redacted(void **state)
{
    (void)state;
    const char *secret[] = {"sasl.password", "ssl.key.password", "ssl.keystore.password",
                            "sasl.oauthbearer.client.secret", "ssl.key.pem"};
    const char *plain[] = {"sasl.username", "security.protocol", "ssl.ca.location", "linger.ms"};
    for (size_t i = 0; i < sizeof secret / sizeof secret[0]; i++)
        assert_true(pb_config_secret_property(secret[i]));
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
        assert_false(pb_config_secret_property(plain[i]));

    pb_config_t cfg;
    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.sasl.username", "postbox");
    set_ok(&cfg, "kafka.sasl.password", "Hunter2Secret");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pb_config_write(&cfg, f);
    fclose(f);
    assert_null(strstr(text, "Hunter2Secret"));
    assert_non_null(strstr(text, "\nsasl.password = ***\n"));
    assert_non_null(strstr(text, "\nsasl.username = postbox\n"));
    /* the properties follow the kafka options, inside [kafka] */
    assert_true(strstr(text, "[kafka]") < strstr(text, "sasl.username"));
    free(text);
    pb_config_free(&cfg);
}

static pb_status_t make(pb_config_t *cfg, pb_error_t *err)
{
    static const pb_kafka_forced_t forced[] = {{"enable.idempotence", "true"}, {"acks", "all"},
                                               {NULL, NULL}};
    rd_kafka_t *rk = NULL;
    pb_status_t st = pb_kafka_new(cfg, PB_KAFKA_PRODUCER, forced, NULL, &rk, err);
    if (rk)
        rd_kafka_destroy(rk);
    return st;
}

static void librdkafka_checks_every_property(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(make(&cfg, &err), PB_OK); /* no broker is contacted to make one */

    set_ok(&cfg, "kafka.no.such.thing", "1");
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "kafka.no.such.thing"));
    pb_config_free(&cfg);

    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.linger.ms", "soon");
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "kafka.linger.ms: invalid value"));
    pb_config_free(&cfg);

    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.acks", "-1"); /* the same as all */
    set_ok(&cfg, "kafka.enable.idempotence", "TRUE");
    assert_int_equal(make(&cfg, &err), PB_OK);
    set_ok(&cfg, "kafka.acks", "1");
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "needs acks = all"));
    pb_config_free(&cfg);

    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.sasl.password", "Hunter2Secret");
    set_ok(&cfg, "kafka.enable.idempotence", "false");
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "enable.idempotence"));
    pb_config_free(&cfg);

    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.brokers", "");
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "kafka.brokers is empty"));
    pb_config_free(&cfg);
}

/* kafka.<property>_file: the property's value from a secret file, which must be private. */
static void secret_properties_come_from_files(void **state)
{
    (void)state;
    char path[] = "/tmp/pb-test-kafka-secret.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "FromFile5ecret\n", 15), 15);
    close(fd);
    assert_int_equal(chmod(path, 0600), 0);

    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.sasl.password_file", path);
    static const pb_kafka_forced_t forced[] = {{NULL, NULL}};
    rd_kafka_t *rk = NULL;
    assert_int_equal(pb_kafka_new(&cfg, PB_KAFKA_PRODUCER, forced, NULL, &rk, &err), PB_OK);
    char value[64];
    size_t size = sizeof value;
    assert_int_equal(rd_kafka_conf_get(rd_kafka_conf(rk), "sasl.password", value, &size),
                     RD_KAFKA_CONF_OK);
    assert_string_equal(value, "FromFile5ecret");
    rd_kafka_destroy(rk);

    set_ok(&cfg, "kafka.sasl.password", "Inline5ecret"); /* both: which one is meant? */
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "both set"));
    assert_null(strstr(err.msg, "5ecret"));
    pb_config_free(&cfg);

    assert_int_equal(chmod(path, 0644), 0); /* readable by others: refused */
    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.sasl.password_file", path);
    assert_int_equal(make(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "kafka.sasl.password_file"));
    assert_null(strstr(err.msg, "5ecret"));
    pb_config_free(&cfg);
    unlink(path);
}

static void errors_are_classified(void **state)
{
    (void)state;
    assert_true(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE));
    assert_true(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC));
    assert_true(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART));
    assert_true(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED));
    assert_false(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT));
    assert_false(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS));
    assert_false(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR__TRANSPORT));
    assert_false(pb_kafka_error_permanent(RD_KAFKA_RESP_ERR__FATAL));
    char kind[64];
    assert_string_equal(pb_kafka_error_kind(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, kind, sizeof kind),
                        "msg_timed_out");
    assert_string_equal(pb_kafka_error_kind(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, kind, 8),
                        "msg_siz");
}

static void sink_checks_topics(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.topic", "events.{aggregate_type}");
    pb_sink_t *snk = NULL;
    assert_int_equal(pb_sink_kafka_new(&cfg, &snk, &err), PB_OK);
    pb_event_t ev = {.event_id = "e", .aggregate_type = "order", .aggregate_id = "1",
                     .event_type = "created.v1", .payload = "{}", .payload_len = 2};
    pb_result_t res = {0};
    assert_true(snk->ops->check(snk, &ev, &res));
    ev.aggregate_type = "or der";
    assert_false(snk->ops->check(snk, &ev, &res));
    assert_int_equal(res.outcome, PB_OUT_REJECT);
    assert_non_null(strstr(res.error, "invalid Kafka topic \"events.or der\""));
    ev.aggregate_type = "order";
    ev.destination = "..";
    assert_false(snk->ops->check(snk, &ev, &res));
    char longname[300];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    ev.destination = longname;
    assert_false(snk->ops->check(snk, &ev, &res));
    assert_non_null(strstr(res.error, "topic longer than"));
    ev.destination = "plain-topic_1.x";
    assert_true(snk->ops->check(snk, &ev, &res));
    pb_sink_free(snk);

    pb_config_free(&cfg);
    pb_config_init(&cfg);
    set_ok(&cfg, "kafka.topic", "{nope}");
    assert_int_equal(pb_sink_kafka_new(&cfg, &snk, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "kafka.topic"));
    pb_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(properties_are_kept_in_order),
        cmocka_unit_test(secrets_are_redacted),
        cmocka_unit_test(librdkafka_checks_every_property),
        cmocka_unit_test(secret_properties_come_from_files),
        cmocka_unit_test(errors_are_classified),
        cmocka_unit_test(sink_checks_topics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
