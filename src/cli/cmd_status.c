/* postbox status: what an operator asks first. Backlog, oldest pending age (lag), dead letters,
 * delayed events, inbox counts per consumer, the relay that owns the outbox, logical replication
 * slot lag; a table for people or --json for scripts. Thresholds given on the command line turn it
 * into a check: exit 1 when one is crossed (or when the database cannot be asked).
 *
 * Costs: the outbox figures are the metrics sampler's bounded index probes (store/stats.h); the
 * inbox counts are exact (one pass over postbox.inbox, which retention keeps bounded); the relay
 * instances are the holders of the shard locks (relay/shards.h). */
#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/status_kafka.h"
#include "cli/status_redis.h"
#include "common/log.h"
#include "common/str.h"
#include "relay/shards.h"
#include "store/pg.h"
#include "store/slot_position.h"
#include "store/stats.h"

#define STATUS_CAP 1000000

/* Logical replication slots of this database (the cdc capture's and any other pgoutput slot). */
static const char slots_sql[] =
    "SELECT slot_name, active, "
    "       coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn), 0)::bigint, "
    "       coalesce(wal_status, '') "
    "FROM pg_replication_slots "
    "WHERE slot_type = 'logical' AND plugin = 'pgoutput' AND database = current_database() "
    "ORDER BY slot_name";

typedef struct limits {
    int64_t max_backlog, max_dead, max_slot_lag; /* -1: none */
    int64_t max_lag_ms;
} limits_t;

static PGresult *query(PGconn *conn, const char *sql, const char *what)
{
    PGresult *res = PQexec(conn, sql);
    pb_error_t err;
    if (pb_pg_check(conn, res, PGRES_TUPLES_OK, what, &err) != PB_OK) {
        fprintf(stderr, "postbox status: %s\n", err.msg);
        return NULL;
    }
    return res;
}

/* fmt is always one of the literals below */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static int check(json_t *failed, bool crossed, const char *fmt, long long value, long long limit)
{
    if (!crossed)
        return 0;
    char msg[200];
    snprintf(msg, sizeof msg, fmt, value, limit);
    json_array_append_new(failed, json_string(msg));
    return 1;
}
#pragma GCC diagnostic pop

static void print_table(json_t *o)
{
    json_t *ob = json_object_get(o, "outbox");
    printf("outbox\n");
    printf("  %-24s %lld%s\n", "backlog", (long long)json_integer_value(json_object_get(ob, "backlog")),
           json_is_true(json_object_get(ob, "backlog_exact")) ? "" : " (upper bound: id span)");
    printf("  %-24s %.1f s", "oldest pending age",
           json_number_value(json_object_get(ob, "oldest_pending_age_seconds")));
    if (json_integer_value(json_object_get(ob, "oldest_pending_id")))
        printf(" (id %lld)", (long long)json_integer_value(json_object_get(ob, "oldest_pending_id")));
    printf("\n  %-24s %lld\n", "retrying",
           (long long)json_integer_value(json_object_get(ob, "retrying")));
    printf("  %-24s %lld\n", "delayed (not due yet)",
           (long long)json_integer_value(json_object_get(ob, "delayed")));
    if (json_integer_value(json_object_get(ob, "cdc_deferred")))
        printf("  %-24s %lld\n", "cdc deferred",
               (long long)json_integer_value(json_object_get(ob, "cdc_deferred")));
    printf("  %-24s %lld\n", "dead letters",
           (long long)json_integer_value(json_object_get(ob, "dead_letters")));

    json_t *owners = json_object_get(o, "relay_owners");
    printf("\nrelays (shard owners; relay.shards splits the aggregates)\n");
    if (json_array_size(owners) == 0)
        printf("  none: no relay is publishing\n");
    size_t i;
    json_t *v;
    json_array_foreach(owners, i, v)
        printf("  shards %s  pid %lld  application \"%s\"  client %s  since %s  state %s\n",
               json_string_value(json_object_get(v, "shards")),
               (long long)json_integer_value(json_object_get(v, "pid")),
               json_string_value(json_object_get(v, "application_name")),
               json_string_value(json_object_get(v, "client_addr")),
               json_string_value(json_object_get(v, "backend_start")),
               json_string_value(json_object_get(v, "state")));

    json_t *intruders = json_object_get(o, "lock_intruders");
    if (json_array_size(intruders)) {
        printf("\nNOT postbox relays: sessions holding the relay's locks whose roles cannot read\n"
               "postbox.relay_lock_keys (they took keys seen in pg_locks); the shards they hold\n"
               "are relayed by nobody: end them and revoke CONNECT from their roles\n");
        json_array_foreach(intruders, i, v) {
            char role[128], app[128];
            pb_text_escape(role, sizeof role, json_string_value(json_object_get(v, "role")));
            pb_text_escape(app, sizeof app,
                           json_string_value(json_object_get(v, "application_name")));
            printf("  pid %lld  role \"%s\"  application \"%s\"  holds %s\n",
                   (long long)json_integer_value(json_object_get(v, "pid")), role, app,
                   json_string_value(json_object_get(v, "holds")));
        }
    }

    json_t *inbox = json_object_get(o, "inbox");
    printf("\ninbox\n");
    if (json_array_size(inbox) == 0)
        printf("  no consumer has recorded a message\n");
    else
        printf("  %-20s %12s %12s %10s %8s %16s\n", "consumer", "processed", "unprocessed",
               "retrying", "dead", "last message");
    json_array_foreach(inbox, i, v) {
        json_t *idle = json_object_get(v, "last_message_age_seconds");
        char ago[32] = "-";
        if (json_is_number(idle))
            snprintf(ago, sizeof ago, "%.0f s ago", json_number_value(idle));
        printf("  %-20s %12lld %12lld %10lld %8lld %16s\n",
               json_string_value(json_object_get(v, "consumer")),
               (long long)json_integer_value(json_object_get(v, "processed")),
               (long long)json_integer_value(json_object_get(v, "unprocessed")),
               (long long)json_integer_value(json_object_get(v, "retrying")),
               (long long)json_integer_value(json_object_get(v, "dead")), ago);
    }

    json_t *slots = json_object_get(o, "replication_slots");
    printf("\nlogical replication slots (pgoutput)\n");
    if (json_array_size(slots) == 0)
        printf("  none\n");
    else
        printf("  %-30s %8s %16s %10s\n", "slot", "active", "lag bytes", "wal");
    json_array_foreach(slots, i, v) {
        json_t *over = json_object_get(v, "over_max_lag");
        json_t *over_age = json_object_get(v, "over_max_lag_age");
        printf("  %-30s %8s %16lld %10s%s%s\n", json_string_value(json_object_get(v, "slot")),
               json_is_true(json_object_get(v, "active")) ? "yes" : "no",
               (long long)json_integer_value(json_object_get(v, "lag_bytes")),
               json_string_value(json_object_get(v, "wal_status")),
               json_is_true(over) ? "  over cdc.max_slot_lag" : "",
               json_is_true(over_age) ? "  over cdc.max_slot_lag_age" : "");
    }

    json_t *redis = json_object_get(o, "redis");
    if (redis)
        pb_status_redis_print(redis);
    json_t *kafka = json_object_get(o, "kafka");
    if (kafka)
        pb_status_kafka_print(kafka);

    json_t *failed = json_object_get(o, "checks_failed");
    if (json_array_size(failed)) {
        printf("\nchecks failed\n");
        json_array_foreach(failed, i, v)
            printf("  %s\n", json_string_value(v));
    }
}

int pb_cmd_status(pb_cli_t *cli)
{
    limits_t lim = {-1, -1, -1, -1};
    bool as_json = false;
    for (int i = 0; i < cli->n_args; i++) {
        const char *v;
        int64_t *count = NULL;
        if (strcmp(cli->args[i], "--json") == 0) {
            as_json = true;
            continue;
        }
        if ((v = pb_args_value(cli->args, cli->n_args, &i, "--max-backlog")))
            count = &lim.max_backlog;
        else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--max-dead")))
            count = &lim.max_dead;
        else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--max-slot-lag")))
            count = &lim.max_slot_lag;
        else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--max-lag"))) {
            if (!*v || !pb_args_duration_ms(v, &lim.max_lag_ms)) {
                pb_args_error("postbox status: --max-lag \"%s\": expected a duration such as 60s", v);
                return PB_EXIT_USAGE;
            }
            continue;
        } else {
            pb_args_error("postbox status: unknown argument \"%s\" (see postbox --help)",
                          cli->args[i]);
            return PB_EXIT_USAGE;
        }
        if (!*v || !pb_args_count(v, count)) {
            pb_args_error("postbox status: %s: expected a number", cli->args[i]);
            return PB_EXIT_USAGE;
        }
    }

    PGconn *conn;
    pb_error_t err;
    if (pb_pg_connect(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        fprintf(stderr, "postbox status: cannot connect to postgresql: %s\n", err.msg);
        return PB_EXIT_FAILURE;
    }
    int rc = PB_EXIT_FAILURE;
    json_t *o = json_object();
    PGresult *owners = NULL, *intruders = NULL, *slots = NULL;
    pb_inbox_stats_t *inbox = NULL;
    size_t n_inbox = 0;
    pb_outbox_stats_t s;
    if (pb_stats_outbox(conn, STATUS_CAP, &s, &err) != PB_OK) {
        fprintf(stderr, "postbox status: %s%s\n", err.msg,
                pb_error_schema_missing(&err) ? " (run `postbox init` first)" : "");
        goto out;
    }
    if (pb_shards_owners(conn, &owners, &err) != PB_OK ||
        pb_shards_intruders(conn, &intruders, &err) != PB_OK ||
        pb_stats_inbox(conn, &inbox, &n_inbox, &err) != PB_OK) {
        fprintf(stderr, "postbox status: %s\n", err.msg);
        goto out;
    }
    if (!(slots = query(conn, slots_sql, "replication slots")))
        goto out;
    /* cdc.max_slot_lag_age without the relay: the oldest outbox row not relayed (mark mode) */
    int64_t unrelayed_ms = -1;
    bool judge_age = cli->cfg.cdc_max_slot_lag_age > 0 && cli->cfg.cdc_mark_published &&
                     !cli->cfg.cdc_delete_after_insert;
    if (judge_age && pb_slot_unrelayed_age(conn, cli->cfg.cdc_slot, &unrelayed_ms, &err) != PB_OK) {
        fprintf(stderr, "postbox status: %s\n", err.msg);
        goto out;
    }

    json_object_set_new(o, "outbox",
                        json_pack("{s:I, s:b, s:f, s:I, s:I, s:I, s:b, s:I, s:I}", "backlog",
                                  (json_int_t)s.backlog, "backlog_exact", s.backlog_exact,
                                  "oldest_pending_age_seconds", s.oldest_age_s,
                                  "oldest_pending_id", (json_int_t)s.oldest_id, "retrying",
                                  (json_int_t)s.retrying, "dead_letters",
                                  (json_int_t)s.dead_letters, "dead_letters_exact", s.dead_exact,
                                  "delayed", (json_int_t)s.delayed, "cdc_deferred",
                                  (json_int_t)s.cdc_deferred));
    json_t *arr = json_array();
    for (int r = 0; r < PQntuples(owners); r++)
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:s, s:s, s:s, s:s}", "pid",
                           (json_int_t)strtoll(PQgetvalue(owners, r, 0), NULL, 10),
                           "application_name", PQgetvalue(owners, r, 1), "client_addr",
                           PQgetvalue(owners, r, 2), "backend_start", PQgetvalue(owners, r, 3),
                           "state", PQgetvalue(owners, r, 4), "shards", PQgetvalue(owners, r, 5)));
    json_object_set_new(o, "relay_owners", arr);
    arr = json_array();
    for (int r = 0; r < PQntuples(intruders); r++)
        json_array_append_new(
            arr, json_pack("{s:I, s:s, s:s, s:s}", "pid",
                           (json_int_t)strtoll(PQgetvalue(intruders, r, 0), NULL, 10), "role",
                           PQgetvalue(intruders, r, 1), "application_name",
                           PQgetvalue(intruders, r, 2), "holds", PQgetvalue(intruders, r, 3)));
    size_t n_intruders = json_array_size(arr);
    json_object_set_new(o, "lock_intruders", arr);
    arr = json_array();
    for (size_t r = 0; r < n_inbox; r++) {
        const pb_inbox_stats_t *c = &inbox[r];
        json_t *j = json_pack("{s:s, s:I, s:I, s:I, s:I}", "consumer", c->consumer, "processed",
                              (json_int_t)c->processed, "unprocessed", (json_int_t)c->unprocessed,
                              "retrying", (json_int_t)c->retrying, "dead", (json_int_t)c->dead);
        json_object_set_new(j, "last_message_age_seconds",
                            c->has_idle ? json_real(c->idle_s) : json_null());
        json_array_append_new(arr, j);
    }
    json_object_set_new(o, "inbox", arr);
    arr = json_array();
    int64_t worst_slot = 0, relay_slot_lag = -1, relay_slot_age = -1;
    for (int r = 0; r < PQntuples(slots); r++) {
        int64_t lag = strtoll(PQgetvalue(slots, r, 2), NULL, 10);
        if (lag > worst_slot)
            worst_slot = lag;
        json_t *j = json_pack("{s:s, s:b, s:I, s:s}", "slot", PQgetvalue(slots, r, 0), "active",
                              PQgetvalue(slots, r, 1)[0] == 't', "lag_bytes", (json_int_t)lag,
                              "wal_status", PQgetvalue(slots, r, 3));
        /* the cdc relay's own slot against its configured limit */
        if (strcmp(PQgetvalue(slots, r, 0), cli->cfg.cdc_slot) == 0 && cli->cfg.cdc_max_slot_lag > 0) {
            relay_slot_lag = lag;
            json_object_set_new(j, "max_lag_bytes", json_integer(cli->cfg.cdc_max_slot_lag));
            json_object_set_new(j, "over_max_lag", json_boolean(lag > cli->cfg.cdc_max_slot_lag));
        }
        if (strcmp(PQgetvalue(slots, r, 0), cli->cfg.cdc_slot) == 0 && judge_age) {
            relay_slot_age = unrelayed_ms;
            json_object_set_new(j, "oldest_unrelayed_age_ms", json_integer(unrelayed_ms));
            json_object_set_new(j, "max_lag_age_ms", json_integer(cli->cfg.cdc_max_slot_lag_age));
            json_object_set_new(j, "over_max_lag_age",
                                json_boolean(unrelayed_ms > cli->cfg.cdc_max_slot_lag_age));
        }
        json_array_append_new(arr, j);
    }
    json_object_set_new(o, "replication_slots", arr);

    json_t *failed = json_array();
    int n_failed = 0;
    if (pb_status_redis_wanted(&cli->cfg)) {
        json_t *redis = pb_status_redis(&cli->cfg);
        if (json_object_get(redis, "error")) {
            json_array_append_new(failed, json_string("redis cannot be asked"));
            n_failed++;
        }
        json_object_set_new(o, "redis", redis);
    }
    if (pb_status_kafka_wanted(&cli->cfg)) {
        json_t *kafka = pb_status_kafka(&cli->cfg);
        if (json_object_get(kafka, "error")) {
            json_array_append_new(failed, json_string("kafka cannot be asked"));
            n_failed++;
        }
        json_object_set_new(o, "kafka", kafka);
    }
    n_failed += check(failed, lim.max_backlog >= 0 && s.backlog > lim.max_backlog,
                      "backlog %lld > %lld", (long long)s.backlog, (long long)lim.max_backlog);
    n_failed += check(failed, lim.max_lag_ms >= 0 && s.oldest_age_s * 1000.0 > (double)lim.max_lag_ms,
                      "oldest pending age %lld s > %lld s", (long long)s.oldest_age_s,
                      (long long)(lim.max_lag_ms / 1000));
    n_failed += check(failed, lim.max_dead >= 0 && s.dead_letters > lim.max_dead,
                      "dead letters %lld > %lld", (long long)s.dead_letters, (long long)lim.max_dead);
    n_failed += check(failed, lim.max_slot_lag >= 0 && worst_slot > lim.max_slot_lag,
                      "replication slot lag %lld bytes > %lld", (long long)worst_slot,
                      (long long)lim.max_slot_lag);
    n_failed += check(failed, relay_slot_lag > cli->cfg.cdc_max_slot_lag,
                      "replication slot lag %lld bytes > cdc.max_slot_lag %lld",
                      (long long)relay_slot_lag, (long long)cli->cfg.cdc_max_slot_lag);
    n_failed += check(failed, judge_age && relay_slot_age > cli->cfg.cdc_max_slot_lag_age,
                      "replication slot: the oldest outbox row not relayed is %lld ms old > "
                      "cdc.max_slot_lag_age %lld ms",
                      (long long)relay_slot_age, (long long)cli->cfg.cdc_max_slot_lag_age);
    if (n_intruders) {
        json_array_append_new(failed, json_string("sessions that are not postbox relays hold the "
                                                  "relay's locks (lock_intruders)"));
        n_failed++;
    }
    json_object_set_new(o, "checks_failed", failed);
    json_object_set_new(o, "ok", json_boolean(n_failed == 0));

    if (as_json) {
        char *text = json_dumps(o, JSON_INDENT(2));
        if (text)
            puts(text);
        free(text);
    } else {
        print_table(o);
    }
    rc = n_failed ? PB_EXIT_FAILURE : PB_EXIT_OK;
out:
    PQclear(owners);
    PQclear(intruders);
    pb_stats_inbox_free(inbox, n_inbox);
    PQclear(slots);
    json_decref(o);
    PQfinish(conn);
    return rc;
}
