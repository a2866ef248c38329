/* The privileges of the role postbox logs in as, against what `postbox init --print-grants`
 * gives the group role of each side (postbox_relay, postbox_consumer): the same GRANT
 * statements, taken apart by pb_grants_privileges, so the check asks for exactly what the
 * script grants. A cdc relay's role also needs the REPLICATION attribute. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_int.h"
#include "check/judge.h"
#include "common/str.h"
#include "store/grants.h"

/* Per privilege: true or false, NULL when its object does not exist. */
static const char privileges_sql[] =
    "SELECT CASE t.kind "
    "  WHEN 'schema' THEN CASE WHEN to_regnamespace(t.obj) IS NULL THEN NULL "
    "                     ELSE has_schema_privilege(t.obj, t.priv) END "
    "  WHEN 'table' THEN CASE WHEN to_regclass(t.obj) IS NULL THEN NULL "
    "                    ELSE has_table_privilege(t.obj, t.priv) END "
    "  WHEN 'column' THEN CASE WHEN NOT EXISTS (SELECT FROM pg_attribute a "
    "                                           WHERE a.attrelid = to_regclass(t.obj) "
    "                                             AND a.attname = t.col AND NOT a.attisdropped) "
    "                     THEN NULL ELSE has_column_privilege(t.obj, t.col, t.priv) END "
    "  ELSE CASE WHEN to_regprocedure(t.obj) IS NULL THEN NULL "
    "       ELSE has_function_privilege(t.obj, t.priv) END "
    "END "
    "FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY "
    "     AS t(kind, obj, col, priv, ord) "
    "ORDER BY t.ord";

static const char *kind_name(pb_privilege_kind_t k)
{
    return k == PB_PRIV_SCHEMA ? "schema" : k == PB_PRIV_TABLE ? "table"
                                          : k == PB_PRIV_COLUMN ? "column"
                                                                : "function";
}

/* What one object lacks, gathered over the rows: "DELETE, SELECT (id, event_id)". */
typedef struct lack {
    const pb_privilege_t *first;
    pb_buf_t text;
    const char *open_priv; /* the privilege whose column list is open, or NULL */
    bool missing;          /* the object does not exist */
} lack_t;

static void note(lack_t *l, const pb_privilege_t *p)
{
    bool cont = p->kind == PB_PRIV_COLUMN && l->open_priv &&
                strcmp(l->open_priv, p->privilege) == 0;
    if (cont) { /* another column of the open list: reopen it */
        l->text.len--;
        pb_buf_printf(&l->text, ", %s)", p->column);
        return;
    }
    if (l->text.len)
        pb_buf_puts(&l->text, ", ");
    if (p->kind == PB_PRIV_COLUMN) {
        pb_buf_printf(&l->text, "%s (%s)", p->privilege, p->column);
        l->open_priv = p->privilege;
    } else {
        pb_buf_puts(&l->text, p->privilege);
        l->open_priv = NULL;
    }
}

static void check_section(pb_check_ctx_t *ctx, pb_grant_section_t section, const char *group)
{
    pb_privilege_t *privs;
    size_t n = pb_grants_privileges(ctx->cfg, section, &privs);
    pb_buf_t arr[4] = {{0}};
    for (int a = 0; a < 4; a++)
        pb_buf_putc(&arr[a], '{');
    for (size_t i = 0; i < n; i++) {
        const char *vals[4] = {kind_name(privs[i].kind), privs[i].object, privs[i].column,
                               privs[i].privilege};
        for (int a = 0; a < 4; a++) {
            if (i)
                pb_buf_putc(&arr[a], ',');
            pb_buf_append_array_text(&arr[a], vals[a]);
        }
    }
    for (int a = 0; a < 4; a++)
        pb_buf_putc(&arr[a], '}');
    const char *params[4] = {arr[0].data, arr[1].data, arr[2].data, arr[3].data};
    PGresult *res = pb_check_query(ctx, "privileges", "check the role's privileges",
                                   privileges_sql, 4, params);
    for (int a = 0; a < 4; a++)
        pb_buf_free(&arr[a]);
    if (!res) {
        free(privs);
        return;
    }
    const char *role = PQuser(ctx->conn);
    lack_t *lacks = pb_malloc((n ? n : 1) * sizeof *lacks);
    memset(lacks, 0, (n ? n : 1) * sizeof *lacks);
    size_t n_lacks = 0, n_bad = 0;
    for (size_t i = 0; i < n && (int)i < PQntuples(res); i++) {
        bool null = PQgetisnull(res, (int)i, 0);
        if (!null && PQgetvalue(res, (int)i, 0)[0] == 't')
            continue;
        n_bad++;
        lack_t *l = NULL;
        for (size_t k = 0; k < n_lacks && !l; k++)
            if (strcmp(lacks[k].first->object, privs[i].object) == 0)
                l = &lacks[k];
        if (!l) {
            l = &lacks[n_lacks++];
            l->first = &privs[i];
        }
        if (null)
            l->missing = true;
        else
            note(l, &privs[i]);
    }
    PQclear(res);
    for (size_t k = 0; k < n_lacks; k++) {
        const lack_t *l = &lacks[k];
        const char *what = l->first->kind == PB_PRIV_SCHEMA     ? "schema "
                           : l->first->kind == PB_PRIV_FUNCTION ? "function "
                                                                : "";
        pb_check_finding_t *f;
        if (l->missing && !ctx->schema_current) {
            pb_buf_free(&lacks[k].text);
            continue; /* made by a migration still pending: schema.version says so */
        }
        if (l->missing) {
            f = pb_check_add(ctx->r, PB_CHECK_FAIL, "privileges", "%s%s does not exist", what,
                             l->first->object);
            pb_check_hint(f, "run `postbox init` (a schema at this postbox's version has it)");
        } else {
            f = pb_check_add(ctx->r, PB_CHECK_FAIL, "privileges",
                             "role \"%s\" lacks %s on %s%s (given to %s by `postbox init "
                             "--print-grants`)",
                             role, l->text.data, what, l->first->object, group);
            pb_check_hint(f, "run the SQL of `postbox init --print-grants` as the schema's owner, "
                             "and GRANT %s TO \"%s\"",
                          group, role);
        }
        pb_buf_free(&lacks[k].text);
    }
    if (!n_bad)
        pb_check_add(ctx->r, PB_CHECK_OK, "privileges",
                     "role \"%s\" holds the %zu privileges `postbox init --print-grants` gives %s",
                     role, n, group);
    free(lacks);
    free(privs);
}

void pb_check_privileges(pb_check_ctx_t *ctx)
{
    if (ctx->schema_absent)
        return; /* the schema family said it: nothing to hold privileges on */
    if (ctx->sides & PB_CHECK_RELAY)
        check_section(ctx, PB_GRANTS_RELAY, "postbox_relay");
    if (ctx->sides & PB_CHECK_CONSUME)
        check_section(ctx, PB_GRANTS_CONSUMER, "postbox_consumer");
    if ((ctx->sides & PB_CHECK_RELAY) && strcmp(ctx->cfg->relay_capture, "cdc") == 0) {
        PGresult *res = pb_check_query(ctx, "privileges.replication",
                                       "read the role's attributes",
                                       "SELECT rolreplication OR rolsuper FROM pg_roles "
                                       "WHERE rolname = current_user",
                                       0, NULL);
        if (!res)
            return;
        pb_judge_replication_role(ctx->r, PQuser(ctx->conn),
                                  PQntuples(res) == 1 && PQgetvalue(res, 0, 0)[0] == 't');
        PQclear(res);
    }
}
