/* postbox init: create or upgrade the postbox schema. */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

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

int pb_cmd_init(pb_cli_t *cli)
{
    if (cli->print_grants) {
        pb_grants_write(stdout, &cli->cfg);
        return PB_EXIT_OK;
    }
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
