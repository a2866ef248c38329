/* Unit tests for the configuration: defaults, types, ranges, file errors, precedence. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "config/config.h"

static char *write_temp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/pb-test-config-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void defaults_are_valid(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_OK);
    assert_string_equal(cfg.relay_sink, "amqp");
    assert_int_equal(cfg.relay_batch_size, 500);
    assert_int_equal(cfg.relay_poll_interval, 1000);
    assert_int_equal(cfg.relay_backoff_cap, 300000);
    assert_true(cfg.amqp_mandatory);
    pb_config_free(&cfg);
}

static void set_parses_types(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "relay.batch_size", "1000", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.relay_batch_size, 1000);
    assert_int_equal(pb_config_set(&cfg, "relay.poll_interval", "250ms", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.relay_poll_interval, 250);
    assert_int_equal(pb_config_set(&cfg, "relay.backoff_cap", "2m", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.relay_backoff_cap, 120000);
    assert_int_equal(pb_config_set(&cfg, "amqp.heartbeat", "1.5s", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.amqp_heartbeat, 1500);
    assert_int_equal(pb_config_set(&cfg, "amqp.mandatory", "off", PB_CFG_CLI, &err), PB_OK);
    assert_false(cfg.amqp_mandatory);
    assert_int_equal(pb_config_set(&cfg, "relay.on_publish", "delete", PB_CFG_CLI, &err), PB_OK);
    assert_string_equal(cfg.relay_on_publish, "delete");
    /* sizes: units of 1024 as PostgreSQL's, a bare number is bytes */
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "1GB", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.cdc_max_slot_lag, 1073741824);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "64kB", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.cdc_max_slot_lag, 65536);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "5000", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.cdc_max_slot_lag, 5000);
    pb_config_free(&cfg);
}

static void set_rejects_bad_values(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "relay.batch_size", "abc", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "relay.batch_size"));
    assert_non_null(strstr(err.msg, "not an integer"));
    assert_int_equal(pb_config_set(&cfg, "relay.batch_size", "0", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "out of range"));
    assert_int_equal(pb_config_set(&cfg, "relay.poll_interval", "5 parsecs", PB_CFG_CLI, &err), PB_FATAL);
    /* a duration beyond int64 milliseconds, NaN or infinity is refused, not cast (found by
     * fuzz_config: undefined behaviour in the conversion) */
    assert_int_equal(pb_config_set(&cfg, "relay.poll_interval", "2e82ms", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "relay.poll_interval", "9300000000000000000", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "relay.poll_interval", "nan", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "relay.poll_interval", "inf", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(cfg.relay_poll_interval, 1000);
    assert_int_equal(pb_config_set(&cfg, "relay.sink", "carrier-pigeon", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "is not one of"));
    assert_non_null(strstr(err.msg, "stdout"));
    assert_int_equal(pb_config_set(&cfg, "amqp.mandatory", "maybe", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "1 GB", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "not a size"));
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "1gb", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "-1MB", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "9000000TB", PB_CFG_CLI, &err), PB_FATAL);
    assert_int_equal(pb_config_set(&cfg, "relay.nope", "1", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "has no key \"nope\""));
    assert_int_equal(pb_config_set(&cfg, "nowhere.key", "1", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "no section [nowhere]"));
    assert_int_equal(pb_config_set(&cfg, "batch_size", "1", PB_CFG_CLI, &err), PB_FATAL);
    /* a failed set leaves the old value */
    assert_int_equal(cfg.relay_batch_size, 500);
    pb_config_free(&cfg);
}

static void file_loads_and_reports_lines(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    char *path = write_temp("; comment\n[relay]\nbatch_size = 42\n\n[amqp]\nexchange = orders\n");
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_OK);
    assert_int_equal(cfg.relay_batch_size, 42);
    assert_string_equal(cfg.amqp_exchange, "orders");
    unlink(path);

    path = write_temp("[relay]\nbatch_size = 42\nbatch_sise = 7\n");
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, ":3:"));
    assert_non_null(strstr(err.msg, "unknown key \"batch_sise\""));
    unlink(path);

    path = write_temp("[relay]\nbatch_size = 1\n[kafak]\nbrokers = x\n");
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, ":4:"));
    assert_non_null(strstr(err.msg, "unknown section [kafak]"));
    unlink(path);

    path = write_temp("[relay]\nthis line is not ini\n");
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, ":2:"));
    unlink(path);

    assert_int_equal(pb_config_load_file(&cfg, "/nonexistent/postbox.ini", &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "cannot open"));
    pb_config_free(&cfg);
}

static void env_overrides_file(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    char *path = write_temp("[relay]\nbatch_size = 42\nmax_attempts = 3\n");
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_OK);
    unlink(path);
    setenv("POSTBOX_RELAY_BATCH_SIZE", "77", 1);
    assert_int_equal(pb_config_load_env(&cfg, &err), PB_OK);
    assert_int_equal(cfg.relay_batch_size, 77);
    assert_int_equal(cfg.relay_max_attempts, 3);
    /* and the command line overrides the environment */
    assert_int_equal(pb_config_set(&cfg, "relay.batch_size", "5", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.relay_batch_size, 5);
    setenv("POSTBOX_RELAY_BATCH_SIZE", "lots", 1);
    assert_int_equal(pb_config_load_env(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "POSTBOX_RELAY_BATCH_SIZE"));
    unsetenv("POSTBOX_RELAY_BATCH_SIZE");
    pb_config_free(&cfg);
}

static void validate_cross_checks(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "relay.backoff_base", "10m", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "backoff_base"));
    assert_int_equal(pb_config_set(&cfg, "relay.backoff_base", "1s", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "amqp.routing_key", "{aggregate}.x", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "amqp.routing_key"));
    assert_int_equal(pb_config_set(&cfg, "amqp.routing_key", "{aggregate_type}", PB_CFG_CLI, &err), PB_OK);

    /* the CloudEvents source must be a URI-reference; the sink options take off|binary only */
    assert_int_equal(pb_config_set(&cfg, "relay.cloudevents_source", "my shop", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "relay.cloudevents_source \"my shop\" is not a URI-reference"));
    assert_int_equal(pb_config_set(&cfg, "relay.cloudevents_source", "urn:example:shop", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "kafka.cloudevents", "structured", PB_CFG_CLI, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "off|binary"));
    assert_int_equal(pb_config_set(&cfg, "amqp.cloudevents_prefix", "cloudEvents:", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "amqp.cloudevents_prefix", "ce_", PB_CFG_CLI, &err), PB_FATAL);

    /* cdc.on_excess_lag = poll needs a limit to act on: bytes, an age, or both */
    assert_int_equal(pb_config_set(&cfg, "relay.capture", "cdc", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "cdc.on_excess_lag", "poll", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag", "0", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "needs a cdc.max_slot_lag or a cdc.max_slot_lag_age"));
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag_age", "5m", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(cfg.cdc_max_slot_lag_age, 300000);
    assert_int_equal(pb_config_validate(&cfg, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "cdc.max_slot_lag_age", "-1s", PB_CFG_CLI, &err), PB_FATAL);
    pb_config_free(&cfg);
}

/* inih (Debian's, INI_MAX_LINE 200) cuts longer lines and reads the rest as a line of its own:
 * the sample file, every option's doc on one comment line, must stay loadable. */
static void sample_lines_fit_inih(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    pb_config_write_sample(f);
    fclose(f);
    for (char *line = text, *nl; *line; line = nl + 1) {
        nl = strchr(line, '\n');
        assert_non_null(nl);
        if (nl - line >= 199)
            fail_msg("sample line of %d bytes (inih reads at most 199): %.60s...", (int)(nl - line), line);
    }
    free(text);
}

static void write_hides_passwords(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "amqp.url", "amqp://bob:s3cret@h:5672/v", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "postgres.dsn", "host=h password=hunter2 dbname=x", PB_CFG_CLI, &err), PB_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pb_config_write(&cfg, f);
    fclose(f);
    assert_null(strstr(text, "s3cret"));
    assert_null(strstr(text, "hunter2"));
    assert_non_null(strstr(text, "amqp://bob:***@h:5672/v"));
    assert_non_null(strstr(text, "password=*** dbname=x"));
    char red[128];
    pb_redact_secret("nats://s3cr3tToken@h:4222", red, sizeof red);
    assert_string_equal(red, "nats://***@h:4222");
    pb_redact_secret("amqp://h:5672/v", red, sizeof red);
    assert_string_equal(red, "amqp://h:5672/v");
    free(text);
    pb_config_free(&cfg);
}

/* Secrets in values that are not URLs or DSN options: nats.url without a scheme (libnats logs in
 * with it), [handlers] SQL, librdkafka properties whose name is no secret but whose value is */
static void write_hides_secrets_in_any_value(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "nats.url", "u:N4tsPass@h1:4222, T0kenN4ts@h2:4222",
                                   PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "consume.handler", "SELECT f('password=HandlerPw1')",
                                   PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "handlers.order.paid.v1",
                                   "SELECT dblink_exec('host=db password=HandlerPw2', $1::text)",
                                   PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "kafka.sasl.oauthbearer.token.endpoint.url",
                                   "https://client:KafkaUrlPw@idp.example/token", PB_CFG_CLI, &err),
                     PB_OK);
    assert_int_equal(pb_config_set(&cfg, "kafka.sasl.kerberos.kinit.cmd",
                                   "kinit password=\"Kafka Jaas Pw\" -k", PB_CFG_CLI, &err), PB_OK);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pb_config_write(&cfg, f);
    fclose(f);
    const char *secrets[] = {"N4tsPass", "T0kenN4ts", "HandlerPw", "KafkaUrlPw", "Jaas Pw"};
    for (size_t i = 0; i < sizeof secrets / sizeof secrets[0]; i++)
        if (strstr(text, secrets[i]))
            fail_msg("postbox config shows \"%s\":\n%s", secrets[i], text);
    assert_non_null(strstr(text, "\nurl = u:***@h1:4222, ***@h2:4222\n"));
    assert_non_null(strstr(text, "\norder.paid.v1 = SELECT dblink_exec('host=db password=*** "
                                 "$1::text)\n"));
    assert_non_null(strstr(text, "\nsasl.oauthbearer.token.endpoint.url = "
                                 "https://client:***@idp.example/token\n"));
    assert_non_null(strstr(text, "\nsasl.kerberos.kinit.cmd = kinit password=*** -k\n"));
    free(text);
    pb_config_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_are_valid),
        cmocka_unit_test(set_parses_types),
        cmocka_unit_test(set_rejects_bad_values),
        cmocka_unit_test(file_loads_and_reports_lines),
        cmocka_unit_test(env_overrides_file),
        cmocka_unit_test(validate_cross_checks),
        cmocka_unit_test(sample_lines_fit_inih),
        cmocka_unit_test(write_hides_passwords),
        cmocka_unit_test(write_hides_secrets_in_any_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
