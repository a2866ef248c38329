#include "store/migrate.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/log.h"
#include "store/pg.h"

int pb_migrate_latest(void)
{
    return pb_migration_count ? pb_migrations[pb_migration_count - 1].version : 0;
}

/* Runs sql (may hold several statements) and checks it succeeded. */
static pb_status_t run(PGconn *conn, const char *sql, const char *what, pb_error_t *err)
{
    PGresult *res = PQexec(conn, sql);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, what, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

static pb_status_t current_version(PGconn *conn, int *version, pb_error_t *err)
{
    PGresult *res = PQexec(conn, "SELECT coalesce(max(version), 0) FROM postbox.schema_migrations");
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read schema version", err);
    if (st != PB_OK)
        return st;
    *version = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    return PB_OK;
}

static pb_status_t migrate_in_tx(PGconn *conn, int *applied, pb_error_t *err)
{
    pb_status_t st;
    /* the lock serialises concurrent inits; the quiet level hides "already exists" notices */
    if ((st = run(conn,
                  "SET LOCAL client_min_messages = warning;"
                  "SELECT pg_advisory_xact_lock(hashtext('postbox.migrate'));"
                  "CREATE SCHEMA IF NOT EXISTS postbox;"
                  "CREATE TABLE IF NOT EXISTS postbox.schema_migrations ("
                  "  version integer PRIMARY KEY,"
                  "  name text NOT NULL,"
                  "  applied_at timestamptz NOT NULL DEFAULT now())",
                  "create schema postbox", err)) != PB_OK)
        return st;
    int version;
    if ((st = current_version(conn, &version, err)) != PB_OK)
        return st;
    if (version > pb_migrate_latest())
        return pb_fail(err, PB_FATAL,
                       "database schema postbox is at version %d, newer than this postbox knows "
                       "(%d): upgrade postbox",
                       version, pb_migrate_latest());
    for (int i = 0; i < pb_migration_count; i++) {
        const pb_migration_t *m = &pb_migrations[i];
        if (m->version <= version)
            continue;
        char what[128];
        snprintf(what, sizeof what, "migration %s", m->name);
        if ((st = run(conn, m->sql, what, err)) != PB_OK)
            return st;
        char vtext[16];
        snprintf(vtext, sizeof vtext, "%d", m->version);
        const char *params[2] = {vtext, m->name};
        PGresult *res = PQexecParams(conn,
                                     "INSERT INTO postbox.schema_migrations (version, name) "
                                     "VALUES ($1, $2)",
                                     2, NULL, params, NULL, NULL, 0);
        if ((st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "record migration", err)) != PB_OK)
            return st;
        PQclear(res);
        log_info("init", "applied migration %s", m->name);
        (*applied)++;
    }
    return PB_OK;
}

pb_status_t pb_migrate(PGconn *conn, int *applied, pb_error_t *err)
{
    *applied = 0;
    pb_status_t st = run(conn, "BEGIN", "begin", err);
    if (st != PB_OK)
        return st;
    st = migrate_in_tx(conn, applied, err);
    if (st == PB_OK)
        return run(conn, "COMMIT", "commit migrations", err);
    PQclear(PQexec(conn, "ROLLBACK"));
    *applied = 0;
    return st;
}
