/* postbox check: the report, the registry of families and the runs (check.h). */
#include "check/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check_int.h"
#include "common/log.h"
#include "common/str.h"
#include "store/pg.h"

/* ---- the report ------------------------------------------------------------------------------ */

static char *vformat(const char *fmt, va_list ap) PB_PRINTF(1, 0);
static char *vformat(const char *fmt, va_list ap)
{
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    char *out = pb_malloc(strlen(buf) + 1);
    pb_text_copy(out, strlen(buf) + 1, buf); /* one line, whatever a server said */
    return out;
}

pb_check_finding_t *pb_check_add(pb_check_report_t *r, pb_check_status_t status, const char *name,
                                 const char *fmt, ...)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 32;
        r->items = pb_realloc(r->items, r->cap * sizeof *r->items);
    }
    pb_check_finding_t *f = &r->items[r->n++];
    memset(f, 0, sizeof *f);
    f->status = status;
    snprintf(f->name, sizeof f->name, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    f->message = vformat(fmt, ap);
    va_end(ap);
    return f;
}

void pb_check_hint(pb_check_finding_t *f, const char *fmt, ...)
{
    free(f->hint);
    va_list ap;
    va_start(ap, fmt);
    f->hint = vformat(fmt, ap);
    va_end(ap);
}

size_t pb_check_count(const pb_check_report_t *r, pb_check_status_t status)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n; i++)
        n += r->items[i].status == status;
    return n;
}

void pb_check_report_free(pb_check_report_t *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->items[i].message);
        free(r->items[i].hint);
    }
    free(r->items);
    memset(r, 0, sizeof *r);
}

const char *pb_check_status_name(pb_check_status_t status)
{
    return status == PB_CHECK_FAIL ? "fail" : status == PB_CHECK_WARN ? "warn" : "ok";
}

/* ---- what the families share ----------------------------------------------------------------- */

PGresult *pb_check_query(pb_check_ctx_t *ctx, const char *name, const char *what, const char *sql,
                         int nparams, const char *const *params)
{
    PGresult *res = PQexecParams(ctx->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    pb_error_t err;
    if (pb_pg_check(ctx->conn, res, PGRES_TUPLES_OK, what, &err) == PB_OK)
        return res;
    pb_check_add(ctx->r, PB_CHECK_FAIL, name, "%s", err.msg);
    return NULL;
}

/* ---- the registry ---------------------------------------------------------------------------- */

typedef struct family {
    const char *name;
    unsigned sides;  /* the sides it concerns */
    bool database;   /* needs the connection to PostgreSQL */
    bool cheap;      /* part of the check at a relay's or consumer's start */
    pb_check_family_fn run;
} family_t;

static const family_t families[] = {
    {"postgres", PB_CHECK_RELAY | PB_CHECK_CONSUME, true, true, pb_check_postgres},
    {"schema", PB_CHECK_RELAY | PB_CHECK_CONSUME, true, true, pb_check_schema},
    {"privileges", PB_CHECK_RELAY | PB_CHECK_CONSUME, true, true, pb_check_privileges},
    {"cdc", PB_CHECK_RELAY, true, true, pb_check_cdc},
    {"broker", PB_CHECK_RELAY | PB_CHECK_CONSUME, false, false, pb_check_broker},
};

static void run_families(pb_check_ctx_t *ctx, const pb_check_opts_t *opts)
{
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) {
        const family_t *fam = &families[i];
        if (!(fam->sides & opts->sides) || (opts->at_start && !fam->cheap) ||
            (fam->database && !ctx->conn))
            continue;
        fam->run(ctx);
    }
}

void pb_check_run(const pb_config_t *cfg, const pb_check_opts_t *opts, pb_check_report_t *r)
{
    pb_check_ctx_t ctx = {.cfg = cfg, .sides = opts->sides, .at_start = opts->at_start, .r = r};
    pb_error_t err;
    if (pb_pg_open(cfg->postgres_dsn, &ctx.conn, &err) != PB_OK) {
        pb_check_finding_t *f = pb_check_add(r, PB_CHECK_FAIL, "postgres.connect",
                                             "cannot connect to postgresql: %s", err.msg);
        pb_check_hint(f, "check postgres.dsn (host, port, database, user, password) and that the "
                         "server runs; the database checks are skipped");
    } else {
        char where[300];
        pb_pg_describe(ctx.conn, where, sizeof where);
        pb_check_add(r, PB_CHECK_OK, "postgres.connect", "connected to postgresql at %s as \"%s\"",
                     where, PQuser(ctx.conn));
    }
    run_families(&ctx, opts);
    PQfinish(ctx.conn);
}

void pb_check_at_start(const pb_config_t *cfg, unsigned side, const char *fac)
{
    pb_check_report_t r = {0};
    pb_check_opts_t opts = {.sides = side, .at_start = true};
    pb_check_ctx_t ctx = {.cfg = cfg, .sides = side, .at_start = true, .r = &r};
    pb_error_t err;
    /* the process's own connect loop says what it waits for: no second voice for that */
    if (pb_pg_open(cfg->postgres_dsn, &ctx.conn, &err) != PB_OK) {
        log_debug(fac, "start-up check skipped: %s", err.msg);
        return;
    }
    run_families(&ctx, &opts);
    PQfinish(ctx.conn);
    size_t problems = 0;
    for (size_t i = 0; i < r.n; i++) {
        const pb_check_finding_t *f = &r.items[i];
        if (f->status == PB_CHECK_OK)
            continue;
        problems++;
        log_warn_f(fac, PB_FIELDS(PB_LF_STR("check", f->name)), "start-up check: %s%s%s%s",
                   f->message, f->hint ? " (hint: " : "", f->hint ? f->hint : "",
                   f->hint ? ")" : "");
    }
    if (problems)
        log_info(fac, "start-up check: %zu problem%s found (`postbox check` lists what it checks)",
                 problems, problems == 1 ? "" : "s");
    else
        log_debug(fac, "start-up check: nothing found");
    pb_check_report_free(&r);
}
