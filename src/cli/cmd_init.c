/* postbox init: create or upgrade the postbox schema. */
#include <libpq-fe.h>
#include <stdio.h>

#include "cli/cli.h"
#include "common/log.h"
#include "store/migrate.h"
#include "store/outbox.h"
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
    /* the index that bounds a claim of some shards is built here, not by a starting relay: it
     * is built concurrently, which waits for every transaction open in the database (with
     * relay.shards = 1 only the indexes of other counts are dropped) */
    if (st == PB_OK)
        st = pb_outbox_ensure_shard_index(conn, (int)cli->cfg.relay_shards, &err);
    PQfinish(conn);
    if (st != PB_OK) {
        log_error("init", "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    printf("schema postbox at version %d (applied %d migration%s)\n", pb_migrate_latest(), applied,
           applied == 1 ? "" : "s");
    return PB_EXIT_OK;
}
