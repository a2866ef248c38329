#include "relay/shards.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "store/pg.h"

#define FAC "relay"
/* How often a relay short of its fair share looks for sessions that are not relays holding the
 * relay's locks. */
#define INTRUDER_CHECK_MS 5000

/* The first keys of the three advisory locks (shards.h), random per schema
 * (sql/008_hardening.sql); the second key is the shard (member: relay.shards). */
#define MEMBER_KEY "(SELECT member FROM postbox.relay_lock_keys)"
#define SHARD_KEY "(SELECT shard FROM postbox.relay_lock_keys)"
#define GUARD_KEY "(SELECT guard FROM postbox.relay_lock_keys)"

/* pg_locks shows a two-int4 advisory lock as classid = key1 (as an oid), objid = key2,
 * objsubid = 2. */
#define KEYS_CTE                                                                              \
    "WITH k AS (SELECT (" MEMBER_KEY "::bigint & 4294967295)::oid AS member, "                 \
    "                  (" SHARD_KEY "::bigint & 4294967295)::oid AS shard, "                   \
    "                  (" GUARD_KEY "::bigint & 4294967295)::oid AS guard, "                   \
    "                  (SELECT oid FROM pg_database WHERE datname = current_database()) AS db) "
#define ADVISORY "l.locktype = 'advisory' AND l.database = k.db AND l.objsubid = 2 AND l.granted "
/* The keys are secret only until a relay takes them: pg_locks shows them to every session. A
 * holder counts as a postbox relay only when its role may read the keys (the relay's role, the
 * schema owner, a superuser); any other session learned them from pg_locks, and is an intruder:
 * its locks neither refuse a relay nor count as one, nor hold a shard's fence (see below). The
 * role of any session is visible to every session in pg_stat_activity. NULL: a holder not found
 * in pg_stat_activity. */
#define HOLDER_IS_RELAY "has_table_privilege(a.usesysid, 'postbox.relay_lock_keys', 'SELECT')"
#define HOLDERS "FROM k, pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "

static const char join_sql[] =
    "SELECT pg_advisory_lock_shared(" MEMBER_KEY ", $1::int)";

static const char others_sql[] =
    KEYS_CTE "SELECT coalesce(string_agg(DISTINCT l.objid::text, ', '), '') "
             HOLDERS "WHERE " ADVISORY "AND l.classid = k.member "
             "AND l.objid <> $1::int::oid AND " HOLDER_IS_RELAY;

static const char state_sql[] =
    KEYS_CTE "SELECT (SELECT count(DISTINCT l.pid) " HOLDERS "WHERE " ADVISORY
             "          AND l.classid = k.member AND l.objid = $1::int::oid AND " HOLDER_IS_RELAY "), "
             "       (SELECT coalesce(array_agg(l.objid::int), '{}') FROM pg_locks l, k WHERE "
             ADVISORY "AND l.classid = k.shard AND l.pid <> pg_backend_pid())::text";

/* Every relay session holding a shard lock, with the shards it holds (pb_shards_owners). */
static const char owners_sql[] =
    KEYS_CTE "SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'local'), "
             "       to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
             "       coalesce(a.state, ''), string_agg(l.objid::text, ',' ORDER BY l.objid::text::int) "
             HOLDERS "WHERE " ADVISORY "AND l.classid = k.shard AND " HOLDER_IS_RELAY " "
             "GROUP BY 1, 2, 3, 4, 5 ORDER BY min(l.objid::text::int)";

/* Every session holding one of the relay's locks that is not a postbox relay
 * (pb_shards_intruders). */
static const char intruders_sql[] =
    KEYS_CTE "SELECT a.pid, coalesce(a.usename::text, ''), coalesce(a.application_name, ''), "
             "       string_agg(CASE l.classid WHEN k.shard THEN 'shard lock ' "
             "                                 WHEN k.guard THEN 'guard of shard ' "
             "                                 ELSE 'member lock of relay.shards = ' END "
             "                  || l.objid::text, ', ' ORDER BY l.classid, l.objid::text::int) "
             HOLDERS "WHERE " ADVISORY "AND l.classid IN (k.shard, k.guard, k.member) "
             "AND NOT coalesce(" HOLDER_IS_RELAY ", true) "
             "GROUP BY 1, 2, 3 ORDER BY 1";

static const char take_sql[] =
    "SELECT pg_try_advisory_lock(" SHARD_KEY ", $1::int)";
static const char give_sql[] =
    "SELECT pg_advisory_unlock(" SHARD_KEY ", $1::int)";
/* Whether no session of a previous owner holds the guard of the shard any more. Read from
 * pg_locks rather than tried as an exclusive lock, so that an intruder's shared hold of the guard
 * does not keep the shard fenced for ever; a holder whose role is unknown counts as a relay.
 * Nobody else can take the guard meanwhile: only an owner of the shard lock does. */
static const char fence_sql[] =
    KEYS_CTE "SELECT NOT EXISTS (SELECT FROM k, pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid "
             "                   WHERE " ADVISORY "AND l.classid = k.guard AND l.objid = $1::int::oid "
             "                     AND l.pid IS DISTINCT FROM pg_backend_pid() "
             "                     AND coalesce(" HOLDER_IS_RELAY ", true))";
static const char guard_sql[] =
    "SELECT true FROM pg_advisory_lock_shared(" GUARD_KEY ", $1::int)";
static const char unguard_sql[] =
    "SELECT pg_advisory_unlock_shared(" GUARD_KEY ", $1::int)";

void pb_shards_init(pb_shards_t *sh, int n)
{
    memset(sh, 0, sizeof *sh);
    sh->n = n;
    sh->owned = calloc((size_t)n, sizeof *sh->owned);
    sh->usable = calloc((size_t)n, sizeof *sh->usable);
    if (!sh->owned || !sh->usable)
        pb_out_of_memory();
    pb_buf_puts(&sh->owned_sql, "{}");
}

void pb_shards_free(pb_shards_t *sh)
{
    free(sh->owned);
    free(sh->usable);
    pb_buf_free(&sh->owned_sql);
    pb_buf_free(&sh->intruders);
    memset(sh, 0, sizeof *sh);
}

static void rebuild_sql(pb_shards_t *sh)
{
    pb_buf_reset(&sh->owned_sql);
    pb_buf_putc(&sh->owned_sql, '{');
    int k = 0;
    for (int i = 0; i < sh->n; i++)
        if (sh->usable[i])
            pb_buf_printf(&sh->owned_sql, "%s%d", k++ ? "," : "", i);
    pb_buf_putc(&sh->owned_sql, '}');
}

void pb_shards_reset(pb_shards_t *sh)
{
    memset(sh->owned, 0, (size_t)sh->n * sizeof *sh->owned);
    memset(sh->usable, 0, (size_t)sh->n * sizeof *sh->usable);
    sh->n_owned = 0;
    sh->fair = 0;
    rebuild_sql(sh);
}

/* Runs a one-row, one-column query with the integer parameter v; *res holds it on success. */
static pb_status_t query_int(PGconn *conn, const char *sql, int v, const char *what,
                             PGresult **res, pb_error_t *err)
{
    char text[16];
    snprintf(text, sizeof text, "%d", v);
    const char *params[1] = {text};
    *res = PQexecParams(conn, sql, 1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, *res, PGRES_TUPLES_OK, what, err);
    if (st == PB_OK && (PQntuples(*res) != 1 || PQnfields(*res) < 1)) {
        PQclear(*res);
        return pb_fail(err, PB_FATAL, "%s: unexpected result shape", what);
    }
    return st;
}

pb_status_t pb_shards_join(pb_shards_t *sh, PGconn *conn, pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = query_int(conn, join_sql, sh->n, "announce the relay instance", &res, err);
    if (st != PB_OK)
        return st;
    PQclear(res);
    if ((st = query_int(conn, others_sql, sh->n, "look for relays with another shard count", &res,
                        err)) != PB_OK)
        return st;
    const char *other = PQgetvalue(res, 0, 0);
    if (*other) {
        st = pb_fail(err, PB_FATAL,
                     "relay.shards is %d here but another relay of this database runs with "
                     "relay.shards = %s: their shards would overlap and reorder aggregates; give "
                     "every instance the same value",
                     sh->n, other);
    }
    PQclear(res);
    return st;
}

/* Parses "{1,5,9}" into flags (shards owned by others). */
static void parse_taken(const char *text, bool *taken, int n)
{
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end != p) {
            if (v >= 0 && v < n)
                taken[v] = true;
            p = end;
        } else {
            p++;
        }
    }
}

static pb_status_t lock_call(PGconn *conn, const char *sql, int shard, bool *ok, pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = query_int(conn, sql, shard, "shard lock", &res, err);
    if (st != PB_OK)
        return st;
    *ok = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    return PB_OK;
}

/* Fences shard i and takes its guard on every session: the shard becomes usable. */
static pb_status_t make_usable(pb_shards_t *sh, PGconn *const *conns, int nconns, int i,
                               bool *done, pb_error_t *err)
{
    bool ok;
    pb_status_t st = lock_call(conns[0], fence_sql, i, &ok, err);
    *done = false;
    if (st != PB_OK || !ok)
        return st; /* a session of the previous owner still lives: next round */
    for (int c = 0; c < nconns && st == PB_OK; c++)
        st = lock_call(conns[c], guard_sql, i, &ok, err);
    if (st == PB_OK) {
        sh->usable[i] = true;
        *done = true;
    }
    return st;
}

static pb_status_t give_back(pb_shards_t *sh, PGconn *const *conns, int nconns, int i,
                             pb_error_t *err)
{
    bool ok;
    pb_status_t st = PB_OK;
    if (sh->usable[i])
        for (int c = 0; c < nconns && st == PB_OK; c++)
            st = lock_call(conns[c], unguard_sql, i, &ok, err);
    if (st == PB_OK)
        st = lock_call(conns[0], give_sql, i, &ok, err);
    if (st == PB_OK) {
        if (!ok)
            log_warn(FAC, "shard %d was not locked by this session", i);
        sh->owned[i] = sh->usable[i] = false;
        sh->n_owned--;
    }
    return st;
}

/* Says in the log who, not being a postbox relay, holds the relay's locks (what keeps this relay
 * short of its share), when that changes; only the rounds that come short look, and those after
 * a report. */
static pb_status_t report_intruders(pb_shards_t *sh, PGconn *conn, pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = pb_shards_intruders(conn, &res, err);
    if (st != PB_OK)
        return st;
    pb_buf_t now = {0};
    for (int r = 0; r < PQntuples(res); r++) {
        char role[128], app[128];
        pb_text_escape(role, sizeof role, PQgetvalue(res, r, 1));
        pb_text_escape(app, sizeof app, PQgetvalue(res, r, 2));
        pb_buf_printf(&now, "%spid %s (role \"%s\", application \"%s\"): %s", r ? "; " : "",
                      PQgetvalue(res, r, 0), role, app, PQgetvalue(res, r, 3));
    }
    PQclear(res);
    const char *before = sh->intruders.len ? sh->intruders.data : "";
    const char *after = now.len ? now.data : "";
    if (strcmp(before, after) != 0) {
        if (*after)
            log_warn(FAC, "sessions that are not postbox relays (their roles cannot read "
                          "postbox.relay_lock_keys) hold the relay's locks, keeping shards from "
                          "this relay: %s. End them (pg_terminate_backend) and revoke CONNECT "
                          "on the database from their roles", after);
        else
            log_info(FAC, "no session other than postbox relays holds the relay's locks any more");
        pb_buf_reset(&sh->intruders);
        pb_buf_append(&sh->intruders, after, strlen(after));
    }
    pb_buf_free(&now);
    return PB_OK;
}

pb_status_t pb_shards_balance(pb_shards_t *sh, PGconn *const *conns, int nconns, bool may_release,
                              bool *changed, pb_error_t *err)
{
    *changed = false;
    PGconn *conn = conns[0];
    PGresult *res;
    pb_status_t st = query_int(conn, state_sql, sh->n, "read the shard owners", &res, err);
    if (st != PB_OK)
        return st;
    long live = strtol(PQgetvalue(res, 0, 0), NULL, 10);
    if (live < 1)
        live = 1;
    sh->fair = (int)((sh->n + live - 1) / live);
    bool *taken = calloc((size_t)sh->n, sizeof *taken);
    if (!taken)
        pb_out_of_memory();
    parse_taken(PQgetvalue(res, 0, 1), taken, sh->n);
    PQclear(res);

    for (int i = 0; i < sh->n && sh->n_owned < sh->fair && st == PB_OK; i++) {
        if (sh->owned[i] || taken[i])
            continue;
        bool ok;
        if ((st = lock_call(conn, take_sql, i, &ok, err)) == PB_OK && ok) {
            sh->owned[i] = true;
            sh->n_owned++;
        }
    }
    /* give away from the top, so that the low shards stay where they are */
    for (int i = sh->n - 1; i >= 0 && may_release && sh->n_owned > sh->fair && st == PB_OK; i--) {
        if (!sh->owned[i])
            continue;
        bool was_usable = sh->usable[i];
        if ((st = give_back(sh, conns, nconns, i, err)) == PB_OK && was_usable)
            *changed = true;
    }
    for (int i = 0; i < sh->n && st == PB_OK; i++) {
        bool done;
        if (sh->owned[i] && !sh->usable[i] &&
            (st = make_usable(sh, conns, nconns, i, &done, err)) == PB_OK && done)
            *changed = true;
    }
    free(taken);
    if (*changed)
        rebuild_sql(sh);
    bool short_of_share = sh->n_owned < sh->fair;
    for (int i = 0; i < sh->n && !short_of_share; i++)
        short_of_share = sh->owned[i] && !sh->usable[i];
    /* Short rounds look at most every INTRUDER_CHECK_MS (with more relays than the shards
     * divide evenly, one is short for good); after a report every round looks, to say at once
     * when they are gone. */
    int64_t now = pb_monotonic_ms();
    if (st == PB_OK && (sh->intruders.len ||
                        (short_of_share && (!sh->intruders_checked ||
                                            now - sh->intruders_checked_ms >= INTRUDER_CHECK_MS)))) {
        sh->intruders_checked = true;
        sh->intruders_checked_ms = now;
        st = report_intruders(sh, conn, err);
    }
    return st;
}

bool pb_shards_usable(const pb_shards_t *sh)
{
    for (int i = 0; i < sh->n; i++)
        if (sh->usable[i])
            return true;
    return false;
}

bool pb_shards_excess(const pb_shards_t *sh)
{
    return sh->fair > 0 && sh->n_owned > sh->fair;
}

void pb_shards_describe(const pb_shards_t *sh, char *out, size_t outsz)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < sh->n; i++) {
        if (!sh->usable[i])
            continue;
        int j = i;
        while (j + 1 < sh->n && sh->usable[j + 1])
            j++;
        int w = j > i ? snprintf(out + len, outsz - len, "%s%d-%d", len ? "," : "", i, j)
                      : snprintf(out + len, outsz - len, "%s%d", len ? "," : "", i);
        if (w < 0 || (size_t)w >= outsz - len) {
            if (outsz > 4)
                snprintf(out + outsz - 4, 4, "...");
            return;
        }
        len += (size_t)w;
        i = j;
    }
    if (len == 0)
        snprintf(out, outsz, "none");
}

pb_status_t pb_shards_owners(PGconn *conn, PGresult **out, pb_error_t *err)
{
    *out = PQexec(conn, owners_sql);
    pb_status_t st = pb_pg_check(conn, *out, PGRES_TUPLES_OK, "list the relay instances", err);
    if (st != PB_OK)
        *out = NULL;
    return st;
}

pb_status_t pb_shards_intruders(PGconn *conn, PGresult **out, pb_error_t *err)
{
    *out = PQexec(conn, intruders_sql);
    pb_status_t st = pb_pg_check(conn, *out, PGRES_TUPLES_OK,
                                 "look for sessions holding the relay's locks", err);
    if (st != PB_OK)
        *out = NULL;
    return st;
}
