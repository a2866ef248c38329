/* postbox init: create or upgrade the postbox schema. */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "common/log.h"
#include "store/grants.h"
#include "store/migrate.h"
#include "store/outbox.h"
#include "store/pg.h"

/* Any role that may call pg_logical_emit_message can write a message with the cdc relay's
 * prefix. The relay drops those that postbox.emit did not sign, but the built-in should not be
 * at every role's hand: a superuser init revokes it, any other init says what to run. */
static void report_emit_lock(pb_emit_lock_t lock, const char *capture)
{
    if (lock == PB_EMIT_LOCK_REVOKED)
        log_info("init", "revoked EXECUTE on pg_logical_emit_message from PUBLIC in this database "
                         "(postbox.emit is the way to write events for the cdc capture)");
    if (lock != PB_EMIT_LOCK_NOT_SUPERUSER)
        return;
    if (strcmp(capture, "cdc") == 0)
        log_warn("init",
                 "every role of this database may call pg_logical_emit_message, and only a "
                 "superuser can revoke that: the cdc relay drops the messages postbox.emit did "
                 "not sign, but to keep them out of the WAL run as a superuser: %s",
                 pb_grants_emit_message_sql);
    else
        log_info("init", "not a superuser: EXECUTE on pg_logical_emit_message stays with PUBLIC "
                         "(matters for relay.capture = cdc; see `postbox init --print-grants`)");
}

typedef struct init_args {
    bool print_sql, from_scratch;
    int64_t mark_applied;     /* -1: not asked */
    const char *partition_by; /* --partition-by: the interval (PostgreSQL syntax); NULL: not asked */
} init_args_t;

static int parse_args(const pb_cli_t *cli, init_args_t *a)
{
    *a = (init_args_t){.mark_applied = -1};
    for (int i = 0; i < cli->n_args; i++) {
        const char *v;
        if (strcmp(cli->args[i], "--print-sql") == 0) {
            a->print_sql = true;
        } else if (strcmp(cli->args[i], "--from-scratch") == 0) {
            a->from_scratch = true;
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--partition-by"))) {
            if (!*v) {
                pb_args_error("postbox init: --partition-by needs an interval, e.g. \"1 day\"");
                return PB_EXIT_USAGE;
            }
            a->partition_by = v;
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--mark-applied"))) {
            if (!*v || !pb_args_count(v, &a->mark_applied) || a->mark_applied > 1000000) {
                if (*v)
                    pb_args_error("postbox init: --mark-applied \"%s\": expected a schema version "
                                  "number", v);
                return PB_EXIT_USAGE;
            }
        } else {
            pb_args_error("postbox init: unknown argument \"%s\" (see postbox --help)",
                          cli->args[i]);
            return PB_EXIT_USAGE;
        }
    }
    if (a->from_scratch && !a->print_sql) {
        pb_args_error("postbox init: --from-scratch goes with --print-sql");
        return PB_EXIT_USAGE;
    }
    if (a->partition_by && (a->print_sql || a->mark_applied >= 0 || cli->print_grants)) {
        pb_args_error("postbox init: --partition-by goes with a plain init (after --print-sql, "
                      "run SELECT postbox.partition_tables('INTERVAL') by hand)");
        return PB_EXIT_USAGE;
    }
    if (a->print_sql + (a->mark_applied >= 0) + cli->print_grants > 1) {
        pb_args_error("postbox init: --print-sql, --mark-applied and --print-grants exclude each "
                      "other");
        return PB_EXIT_USAGE;
    }
    return PB_EXIT_OK;
}

/* --print-sql: the migrations the configured database lacks (all of them with --from-scratch,
 * which asks no database) as one script. */
static int print_sql(const pb_cli_t *cli, bool from_scratch)
{
    int version = 0;
    if (!from_scratch) {
        pb_error_t err;
        PGconn *conn;
        if (pb_pg_connect(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
            log_error("init", "cannot connect to postgresql: %s (--from-scratch prints every "
                              "migration without asking a database)", err.msg);
            return PB_EXIT_FAILURE;
        }
        bool present;
        pb_status_t st = pb_migrate_version(conn, &present, &version, &err);
        PQfinish(conn);
        if (st != PB_OK) {
            log_error("init", "%s", err.msg);
            return PB_EXIT_FAILURE;
        }
        if (version > pb_migrate_latest()) {
            log_error("init", "database schema postbox is at version %d, newer than this postbox "
                              "knows (%d): upgrade postbox", version, pb_migrate_latest());
            return PB_EXIT_FAILURE;
        }
    }
    pb_migrate_write_sql(stdout, version, (int)cli->cfg.relay_shards);
    return fflush(stdout) == 0 ? PB_EXIT_OK : PB_EXIT_FAILURE;
}

static int mark_applied(const pb_cli_t *cli, int version)
{
    pb_error_t err;
    if (!pb_migrate_find(version)) {
        pb_args_error("postbox init: --mark-applied %d: this postbox has no migration %d (its "
                      "versions go from 1 to %d)", version, version, pb_migrate_latest());
        return PB_EXIT_USAGE;
    }
    PGconn *conn;
    if (pb_pg_connect_primary(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        log_error("init", "cannot connect to postgresql: %s", err.msg);
        return PB_EXIT_FAILURE;
    }
    int marked;
    pb_status_t st = pb_migrate_mark_applied(conn, version, &marked, &err);
    bool present = false;
    int now = 0;
    if (st == PB_OK)
        st = pb_migrate_version(conn, &present, &now, &err);
    PQfinish(conn);
    if (st != PB_OK) {
        log_error("init", "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    printf("schema postbox at version %d (marked %d migration%s as applied, none run)\n", now,
           marked, marked == 1 ? "" : "s");
    return PB_EXIT_OK;
}

/* --partition-by: the history tables on the partitioned layout (sql/020). An empty table is
 * made again partitioned; one holding rows becomes the partition <table>_legacy of the new one
 * (the online migration: prepared without blocking writers, then a moment's lock). */
static pb_status_t partition_tables(PGconn *conn, const char *every, pb_error_t *err)
{
    const char *params[1] = {every};
    /* tables holding rows: the online migration's preparation (sql/020), one statement at a
     * time outside a transaction (an index built concurrently), none blocking writers */
    PGresult *steps = PQexecParams(conn, "SELECT table_name, step FROM "
                                         "postbox.partition_online_steps($1::interval)",
                                   1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, steps, PGRES_TUPLES_OK, "plan the online migration", err);
    if (st != PB_OK)
        return st;
    for (int i = 0; i < PQntuples(steps) && st == PB_OK; i++) {
        log_info("init", "postbox.%s holds rows: %s", PQgetvalue(steps, i, 0),
                 PQgetvalue(steps, i, 1));
        st = pb_pg_exec(conn, PQgetvalue(steps, i, 1), err);
    }
    PQclear(steps);
    if (st != PB_OK)
        return st;
    PGresult *res = PQexecParams(conn, "SELECT string_agg(t, ', ') FROM postbox.partition_tables("
                                       "$1::interval) AS t",
                                 1, NULL, params, NULL, NULL, 0);
    st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "partition the history tables", err);
    if (st != PB_OK)
        return st;
    log_info("init", "partitioned by %s: postbox.{%s} (the janitors make partitions ahead and "
                     "drop old ones)", every, PQgetvalue(res, 0, 0));
    PQclear(res);
    return PB_OK;
}

int pb_cmd_init(pb_cli_t *cli)
{
    init_args_t a;
    int rc = parse_args(cli, &a);
    if (rc != PB_EXIT_OK)
        return rc;
    if (cli->print_grants) {
        pb_grants_write(stdout, &cli->cfg);
        return PB_EXIT_OK;
    }
    if (a.print_sql)
        return print_sql(cli, a.from_scratch);
    if (a.mark_applied >= 0)
        return mark_applied(cli, (int)a.mark_applied);
    pb_error_t err;
    PGconn *conn;
    if (pb_pg_connect_primary(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        log_error("init", "cannot connect to postgresql: %s", err.msg);
        return PB_EXIT_FAILURE;
    }
    int applied;
    pb_status_t st = pb_migrate(conn, &applied, &err);
    /* the index that bounds a claim of some shards is built here, not by a starting relay: it
     * is built concurrently, which waits for every transaction open in the database (with
     * relay.shards = 1 only the indexes of other counts are dropped) */
    if (st == PB_OK)
        st = pb_outbox_ensure_shard_index(conn, (int)cli->cfg.relay_shards, &err);
    if (st == PB_OK && a.partition_by)
        st = partition_tables(conn, a.partition_by, &err);
    pb_emit_lock_t lock = PB_EMIT_LOCK_ALREADY;
    if (st == PB_OK)
        st = pb_grants_lock_emit_message(conn, &lock, &err);
    PQfinish(conn);
    if (st != PB_OK) {
        log_error("init", "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    report_emit_lock(lock, cli->cfg.relay_capture);
    printf("schema postbox at version %d (applied %d migration%s)\n", pb_migrate_latest(), applied,
           applied == 1 ? "" : "s");
    return PB_EXIT_OK;
}
