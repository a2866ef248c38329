/* Unit tests for the member lookups of common/json_span.h: pb_json_members finds each key's
 * raw value in one pass, as pb_json_member (the same walk for one key) does. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "common/json_span.h"

static const char *const keys[] = {"a", "b", "missing", "c"};
#define N (sizeof keys / sizeof keys[0])

/* text's members a, b, missing, c are the raw texts want[] (NULL: not found), by both lookups */
static void expect(const char *text, const char *const want[N])
{
    const char *vals[N];
    size_t lens[N];
    assert_true(pb_json_members(text, strlen(text), keys, N, vals, lens));
    for (size_t k = 0; k < N; k++) {
        const char *v = NULL;
        size_t n = 0;
        bool found = pb_json_member(text, strlen(text), keys[k], &v, &n);
        if (!want[k]) {
            assert_null(vals[k]);
            assert_int_equal(lens[k], 0);
            assert_false(found);
            continue;
        }
        assert_non_null(vals[k]);
        assert_int_equal(lens[k], strlen(want[k]));
        assert_memory_equal(vals[k], want[k], lens[k]);
        assert_true(found);
        assert_ptr_equal(v, vals[k]);
        assert_int_equal(n, lens[k]);
    }
}

static void finds_each_member(void **state)
{
    (void)state;
    expect("{\"a\": {\"b\": 1, \"c\": [2, \"}\"]}, \"b\": \"x\\\"y\", \"c\": 3}",
           (const char *const[]){"{\"b\": 1, \"c\": [2, \"}\"]}", "\"x\\\"y\"", NULL, "3"});
    expect("{\"c\":null,\"a\":1e400,\"b\":[]}", (const char *const[]){"1e400", "[]", NULL, "null"});
    /* the first of two */
    expect("{\"a\": 1, \"a\": 2, \"b\": 3}", (const char *const[]){"1", "3", NULL, NULL});
    /* broken after a: what follows is not found */
    expect("{\"a\": 1, \"b\": [1, 2}, \"c\": 3}", (const char *const[]){"1", NULL, NULL, NULL});
    expect("{\"a\": 1, \"b\" 2, \"c\": 3}", (const char *const[]){"1", NULL, NULL, NULL});
    /* an escaped key is compared as written */
    expect("{\"\\u0061\": 1, \"b\": 2}", (const char *const[]){NULL, "2", NULL, NULL});
    expect("{}", (const char *const[]){NULL, NULL, NULL, NULL});
    expect("  { \"a\" : true , \"c\" : false }  ", (const char *const[]){"true", NULL, NULL, "false"});
}

static void not_an_object(void **state)
{
    (void)state;
    const char *vals[N];
    size_t lens[N];
    assert_false(pb_json_members("[1]", 3, keys, N, vals, lens));
    assert_false(pb_json_members("", 0, keys, N, vals, lens));
    for (size_t k = 0; k < N; k++)
        assert_null(vals[k]);
    const char *v;
    size_t n;
    assert_false(pb_json_member("[1]", 3, "a", &v, &n));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(finds_each_member),
        cmocka_unit_test(not_an_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
