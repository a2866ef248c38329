/* Unit tests for postbox check's judgements (check/judge.h) with values a shared test server
 * cannot be made to show (wal_level replica, a lost slot, a server too old, clock skew), the
 * privileges taken from the GRANT statements of `postbox init --print-grants`, and the script
 * of `postbox init --print-sql`. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/judge.h"
#include "config/config.h"
#include "store/grants.h"
#include "store/migrate.h"

/* The only finding named name in r (fails when there is none or more than one). */
static const pb_check_finding_t *only(const pb_check_report_t *r, const char *name)
{
    const pb_check_finding_t *f = NULL;
    for (size_t i = 0; i < r->n; i++)
        if (strcmp(r->items[i].name, name) == 0) {
            assert_null(f);
            f = &r->items[i];
        }
    assert_non_null(f);
    return f;
}

static void expect(const pb_check_finding_t *f, pb_check_status_t status, const char *in_message)
{
    if (f->status != status || !strstr(f->message, in_message)) {
        print_error("finding %s: %s \"%s\", expected %s with \"%s\"\n", f->name,
                    pb_check_status_name(f->status), f->message, pb_check_status_name(status),
                    in_message);
        fail();
    }
    if (status != PB_CHECK_OK)
        assert_non_null(f->hint); /* every problem says what to do */
}

static pb_config_t cdc_config(void)
{
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_error_t err;
    assert_int_equal(pb_config_set(&cfg, "relay.capture", "cdc", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "cdc.slot", "orders", PB_CFG_CLI, &err), PB_OK);
    return cfg;
}

static void version(void **state)
{
    (void)state;
    pb_check_report_t r = {0};
    pb_judge_version(&r, 130012, "13.12");
    expect(only(&r, "postgres.version"), PB_CHECK_FAIL, "13.12 is too old");
    pb_check_report_free(&r);
    pb_judge_version(&r, 140000, "14.0");
    expect(only(&r, "postgres.version"), PB_CHECK_OK, "14.0");
    pb_check_report_free(&r);
}

static void primary(void **state)
{
    (void)state;
    pb_check_report_t r = {0};
    pb_judge_primary(&r, true);
    expect(only(&r, "postgres.primary"), PB_CHECK_FAIL, "is a standby");
    pb_check_report_free(&r);
    pb_judge_primary(&r, false);
    expect(only(&r, "postgres.primary"), PB_CHECK_OK, "a primary");
    pb_check_report_free(&r);
}

static void clock_skew(void **state)
{
    (void)state;
    pb_check_report_t r = {0};
    pb_judge_clock(&r, -30000000, 500, 1000); /* the server 30 s behind this host */
    expect(only(&r, "postgres.clock"), PB_CHECK_FAIL, "30.000 s ahead of PostgreSQL's");
    pb_check_report_free(&r);
    pb_judge_clock(&r, 2500000, 1000, 1000);
    expect(only(&r, "postgres.clock"), PB_CHECK_FAIL, "2.500 s behind");
    pb_check_report_free(&r);
    /* 1.2 s, but the round trip took 600 ms: not surely above 1 s */
    pb_judge_clock(&r, 1200000, 300000, 1000);
    expect(only(&r, "postgres.clock"), PB_CHECK_OK, "differ by");
    pb_check_report_free(&r);
    pb_judge_clock(&r, 3600000000LL, 0, 0); /* not judged */
    expect(only(&r, "postgres.clock"), PB_CHECK_OK, "not judged");
    pb_check_report_free(&r);
}

static void schema_version(void **state)
{
    (void)state;
    pb_check_report_t r = {0};
    int latest = pb_migrate_latest();
    assert_false(pb_judge_schema(&r, false, 0));
    expect(only(&r, "schema.version"), PB_CHECK_FAIL, "not installed");
    pb_check_report_free(&r);
    /* two files behind (not latest - 2: a version number may be missing, held by another branch) */
    assert_false(pb_judge_schema(&r, true, pb_migrations[pb_migration_count - 3].version));
    expect(only(&r, "schema.version"), PB_CHECK_FAIL, "2 migrations pending");
    assert_non_null(strstr(r.items[0].message, pb_migrations[pb_migration_count - 1].name));
    assert_non_null(strstr(r.items[0].hint, "--print-sql"));
    pb_check_report_free(&r);
    assert_false(pb_judge_schema(&r, true, latest + 1));
    expect(only(&r, "schema.version"), PB_CHECK_FAIL, "newer than this postbox");
    pb_check_report_free(&r);
    assert_true(pb_judge_schema(&r, true, latest));
    expect(only(&r, "schema.version"), PB_CHECK_OK, "current");
    pb_check_report_free(&r);
}

static void wal_settings(void **state)
{
    (void)state;
    pb_config_t cfg = cdc_config();
    pb_check_report_t r = {0};
    pb_check_wal_t w = {.wal_level = "replica", .max_replication_slots = 10, .slots_used = 3,
                        .max_wal_senders = 10, .senders_used = 1};
    pb_judge_wal(&r, &w, &cfg);
    expect(only(&r, "cdc.wal_level"), PB_CHECK_FAIL, "wal_level is replica");
    assert_non_null(strstr(only(&r, "cdc.wal_level")->hint, "wal_level = logical"));
    expect(only(&r, "cdc.replication_slots"), PB_CHECK_OK, "10, 3 in use");
    expect(only(&r, "cdc.wal_senders"), PB_CHECK_OK, "10, 1 in use");
    pb_check_report_free(&r);

    /* no room for a new slot; an existing slot needs none */
    w = (pb_check_wal_t){.wal_level = "logical", .max_replication_slots = 4, .slots_used = 4,
                         .max_wal_senders = 2, .senders_used = 2};
    pb_judge_wal(&r, &w, &cfg);
    expect(only(&r, "cdc.wal_level"), PB_CHECK_OK, "logical");
    expect(only(&r, "cdc.replication_slots"), PB_CHECK_FAIL, "no room for slot \"orders\"");
    expect(only(&r, "cdc.wal_senders"), PB_CHECK_WARN, "every WAL sender is in use");
    pb_check_report_free(&r);
    w.slot_exists = true;
    w.max_wal_senders = 0;
    pb_judge_wal(&r, &w, &cfg);
    expect(only(&r, "cdc.replication_slots"), PB_CHECK_OK, "4 in use");
    expect(only(&r, "cdc.wal_senders"), PB_CHECK_FAIL, "max_wal_senders is 0");
    pb_check_report_free(&r);
    pb_config_free(&cfg);
}

static void slot_state(void **state)
{
    (void)state;
    pb_config_t cfg = cdc_config();
    pb_check_report_t r = {0};
    pb_check_slot_t s = {0};

    pb_judge_slot(&r, &s, &cfg, false); /* missing, created at start */
    expect(only(&r, "cdc.slot"), PB_CHECK_WARN, "does not exist yet");
    pb_check_report_free(&r);
    pb_judge_slot(&r, &s, &cfg, true); /* a starting relay creates it: nothing to say */
    assert_int_equal(r.n, 0);
    cfg.cdc_create_slot = false;
    pb_judge_slot(&r, &s, &cfg, true);
    expect(only(&r, "cdc.slot"), PB_CHECK_FAIL, "cdc.create_slot = false");
    pb_check_report_free(&r);
    cfg.cdc_create_slot = true;

    s = (pb_check_slot_t){.exists = true, .pgoutput = true, .this_database = true,
                          .wal_status = "lost", .lag_known = true, .lag_bytes = 1 << 20};
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_FAIL, "wal_status lost");
    pb_check_report_free(&r);
    s.wal_status = "unreserved";
    pb_judge_slot(&r, &s, &cfg, true);
    expect(only(&r, "cdc.slot"), PB_CHECK_FAIL, "about to lose WAL");
    pb_check_report_free(&r);

    s.wal_status = "reserved";
    s.lag_bytes = 3LL << 30; /* 3 GiB behind, over the default 1 GiB */
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_FAIL, "3.0 GiB behind");
    assert_non_null(strstr(r.items[0].message, "cdc.max_slot_lag 1.0 GiB"));
    pb_check_report_free(&r);
    cfg.cdc_max_slot_lag = 0; /* not judged */
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_WARN, "inactive");
    pb_check_report_free(&r);
    pb_judge_slot(&r, &s, &cfg, true); /* inactive before the relay starts streaming it */
    expect(only(&r, "cdc.slot"), PB_CHECK_OK, "inactive");
    pb_check_report_free(&r);
    s.active = true;
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_OK, "streamed");
    pb_check_report_free(&r);
    /* cdc.max_slot_lag_age: judged by the oldest outbox row not relayed */
    s.unrelayed_age_ms = 90000;
    pb_judge_slot(&r, &s, &cfg, false); /* no age limit: not judged */
    expect(only(&r, "cdc.slot"), PB_CHECK_OK, "streamed");
    pb_check_report_free(&r);
    cfg.cdc_max_slot_lag_age = 60000;
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_FAIL, "not relayed for 90s");
    assert_non_null(strstr(r.items[0].message, "cdc.max_slot_lag_age 1m"));
    pb_check_report_free(&r);
    s.unrelayed_age_ms = -1; /* nothing pending */
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_OK, "streamed");
    pb_check_report_free(&r);
    cfg.cdc_max_slot_lag_age = 0;

    s.pgoutput = false;
    pb_judge_slot(&r, &s, &cfg, false);
    expect(only(&r, "cdc.slot"), PB_CHECK_FAIL, "not a logical pgoutput slot");
    pb_check_report_free(&r);
    pb_config_free(&cfg);
}

static void publication_and_identity(void **state)
{
    (void)state;
    pb_config_t cfg = cdc_config();
    pb_check_report_t r = {0};
    pb_check_publication_t p = {.exists = true, .has_outbox = true, .inserts = false};
    pb_judge_publication(&r, &p, &cfg, false);
    expect(only(&r, "cdc.publication"), PB_CHECK_FAIL, "does not publish inserts");
    pb_check_report_free(&r);
    p = (pb_check_publication_t){.exists = true, .inserts = true};
    pb_judge_publication(&r, &p, &cfg, true);
    expect(only(&r, "cdc.publication"), PB_CHECK_FAIL, "does not include postbox.outbox");
    pb_check_report_free(&r);

    pb_judge_replica_identity(&r, 'n', true);
    expect(only(&r, "cdc.replica_identity"), PB_CHECK_FAIL, "NOTHING");
    assert_string_equal(r.items[0].hint, "ALTER TABLE postbox.outbox REPLICA IDENTITY DEFAULT");
    pb_check_report_free(&r);
    pb_judge_replica_identity(&r, 'f', false);
    expect(only(&r, "cdc.replica_identity"), PB_CHECK_FAIL, "FULL");
    pb_check_report_free(&r);
    pb_judge_replica_identity(&r, 'd', false);
    expect(only(&r, "cdc.replica_identity"), PB_CHECK_OK, "DEFAULT");
    pb_check_report_free(&r);
    pb_judge_replication_role(&r, "relay", false);
    expect(only(&r, "privileges.replication"), PB_CHECK_FAIL, "lacks the REPLICATION attribute");
    pb_check_report_free(&r);
    pb_config_free(&cfg);
}

static void broker_bounds(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_check_report_t r = {0};

    pb_judge_nats_stream(&r, "nats.stream", true, false, "stream \"S\"", &cfg);
    expect(only(&r, "nats.stream"), PB_CHECK_WARN, "configured ones at start"); /* it is updated */
    pb_check_report_free(&r);
    cfg.nats_stream_create = false;
    pb_judge_nats_stream(&r, "nats.stream", true, false, "stream \"S\"", &cfg);
    expect(only(&r, "nats.stream"), PB_CHECK_FAIL, "has no limit");
    pb_check_report_free(&r);
    pb_judge_nats_stream(&r, "nats.stream", false, false, "", &cfg);
    expect(only(&r, "nats.stream"), PB_CHECK_FAIL, "nats.stream_create = false");
    pb_check_report_free(&r);
    cfg.nats_allow_unlimited = true;
    pb_judge_nats_stream(&r, "nats.stream", true, false, "stream \"S\"", &cfg);
    expect(only(&r, "nats.stream"), PB_CHECK_WARN, "allowed by nats.allow_unlimited");
    pb_check_report_free(&r);

    pb_judge_redis_bound(&r, "redis.bound", &cfg);
    expect(only(&r, "redis.bound"), PB_CHECK_OK, "older than 7d");
    pb_check_report_free(&r);
    cfg.redis_max_age = 0;
    pb_judge_redis_bound(&r, "redis.bound", &cfg);
    expect(only(&r, "redis.bound"), PB_CHECK_FAIL, "without a bound");
    pb_check_report_free(&r);

    pb_judge_amqp_queue_bound(&r, "amqp.queue", true, &cfg);
    expect(only(&r, "amqp.queue"), PB_CHECK_OK, "x-message-ttl 7d");
    pb_check_report_free(&r);
    cfg.amqp_queue_message_ttl = 0;
    cfg.amqp_allow_unlimited = true;
    pb_judge_amqp_queue_bound(&r, "amqp.queue", true, &cfg);
    expect(only(&r, "amqp.queue"), PB_CHECK_WARN, "has no bound");
    pb_check_report_free(&r);
    pb_config_free(&cfg);
}

/* The privileges of print-grants are the GRANT statements taken apart. */
static void grant_privileges(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_privilege_t *p;
    size_t n = pb_grants_privileges(&cfg, PB_GRANTS_RELAY, &p);
    bool usage = false, outbox_delete = false, emit_key = false, marker = false, inbox = false;
    for (size_t i = 0; i < n; i++) {
        usage |= p[i].kind == PB_PRIV_SCHEMA && strcmp(p[i].object, "postbox") == 0 &&
                 strcmp(p[i].privilege, "USAGE") == 0;
        outbox_delete |= p[i].kind == PB_PRIV_TABLE && strcmp(p[i].object, "postbox.outbox") == 0 &&
                         strcmp(p[i].privilege, "DELETE") == 0;
        emit_key |= p[i].kind == PB_PRIV_TABLE && strcmp(p[i].object, "postbox.emit_key") == 0;
        marker |= p[i].kind == PB_PRIV_FUNCTION &&
                  strcmp(p[i].object, "postbox.emit_drain_marker(text)") == 0;
        inbox |= strstr(p[i].object, "inbox") != NULL;
    }
    assert_true(usage && outbox_delete && emit_key && marker);
    assert_false(inbox);
    free(p);

    /* the producer's column privileges: SELECT (id, event_id) is two of them */
    n = pb_grants_privileges(&cfg, PB_GRANTS_PRODUCER, &p);
    size_t cols = 0;
    for (size_t i = 0; i < n; i++)
        if (p[i].kind == PB_PRIV_COLUMN) {
            assert_string_equal(p[i].privilege, "SELECT");
            assert_string_equal(p[i].object, "postbox.outbox");
            assert_true(strcmp(p[i].column, "id") == 0 || strcmp(p[i].column, "event_id") == 0);
            cols++;
        }
    assert_int_equal(cols, 2);
    free(p);

    /* two tables in one statement: each gets every privilege */
    n = pb_grants_privileges(&cfg, PB_GRANTS_CONSUMER, &p);
    size_t failures = 0;
    for (size_t i = 0; i < n; i++)
        failures += strcmp(p[i].object, "postbox.inbox_failures") == 0;
    assert_int_equal(failures, 4); /* SELECT, INSERT, UPDATE, DELETE */
    free(p);
    pb_config_free(&cfg);
}

/* The script of --print-sql: in one transaction, behind the guard, each migration with its
 * bookkeeping row. */
static void print_sql(void **state)
{
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    int from = pb_migrate_latest() - 2;
    pb_migrate_write_sql(out, from, 4);
    fclose(out);
    char guard[64];
    snprintf(guard, sizeof guard, "<> %d THEN", from);
    assert_non_null(strstr(text, "BEGIN;"));
    assert_non_null(strstr(text, guard));
    assert_non_null(strstr(text, "\nCOMMIT;\n"));
    assert_true(strstr(text, "BEGIN;") < strstr(text, guard));
    for (int i = 0; i < pb_migration_count; i++) {
        const pb_migration_t *m = &pb_migrations[i];
        char row[128];
        snprintf(row, sizeof row, "VALUES (%d, '%s');", m->version, m->name);
        const char *at = strstr(text, row);
        if (m->version <= from) {
            assert_null(at);
            continue;
        }
        assert_non_null(at);
        assert_true(at < strstr(text, "\nCOMMIT;\n"));
    }
    assert_non_null(strstr(text, "shard_index_ddl(4)"));
    free(text);

    text = NULL;
    out = open_memstream(&text, &len);
    pb_migrate_write_sql(out, pb_migrate_latest(), 1);
    fclose(out);
    assert_non_null(strstr(text, "nothing to apply"));
    assert_null(strstr(text, "BEGIN"));
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(version),
        cmocka_unit_test(primary),
        cmocka_unit_test(clock_skew),
        cmocka_unit_test(schema_version),
        cmocka_unit_test(wal_settings),
        cmocka_unit_test(slot_state),
        cmocka_unit_test(publication_and_identity),
        cmocka_unit_test(broker_bounds),
        cmocka_unit_test(grant_privileges),
        cmocka_unit_test(print_sql),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
