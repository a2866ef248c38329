#include "store/migrate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "store/grants.h"
#include "store/pg.h"

/* What opens every migration run, `postbox init`'s transaction and the printed script alike: the
 * lock that serialises concurrent runs, the schema and the table of applied versions. The quiet
 * level hides "already exists" notices. */
static const char preamble_sql[] =
    "SET LOCAL client_min_messages = warning;\n"
    "DO $$ BEGIN PERFORM pg_advisory_xact_lock(hashtext('postbox.migrate')); END $$;\n"
    "CREATE SCHEMA IF NOT EXISTS postbox;\n"
    "CREATE TABLE IF NOT EXISTS postbox.schema_migrations (\n"
    "  version integer PRIMARY KEY,\n"
    "  name text NOT NULL,\n"
    "  applied_at timestamptz NOT NULL DEFAULT now());\n";

#define RECORD_SQL "INSERT INTO postbox.schema_migrations (version, name) VALUES ($1, $2)"

int pb_migrate_latest(void)
{
    return pb_migration_count ? pb_migrations[pb_migration_count - 1].version : 0;
}

const pb_migration_t *pb_migrate_find(int version)
{
    for (int i = 0; i < pb_migration_count; i++)
        if (pb_migrations[i].version == version)
            return &pb_migrations[i];
    return NULL;
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
    int64_t latest;
    pb_status_t st = pb_pg_query_int64(conn,
                                       "SELECT coalesce(max(version), 0) FROM postbox.schema_migrations",
                                       "read schema version", &latest, NULL, err);
    if (st == PB_OK)
        *version = (int)latest;
    return st;
}

pb_status_t pb_migrate_version(PGconn *conn, bool *present, int *version, pb_error_t *err)
{
    *present = false;
    *version = 0;
    pb_status_t st = pb_pg_query_bool(conn,
                                      "SELECT to_regclass('postbox.schema_migrations') IS NOT NULL",
                                      "look for the schema version", present, err);
    if (st != PB_OK || !*present)
        return st;
    return current_version(conn, version, err);
}

static pb_status_t record(PGconn *conn, const pb_migration_t *m, pb_error_t *err)
{
    char vtext[16];
    snprintf(vtext, sizeof vtext, "%d", m->version);
    const char *params[2] = {vtext, m->name};
    PGresult *res = PQexecParams(conn, RECORD_SQL, 2, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "record migration", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

/* Opens the run inside the caller's transaction; *version gets the database's version. */
static pb_status_t begin_run(PGconn *conn, int *version, pb_error_t *err)
{
    pb_status_t st = run(conn, preamble_sql, "create schema postbox", err);
    if (st == PB_OK)
        st = current_version(conn, version, err);
    if (st == PB_OK && *version > pb_migrate_latest())
        st = pb_fail(err, PB_FATAL,
                     "database schema postbox is at version %d, newer than this postbox knows "
                     "(%d): upgrade postbox",
                     *version, pb_migrate_latest());
    return st;
}

static pb_status_t migrate_in_tx(PGconn *conn, int *applied, pb_error_t *err)
{
    int version;
    pb_status_t st = begin_run(conn, &version, err);
    for (int i = 0; st == PB_OK && i < pb_migration_count; i++) {
        const pb_migration_t *m = &pb_migrations[i];
        if (m->version <= version)
            continue;
        char what[128];
        snprintf(what, sizeof what, "migration %s", m->name);
        if ((st = run(conn, m->sql, what, err)) != PB_OK || (st = record(conn, m, err)) != PB_OK)
            break;
        log_info("init", "applied migration %s", m->name);
        (*applied)++;
    }
    return st;
}

static pb_status_t mark_in_tx(PGconn *conn, int upto, int *marked, pb_error_t *err)
{
    int version;
    pb_status_t st = begin_run(conn, &version, err);
    for (int i = 0; st == PB_OK && i < pb_migration_count; i++) {
        const pb_migration_t *m = &pb_migrations[i];
        if (m->version <= version || m->version > upto)
            continue;
        if ((st = record(conn, m, err)) != PB_OK)
            break;
        log_info("init", "marked migration %s as applied (not run)", m->name);
        (*marked)++;
    }
    return st;
}

/* Runs body in one transaction: committed when it succeeds, rolled back (and *count 0) when not. */
static pb_status_t in_tx(PGconn *conn, pb_status_t (*body)(PGconn *, int, int *, pb_error_t *),
                         int arg, int *count, pb_error_t *err)
{
    *count = 0;
    pb_status_t st = run(conn, "BEGIN", "begin", err);
    if (st != PB_OK)
        return st;
    st = body(conn, arg, count, err);
    if (st == PB_OK)
        return run(conn, "COMMIT", "commit migrations", err);
    PQclear(PQexec(conn, "ROLLBACK"));
    *count = 0;
    return st;
}

static pb_status_t migrate_body(PGconn *conn, int unused, int *applied, pb_error_t *err)
{
    (void)unused;
    return migrate_in_tx(conn, applied, err);
}

pb_status_t pb_migrate(PGconn *conn, int *applied, pb_error_t *err)
{
    return in_tx(conn, migrate_body, 0, applied, err);
}

pb_status_t pb_migrate_mark_applied(PGconn *conn, int version, int *marked, pb_error_t *err)
{
    *marked = 0;
    if (!pb_migrate_find(version))
        return pb_fail(err, PB_FATAL, "--mark-applied %d: this postbox has no migration %d (its "
                                      "migrations go from 1 to %d)",
                       version, version, pb_migrate_latest());
    return in_tx(conn, mark_in_tx, version, marked, err);
}

void pb_migrate_write_sql(FILE *out, int from_version, int relay_shards)
{
    int latest = pb_migrate_latest(), n = 0;
    for (int i = 0; i < pb_migration_count; i++)
        n += pb_migrations[i].version > from_version;
    fprintf(out, "-- postbox schema migrations (postbox init --print-sql, postbox %s)\n",
            POSTBOX_VERSION_STRING);
    if (n == 0) {
        fprintf(out, "-- schema postbox is at version %d, the latest this postbox knows: nothing "
                     "to apply.\n", from_version);
        return;
    }
    fprintf(out,
            "-- From schema version %d to %d: %d migration%s. Review it, then run it as the role\n"
            "-- that is to own schema postbox, e.g.  psql -v ON_ERROR_STOP=1 -d DBNAME -f FILE\n"
            "-- It runs in one transaction, records each migration in postbox.schema_migrations (so\n"
            "-- that `postbox init`, `postbox check` and a starting relay find the schema current)\n"
            "-- and refuses a database at another version than %d.\n",
            from_version, latest, n, n == 1 ? "" : "s", from_version);
    fputs("BEGIN;\n", out);
    fputs(preamble_sql, out);
    fprintf(out,
            "DO $$ BEGIN\n"
            "    IF (SELECT coalesce(max(version), 0) FROM postbox.schema_migrations) <> %d THEN\n"
            "        RAISE EXCEPTION 'postbox: this script upgrades schema version %d, the database is at version %%',\n"
            "            (SELECT coalesce(max(version), 0) FROM postbox.schema_migrations);\n"
            "    END IF;\n"
            "END $$;\n",
            from_version, from_version);
    for (int i = 0; i < pb_migration_count; i++) {
        const pb_migration_t *m = &pb_migrations[i];
        if (m->version <= from_version)
            continue;
        fprintf(out, "\n-- ---- migration %s ----\n", m->name);
        size_t len = strlen(m->sql);
        fputs(m->sql, out);
        if (len && m->sql[len - 1] != '\n')
            fputc('\n', out);
        /* names are file names of sql/: digits, letters, '_' and '.' */
        fprintf(out, "INSERT INTO postbox.schema_migrations (version, name) VALUES (%d, '%s');\n",
                m->version, m->name);
    }
    fputs("\nCOMMIT;\n", out);
    fputs("\n-- What `postbox init` does besides the migrations, not part of this script:\n", out);
    if (relay_shards > 1)
        fprintf(out,
                "-- relay.shards = %d: the index that bounds a claim of some shards is built outside a\n"
                "-- transaction: run each statement that  SELECT postbox.shard_index_ddl(%d);  returns\n"
                "-- (psql:  SELECT postbox.shard_index_ddl(%d) \\gexec), or `postbox init` with\n"
                "-- relay.shards = %d.\n",
                relay_shards, relay_shards, relay_shards, relay_shards);
    fputs("-- pg_logical_emit_message is executable by PUBLIC unless revoked (a superuser's\n"
          "-- `postbox init` does it); for the cdc capture, run as a superuser:\n",
          out);
    pb_grants_write_emit_message_comment(out);
}
