/* Unit tests for the names postbox writes into SQL: the cdc slot, publication and message prefix
 * are refused at validation when PostgreSQL would not take them as they are; the grants script
 * keeps even a hostile publication name out of its DO bodies; a statement that does not fit its
 * buffer is an error, never a statement cut short. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "store/grants.h"
#include "store/pg.h"

/* Validates the default configuration with option name set to value. */
static pb_status_t validate_with(const char *name, const char *value, pb_error_t *err)
{
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_status_t st = pb_config_set(&cfg, name, value, PB_CFG_CLI, err);
    if (st == PB_OK)
        st = pb_config_validate(&cfg, err);
    pb_config_free(&cfg);
    return st;
}

static void slot_names(void **state)
{
    (void)state;
    pb_error_t err;
    assert_int_equal(validate_with("cdc.slot", "postbox_orders_2", &err), PB_OK);
    assert_int_equal(validate_with("cdc.slot", "2nd", &err), PB_OK); /* PostgreSQL takes it */
    const char *bad[] = {"", "Orders", "a-b", "a b", "a\"b", "x$$y", "caf\xc3\xa9", "a;DROP"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(validate_with("cdc.slot", bad[i], &err), PB_FATAL);
        assert_non_null(strstr(err.msg, "cdc.slot"));
    }
    char name[65];
    memset(name, 'a', 64);
    name[64] = '\0';
    assert_int_equal(validate_with("cdc.slot", name, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "at most 63"));
    name[63] = '\0';
    assert_int_equal(validate_with("cdc.slot", name, &err), PB_OK);
}

static void publication_names(void **state)
{
    (void)state;
    pb_error_t err;
    assert_int_equal(validate_with("cdc.publication", "_outbox_2", &err), PB_OK);
    const char *bad[] = {"", "2nd", "Outbox", "x$$; DROP TABLE t; --", "o'b", "a.b", "a\\b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(validate_with("cdc.publication", bad[i], &err), PB_FATAL);
        assert_non_null(strstr(err.msg, "cdc.publication"));
    }
    char name[65];
    memset(name, 'p', 64);
    name[64] = '\0';
    assert_int_equal(validate_with("cdc.publication", name, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "at most 63"));
}

/* The prefixes postbox.emit writes (sql/014_emit_prefix.sql), and no other. */
static void message_prefixes(void **state)
{
    (void)state;
    pb_error_t err;
    assert_int_equal(validate_with("cdc.message_prefix", "postbox", &err), PB_OK);
    assert_int_equal(validate_with("cdc.message_prefix", "postbox.Orders_v-2", &err), PB_OK);
    const char *bad[] = {"", "orders", "postbox.", "postbox-drain", "postboxes", "postbox.a.b",
                         "postbox.a b", "Postbox"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(validate_with("cdc.message_prefix", bad[i], &err), PB_FATAL);
        assert_non_null(strstr(err.msg, "cdc.message_prefix"));
    }
}

/* The script of `postbox init --print-grants` for cfg, as a string (free it). Not inlined:
 * gcc 12 at -O2 takes the memstream's buffer for the address of a local once it is. */
__attribute__((noinline)) static char *grants_script(const pb_config_t *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    pb_grants_write(out, cfg);
    assert_int_equal(fclose(out), 0);
    return text;
}

/* A name that got past validation (a library caller's own configuration) still cannot end a DO
 * body and add statements of its own to the script a DBA runs as a superuser. */
static void grants_keep_the_name_out_of_do_bodies(void **state)
{
    (void)state;
    static const char hostile[] = "x$$; DROP TABLE victim; DO $$BEGIN END";
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_set(&cfg, "relay.capture", "cdc", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "cdc.publication", hostile, PB_CFG_CLI, &err), PB_OK);
    char *script = grants_script(&cfg);
    assert_non_null(strstr(script, "CREATE PUBLICATION"));
    /* the name is written once, as the one string literal of a SET outside every DO block */
    const char *at = strstr(script, "victim");
    assert_non_null(at);
    assert_null(strstr(at + 1, "victim"));
    const char *line = at;
    while (line > script && line[-1] != '\n')
        line--;
    assert_non_null(strstr(script, "SET postbox.publication = 'x$$; DROP TABLE victim; DO $$BEGIN END';\n"));
    assert_true(strncmp(line, "SET postbox.publication = '", 27) == 0);
    size_t opened = 0, closed = 0;
    for (const char *p = script; (p = strstr(p, "DO $$")) != NULL && p < line; p++)
        opened++;
    for (const char *p = script; (p = strstr(p, "END $$;")) != NULL && p < line; p++)
        closed++;
    assert_int_equal(opened, closed);
    free(script);

    /* a quote and a backslash: a literal that means the same whatever
     * standard_conforming_strings says */
    assert_int_equal(pb_config_set(&cfg, "cdc.publication", "a'b\\", PB_CFG_CLI, &err), PB_OK);
    script = grants_script(&cfg);
    assert_non_null(strstr(script, "SET postbox.publication = E'a''b\\\\';\n"));
    free(script);
    pb_config_free(&cfg);
}

static void statement_that_does_not_fit(void **state)
{
    (void)state;
    pb_error_t err;
    char sql[32];
    assert_int_equal(pb_pg_sql_printf(sql, sizeof sql, "drop it", &err, "DROP PUBLICATION %s", "\"p\""),
                     PB_OK);
    assert_string_equal(sql, "DROP PUBLICATION \"p\"");
    assert_int_equal(pb_pg_sql_printf(sql, sizeof sql, "drop it", &err, "DROP PUBLICATION %s",
                                      "\"a_name_that_is_rather_long\""),
                     PB_FATAL);
    assert_non_null(strstr(err.msg, "drop it"));
    assert_string_equal(sql, ""); /* nothing half-written to run by mistake */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(slot_names),
        cmocka_unit_test(publication_names),
        cmocka_unit_test(message_prefixes),
        cmocka_unit_test(grants_keep_the_name_out_of_do_bodies),
        cmocka_unit_test(statement_that_does_not_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
