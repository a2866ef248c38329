/* Unit tests for src/source/amqp_headers.c: AMQP field tables to JSON, header values as text.
 * No network. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <jansson.h>

#include "common/str.h"
#include "source/amqp_headers.h"

/* ---- builders ------------------------------------------------------------------------------- */

static amqp_bytes_t B(const char *s)
{
    amqp_bytes_t b = {.len = strlen(s), .bytes = (void *)(uintptr_t)s};
    return b;
}

static amqp_bytes_t BN(const char *s, size_t n)
{
    amqp_bytes_t b = {.len = n, .bytes = (void *)(uintptr_t)s};
    return b;
}

static amqp_table_entry_t E(const char *key, amqp_field_value_t v)
{
    amqp_table_entry_t e = {.key = B(key), .value = v};
    return e;
}

static amqp_field_value_t V_str(const char *s)
{
    amqp_field_value_t v = {.kind = AMQP_FIELD_KIND_UTF8};
    v.value.bytes = B(s);
    return v;
}

static amqp_field_value_t V_strn(const char *s, size_t n)
{
    amqp_field_value_t v = {.kind = AMQP_FIELD_KIND_UTF8};
    v.value.bytes = BN(s, n);
    return v;
}

static amqp_field_value_t V_kind(uint8_t kind)
{
    amqp_field_value_t v;
    memset(&v, 0, sizeof v);
    v.kind = kind;
    return v;
}

/* JSON text of a table, compared as text (the conversion is deterministic and keeps order). */
static void expect_json(amqp_table_entry_t *entries, int n, const char *want)
{
    amqp_table_t t = {.num_entries = n, .entries = entries};
    pb_buf_t buf = {0};
    const char *got = pb_amqp_headers_json(&t, &buf);
    if (strcmp(got, want) != 0)
        print_error("got  %s\nwant %s\n", got, want);
    assert_string_equal(got, want);
    /* and it is valid JSON */
    json_error_t jerr;
    json_t *j = json_loads(got, 0, &jerr);
    assert_non_null(j);
    assert_true(json_is_object(j));
    json_decref(j);
    pb_buf_free(&buf);
}

/* JSON text of one value, as the single entry "v" of a table. */
static void expect_one(amqp_field_value_t v, const char *want_value)
{
    char want[512];
    snprintf(want, sizeof want, "{\"v\":%s}", want_value);
    amqp_table_entry_t e = E("v", v);
    expect_json(&e, 1, want);
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_empty_table(void **state)
{
    (void)state;
    pb_buf_t buf = {0};
    amqp_table_t t = {0};
    assert_string_equal(pb_amqp_headers_json(&t, &buf), "{}");
    assert_string_equal(pb_amqp_headers_json(NULL, &buf), "{}");
    assert_int_equal(buf.len, 2);
    pb_buf_free(&buf);
}

static void test_strings_and_order(void **state)
{
    (void)state;
    amqp_table_entry_t e[] = {
        E("aggregate_type", V_str("order")),
        E("aggregate_id", V_str("42")),
        E("b", V_str("")),
        E("a", V_str("h\xc3\xa9 \"q\" \\ \n\t\x01")),
    };
    /* table order kept (not sorted), compact, escapes; UTF-8 passed through */
    expect_json(e, 4, "{\"aggregate_type\":\"order\",\"aggregate_id\":\"42\",\"b\":\"\","
                      "\"a\":\"h\xc3\xa9 \\\"q\\\" \\\\ \\n\\t\\u0001\"}");
}

static void test_string_with_nul(void **state)
{
    (void)state;
    /* PostgreSQL's jsonb refuses \u0000: a string with NUL is given as bytes */
    expect_one(V_strn("a\0b", 3), "\"\\\\x610062\"");
}

static void test_invalid_utf8_string_is_hex(void **state)
{
    (void)state;
    expect_one(V_strn("\x80\xff" "A", 3), "\"\\\\x80ff41\"");
    expect_one(V_strn("\xc0\xaf", 2), "\"\\\\xc0af\""); /* overlong '/' */
}

static void test_bytes_are_hex(void **state)
{
    (void)state;
    amqp_field_value_t v = V_kind(AMQP_FIELD_KIND_BYTES);
    v.value.bytes = B("hi");
    expect_one(v, "\"\\\\x6869\"");
    v.value.bytes = BN("", 0);
    expect_one(v, "\"\\\\x\"");
}

static void test_integers(void **state)
{
    (void)state;
    amqp_field_value_t v;
    v = V_kind(AMQP_FIELD_KIND_I8);
    v.value.i8 = -128;
    expect_one(v, "-128");
    v = V_kind(AMQP_FIELD_KIND_U8);
    v.value.u8 = 255;
    expect_one(v, "255");
    v = V_kind(AMQP_FIELD_KIND_I16);
    v.value.i16 = -32768;
    expect_one(v, "-32768");
    v = V_kind(AMQP_FIELD_KIND_U16);
    v.value.u16 = 65535;
    expect_one(v, "65535");
    v = V_kind(AMQP_FIELD_KIND_I32);
    v.value.i32 = INT32_MIN;
    expect_one(v, "-2147483648");
    v = V_kind(AMQP_FIELD_KIND_U32);
    v.value.u32 = UINT32_MAX;
    expect_one(v, "4294967295");
    v = V_kind(AMQP_FIELD_KIND_I64);
    v.value.i64 = INT64_MIN;
    expect_one(v, "-9223372036854775808");
    v = V_kind(AMQP_FIELD_KIND_U64);
    v.value.u64 = (uint64_t)INT64_MAX;
    expect_one(v, "9223372036854775807");
    v.value.u64 = UINT64_MAX; /* no JSON integer in jansson: exact digits as a string */
    expect_one(v, "\"18446744073709551615\"");
    v = V_kind(AMQP_FIELD_KIND_TIMESTAMP);
    v.value.u64 = 1700000000;
    expect_one(v, "1700000000");
}

static void test_bool_void_unknown(void **state)
{
    (void)state;
    amqp_field_value_t v = V_kind(AMQP_FIELD_KIND_BOOLEAN);
    v.value.boolean = 1;
    expect_one(v, "true");
    v.value.boolean = 0;
    expect_one(v, "false");
    expect_one(V_kind(AMQP_FIELD_KIND_VOID), "null");
    expect_one(V_kind('?'), "null");
}

static void test_reals(void **state)
{
    (void)state;
    amqp_field_value_t v = V_kind(AMQP_FIELD_KIND_F64);
    v.value.f64 = 1.5;
    expect_one(v, "1.5");
    v.value.f64 = -0.25;
    expect_one(v, "-0.25");
    v.value.f64 = 3.0;
    expect_one(v, "3.0");
    v.value.f64 = NAN;
    expect_one(v, "null");
    v.value.f64 = INFINITY;
    expect_one(v, "null");
    v = V_kind(AMQP_FIELD_KIND_F32);
    v.value.f32 = 0.5f;
    expect_one(v, "0.5");
    v.value.f32 = -INFINITY;
    expect_one(v, "null");

    /* exact: parsing the text gives the same double back */
    v = V_kind(AMQP_FIELD_KIND_F64);
    v.value.f64 = 0.1;
    json_t *j = pb_amqp_value_to_json(&v);
    char *txt = json_dumps(j, JSON_ENCODE_ANY);
    json_t *back = json_loads(txt, JSON_DECODE_ANY, NULL);
    assert_true(json_real_value(back) == 0.1);
    json_decref(back);
    free(txt);
    json_decref(j);
}

static void test_decimals(void **state)
{
    (void)state;
    amqp_field_value_t v = V_kind(AMQP_FIELD_KIND_DECIMAL);
    v.value.decimal.decimals = 2;
    v.value.decimal.value = 12345;
    expect_one(v, "\"123.45\"");
    v.value.decimal.decimals = 0;
    expect_one(v, "\"12345\"");
    v.value.decimal.decimals = 5;
    expect_one(v, "\"0.12345\"");
    v.value.decimal.decimals = 7;
    expect_one(v, "\"0.0012345\"");
    v.value.decimal.decimals = 3;
    v.value.decimal.value = 0;
    expect_one(v, "\"0.000\"");
    v.value.decimal.decimals = 255; /* the widest scale fits */
    v.value.decimal.value = UINT32_MAX;
    json_t *j = pb_amqp_value_to_json(&v);
    assert_int_equal(json_string_length(j), 2 + 255);
    assert_string_equal(json_string_value(j) + 2 + 255 - 10, "4294967295");
    json_decref(j);
}

static void test_nested(void **state)
{
    (void)state;
    amqp_table_entry_t inner[] = {E("x", V_str("y"))};
    amqp_field_value_t items[3];
    items[0] = V_str("s");
    items[1] = V_kind(AMQP_FIELD_KIND_I32);
    items[1].value.i32 = 7;
    items[2] = V_kind(AMQP_FIELD_KIND_TABLE);
    items[2].value.table.num_entries = 1;
    items[2].value.table.entries = inner;

    amqp_field_value_t arr = V_kind(AMQP_FIELD_KIND_ARRAY);
    arr.value.array.num_entries = 3;
    arr.value.array.entries = items;
    amqp_field_value_t tab = V_kind(AMQP_FIELD_KIND_TABLE);
    tab.value.table.num_entries = 1;
    tab.value.table.entries = inner;
    amqp_field_value_t empty_arr = V_kind(AMQP_FIELD_KIND_ARRAY);
    amqp_field_value_t empty_tab = V_kind(AMQP_FIELD_KIND_TABLE);

    amqp_table_entry_t e[] = {
        E("arr", arr), E("tab", tab), E("ea", empty_arr), E("et", empty_tab),
    };
    expect_json(e, 4,
                "{\"arr\":[\"s\",7,{\"x\":\"y\"}],\"tab\":{\"x\":\"y\"},\"ea\":[],\"et\":{}}");
}

static void test_depth_limit(void **state)
{
    (void)state;
    /* a chain of tables PB_AMQP_JSON_MAX_DEPTH + 5 deep: the deepest levels become null */
    enum { N = PB_AMQP_JSON_MAX_DEPTH + 5 };
    amqp_table_entry_t entries[N];
    for (int i = 0; i < N; i++) {
        amqp_field_value_t v = V_kind(AMQP_FIELD_KIND_TABLE);
        if (i + 1 < N) {
            v.value.table.num_entries = 1;
            v.value.table.entries = &entries[i + 1];
        }
        entries[i] = E("d", v);
    }
    amqp_table_t t = {.num_entries = 1, .entries = &entries[0]};
    pb_buf_t buf = {0};
    const char *txt = pb_amqp_headers_json(&t, &buf);
    json_t *j = json_loads(txt, 0, NULL);
    assert_non_null(j);
    int depth = 0;
    json_t *cur = j;
    while (json_is_object(cur)) {
        cur = json_object_get(cur, "d");
        depth++;
    }
    assert_true(json_is_null(cur));
    assert_int_equal(depth, PB_AMQP_JSON_MAX_DEPTH + 1);
    json_decref(j);
    pb_buf_free(&buf);
}

static void test_keys(void **state)
{
    (void)state;
    amqp_table_entry_t e[] = {
        E("k", V_str("first")),
        {.key = BN("\xff\xfe", 2), .value = V_str("bad key")}, /* skipped */
        {.key = BN("a\0b", 3), .value = V_str("nul in key")},   /* skipped */
        E("", V_str("empty key")),
        E("k", V_str("last")), /* duplicate: the last one wins */
    };
    pb_buf_t buf = {0};
    amqp_table_t t = {.num_entries = 5, .entries = e};
    json_t *j = json_loads(pb_amqp_headers_json(&t, &buf), 0, NULL);
    assert_non_null(j);
    assert_int_equal(json_object_size(j), 2);
    assert_string_equal(json_string_value(json_object_get(j, "k")), "last");
    assert_string_equal(json_string_value(json_object_get(j, "")), "empty key");
    json_decref(j);
    pb_buf_free(&buf);
}

/* A table as rabbitmq-c decodes it off the wire: encode, then decode. */
static void test_wire_round_trip(void **state)
{
    (void)state;
    amqp_field_value_t n = V_kind(AMQP_FIELD_KIND_I64);
    n.value.i64 = 3;
    amqp_field_value_t t = V_kind(AMQP_FIELD_KIND_TIMESTAMP);
    t.value.u64 = 1234;
    amqp_table_entry_t e[] = {E("event_id", V_str("0190")), E("attempt", n), E("at", t)};
    amqp_table_t in = {.num_entries = 3, .entries = e};
    char raw[512];
    amqp_bytes_t enc = {.len = sizeof raw, .bytes = raw};
    size_t off = 0;
    assert_int_equal(amqp_encode_table(enc, &in, &off), AMQP_STATUS_OK);
    enc.len = off;

    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    amqp_table_t out;
    off = 0;
    assert_int_equal(amqp_decode_table(enc, &pool, &out, &off), AMQP_STATUS_OK);
    pb_buf_t buf = {0};
    assert_string_equal(pb_amqp_headers_json(&out, &buf),
                        "{\"event_id\":\"0190\",\"attempt\":3,\"at\":1234}");
    pb_buf_free(&buf);
    empty_amqp_pool(&pool);
}

static void test_utf8_valid(void **state)
{
    (void)state;
    assert_true(pb_utf8_valid("", 0));
    assert_true(pb_utf8_valid("plain ascii", 11));
    assert_true(pb_utf8_valid("a\0b", 3));
    assert_true(pb_utf8_valid("\xc3\xa9", 2));         /* é */
    assert_true(pb_utf8_valid("\xe2\x82\xac", 3));     /* € */
    assert_true(pb_utf8_valid("\xf0\x9f\x98\x80", 4)); /* U+1F600 */
    assert_true(pb_utf8_valid("\xf4\x8f\xbf\xbf", 4)); /* U+10FFFF */
    assert_false(pb_utf8_valid("\x80", 1));             /* lone continuation */
    assert_false(pb_utf8_valid("\xc3", 1));             /* truncated */
    assert_false(pb_utf8_valid("\xe2\x82", 2));         /* truncated */
    assert_false(pb_utf8_valid("\xc0\x80", 2));         /* overlong NUL */
    assert_false(pb_utf8_valid("\xe0\x80\x80", 3));     /* overlong */
    assert_false(pb_utf8_valid("\xf0\x80\x80\x80", 4)); /* overlong */
    assert_false(pb_utf8_valid("\xed\xa0\x80", 3));     /* surrogate U+D800 */
    assert_false(pb_utf8_valid("\xf4\x90\x80\x80", 4)); /* above U+10FFFF */
    assert_false(pb_utf8_valid("\xff", 1));
    assert_false(pb_utf8_valid("\xc3\x28", 2)); /* bad continuation */
}

static void test_find(void **state)
{
    (void)state;
    amqp_table_entry_t e[] = {E("id", V_str("1")), E("other", V_str("x")), E("id", V_str("2"))};
    amqp_table_t t = {.num_entries = 3, .entries = e};
    const amqp_field_value_t *v = pb_amqp_table_find(&t, "id");
    assert_non_null(v);
    assert_memory_equal(v->value.bytes.bytes, "2", 1);
    assert_null(pb_amqp_table_find(&t, "i"));
    assert_null(pb_amqp_table_find(&t, "idx"));
    assert_null(pb_amqp_table_find(NULL, "id"));
}

static void test_field_text(void **state)
{
    (void)state;
    char buf[24];
    const char *txt;
    size_t len;
    amqp_field_value_t v = V_str("evt-1");
    assert_true(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    assert_int_equal(len, 5);
    assert_memory_equal(txt, "evt-1", 5);

    v = V_str("");
    assert_false(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    v = V_strn("a\0b", 3);
    assert_false(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    v = V_strn("\xff", 1);
    assert_false(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    assert_false(pb_amqp_field_text(NULL, true, buf, sizeof buf, &txt, &len));

    v = V_kind(AMQP_FIELD_KIND_I64);
    v.value.i64 = INT64_MIN;
    assert_true(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    assert_string_equal(txt, "-9223372036854775808");
    assert_int_equal(len, 20);
    assert_false(pb_amqp_field_text(&v, false, buf, sizeof buf, &txt, &len));
    v = V_kind(AMQP_FIELD_KIND_U64);
    v.value.u64 = UINT64_MAX;
    assert_true(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    assert_string_equal(txt, "18446744073709551615");
    v = V_kind(AMQP_FIELD_KIND_U8);
    v.value.u8 = 7;
    assert_true(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    assert_string_equal(txt, "7");
    v = V_kind(AMQP_FIELD_KIND_I16);
    v.value.i16 = -5;
    assert_true(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    assert_string_equal(txt, "-5");

    v = V_kind(AMQP_FIELD_KIND_BYTES);
    v.value.bytes = B("raw");
    assert_false(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    v = V_kind(AMQP_FIELD_KIND_F64);
    assert_false(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
    v = V_kind(AMQP_FIELD_KIND_BOOLEAN);
    assert_false(pb_amqp_field_text(&v, true, buf, sizeof buf, &txt, &len));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_table),
        cmocka_unit_test(test_strings_and_order),
        cmocka_unit_test(test_string_with_nul),
        cmocka_unit_test(test_invalid_utf8_string_is_hex),
        cmocka_unit_test(test_bytes_are_hex),
        cmocka_unit_test(test_integers),
        cmocka_unit_test(test_bool_void_unknown),
        cmocka_unit_test(test_reals),
        cmocka_unit_test(test_decimals),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_wire_round_trip),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_find),
        cmocka_unit_test(test_field_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
