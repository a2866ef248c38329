/* Unit tests for source/envelope.c: a message's id, type, sequence and trace context from the
 * CloudEvents attributes of its headers when its own fields lack them, per source's naming;
 * postbox's own fields win; invalid trace context is dropped; values that are no text count as
 * absent; the strings outlive the parse of a whole batch. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "source/envelope.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
#define TP2 "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

static pb_envelope_t setup(pb_config_t *cfg, const char *source, const char *amqp_prefix)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->consume_source = (char *)source;
    cfg->amqp_cloudevents_prefix = (char *)amqp_prefix;
    pb_envelope_t env;
    pb_envelope_init(&env, cfg);
    return env;
}

static void amqp_takes_both_prefixes_and_the_configured_one(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_envelope_t env = setup(&cfg, "amqp", "ce-");
    pb_message_t m[4] = {
        {.headers = "{\"cloudEvents_id\":\"a\",\"cloudEvents_type\":\"t.a\",\"cloudEvents_traceparent\":\"" TP "\",\"cloudEvents_tracestate\":\"k=v\"}"},
        {.headers = "{\"cloudEvents:id\":\"b\",\"cloudEvents:type\":\"t.b\",\"cloudEvents:aggregatesequence\":\"7\"}"},
        {.headers = "{\"ce-id\":\"c\",\"ce-type\":\"t.c\"}"},
        {.headers = "{\"cloudEvents_id\":\"\\\\x80ff\",\"cloudEvents_type\":\"t.d\"}"}, /* bytes */
    };
    pb_envelope_fill(&env, m, 4);
    assert_string_equal(m[0].message_id, "a");
    assert_string_equal(m[0].type, "t.a");
    assert_string_equal(m[0].traceparent, TP);
    assert_string_equal(m[0].tracestate, "k=v");
    assert_string_equal(m[1].message_id, "b");
    assert_string_equal(m[1].type, "t.b");
    assert_int_equal(m[1].sequence, 7);
    assert_null(m[1].traceparent);
    assert_string_equal(m[2].message_id, "c");
    assert_null(m[3].message_id);
    assert_string_equal(m[3].type, "t.d");
    pb_envelope_free(&env);
}

static void own_fields_and_plain_trace_headers_win(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_envelope_t env = setup(&cfg, "kafka", "cloudEvents_");
    pb_message_t m[3] = {
        {.message_id = "own", .type = "own.t", .sequence = 3,
         .headers = "{\"ce_id\":\"x\",\"ce_type\":\"y\",\"ce_aggregatesequence\":\"9\",\"traceparent\":\"" TP2 "\",\"ce_traceparent\":\"" TP "\"}"},
        {.headers = "{\"ce_id\":\"k\",\"ce_traceparent\":\"not-a-traceparent\",\"ce_tracestate\":\"k=v\"}"},
        {.headers = "{\"cloudEvents_id\":\"other binding\"}"},
    };
    pb_envelope_fill(&env, m, 3);
    assert_string_equal(m[0].message_id, "own");
    assert_string_equal(m[0].type, "own.t");
    assert_int_equal(m[0].sequence, 3);
    assert_string_equal(m[0].traceparent, TP2);
    assert_string_equal(m[1].message_id, "k");
    assert_null(m[1].traceparent);
    assert_null(m[1].tracestate);
    assert_null(m[2].message_id);
    pb_envelope_free(&env);
}

static void nats_values_are_percent_decoded(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_envelope_t env = setup(&cfg, "nats", "cloudEvents_");
    pb_message_t m[2] = {
        {.headers = "{\"ce-id\":\"caf%C3%A9%2042\",\"ce-type\":\"order%20paid\"}"},
        {.headers = "{\"ce-id\":\"bad%zz\",\"ce-type\":\"t\"}"},
    };
    pb_envelope_fill(&env, m, 2);
    assert_string_equal(m[0].message_id, "caf\xc3\xa9 42");
    assert_string_equal(m[0].type, "order paid");
    assert_null(m[1].message_id); /* a malformed escape: absent */
    assert_string_equal(m[1].type, "t");
    pb_envelope_free(&env);
}

static void a_big_batch_keeps_every_value(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_envelope_t env = setup(&cfg, "redis", "cloudEvents_");
    enum { N = 500 };
    static pb_message_t m[N];
    static char headers[N][200];
    for (int i = 0; i < N; i++) {
        snprintf(headers[i], sizeof headers[i], "{\"ce_id\":\"id-%d\",\"traceparent\":\"" TP "\"}", i);
        m[i] = (pb_message_t){.headers = headers[i], .traceparent = "stale"};
    }
    m[N - 1].headers = "{}"; /* no trace context: none, not the previous message's */
    pb_envelope_fill(&env, m, N);
    for (int i = 0; i < N - 1; i++) {
        char want[32];
        snprintf(want, sizeof want, "id-%d", i);
        assert_string_equal(m[i].message_id, want);
        assert_string_equal(m[i].traceparent, TP);
    }
    assert_null(m[N - 1].traceparent);
    pb_envelope_free(&env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(amqp_takes_both_prefixes_and_the_configured_one),
        cmocka_unit_test(own_fields_and_plain_trace_headers_win),
        cmocka_unit_test(nats_values_are_percent_decoded),
        cmocka_unit_test(a_big_batch_keeps_every_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
