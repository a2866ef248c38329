/* Unit tests for the JetStream PubAck reading (src/sink/nats_ack.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "sink/nats_ack.h"

static pb_puback_t parse(const char *text)
{
    pb_puback_t ack;
    pb_nats_puback_parse(text, strlen(text), &ack);
    return ack;
}

static void stored_and_duplicate(void **state)
{
    (void)state;
    pb_puback_t a = parse("{\"stream\":\"ORDERS\",\"seq\":42}");
    assert_int_equal(a.kind, PB_PUBACK_STORED);
    assert_true(a.seq == 42);
    a = parse(" { \"stream\" : \"ORDERS\" , \"seq\" : 9223372036854775807 ,"
              " \"duplicate\" : true } \r\n");
    assert_int_equal(a.kind, PB_PUBACK_DUPLICATE);
    assert_true(a.seq == INT64_MAX);
    a = parse("{\"stream\":\"S\",\"domain\":\"hub\",\"seq\":7,\"duplicate\":false}");
    assert_int_equal(a.kind, PB_PUBACK_STORED);
    assert_true(a.seq == 7);
    /* keys a later server may add are skipped, whatever their value */
    a = parse("{\"stream\":\"S\",\"seq\":1,\"val\":\"3\",\"batch\":{\"id\":\"x\","
              "\"n\":[1,2.5e3,null,true,{\"k\":\"\\u00e9\"}]},\"count\":-1.5}");
    assert_int_equal(a.kind, PB_PUBACK_STORED);
}

/* What nats-server 2.9 writes, byte for byte, and the neighbours of those shapes that the
 * recogniser leaves to jansson: each must come out as jansson reads it. */
static void common_shapes_and_neighbours(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        pb_puback_kind_t kind;
        uint64_t seq;
    } cases[] = {
        {"{\"stream\":\"PB_PEEK\", \"seq\":1}", PB_PUBACK_STORED, 1},
        {"{\"stream\":\"PB_PEEK\", \"seq\":2,\"duplicate\": true}", PB_PUBACK_DUPLICATE, 2},
        {"{\"stream\":\"S\",\"seq\":0}", PB_PUBACK_STORED, 0},
        {"{\"stream\":\"S\",\"seq\":1,\"duplicate\":false}\r\n", PB_PUBACK_STORED, 1},
        {"{\"stream\":\"S\\u0041\",\"seq\":5}", PB_PUBACK_STORED, 5},   /* escape */
        {"{\"stream\":\"\xc3\xa9\",\"seq\":6}", PB_PUBACK_STORED, 6},   /* UTF-8 */
        {"{\"seq\":7,\"stream\":\"S\"}", PB_PUBACK_STORED, 7},            /* other order */
        {"{\"stream\":\"S\",\"seq\":8,\"duplicate\":true,\"x\":1}", PB_PUBACK_DUPLICATE, 8},
        {"{\"stream\":\"S\",\"seq\":01}", PB_PUBACK_INVALID, 0},
        {"{\"stream\":\"S\",\"seq\":9223372036854775808}", PB_PUBACK_INVALID, 0},
        {"{\"stream\":\"S\",\"seq\":1,\"duplicate\":truex}", PB_PUBACK_INVALID, 0},
        {"{\"stream\":\"S\",\"seq\":1,\"duplicate\":true,}", PB_PUBACK_INVALID, 0},
        {"{\"stream\":\"S\",\"seq\":1,\"seq\":2}", PB_PUBACK_INVALID, 0},  /* a key twice */
        {"{\"stream\":\"S\",\"seq\":1}}", PB_PUBACK_INVALID, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb_puback_t a = parse(cases[i].text);
        if (a.kind != cases[i].kind || (a.kind != PB_PUBACK_INVALID && a.seq != cases[i].seq))
            fail_msg("%s: kind %d seq %llu", cases[i].text, (int)a.kind,
                     (unsigned long long)a.seq);
        assert_true(a.kind == PB_PUBACK_INVALID ? a.text[0] != '\0' : a.text[0] == '\0');
    }
}

static void refused(void **state)
{
    (void)state;
    pb_puback_t a = parse("{\"error\":{\"code\":503,\"err_code\":10077,\"description\":"
                          "\"maximum messages exceeded\"},\"stream\":\"S\",\"seq\":0}");
    assert_int_equal(a.kind, PB_PUBACK_ERROR);
    assert_int_equal(a.code, 503);
    assert_int_equal(a.err_code, 10077);
    assert_string_equal(a.text, "maximum messages exceeded");
    a = parse("{\"error\":{\"code\":400,"
              "\"description\":\"wrong \\\"last\\\" sequence\\u0021\\n\"}}");
    assert_int_equal(a.kind, PB_PUBACK_ERROR);
    assert_int_equal(a.err_code, 0);
    assert_string_equal(a.text, "wrong \"last\" sequence!\n");
    a = parse("{\"error\":{\"code\":500}}");
    assert_int_equal(a.kind, PB_PUBACK_ERROR);
    assert_string_equal(a.text, "no description");
    /* a long description is cut, not overflowed */
    char big[600] = "{\"error\":{\"code\":1,\"description\":\"";
    memset(big + strlen(big), 'x', 400);
    strcat(big, "\"}}");
    a = parse(big);
    assert_int_equal(a.kind, PB_PUBACK_ERROR);
    assert_int_equal(strlen(a.text), sizeof a.text - 1);
}

static void invalid(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",
        "   ",
        "null",
        "[]",
        "{}",                                    /* neither stream nor error */
        "{\"stream\":\"S\"}",                    /* no seq */
        "{\"seq\":1}",                           /* no stream */
        "{\"stream\":\"\",\"seq\":1}",           /* empty stream */
        "{\"stream\":\"S\",\"seq\":-1}",
        "{\"stream\":\"S\",\"seq\":1.5}",
        "{\"stream\":\"S\",\"seq\":01}",
        "{\"stream\":\"S\",\"seq\":18446744073709551616}",
        "{\"stream\":\"S\",\"seq\":\"1\"}",
        "{\"stream\":\"S\",\"seq\":1,}",         /* trailing comma */
        "{\"stream\":\"S\",\"seq\":1",           /* cut */
        "{\"stream\":\"S\",\"seq\":1}x",         /* trailing data */
        "{\"stream\":\"S\",\"seq\":1}{}",
        "{\"stream\":S,\"seq\":1}",
        "{stream:\"S\",\"seq\":1}",
        "{\"stream\":\"S\",\"seq\":1,\"duplicate\":1}",
        "{\"stream\":\"S\",\"seq\":1,\"x\":tru}",
        "{\"stream\":\"S\\q\",\"seq\":1}",       /* bad escape */
        "{\"stream\":\"S\\u12g4\",\"seq\":1}",
        "{\"stream\":\"S\tT\",\"seq\":1}",       /* control character in a string */
        "{\"error\":\"bad\"}",
        "{\"error\":{\"code\":99999999999}}",
        "NATS/1.0 503",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pb_puback_t a = parse(bad[i]);
        if (a.kind != PB_PUBACK_INVALID)
            fail_msg("accepted: %s", bad[i]);
        assert_true(a.text[0] != '\0');
    }
    /* not NUL-terminated: only len bytes count */
    pb_puback_t a;
    pb_nats_puback_parse("{\"stream\":\"S\",\"seq\":12}garbage", 23, &a);
    assert_int_equal(a.kind, PB_PUBACK_STORED);
    assert_true(a.seq == 12);
    pb_nats_puback_parse("{\"stream\":\"S\",\"seq\":12}", 22, &a);
    assert_int_equal(a.kind, PB_PUBACK_INVALID);
    pb_nats_puback_parse(NULL, 0, &a);
    assert_int_equal(a.kind, PB_PUBACK_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(stored_and_duplicate),
        cmocka_unit_test(common_shapes_and_neighbours),
        cmocka_unit_test(refused),
        cmocka_unit_test(invalid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
