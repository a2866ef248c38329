#include "store/grants.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"
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

/* The GRANT statements of pb_grants_write, in its order: "GRANT <privileges> ON <object> TO
 * <the section's roles>;", each after its comment (lines of their own, may be NULL). */
typedef struct grant {
    pb_grant_section_t section;
    const char *privileges; /* "SELECT, UPDATE", "INSERT, SELECT (id, event_id)" */
    const char *object;     /* "SCHEMA s", "s.t1, s.t2", "FUNCTION s.f(types)" */
    const char *comment;
    bool cdc_delete_only; /* only with relay.capture = cdc and cdc.delete_after_insert */
} grant_t;

static const grant_t grants[] = {
    {PB_GRANTS_ALL, "USAGE", "SCHEMA postbox", NULL, false},
    {PB_GRANTS_PRODUCER, "INSERT, SELECT (id, event_id)", "postbox.outbox",
     "-- producer: postbox.enqueue and libpostbox (an INSERT returning the ids),\n"
     "-- postbox.capture triggers (an INSERT), postbox.emit (cdc, signed: see pg_logical_emit_message below)\n",
     false},
    {PB_GRANTS_PRODUCER, "EXECUTE",
     "FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text, timestamptz, timestamptz)", NULL, false},
    {PB_GRANTS_PRODUCER, "DELETE", "postbox.outbox",
     "-- cdc.delete_after_insert: the trigger deletes each row as the role that inserts it\n",
     true},
    {PB_GRANTS_RELAY, "SELECT, UPDATE, DELETE", "postbox.outbox",
     "-- relay: claims and moves outbox rows, dead-letters, purges its history and dead letters,\n"
     "-- holds its shard locks (keys in relay_lock_keys), verifies postbox.emit's signatures\n"
     "-- (emit_key)\n",
     false},
    {PB_GRANTS_RELAY, "SELECT, INSERT, DELETE", "postbox.outbox_published", NULL, false},
    {PB_GRANTS_RELAY, "SELECT, INSERT, DELETE", "postbox.dead_letters", NULL, false},
    {PB_GRANTS_RELAY, "SELECT, UPDATE, DELETE", "postbox.aggregate_sequences",
     "-- the retention of the producers' numbering (relay.sequence_retention: rows locked, then\n"
     "-- deleted)\n",
     false},
    {PB_GRANTS_RELAY, "SELECT", "postbox.schema_migrations, postbox.emit_key, postbox.relay_lock_keys",
     NULL, false},
    {PB_GRANTS_RELAY, "SELECT, INSERT, DELETE", "postbox.cdc_deferred",
     "-- the cdc relay's events set aside until due (counted by every relay's metrics)\n", false},
    {PB_GRANTS_RELAY, "EXECUTE", "FUNCTION postbox.emit_drain_marker(text)", NULL, false},
    {PB_GRANTS_RELAY, "SELECT, INSERT, UPDATE, DELETE", "postbox.cdc_slot_positions",
     "-- cdc: the position the relay confirmed on its slot (`postbox cdc drop-slot` deletes it)\n",
     false},
    {PB_GRANTS_RELAY, "SELECT, INSERT, DELETE", "postbox.cdc_fallback",
     "-- cdc: the slot given up by cdc.on_excess_lag = poll until the relay streams again\n",
     false},
    {PB_GRANTS_CONSUMER, "SELECT, INSERT, UPDATE, DELETE", "postbox.inbox, postbox.inbox_failures",
     "-- consumer: the inbox, its failures and dead messages (and purges its own rows), the\n"
     "-- last sequence number handled per aggregate, the schema version (its start-up check)\n",
     false},
    {PB_GRANTS_CONSUMER, "SELECT, INSERT, UPDATE, DELETE", "postbox.inbox_sequences", NULL,
     false},
    {PB_GRANTS_CONSUMER, "SELECT, INSERT, DELETE", "postbox.inbox_dead", NULL, false},
    {PB_GRANTS_CONSUMER, "SELECT", "postbox.schema_migrations", NULL, false},
    {PB_GRANTS_RELAY, "EXECUTE", "FUNCTION postbox.partitions_create_ahead(timestamptz)",
     "-- the partitioned layout (init --partition-by): the janitors make partitions ahead and\n"
     "-- drop old ones through these (SECURITY DEFINER: the tables' owner does it)\n",
     false},
    {PB_GRANTS_RELAY, "EXECUTE", "FUNCTION postbox.partitions_drop_before(text, timestamptz)",
     NULL, false},
    {PB_GRANTS_RELAY, "EXECUTE",
     "FUNCTION postbox.partitions_purge_default(text, timestamptz, integer)", NULL, false},
    {PB_GRANTS_CONSUMER, "EXECUTE", "FUNCTION postbox.partitions_create_ahead(timestamptz)", NULL,
     false},
    {PB_GRANTS_CONSUMER, "EXECUTE", "FUNCTION postbox.partitions_drop_before(text, timestamptz)",
     NULL, false},
    {PB_GRANTS_CONSUMER, "EXECUTE",
     "FUNCTION postbox.inbox_purge_unpartitioned(timestamptz, integer, text)", NULL, false},
    {PB_GRANTS_CONSUMER, "EXECUTE", "FUNCTION postbox.inbox_legacy_move(integer, text, text)",
     "-- the online migration of an inbox holding rows (sql/025): the consumers' janitors move\n"
     "-- the rows of postbox.inbox_legacy and drop it when it is empty\n",
     false},
    {PB_GRANTS_CONSUMER, "EXECUTE", "FUNCTION postbox.inbox_legacy_finish()", NULL, false},
    {PB_GRANTS_CONSUMER, "EXECUTE", "FUNCTION postbox.inbox_legacy_take(text, text)", NULL,
     false},
};

static const char *section_roles(pb_grant_section_t section)
{
    switch (section) {
    case PB_GRANTS_PRODUCER:
        return PB_ROLE_PRODUCER;
    case PB_GRANTS_RELAY:
        return PB_ROLE_RELAY;
    case PB_GRANTS_CONSUMER:
        return PB_ROLE_CONSUMER;
    default:
        return PB_ROLE_PRODUCER ", " PB_ROLE_RELAY ", " PB_ROLE_CONSUMER;
    }
}

static bool grant_applies(const grant_t *g, const pb_config_t *cfg)
{
    return !g->cdc_delete_only ||
           (strcmp(cfg->relay_capture, "cdc") == 0 && cfg->cdc_delete_after_insert);
}

static void write_section(FILE *out, const pb_config_t *cfg, pb_grant_section_t section)
{
    for (size_t i = 0; i < sizeof grants / sizeof grants[0]; i++) {
        const grant_t *g = &grants[i];
        if (g->section != section || !grant_applies(g, cfg))
            continue;
        if (g->comment)
            fputs(g->comment, out);
        fprintf(out, "GRANT %s ON %s TO %s;\n", g->privileges, g->object, section_roles(section));
    }
}

void pb_grants_write_emit_message_comment(FILE *out)
{
    for (const char *p = pb_grants_emit_message_sql; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        fprintf(out, "--   %.*s\n", (int)n, p);
        p += n + (nl ? 1 : 0);
    }
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
    write_section(out, cfg, PB_GRANTS_ALL);
    fputc('\n', out);
    write_section(out, cfg, PB_GRANTS_PRODUCER);
    fputc('\n', out);
    write_section(out, cfg, PB_GRANTS_RELAY);
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
    fputc('\n', out);
    write_section(out, cfg, PB_GRANTS_CONSUMER);
    fputs("\n"
          "-- pg_logical_emit_message is executable by PUBLIC unless revoked (a superuser's\n"
          "-- `postbox init` does it); for the cdc capture, run as a superuser:\n",
          out);
    pb_grants_write_emit_message_comment(out);
}

/* ---- the privileges of the statements, for `postbox check` ---------------------------------- */

/* Steps through "a, b (x, y), c": the next item at top level (commas inside parentheses belong
 * to it), blanks around it removed. False at the end. */
static bool next_item(const char **p, const char **item, size_t *len)
{
    while (**p == ' ' || **p == ',')
        (*p)++;
    if (!**p)
        return false;
    *item = *p;
    int depth = 0;
    for (; **p && (depth || **p != ','); (*p)++)
        depth += **p == '(' ? 1 : **p == ')' ? -1 : 0;
    *len = (size_t)(*p - *item);
    while (*len && (*item)[*len - 1] == ' ')
        (*len)--;
    return true;
}

static void add_privilege(pb_privilege_t **out, size_t *n, size_t *cap, pb_privilege_kind_t kind,
                          const char *priv, size_t priv_len, const char *object, size_t object_len,
                          const char *column, size_t column_len)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 32;
        *out = pb_realloc(*out, *cap * sizeof **out);
    }
    pb_privilege_t *p = &(*out)[(*n)++];
    memset(p, 0, sizeof *p);
    p->kind = kind;
    snprintf(p->privilege, sizeof p->privilege, "%.*s", (int)priv_len, priv);
    snprintf(p->object, sizeof p->object, "%.*s", (int)object_len, object);
    snprintf(p->column, sizeof p->column, "%.*s", (int)column_len, column ? column : "");
}

/* The privileges of one GRANT statement, one per object, column and privilege. */
static void expand(const grant_t *g, pb_privilege_t **out, size_t *n, size_t *cap)
{
    bool schema = strncmp(g->object, "SCHEMA ", 7) == 0;
    bool function = strncmp(g->object, "FUNCTION ", 9) == 0;
    const char *objects = g->object + (schema ? 7 : function ? 9 : 0);
    const char *pp = g->privileges, *item;
    size_t len;
    while (next_item(&pp, &item, &len)) {
        const char *paren = memchr(item, '(', len);
        size_t priv_len = paren ? (size_t)(paren - item) : len;
        while (priv_len && item[priv_len - 1] == ' ')
            priv_len--;
        if (function || schema) { /* one object, whose text may hold commas */
            add_privilege(out, n, cap, function ? PB_PRIV_FUNCTION : PB_PRIV_SCHEMA, item,
                          priv_len, objects, strlen(objects), NULL, 0);
            continue;
        }
        const char *op = objects, *obj;
        size_t obj_len;
        while (next_item(&op, &obj, &obj_len)) {
            if (!paren) {
                add_privilege(out, n, cap, PB_PRIV_TABLE, item, priv_len, obj, obj_len, NULL, 0);
                continue;
            }
            char cols[128];
            snprintf(cols, sizeof cols, "%.*s", (int)(len - (size_t)(paren - item) - 2),
                     paren + 1); /* between the parentheses */
            const char *cp = cols, *col;
            size_t col_len;
            while (next_item(&cp, &col, &col_len))
                add_privilege(out, n, cap, PB_PRIV_COLUMN, item, priv_len, obj, obj_len, col,
                              col_len);
        }
    }
}

size_t pb_grants_privileges(const pb_config_t *cfg, pb_grant_section_t section,
                            pb_privilege_t **out)
{
    size_t n = 0, cap = 0;
    *out = NULL;
    for (size_t i = 0; i < sizeof grants / sizeof grants[0]; i++) {
        const grant_t *g = &grants[i];
        if ((g->section == section || g->section == PB_GRANTS_ALL) && grant_applies(g, cfg))
            expand(g, out, &n, &cap);
    }
    return n;
}
