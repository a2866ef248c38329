/* Unit tests for pb_json_members (common/json_span.h): for every key the span pb_json_member
 * gives, in one pass. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "common/json_span.h"

static const char *const keys[] = {"a", "b", "missing", "c"};
#define N (sizeof keys / sizeof keys[0])

/* members agree with member for each key of text */
static void agree(const char *text)
{
    const char *vals[N];
    size_t lens[N];
    bool object = pb_json_members(text, strlen(text), keys, N, vals, lens);
    assert_int_equal(object, text[strspn(text, " ")] == '{');
    for (size_t k = 0; k < N; k++) {
        const char *v = NULL;
        size_t n = 0;
        bool found = pb_json_member(text, strlen(text), keys[k], &v, &n);
        assert_int_equal(found, vals[k] != NULL);
        if (found) {
            assert_ptr_equal(vals[k], v);
            assert_int_equal(lens[k], n);
        } else {
            assert_int_equal(lens[k], 0);
        }
    }
}

static void one_pass_agrees_with_each_lookup(void **state)
{
    (void)state;
    agree("{\"a\": {\"b\": 1, \"c\": [2, \"}\"]}, \"b\": \"x\\\"y\", \"c\": 3}");
    agree("{\"c\":null,\"a\":1e400,\"b\":[]}");
    agree("{\"a\": 1, \"a\": 2, \"b\": 3}");              /* the first of two */
    agree("{\"a\": 1, \"b\": [1, 2}, \"c\": 3}");         /* broken after a: b and c not found */
    agree("{\"a\": 1, \"b\" 2, \"c\": 3}");
    agree("{\"\\u0061\": 1, \"b\": 2}");                  /* an escaped key is not \"a\" */
    agree("{}");
    agree("  { \"a\" : true , \"c\" : false }  ");
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
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_pass_agrees_with_each_lookup),
        cmocka_unit_test(not_an_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
