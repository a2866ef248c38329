/* Versioned schema migrations, compiled in from sql/NNN_*.sql (cmake/embed_sql.cmake). */
#ifndef PB_STORE_MIGRATE_H
#define PB_STORE_MIGRATE_H

#include <libpq-fe.h>

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

#endif
