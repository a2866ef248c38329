/* relay.shadow: rule parsing, event type patterns, and the shadow sink in front of a fake sink
 * (copies, the postbox-shadow header, results merged so that an event counts as published only
 * when every destination confirmed it). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "relay/shadow_rules.h"
#include "relay/shadow_sink.h"
#include "sink/sink.h"

static void patterns_match_words(void **state)
{
    (void)state;
    assert_true(pb_shadow_pattern_matches("order.paid.v1", "order.paid.v1"));
    assert_true(pb_shadow_pattern_matches("order.paid.v1", "Order.Paid.V1")); /* case aside */
    assert_false(pb_shadow_pattern_matches("order.paid.v1", "order.paid.v2"));
    assert_true(pb_shadow_pattern_matches("order.*.v1", "order.paid.v1"));
    assert_false(pb_shadow_pattern_matches("order.*", "order.paid.v1"));
    assert_true(pb_shadow_pattern_matches("order.#", "order.paid.v1"));
    assert_true(pb_shadow_pattern_matches("order.#", "order")); /* # takes zero words too */
    assert_false(pb_shadow_pattern_matches("order.#", "orders.paid"));
    assert_true(pb_shadow_pattern_matches("#", "anything.at.all"));
    assert_true(pb_shadow_pattern_matches("#.v1", "order.paid.v1"));
    assert_false(pb_shadow_pattern_matches("#.v1", "order.paid.v2"));
    assert_true(pb_shadow_pattern_matches("order.#.v1", "order.v1"));
    assert_true(pb_shadow_pattern_matches("*", "order"));
    assert_false(pb_shadow_pattern_matches("*", "order.paid"));
    assert_false(pb_shadow_pattern_matches("order", "order.paid"));
    assert_false(pb_shadow_pattern_matches("order.paid", "order"));
}

static void parses_rules(void **state)
{
    (void)state;
    pb_shadow_rules_t rs;
    pb_error_t err;
    assert_int_equal(pb_shadow_rules_parse(" order.# only shadow.{event_type} ,"
                                           "payment.paid.v1   also\taudit.{aggregate_id}",
                                           &rs, &err),
                     PB_OK);
    assert_int_equal(rs.n, 2);
    assert_string_equal(rs.rules[0].pattern, "order.#");
    assert_int_equal(rs.rules[0].mode, PB_SHADOW_ONLY);
    assert_string_equal(rs.rules[0].destination, "shadow.{event_type}");
    assert_int_equal(rs.rules[1].mode, PB_SHADOW_ALSO);
    assert_ptr_equal(pb_shadow_rule_for(&rs, "order.paid.v1"), &rs.rules[0]);
    assert_ptr_equal(pb_shadow_rule_for(&rs, "payment.paid.v1"), &rs.rules[1]);
    assert_null(pb_shadow_rule_for(&rs, "payment.failed.v1"));

    pb_event_t ev = {.event_id = "e", .aggregate_type = "order", .aggregate_id = "7",
                     .event_type = "order.paid.v1", .destination = "row.override"};
    char out[64];
    assert_true(pb_shadow_render(&rs.rules[0], &ev, out, sizeof out));
    assert_string_equal(out, "shadow.order.paid.v1"); /* the row's destination is not used */
    pb_shadow_rules_free(&rs);

    assert_int_equal(pb_shadow_rules_parse(" a also b,, ", &rs, &err), PB_OK); /* as every list */
    assert_int_equal(rs.n, 1);
    pb_shadow_rules_free(&rs);
    assert_int_equal(pb_shadow_rules_parse("", &rs, &err), PB_OK);
    assert_int_equal(rs.n, 0);
    pb_shadow_rules_free(&rs);
}

static void refuses_bad_rules(void **state)
{
    (void)state;
    static const struct {
        const char *text, *says;
    } bad[] = {
        {"order.# sometimes x", "neither also"},
        {"order.#", "expected PATTERN also|only DESTINATION"},
        {"order.# also x y", "expected PATTERN"},
        {"order* also x", "whole words"},
        {"order..paid also x", "empty word"},
        {"order.# also {nope}", "unknown placeholder"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pb_error_t err = {0};
        assert_int_equal(pb_shadow_rules_check(bad[i].text, &err), PB_FATAL);
        if (!strstr(err.msg, bad[i].says))
            fail_msg("\"%s\": got \"%s\"", bad[i].text, err.msg);
    }
}

/* ---- the shadow sink in front of a fake sink ------------------------------------------------ */

#define MAX_SENT 16

/* What the fake sink was handed, and its script: a destination starting with "fail" is RETRY,
 * "never" is refused by check. */
typedef struct fake_sink {
    pb_sink_t base;
    size_t n_sent;
    char dest[MAX_SENT][64];
    char shadow_header[MAX_SENT][16];
    char headers_text[MAX_SENT][128];
    int freed;
} fake_sink_t;

static int fake_frees;

static const char *dest_of(const pb_event_t *ev)
{
    return ev->destination ? ev->destination : "normal";
}

static bool fake_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *r)
{
    (void)snk;
    if (strncmp(dest_of(ev), "never", 5) == 0) {
        pb_result_set(r, PB_OUT_REJECT, "routing key refused");
        return false;
    }
    return true;
}

static pb_status_t fake_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    (void)err;
    fake_sink_t *f = (fake_sink_t *)snk;
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i].outcome != PB_OUT_UNTRIED)
            continue;
        const pb_event_t *ev = &b->events[i];
        assert_true(f->n_sent < MAX_SENT);
        snprintf(f->dest[f->n_sent], sizeof f->dest[0], "%s", dest_of(ev));
        json_t *h = ev->header_obj ? json_object_get(ev->header_obj, PB_SHADOW_HEADER) : NULL;
        snprintf(f->shadow_header[f->n_sent], sizeof f->shadow_header[0], "%s",
                 h ? json_string_value(h) : "-");
        snprintf(f->headers_text[f->n_sent], sizeof f->headers_text[0], "%s",
                 ev->headers ? ev->headers : "-");
        f->n_sent++;
    }
    return PB_OK;
}

static pb_status_t fake_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    (void)snk;
    (void)err;
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i].outcome != PB_OUT_UNTRIED)
            continue;
        if (strncmp(dest_of(&b->events[i]), "fail", 4) == 0)
            pb_result_set(&b->results[i], PB_OUT_RETRY, "not routed");
        else
            pb_result_set(&b->results[i], PB_OUT_PUBLISHED, NULL);
    }
    return PB_OK;
}

static pb_status_t fake_ok(pb_sink_t *snk, pb_error_t *err)
{
    (void)snk;
    (void)err;
    return PB_OK;
}

static void fake_free(pb_sink_t *snk)
{
    fake_frees++;
    free(snk);
}

static const pb_sink_ops_t fake_ops = {
    .name = "fake", .max_in_flight = 1, .connect = fake_ok, .send = fake_send,
    .await = fake_await, .check = fake_check, .idle = fake_ok, .free = fake_free,
};

typedef struct fixture {
    pb_config_t cfg;
    pb_sink_t *snk;
    fake_sink_t *fake;
} fixture_t;

static void make(fixture_t *fx, const char *rules)
{
    pb_config_init(&fx->cfg);
    pb_error_t err;
    assert_int_equal(pb_config_set(&fx->cfg, "relay.shadow", rules, PB_CFG_CLI, &err), PB_OK);
    fx->fake = calloc(1, sizeof *fx->fake);
    fx->fake->base.ops = &fake_ops;
    fx->fake->base.cfg = &fx->cfg;
    fx->snk = &fx->fake->base;
    assert_int_equal(pb_shadow_sink_wrap(&fx->cfg, &fx->snk, &err), PB_OK);
}

static void destroy(fixture_t *fx)
{
    pb_sink_free(fx->snk);
    pb_config_free(&fx->cfg);
}

/* Prepares and publishes events of the given types (headers as given), results into res. */
static void publish(fixture_t *fx, const char *const *types, const char *headers, size_t n,
                    pb_result_t *res)
{
    pb_event_t ev[8];
    assert_true(n <= 8);
    for (size_t i = 0; i < n; i++) {
        ev[i] = (pb_event_t){.event_id = "00000000-0000-4000-8000-000000000001",
                             .aggregate_type = "order", .aggregate_id = "1",
                             .event_type = types[i], .payload = "{}", .payload_len = 2,
                             .headers = headers};
        memset(&res[i], 0, sizeof res[i]);
        if (!pb_sink_prepare(fx->snk, &ev[i], &res[i]))
            continue;
    }
    pb_sink_batch_t b = {.events = ev, .results = res, .n = n};
    pb_error_t err;
    assert_int_equal(pb_sink_publish(fx->snk, &b, &err), PB_OK);
    for (size_t i = 0; i < n; i++)
        pb_sink_release(&ev[i]);
}

static void no_rules_no_wrapper(void **state)
{
    (void)state;
    fixture_t fx;
    make(&fx, "");
    assert_ptr_equal(fx.snk, &fx.fake->base); /* nothing in front: no cost per event */
    destroy(&fx);
}

static void also_sends_both_marked(void **state)
{
    (void)state;
    fixture_t fx;
    make(&fx, "order.# also shadow.{event_type}");
    assert_string_equal(fx.snk->ops->name, "fake"); /* metrics name the broker */
    const char *types[] = {"order.paid.v1", "user.created.v1"};
    pb_result_t res[2];
    publish(&fx, types, "{\"traceparent\":\"t\"}", 2, res);
    assert_int_equal(fx.fake->n_sent, 3);
    assert_string_equal(fx.fake->dest[0], "normal");
    assert_string_equal(fx.fake->shadow_header[0], "-");
    assert_string_equal(fx.fake->dest[1], "shadow.order.paid.v1");
    assert_string_equal(fx.fake->shadow_header[1], "true");
    assert_string_equal(fx.fake->headers_text[1],
                        "{\"traceparent\":\"t\",\"" PB_SHADOW_HEADER "\":\"true\"}");
    assert_string_equal(fx.fake->dest[2], "normal"); /* no rule: as it was */
    assert_int_equal(res[0].outcome, PB_OUT_PUBLISHED);
    assert_int_equal(res[1].outcome, PB_OUT_PUBLISHED);
    destroy(&fx);
}

static void only_sends_the_copy(void **state)
{
    (void)state;
    fixture_t fx;
    make(&fx, "order.* only shadow.{aggregate_id}");
    const char *types[] = {"order.paid"};
    pb_result_t res[1];
    publish(&fx, types, NULL, 1, res);
    assert_int_equal(fx.fake->n_sent, 1);
    assert_string_equal(fx.fake->dest[0], "shadow.1");
    assert_string_equal(fx.fake->shadow_header[0], "true");
    assert_string_equal(fx.fake->headers_text[0], "{\"" PB_SHADOW_HEADER "\":\"true\"}");
    assert_int_equal(res[0].outcome, PB_OUT_PUBLISHED);
    destroy(&fx);
}

static void published_only_when_every_copy_is(void **state)
{
    (void)state;
    fixture_t fx;
    make(&fx, "order.# also fail.{event_type}");
    const char *types[] = {"order.paid.v1", "user.created.v1"};
    pb_result_t res[2];
    publish(&fx, types, NULL, 2, res);
    assert_int_equal(fx.fake->n_sent, 3);
    assert_int_equal(res[0].outcome, PB_OUT_RETRY); /* the normal copy alone is not enough */
    assert_non_null(strstr(res[0].error, "shadow copy to \"fail.order.paid.v1\": not routed"));
    assert_int_equal(res[1].outcome, PB_OUT_PUBLISHED);
    destroy(&fx);
}

static void check_covers_the_shadow_destination(void **state)
{
    (void)state;
    fixture_t fx;
    make(&fx, "order.# only never.{event_type}");
    pb_event_t ev = {.event_id = "e", .aggregate_type = "order", .aggregate_id = "1",
                     .event_type = "order.paid.v1", .payload = "{}", .payload_len = 2};
    pb_result_t r = {0};
    assert_false(pb_sink_prepare(fx.snk, &ev, &r));
    assert_int_equal(r.outcome, PB_OUT_REJECT);
    assert_non_null(strstr(r.error, "shadow copy to \"never.order.paid.v1\": routing key refused"));
    pb_sink_release(&ev);
    destroy(&fx);
}

static void frees_the_inner_sink(void **state)
{
    (void)state;
    fake_frees = 0;
    fixture_t fx;
    make(&fx, "# also x");
    destroy(&fx);
    assert_int_equal(fake_frees, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(patterns_match_words),
        cmocka_unit_test(parses_rules),
        cmocka_unit_test(refuses_bad_rules),
        cmocka_unit_test(no_rules_no_wrapper),
        cmocka_unit_test(also_sends_both_marked),
        cmocka_unit_test(only_sends_the_copy),
        cmocka_unit_test(published_only_when_every_copy_is),
        cmocka_unit_test(check_covers_the_shadow_destination),
        cmocka_unit_test(frees_the_inner_sink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
