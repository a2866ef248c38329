/* What the cdc capture needs of the server (relay.capture = cdc): wal_level and room for a slot
 * and a WAL sender, the state of cdc.slot (missing, inactive, lost, behind), cdc.publication,
 * and the REPLICA IDENTITY of the outbox. One query each; the judgements are in judge.c. */
#include <stdlib.h>
#include <string.h>

#include "check/check_int.h"
#include "check/judge.h"
#include "store/slot_position.h"

static const char settings_sql[] =
    "SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int, "
    "       (SELECT count(*) FROM pg_replication_slots)::int, "
    "       current_setting('max_wal_senders')::int, "
    "       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender')::int";

/* pg_current_wal_lsn() fails on a standby: the lag is then unknown */
static const char slot_sql[] =
    "SELECT slot_type = 'logical' AND plugin = 'pgoutput', database = current_database(), active, "
    "       wal_status, "
    "       CASE WHEN pg_is_in_recovery() THEN NULL "
    "            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::int8 END, "
    "       CASE WHEN pg_is_in_recovery() THEN NULL "
    "            ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::int8 END "
    "FROM pg_replication_slots WHERE slot_name = $1";

static const char publication_sql[] =
    "SELECT p.pubinsert, EXISTS (SELECT FROM pg_publication_tables t "
    "                            WHERE t.pubname = p.pubname AND t.schemaname = 'postbox' "
    "                              AND t.tablename = 'outbox') "
    "FROM pg_publication p WHERE p.pubname = $1";

/* the outbox's identity, and whether a publication of it publishes what needs one */
static const char identity_sql[] =
    "SELECT c.relreplident, "
    "       coalesce((SELECT bool_or(p.pubupdate OR p.pubdelete) FROM pg_publication p "
    "                 JOIN pg_publication_tables t ON t.pubname = p.pubname "
    "                 WHERE t.schemaname = 'postbox' AND t.tablename = 'outbox'), false) "
    "FROM pg_class c WHERE c.oid = to_regclass('postbox.outbox')";

static int64_t int_or(PGresult *res, int col, int64_t dflt)
{
    return PQgetisnull(res, 0, col) ? dflt : strtoll(PQgetvalue(res, 0, col), NULL, 10);
}

/* The slot against the position the relay recorded (cdc/slot_check.h): a slot dropped, lost or
 * made again under the relay's feet stops the relay; say so before it starts. A schema without
 * the record (before version 15) is left to schema.version. */
static void check_slot_identity(pb_check_ctx_t *ctx)
{
    pb_slot_state_t slot;
    pb_slot_record_t rec;
    int64_t lag;
    pb_error_t err;
    if (pb_slot_position_load(ctx->conn, ctx->cfg->cdc_slot, &slot, &rec, &lag, &err) != PB_OK)
        return;
    pb_slot_verdict_t v = pb_slot_judge(&slot, &rec);
    if (!pb_slot_verdict_fatal(v))
        return;
    char why[512];
    pb_slot_explain(v, ctx->cfg->cdc_slot, &slot, &rec, why, sizeof why);
    pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "cdc.slot_position", "%s", why);
    pb_check_hint(f, "a slot dropped on purpose is dropped with `postbox cdc drop-slot`, which "
                     "forgets the recorded position too");
}

void pb_check_cdc(pb_check_ctx_t *ctx)
{
    const pb_config_t *cfg = ctx->cfg;
    if (strcmp(cfg->relay_capture, "cdc") != 0)
        return;
    const char *slot_param[1] = {cfg->cdc_slot};
    PGresult *res = pb_check_query(ctx, "cdc.slot", "look up the replication slot", slot_sql, 1,
                                   slot_param);
    if (!res)
        return;
    pb_check_slot_t slot = {.exists = PQntuples(res) == 1};
    char wal_status[16] = "";
    if (slot.exists) {
        slot.pgoutput = PQgetvalue(res, 0, 0)[0] == 't';
        slot.this_database = PQgetvalue(res, 0, 1)[0] == 't';
        slot.active = PQgetvalue(res, 0, 2)[0] == 't';
        snprintf(wal_status, sizeof wal_status, "%s", PQgetvalue(res, 0, 3));
        slot.wal_status = wal_status;
        slot.lag_known = !PQgetisnull(res, 0, 4);
        slot.lag_bytes = int_or(res, 4, 0);
        slot.retained_bytes = int_or(res, 5, 0);
    }
    PQclear(res);
    slot.unrelayed_age_ms = -1;
    if (slot.exists && !ctx->schema_absent && cfg->cdc_max_slot_lag_age > 0 &&
        cfg->cdc_mark_published && !cfg->cdc_delete_after_insert) {
        pb_error_t err; /* unreadable: the schema and privilege items say why */
        if (pb_slot_unrelayed_age(ctx->conn, cfg->cdc_slot, &slot.unrelayed_age_ms, &err) != PB_OK)
            slot.unrelayed_age_ms = -1;
    }
    check_slot_identity(ctx);

    if (!(res = pb_check_query(ctx, "cdc.settings", "read the replication settings", settings_sql,
                               0, NULL)))
        return;
    pb_check_wal_t w = {.wal_level = PQgetvalue(res, 0, 0),
                        .max_replication_slots = (int)int_or(res, 1, 0),
                        .slots_used = (int)int_or(res, 2, 0),
                        .max_wal_senders = (int)int_or(res, 3, 0),
                        .senders_used = (int)int_or(res, 4, 0),
                        .slot_exists = slot.exists};
    pb_judge_wal(ctx->r, &w, cfg);
    PQclear(res);
    pb_judge_slot(ctx->r, &slot, cfg, ctx->at_start);

    if (!(res = pb_check_query(ctx, "cdc.publication", "look up the publication", publication_sql,
                               1, (const char *const[]){cfg->cdc_publication})))
        return;
    pb_check_publication_t pub = {.exists = PQntuples(res) == 1};
    if (pub.exists) {
        pub.inserts = PQgetvalue(res, 0, 0)[0] == 't';
        pub.has_outbox = PQgetvalue(res, 0, 1)[0] == 't';
    }
    PQclear(res);
    pb_judge_publication(ctx->r, &pub, cfg, ctx->at_start);

    if (ctx->schema_absent ||
        !(res = pb_check_query(ctx, "cdc.replica_identity", "read the outbox's replica identity",
                               identity_sql, 0, NULL)))
        return;
    if (PQntuples(res) == 1)
        pb_judge_replica_identity(ctx->r, PQgetvalue(res, 0, 0)[0],
                                  PQgetvalue(res, 0, 1)[0] == 't');
    PQclear(res);
}
