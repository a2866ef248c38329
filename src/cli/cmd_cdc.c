/* postbox cdc drop-slot: remove the replication slot and the publication of the cdc capture,
 * so that an abandoned slot stops holding WAL, and the position recorded for the slot
 * (postbox.cdc_slot_positions), so that the next cdc relay creates a new slot instead of
 * stopping at a missing or replaced one. Refuses while a relay streams the slot. */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/log.h"
#include "store/pg.h"
#include "store/slot_position.h"

#define FAC "cdc"

static int drop_slot(pb_cli_t *cli, PGconn *conn)
{
    const pb_config_t *cfg = &cli->cfg;
    pb_error_t err;
    const char *slot[1] = {cfg->cdc_slot};
    PGresult *res = PQexecParams(conn,
                                 "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                                 1, NULL, slot, NULL, NULL, 0);
    if (pb_pg_check(conn, res, PGRES_TUPLES_OK, "look up the slot", &err) != PB_OK) {
        log_error(FAC, "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    bool exists = PQntuples(res) == 1;
    if (exists && !PQgetisnull(res, 0, 0)) {
        log_error(FAC, "slot \"%s\" is being streamed by process %s: stop that relay first",
                  cfg->cdc_slot, PQgetvalue(res, 0, 0));
        PQclear(res);
        return PB_EXIT_FAILURE;
    }
    PQclear(res);
    if (exists) {
        res = PQexecParams(conn, "SELECT pg_drop_replication_slot($1)", 1, NULL, slot, NULL, NULL, 0);
        if (pb_pg_check(conn, res, PGRES_TUPLES_OK, "drop the slot", &err) != PB_OK) {
            log_error(FAC, "%s", err.msg);
            return PB_EXIT_FAILURE;
        }
        PQclear(res);
        printf("dropped replication slot \"%s\"\n", cfg->cdc_slot);
    } else {
        printf("replication slot \"%s\" does not exist\n", cfg->cdc_slot);
    }
    char *ident;
    if (pb_pg_quote_ident(conn, cfg->cdc_publication, "cdc.publication", &ident, &err) != PB_OK) {
        log_error(FAC, "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    char sql[512];
    pb_status_t st = pb_pg_sql_printf(sql, sizeof sql, "drop the publication", &err,
                                      "SET client_min_messages = warning; DROP PUBLICATION IF EXISTS %s",
                                      ident);
    PQfreemem(ident);
    if (st != PB_OK || pb_pg_exec(conn, sql, &err) != PB_OK) {
        log_error(FAC, "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    printf("dropped publication \"%s\" (if it existed)\n", cfg->cdc_publication);
    /* dropped on purpose: the next start creates the slot afresh instead of stopping at it */
    if (pb_slot_position_forget(conn, cfg->cdc_slot, &err) != PB_OK) {
        log_error(FAC, "%s", err.msg);
        return PB_EXIT_FAILURE;
    }
    printf("forgot the position recorded for slot \"%s\"\n", cfg->cdc_slot);
    return PB_EXIT_OK;
}

int pb_cmd_cdc(pb_cli_t *cli)
{
    if (!cli->subcommand || strcmp(cli->subcommand, "drop-slot") != 0) {
        fprintf(stderr, "postbox: usage: postbox cdc drop-slot\n");
        return PB_EXIT_USAGE;
    }
    pb_error_t err;
    PGconn *conn;
    if (pb_pg_connect_primary(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        log_error(FAC, "cannot connect to postgresql: %s", err.msg);
        return PB_EXIT_FAILURE;
    }
    int rc = drop_slot(cli, conn);
    PQfinish(conn);
    return rc;
}
