/* Versioned schema migrations, compiled in from sql/NNN_*.sql (cmake/embed_sql.cmake). */
#ifndef PB_STORE_MIGRATE_H
#define PB_STORE_MIGRATE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>

#include "common/err.h"

typedef struct pb_migration {
    int version;
    const char *name;
    const char *sql;
} pb_migration_t;

extern const pb_migration_t pb_migrations[];
extern const int pb_migration_count;

/* Applies every migration newer than the database's, all in one transaction, under an
 * advisory lock so two concurrent inits do not race. *applied receives how many ran (0 when the
 * schema is current). A database newer than this binary is a fatal error. */
pb_status_t pb_migrate(PGconn *conn, int *applied, pb_error_t *err) PB_MUSTCHECK;

/* The highest version this binary knows. */
int pb_migrate_latest(void);

/* The migration of that version, or NULL when this binary has none. */
const pb_migration_t *pb_migrate_find(int version);

/* Reads the schema version recorded in the database, changing nothing: *present is false (and
 * *version 0) when postbox.schema_migrations does not exist. A version below pb_migrate_latest()
 * means migrations are pending (the ones newer than it: pb_migrate applies exactly those). */
pb_status_t pb_migrate_version(PGconn *conn, bool *present, int *version,
                               pb_error_t *err) PB_MUSTCHECK;

/* Writes the migrations newer than from_version as one SQL script for review (`postbox init
 * --print-sql`): in one transaction, the statements pb_migrate runs, each migration followed by
 * the row that records it in postbox.schema_migrations, behind a guard that refuses a database
 * at another version than from_version. Applied with psql, it leaves the schema as `postbox
 * init` would (without what init does outside the migrations, named in the script's comments). */
void pb_migrate_write_sql(FILE *out, int from_version, int relay_shards);

/* Records the migrations newer than the database's version up to `version` as applied, without
 * running them, for a DBA who applied them by hand (`postbox init --mark-applied`). *marked
 * receives how many rows were written (0 when the database is at `version` or past it). PB_FATAL
 * for a version this binary does not know. */
pb_status_t pb_migrate_mark_applied(PGconn *conn, int version, int *marked,
                                    pb_error_t *err) PB_MUSTCHECK;

#endif
