/* postbox init: create or upgrade the postbox schema. */
#include <libpq-fe.h>
#include <stdio.h>

#include "cli/cli.h"
#include "common/log.h"
#include "store/migrate.h"
#include "store/pg.h"

int pb_cmd_init(pb_cli_t *cli)
{
    pb_error_t err;
    PGconn *conn;
    if (pb_pg_connect(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        log_error("init", "cannot connect to postgresql: %s", err.msg);
        return PB_EXIT_FAILURE;
    }
    int applied;
    pb_status_t st = pb_migrate(conn, &applied, &err);
    PQfinish(conn);
    if (st != PB_OK) {
        log_error("init", "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    printf("schema postbox at version %d (applied %d migration%s)\n", pb_migrate_latest(), applied,
           applied == 1 ? "" : "s");
    return PB_EXIT_OK;
}
