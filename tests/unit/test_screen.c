/* Unit tests for inbox/screen.c: whatever a message holds, the inbox gets keys an index can
 * take (long or non-UTF-8 ids and aggregates become digests, the same for the same bytes) and a
 * reason for what no handler can take (non-UTF-8 type, headers or body, a NUL in the body, a
 * body above the limit). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "inbox/screen.h"

static pb_message_t plain(void)
{
    pb_message_t m = {0};
    m.message_id = "id-1";
    m.type = "order.paid.v1";
    m.aggregate_type = "order";
    m.aggregate_id = "o-1";
    m.routing_key = "order.paid.v1";
    m.exchange = "ex";
    m.headers = "{}";
    m.body = "{\"a\": 1}";
    m.body_len = strlen(m.body);
    return m;
}

static void plain_message_passes_unchanged(void **state)
{
    (void)state;
    pb_screen_t sc = {0};
    pb_message_t m = plain();
    pb_screen_batch(&sc, &m, 1, 1 << 20);
    assert_string_equal(sc.why[0], "");
    assert_ptr_equal(sc.safe[0].message_id, m.message_id);
    assert_ptr_equal(sc.safe[0].aggregate_id, m.aggregate_id);
    assert_ptr_equal(sc.safe[0].routing_key, m.routing_key);
    pb_screen_free(&sc);
}

static void long_and_invalid_keys_become_digests(void **state)
{
    (void)state;
    char *long_id = malloc(5000);
    memset(long_id, 'x', 4999);
    long_id[4999] = '\0';
    pb_message_t m[3] = {plain(), plain(), plain()};
    m[0].message_id = long_id;
    m[0].aggregate_id = long_id;
    m[1].message_id = long_id; /* the same bytes: the same key */
    m[2].message_id = "bad\xff\xfe";
    m[2].aggregate_type = "t\xc3";
    pb_screen_t sc = {0};
    pb_screen_batch(&sc, m, 3, 1 << 20);
    for (int i = 0; i < 3; i++)
        assert_string_equal(sc.why[i], "");
    assert_int_equal(strlen(sc.safe[0].message_id), strlen(PB_INBOX_DIGEST_PREFIX) + 64);
    assert_memory_equal(sc.safe[0].message_id, PB_INBOX_DIGEST_PREFIX, 7);
    assert_string_equal(sc.safe[0].message_id, sc.safe[1].message_id);
    assert_string_equal(sc.safe[0].aggregate_id, sc.safe[0].message_id);
    assert_string_equal(sc.safe[1].aggregate_id, "o-1");
    assert_memory_equal(sc.safe[2].message_id, PB_INBOX_DIGEST_PREFIX, 7);
    assert_string_not_equal(sc.safe[2].message_id, sc.safe[0].message_id);
    assert_memory_equal(sc.safe[2].aggregate_type, PB_INBOX_DIGEST_PREFIX, 7);
    /* a key of exactly PB_INBOX_KEY_MAX bytes is kept as it is */
    long_id[PB_INBOX_KEY_MAX] = '\0';
    pb_screen_batch(&sc, m, 1, 1 << 20);
    assert_ptr_equal(sc.safe[0].message_id, long_id);
    pb_screen_free(&sc);
    free(long_id);
}

static void unhandleable_texts_are_refused_with_a_reason(void **state)
{
    (void)state;
    pb_message_t m[6] = {plain(), plain(), plain(), plain(), plain(), plain()};
    m[0].type = "paid\x80";
    m[1].headers = "{\"k\": \"\xc0\xaf\"}";
    m[2].body = "ab\xed\xa0\x80"; /* a surrogate: not UTF-8 */
    m[2].body_len = 5;
    m[3].body = "a\0b";
    m[3].body_len = 3;
    m[4].body = "";
    m[4].body_len = 0;
    m[4].body_dropped = 64u << 20;
    m[5].routing_key = "rk\xff";
    pb_screen_t sc = {0};
    pb_screen_batch(&sc, m, 6, 1 << 20);
    assert_non_null(strstr(sc.why[0], "type is not valid UTF-8 (at byte 4)"));
    assert_non_null(strstr(sc.why[1], "headers are not valid UTF-8"));
    assert_string_equal(sc.safe[1].headers, "{}");
    assert_non_null(strstr(sc.why[2], "body is not valid UTF-8 (at byte 2)"));
    assert_non_null(strstr(sc.why[3], "NUL byte at offset 1"));
    assert_non_null(strstr(sc.why[4], "67108864 bytes is larger than consume.max_message_size"));
    assert_string_equal(sc.why[5], ""); /* metadata only: cleaned, not refused */
    assert_string_equal(sc.safe[5].routing_key, "rk?");
    pb_screen_free(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(plain_message_passes_unchanged),
        cmocka_unit_test(long_and_invalid_keys_become_digests),
        cmocka_unit_test(unhandleable_texts_are_refused_with_a_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
