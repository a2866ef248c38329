#include "store/grants.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "store/pg.h"

const char pb_grants_emit_message_sql[] =
    "DO $$\n"
    "DECLARE\n"
    "    f regprocedure;\n"
    "    owner name := (SELECT pg_get_userbyid(proowner) FROM pg_proc\n"
    "                   WHERE oid = 'postbox.emit(text,text,text,jsonb,jsonb,text,text,timestamptz,timestamptz)'::regprocedure);\n"
    "BEGIN\n"
    "    FOR f IN SELECT oid::regprocedure FROM pg_proc\n"
    "             WHERE proname = 'pg_logical_emit_message'\n"
    "               AND pronamespace = 'pg_catalog'::regnamespace LOOP\n"
    "        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);\n"
    "        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, owner);\n"
    "    END LOOP;\n"
    "END $$;\n";

/* Whether PUBLIC may execute some pg_logical_emit_message (a NULL acl is the default: it may),
 * and whether the session's role is a superuser. */
static const char probe_sql[] =
    "SELECT EXISTS (SELECT FROM pg_proc p\n"
    "               WHERE p.proname = 'pg_logical_emit_message'\n"
    "                 AND p.pronamespace = 'pg_catalog'::regnamespace\n"
    "                 AND (p.proacl IS NULL OR EXISTS (\n"
    "                      SELECT FROM aclexplode(p.proacl) a\n"
    "                      WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))),\n"
    "       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)";

pb_status_t pb_grants_lock_emit_message(PGconn *conn, pb_emit_lock_t *out, pb_error_t *err)
{
    PGresult *res = PQexec(conn, probe_sql);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK,
                                 "check who may execute pg_logical_emit_message", err);
    if (st != PB_OK)
        return st;
    bool public_may = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool superuser = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    if (!public_may) {
        *out = PB_EMIT_LOCK_ALREADY;
        return PB_OK;
    }
    if (!superuser) {
        *out = PB_EMIT_LOCK_NOT_SUPERUSER;
        return PB_OK;
    }
    res = PQexec(conn, pb_grants_emit_message_sql);
    if ((st = pb_pg_check(conn, res, PGRES_COMMAND_OK,
                          "revoke EXECUTE on pg_logical_emit_message from PUBLIC", err)) != PB_OK)
        return st;
    PQclear(res);
    *out = PB_EMIT_LOCK_REVOKED;
    return PB_OK;
}

/* A role created unless it exists (two sessions creating it at once: one of them wins). */
static void write_role(FILE *out, const char *role)
{
    fprintf(out,
            "DO $$ BEGIN CREATE ROLE %s NOLOGIN;\n"
            "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$;\n",
            role);
}

/* s as an SQL string literal whatever standard_conforming_strings says: quotes doubled, and
 * with a backslash the E'' form with backslashes doubled (as PQescapeLiteral writes it). */
static void write_literal(FILE *out, const char *s)
{
    bool backslash = strchr(s, '\\') != NULL;
    fputs(backslash ? "E'" : "'", out);
    for (; *s; s++) {
        if (*s == '\'' || (backslash && *s == '\\'))
            fputc(*s, out);
        fputc(*s, out);
    }
    fputc('\'', out);
}

void pb_grants_write(FILE *out, const pb_config_t *cfg)
{
    bool cdc = strcmp(cfg->relay_capture, "cdc") == 0;
    fputs("-- Least-privilege roles of postbox (postbox init --print-grants). Run this as the owner\n"
          "-- of schema postbox (the role that ran `postbox init`) in the database, then make the\n"
          "-- login roles members:\n"
          "--   GRANT " PB_ROLE_PRODUCER " TO app;      -- writes events\n"
          "--   GRANT " PB_ROLE_RELAY " TO relay;       -- postbox relay\n"
          "--   GRANT " PB_ROLE_CONSUMER " TO consumer; -- postbox consume (plus its handlers' own grants)\n"
          "-- relay.capture = cdc: the relay's login role also needs the REPLICATION attribute, which\n"
          "-- membership does not pass on: ALTER ROLE relay REPLICATION;\n"
          "-- No role needs to own anything or be a superuser; `postbox init` itself stays with the\n"
          "-- schema owner.\n",
          out);
    write_role(out, PB_ROLE_PRODUCER);
    write_role(out, PB_ROLE_RELAY);
    write_role(out, PB_ROLE_CONSUMER);
    fputs("GRANT USAGE ON SCHEMA postbox TO " PB_ROLE_PRODUCER ", " PB_ROLE_RELAY ", " PB_ROLE_CONSUMER ";\n"
          "\n"
          "-- producer: postbox.enqueue and libpostbox (an INSERT returning the ids),\n"
          "-- postbox.capture triggers (an INSERT), postbox.emit (cdc, signed: see pg_logical_emit_message below)\n"
          "GRANT INSERT, SELECT (id, event_id) ON postbox.outbox TO " PB_ROLE_PRODUCER ";\n"
          "GRANT EXECUTE ON FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text, timestamptz, timestamptz) TO " PB_ROLE_PRODUCER ";\n",
          out);
    if (cdc && cfg->cdc_delete_after_insert)
        fputs("-- cdc.delete_after_insert: the trigger deletes each row as the role that inserts it\n"
              "GRANT DELETE ON postbox.outbox TO " PB_ROLE_PRODUCER ";\n",
              out);
    fputs("\n"
          "-- relay: claims and moves outbox rows, dead-letters, purges its history, holds its shard\n"
          "-- locks (keys in relay_lock_keys), verifies postbox.emit's signatures (emit_key)\n"
          "GRANT SELECT, UPDATE, DELETE ON postbox.outbox TO " PB_ROLE_RELAY ";\n"
          "GRANT SELECT, INSERT, DELETE ON postbox.outbox_published TO " PB_ROLE_RELAY ";\n"
          "GRANT SELECT, INSERT ON postbox.dead_letters TO " PB_ROLE_RELAY ";\n"
          "GRANT SELECT ON postbox.schema_migrations, postbox.emit_key, postbox.relay_lock_keys TO " PB_ROLE_RELAY ";\n"
          "-- the cdc relay's events set aside until due (counted by every relay's metrics)\n"
          "GRANT SELECT, INSERT, DELETE ON postbox.cdc_deferred TO " PB_ROLE_RELAY ";\n"
          "GRANT EXECUTE ON FUNCTION postbox.emit_drain_marker(text) TO " PB_ROLE_RELAY ";\n",
          out);
    if (cdc) {
        /* The name reaches the DO block through a setting, never inside its body: whatever it
         * holds (a "$$" would end the body) it cannot become a statement of the script. */
        fputs("-- cdc: the publication the relay streams (creating it needs the outbox's owner)\n"
              "SET postbox.publication = ",
              out);
        write_literal(out, cfg->cdc_publication);
        fputs(";\n"
              "DO $$ BEGIN\n"
              "    IF NOT EXISTS (SELECT FROM pg_publication\n"
              "                   WHERE pubname = current_setting('postbox.publication')) THEN\n"
              "        EXECUTE format('CREATE PUBLICATION %I FOR TABLE postbox.outbox WITH (publish = ''insert'')',\n"
              "                       current_setting('postbox.publication'));\n"
              "    END IF;\n"
              "END $$;\n",
              out);
        fputs(cfg->cdc_delete_after_insert
                  ? "CREATE OR REPLACE TRIGGER outbox_cdc_delete AFTER INSERT ON postbox.outbox\n"
                    "    FOR EACH ROW EXECUTE FUNCTION postbox.delete_inserted_row();\n"
                  : "DROP TRIGGER IF EXISTS outbox_cdc_delete ON postbox.outbox;\n",
              out);
    }
    fputs("\n"
          "-- consumer: the inbox, its failures and dead messages (and purges its own rows), the\n"
          "-- last sequence number handled per aggregate\n"
          "GRANT SELECT, INSERT, UPDATE, DELETE ON postbox.inbox, postbox.inbox_failures TO " PB_ROLE_CONSUMER ";\n"
          "GRANT SELECT, INSERT, UPDATE ON postbox.inbox_sequences TO " PB_ROLE_CONSUMER ";\n"
          "GRANT SELECT, INSERT ON postbox.inbox_dead TO " PB_ROLE_CONSUMER ";\n"
          "\n"
          "-- pg_logical_emit_message is executable by PUBLIC unless revoked (a superuser's\n"
          "-- `postbox init` does it); for the cdc capture, run as a superuser:\n",
          out);
    for (const char *p = pb_grants_emit_message_sql; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(out, "--   %.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
}
