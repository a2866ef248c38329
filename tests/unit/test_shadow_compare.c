/* postbox shadow compare's matching and diff (shadow/compare.c), without brokers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadow/compare.h"

static void add(pb_shadow_msgs_t *ms, const char *body, const char *message_id)
{
    pb_shadow_msg_t *m = pb_shadow_msgs_add(ms, body, strlen(body));
    if (message_id)
        pb_shadow_msg_set_attr(m, "message_id", message_id, strlen(message_id));
    pb_shadow_msg_set_attr(m, "type", "order.paid.v1", 13);
}

static void options(pb_shadow_opts_t *o, const char *key, const char *fields)
{
    pb_error_t err;
    memset(o, 0, sizeof *o);
    assert_int_equal(pb_shadow_spec_parse(key, "--key", &o->key_legacy, &err), PB_OK);
    assert_int_equal(pb_shadow_spec_parse(key, "--key", &o->key_ours, &err), PB_OK);
    assert_int_equal(pb_shadow_fields_parse(fields, o, &err), PB_OK);
}

/* The text report as one string (caller frees). */
static char *text_of(const pb_shadow_report_t *rep)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pb_shadow_report_write_text(rep, f);
    fclose(f);
    return buf;
}

/* The --json report parsed back. */
static json_t *json_of(const pb_shadow_report_t *rep)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pb_shadow_report_write_json(rep, "amqp:l", "redis:o", f);
    fclose(f);
    json_t *j = json_loads(buf, 0, NULL);
    free(buf);
    assert_non_null(j);
    return j;
}

static void release(pb_shadow_msgs_t *legacy, pb_shadow_msgs_t *ours, pb_shadow_opts_t *o,
                    pb_shadow_report_t *rep)
{
    pb_shadow_report_free(rep);
    pb_shadow_opts_free(o);
    pb_shadow_msgs_free(legacy);
    pb_shadow_msgs_free(ours);
}

static void reports_missing_extra_differing(void **state)
{
    (void)state;
    pb_shadow_msgs_t legacy = {0}, ours = {0};
    add(&legacy, "{\"order_id\": 1, \"total\": 10.50, \"status\": \"paid\"}", "l-1");
    add(&legacy, "{\"order_id\": 2, \"total\": 20, \"status\": \"paid\"}", "l-2");
    add(&legacy, "{\"order_id\": 3, \"total\": 30, \"status\": \"paid\"}", "l-3");
    add(&ours, "{\"status\":\"paid\",\"total\":10.5,\"order_id\":1}", "o-1"); /* same */
    add(&ours, "{\"order_id\": 2, \"total\": 21, \"status\": \"paid\"}", "o-2"); /* differs */
    add(&ours, "{\"order_id\": 4, \"total\": 40, \"status\": \"paid\"}", "o-4"); /* extra */
    add(&ours, "{\"order_id\": 1, \"total\": 99, \"status\": \"paid\"}", "o-1b"); /* duplicate */
    pb_shadow_opts_t o;
    options(&o, "/order_id", "/total,/status");
    pb_shadow_report_t rep;
    pb_shadow_compare(&o, &legacy, &ours, &rep);
    assert_int_equal(rep.legacy, 3);
    assert_int_equal(rep.ours, 4);
    assert_int_equal(rep.equal, 1);
    assert_int_equal(rep.missing, 1);
    assert_int_equal(rep.extra, 1);
    assert_int_equal(rep.differing, 1);
    assert_int_equal(rep.duplicates_ours, 1);
    assert_false(pb_shadow_report_equal(&rep));
    char *text = text_of(&rep);
    assert_string_equal(text,
                        "differs   2: /total legacy 20, ours 21\n"
                        "missing   3: in legacy, not in ours\n"
                        "extra     4: in ours, not in legacy\n"
                        "summary: legacy 3, ours 4, equal 1, missing 1, extra 1, differing 1, "
                        "unkeyed 0 (duplicates not compared: legacy 0, ours 1): different\n");
    free(text);
    release(&legacy, &ours, &o, &rep);
}

static void equal_sides(void **state)
{
    (void)state;
    pb_shadow_msgs_t legacy = {0}, ours = {0};
    add(&legacy, "{\"id\": \"a\", \"n\": [1, {\"x\": true}]}", "a");
    add(&ours, "{\"n\": [1.0, {\"x\": true}], \"id\": \"a\"}", "a");
    pb_shadow_opts_t o;
    options(&o, "header:message_id", ""); /* default field: the whole body */
    pb_shadow_report_t rep;
    pb_shadow_compare(&o, &legacy, &ours, &rep);
    assert_true(pb_shadow_report_equal(&rep));
    assert_int_equal(rep.equal, 1);
    assert_int_equal(rep.n_diffs, 0);
    release(&legacy, &ours, &o, &rep);
}

static void fields_named_differently_and_unkeyed(void **state)
{
    (void)state;
    pb_shadow_msgs_t legacy = {0}, ours = {0};
    add(&legacy, "{\"orderId\": 7, \"sum\": \"12\"}", "x");
    add(&legacy, "{\"sum\": 1}", "y"); /* no orderId */
    add(&ours, "{\"order\": {\"id\": 7}, \"total\": 12}", "z");
    pb_shadow_opts_t o;
    pb_error_t err;
    memset(&o, 0, sizeof o);
    assert_int_equal(pb_shadow_spec_parse("/orderId", "--legacy-key", &o.key_legacy, &err), PB_OK);
    assert_int_equal(pb_shadow_spec_parse("/order/id", "--ours-key", &o.key_ours, &err), PB_OK);
    assert_int_equal(pb_shadow_fields_parse("/sum=/total, header:type", &o, &err), PB_OK);
    assert_int_equal(o.n_fields, 2);
    pb_shadow_report_t rep;
    pb_shadow_compare(&o, &legacy, &ours, &rep);
    assert_int_equal(rep.equal, 1); /* "12" as a text equals the number 12 */
    assert_int_equal(rep.unkeyed, 1);
    char *text = text_of(&rep);
    assert_non_null(strstr(text, "unkeyed   legacy message 2 has no key"));
    free(text);

    /* --json: one object, the differences in it */
    json_t *j = json_of(&rep);
    assert_non_null(j);
    assert_false(json_is_true(json_object_get(j, "same")));
    assert_int_equal(json_integer_value(json_object_get(j, "unkeyed")), 1);
    json_t *d = json_array_get(json_object_get(j, "differences"), 0);
    assert_string_equal(json_string_value(json_object_get(d, "kind")), "unkeyed");
    assert_string_equal(json_string_value(json_object_get(d, "side")), "legacy");
    json_decref(j);
    release(&legacy, &ours, &o, &rep);
}

static void differing_json_report(void **state)
{
    (void)state;
    pb_shadow_msgs_t legacy = {0}, ours = {0};
    add(&legacy, "{\"k\": \"a\", \"v\": 1, \"w\": \"x\"}", "1");
    add(&ours, "{\"k\": \"a\", \"v\": 2}", "1");
    pb_shadow_opts_t o;
    options(&o, "/k", "/v,/w,header:type");
    pb_shadow_report_t rep;
    pb_shadow_compare(&o, &legacy, &ours, &rep);
    assert_int_equal(rep.differing, 1);
    assert_int_equal(rep.diffs[0].n_fields, 2);
    char *text = text_of(&rep);
    assert_non_null(strstr(text, "differs   a: /v legacy 1, ours 2; /w legacy \"x\", ours absent\n"));
    free(text);
    json_t *j = json_of(&rep);
    json_t *fields = json_object_get(json_array_get(json_object_get(j, "differences"), 0), "fields");
    assert_int_equal(json_array_size(fields), 2);
    json_t *w = json_array_get(fields, 1);
    assert_string_equal(json_string_value(json_object_get(w, "field")), "/w");
    assert_true(json_is_null(json_object_get(w, "ours")));
    json_decref(j);
    release(&legacy, &ours, &o, &rep);
}

static void values_and_pointers(void **state)
{
    (void)state;
    pb_shadow_msgs_t ms = {0};
    add(&ms, "{\"a/b\": {\"m~n\": [10, 20]}, \"s\": \"t\"}", "id");
    add(&ms, "not json", NULL);
    pb_shadow_spec_t sp;
    pb_error_t err;
    assert_int_equal(pb_shadow_spec_parse("/a~1b/m~0n/1", "--key", &sp, &err), PB_OK);
    json_t *v = pb_shadow_value(&ms.items[0], &sp);
    assert_int_equal(json_integer_value(v), 20);
    json_decref(v);
    assert_null(pb_shadow_value(&ms.items[1], &sp)); /* not JSON: no pointer into it */
    free(sp.text);
    free(sp.arg);
    assert_int_equal(pb_shadow_spec_parse("body", "--key", &sp, &err), PB_OK);
    v = pb_shadow_value(&ms.items[1], &sp);
    assert_string_equal(json_string_value(v), "not json");
    json_decref(v);
    free(sp.text);
    free(sp.arg);

    json_t *a = json_real(10.5), *b = json_string("10.50"), *c = json_integer(10);
    json_t *d = json_real(10.0), *e = json_string("ten");
    assert_true(pb_shadow_values_equal(a, b));
    assert_true(pb_shadow_values_equal(c, d));
    assert_false(pb_shadow_values_equal(c, e));
    assert_false(pb_shadow_values_equal(c, NULL));
    assert_true(pb_shadow_values_equal(NULL, NULL));
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
    json_decref(e);
    pb_shadow_msgs_free(&ms);
}

static void refuses_bad_specs(void **state)
{
    (void)state;
    pb_shadow_spec_t sp;
    pb_error_t err;
    assert_int_equal(pb_shadow_spec_parse("order_id", "--key", &sp, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "--key \"order_id\": expected body, a JSON pointer"));
    assert_int_equal(pb_shadow_spec_parse("header:", "--key", &sp, &err), PB_FATAL);
    assert_int_equal(pb_shadow_spec_parse("/a~2", "--key", &sp, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "RFC 6901"));
    pb_shadow_opts_t o = {0};
    assert_int_equal(pb_shadow_fields_parse(" , ", &o, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "no field named"));
    pb_shadow_opts_free(&o);
    assert_int_equal(pb_shadow_fields_parse("/a,total", &o, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "\"total\""));
    pb_shadow_opts_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reports_missing_extra_differing),
        cmocka_unit_test(equal_sides),
        cmocka_unit_test(fields_named_differently_and_unkeyed),
        cmocka_unit_test(differing_json_report),
        cmocka_unit_test(values_and_pointers),
        cmocka_unit_test(refuses_bad_specs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
