/* Unit tests for pb_amqp_url_parse: no network. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "broker/amqp/url.h"

static void parse_ok(const char *url, pb_amqp_url_t *u)
{
    pb_error_t err = {0};
    pb_status_t st = pb_amqp_url_parse(url, u, &err);
    if (st != PB_OK)
        print_error("unexpected error for %s: %s\n", url, err.msg);
    assert_int_equal(st, PB_OK);
}

/* Parses a bad URL and returns its message in err. */
static void parse_bad(const char *url, pb_error_t *err)
{
    pb_amqp_url_t u;
    memset(err, 0, sizeof *err);
    assert_int_equal(pb_amqp_url_parse(url, &u, err), PB_FATAL);
    assert_null(u.host);
    assert_null(u.password);
    assert_non_null(strstr(err->msg, "bad amqp url"));
}

static void test_full_url(void **state)
{
    (void)state;
    pb_amqp_url_t u;
    parse_ok("amqp://alice:s3cret@broker.example:5673/orders", &u);
    assert_string_equal(u.user, "alice");
    assert_string_equal(u.password, "s3cret");
    assert_string_equal(u.host, "broker.example");
    assert_int_equal(u.port, 5673);
    assert_string_equal(u.vhost, "orders");
    assert_false(u.tls);
    pb_amqp_url_free(&u);
    assert_null(u.user);
}

static void test_defaults(void **state)
{
    (void)state;
    pb_amqp_url_t u;
    parse_ok("amqp://127.0.0.1", &u);
    assert_string_equal(u.user, "guest");
    assert_string_equal(u.password, "guest");
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 5672);
    assert_string_equal(u.vhost, "/");
    pb_amqp_url_free(&u);

    /* a trailing slash alone also means the default vhost */
    parse_ok("amqp://guest:guest@127.0.0.1:25672/", &u);
    assert_int_equal(u.port, 25672);
    assert_string_equal(u.vhost, "/");
    pb_amqp_url_free(&u);
}

static void test_amqps_default_port(void **state)
{
    (void)state;
    pb_amqp_url_t u;
    parse_ok("amqps://bob:pw@secure.example/", &u);
    assert_true(u.tls);
    assert_int_equal(u.port, 5671);
    pb_amqp_url_free(&u);

    parse_ok("AMQPS://bob:pw@secure.example:15671", &u);
    assert_true(u.tls);
    assert_int_equal(u.port, 15671);
    pb_amqp_url_free(&u);
}

static void test_percent_decoding(void **state)
{
    (void)state;
    pb_amqp_url_t u;
    parse_ok("amqp://us%40er:p%3Aw%2Fd@host/%2f", &u);
    assert_string_equal(u.user, "us@er");
    assert_string_equal(u.password, "p:w/d");
    assert_string_equal(u.vhost, "/");
    pb_amqp_url_free(&u);

    parse_ok("amqp://host/my%2Fvhost", &u);
    assert_string_equal(u.vhost, "my/vhost");
    pb_amqp_url_free(&u);
}

static void test_user_without_password(void **state)
{
    (void)state;
    pb_amqp_url_t u;
    parse_ok("amqp://carol@host", &u);
    assert_string_equal(u.user, "carol");
    assert_string_equal(u.password, "guest"); /* as amqp_parse_url */
    pb_amqp_url_free(&u);

    parse_ok("amqp://carol:@host", &u);
    assert_string_equal(u.password, "");
    pb_amqp_url_free(&u);
}

static void test_ipv6(void **state)
{
    (void)state;
    pb_amqp_url_t u;
    parse_ok("amqp://u:p@[::1]:5674/v", &u);
    assert_string_equal(u.host, "::1");
    assert_int_equal(u.port, 5674);
    assert_string_equal(u.vhost, "v");
    pb_amqp_url_free(&u);
}

static void test_missing_host(void **state)
{
    (void)state;
    pb_error_t err;
    parse_bad("amqp://", &err);
    assert_non_null(strstr(err.msg, "missing host"));
    parse_bad("amqp://user:pw@/vhost", &err);
    assert_non_null(strstr(err.msg, "missing host"));
    parse_bad("amqp://:5672/", &err);
    assert_non_null(strstr(err.msg, "missing host"));
}

static void test_wrong_scheme(void **state)
{
    (void)state;
    pb_error_t err;
    parse_bad("http://guest:guest@localhost:5672/", &err);
    assert_non_null(strstr(err.msg, "amqp:// or amqps://"));
    assert_non_null(strstr(err.msg, "expected amqp://user:***@host:port/vhost"));
    parse_bad("localhost:5672", &err);
    parse_bad("", &err);
}

static void test_bad_port(void **state)
{
    (void)state;
    pb_error_t err;
    parse_bad("amqp://host:0/", &err);
    assert_non_null(strstr(err.msg, "port"));
    parse_bad("amqp://host:65536/", &err);
    parse_bad("amqp://host:12ab/", &err);
    parse_bad("amqp://host:/", &err);
}

static void test_other_bad_forms(void **state)
{
    (void)state;
    pb_error_t err;
    parse_bad("amqp://host/a/b", &err); /* unencoded '/' in the vhost */
    assert_non_null(strstr(err.msg, "%2f"));
    parse_bad("amqp://host/v?heartbeat=10", &err);
    parse_bad("amqp://host/%zz", &err);
    parse_bad("amqp://host/%00", &err);
    parse_bad("amqp://[::1/", &err);
    parse_bad("amqp://:pw@host/", &err);
}

static void test_password_not_in_error(void **state)
{
    (void)state;
    pb_error_t err;
    /* each is invalid for a reason after the password */
    static const char *const urls[] = {
        "amqp://alice:Hunter2Secret@host:99999/",
        "amqp://alice:Hunter2Secret@/",
        "http://alice:Hunter2Secret@host/",
        "amqp://alice:Hunter2Secret@host/a/b",
        "amqp://alice:Hunter2@Secret@host:x/", /* unencoded '@' in the password */
        "amqp://alice:Hunter2Secret",           /* no '@': the password looks like a port */
    };
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        parse_bad(urls[i], &err);
        if (strstr(err.msg, "Hunter2") || strstr(err.msg, "Secret"))
            fail_msg("password leaked for %s: %s", urls[i], err.msg);
    }
}

/* a control character in the URL (found by fuzz_url): refused, and the URL is not quoted */
static void test_control_characters(void **state)
{
    (void)state;
    pb_error_t err;
    parse_bad("amqp://u:my\nsecret@host/", &err);
    assert_non_null(strstr(err.msg, "control character"));
    assert_null(strstr(err.msg, "secret"));
    parse_bad("amqp://u:a\tb@host/", &err);
}

static void test_free_null(void **state)
{
    (void)state;
    pb_amqp_url_free(NULL);
    pb_amqp_url_t u = {0};
    pb_amqp_url_free(&u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_url),
        cmocka_unit_test(test_control_characters),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_amqps_default_port),
        cmocka_unit_test(test_percent_decoding),
        cmocka_unit_test(test_user_without_password),
        cmocka_unit_test(test_ipv6),
        cmocka_unit_test(test_missing_host),
        cmocka_unit_test(test_wrong_scheme),
        cmocka_unit_test(test_bad_port),
        cmocka_unit_test(test_other_bad_forms),
        cmocka_unit_test(test_password_not_in_error),
        cmocka_unit_test(test_free_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
