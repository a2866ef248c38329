/* Unit tests for pb_pg_target: which host a connection string leads to once libpq applies a
 * service file and the environment, and which hosts stay on this machine by their address. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/pg_target.h"

static bool loopback(const char *h)
{
    return pb_pg_host_is_loopback(h, strlen(h));
}

static void loopback_by_address(void **state)
{
    (void)state;
    const char *local[] = {"", "/run/postgresql", "@abstract", "localhost", "LocalHost",
                           "127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"};
    const char *remote[] = {"127.evil.example", "127.0.0.1.evil.example", "db.example", "10.0.0.1",
                            "128.0.0.1", "::2", "localhost.evil.example", "1270.0.0.1"};
    for (size_t i = 0; i < sizeof local / sizeof local[0]; i++)
        if (!loopback(local[i]))
            fail_msg("\"%s\" judged remote", local[i]);
    for (size_t i = 0; i < sizeof remote / sizeof remote[0]; i++)
        if (loopback(remote[i]))
            fail_msg("\"%s\" judged loopback", remote[i]);
}

/* The first remote server of dsn, or "" when every one is local; service_unknown too. */
static const char *remote_of(const char *dsn, bool *unknown)
{
    static char out[256];
    pb_pg_target_t t;
    pb_error_t err;
    assert_int_equal(pb_pg_target_resolve(dsn, &t, &err), PB_OK);
    const char *r = pb_pg_target_remote(&t, out, sizeof out);
    if (unknown)
        *unknown = t.service_unknown;
    pb_pg_target_free(&t);
    return r ? r : "";
}

static void host_lists(void **state)
{
    (void)state;
    unsetenv("PGHOST");
    unsetenv("PGHOSTADDR");
    unsetenv("PGSERVICE");
    assert_string_equal(remote_of("dbname=x", NULL), "");
    assert_string_equal(remote_of("host=127.evil.example dbname=x", NULL), "127.evil.example");
    assert_string_equal(remote_of("host=/run/pg,db2.example dbname=x", NULL), "db2.example");
    assert_string_equal(remote_of("postgresql://u@127.0.0.1:5432,[::1]:5433/x", NULL), "");
    assert_string_equal(remote_of("postgresql://u@127.0.0.1:5432,db2.example:5433/x?"
                                  "target_session_attrs=read-write", NULL), "db2.example");
    /* an entry's hostaddr is where libpq connects: host only names the certificate */
    assert_string_equal(remote_of("host=db.example hostaddr=127.0.0.1", NULL), "");
    assert_string_equal(remote_of("host=localhost hostaddr=192.0.2.1", NULL), "192.0.2.1");
    setenv("PGHOST", "db.example", 1);
    assert_string_equal(remote_of("dbname=x", NULL), "db.example");
    assert_string_equal(remote_of("host=127.0.0.1 dbname=x", NULL), "");
    unsetenv("PGHOST");
}

static void services(void **state)
{
    (void)state;
    char path[] = "/tmp/pb-test-pg-service-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "[remote]\nhost=db.example\nsslmode=require\n\n"
                       "[local]\nhost=/run/postgresql\ndbname=app\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    setenv("PGSERVICEFILE", path, 1);
    unsetenv("PGHOST");
    unsetenv("PGSERVICE");
    bool unknown;
    assert_string_equal(remote_of("service=remote dbname=x", &unknown), "db.example");
    assert_false(unknown);
    assert_string_equal(remote_of("service=local", &unknown), "");
    assert_false(unknown);
    /* the string's own host comes before the service's */
    assert_string_equal(remote_of("service=remote host=127.0.0.1", &unknown), "");
    assert_string_equal(remote_of("postgresql:///x?service=remote", &unknown), "db.example");
    assert_string_equal(remote_of("service=nosuch", &unknown), "");
    assert_true(unknown);
    setenv("PGSERVICE", "remote", 1);
    assert_string_equal(remote_of("dbname=x", &unknown), "db.example");
    assert_false(unknown);
    assert_string_equal(getenv("PGSERVICE"), "remote"); /* left as it was */
    unsetenv("PGSERVICE");
    pb_pg_target_t t;
    pb_error_t err;
    assert_int_equal(pb_pg_target_resolve("service=remote", &t, &err), PB_OK);
    assert_string_equal(t.sslmode, "require");
    assert_string_equal(t.service, "remote");
    pb_pg_target_free(&t);
    assert_null(getenv("PGSERVICE"));
    unsetenv("PGSERVICEFILE");
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(loopback_by_address),
        cmocka_unit_test(host_lists),
        cmocka_unit_test(services),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
