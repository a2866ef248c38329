/* Unit tests for the Redis command writer (src/sink/redis_command.c): the bytes must be those
 * hiredis's own redisFormatCommandArgv writes for the same arguments. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "sink/redis_command.h"

/* Ours and hiredis's for argc arguments: equal, byte for byte. */
static void same_as_hiredis(int argc, const char **argv, const size_t *len)
{
    pb_buf_t b = {0};
    pb_redis_command(&b, argc, argv, len);
    char *want = NULL;
    long long n = redisFormatCommandArgv(&want, argc, argv, len);
    assert_true(n > 0);
    assert_int_equal(b.len, (size_t)n);
    assert_memory_equal(b.data, want, (size_t)n);
    redisFreeCommand(want);
    pb_buf_free(&b);
}

static void an_xadd(void **state)
{
    (void)state;
    const char *argv[] = {"XADD", "postbox:order", "MAXLEN", "~", "1000000", "*", "event_id",
                          "01a23ae0-21b0-7893-b220-621caa450fd4", "payload", "{\"k\": \"v\"}",
                          "ce_specversion", "1.0", "empty", ""};
    size_t len[sizeof argv / sizeof argv[0]];
    for (size_t i = 0; i < sizeof argv / sizeof argv[0]; i++)
        len[i] = strlen(argv[i]);
    same_as_hiredis((int)(sizeof argv / sizeof argv[0]), argv, len);
}

/* Lengths rule, not NULs: binary bytes, an embedded NUL, CRLF inside, a long argument, and an
 * argument cut short of its text. */
static void binary_and_long(void **state)
{
    (void)state;
    static char big[70000];
    memset(big, 'x', sizeof big);
    const char *argv[] = {"SET", "a\0b\r\n", big, "cut here"};
    size_t len[] = {3, 5, sizeof big, 3};
    same_as_hiredis(4, argv, len);
}

/* The buffer is reused: a second, shorter command replaces the first. */
static void reused_buffer(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    const char *one[] = {"PING", "a long first argument"};
    size_t one_len[] = {4, 21};
    pb_redis_command(&b, 2, one, one_len);
    const char *two[] = {"PING"};
    size_t two_len[] = {4};
    pb_redis_command(&b, 1, two, two_len);
    assert_int_equal(b.len, 14);
    assert_memory_equal(b.data, "*1\r\n$4\r\nPING\r\n", 14);
    pb_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_xadd),
        cmocka_unit_test(binary_and_long),
        cmocka_unit_test(reused_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
