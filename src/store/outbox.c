#include "store/outbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/pg.h"

/* Events that failed wait for their retry set aside (waiting = true, see
 * sql/005_retry_waiting.sql), so that the claim never walks over them: its work is bounded by
 * the batch size however many events wait.
 *
 * wake_sql, run before the claim's transaction: up to $1 waiting rows whose retry time has come
 * go back to the rows the claim walks (outbox_waiting_due). It runs only when due_sql finds such
 * a row: a plain read of the same index, and no UPDATE statement (whose statement-level
 * triggers a user may have put on the outbox would fire) before every claim. */
static const char due_sql[] =
    "SELECT EXISTS (SELECT FROM postbox.outbox WHERE waiting AND next_attempt_at <= now())";

static const char wake_sql[] =
    "UPDATE postbox.outbox o SET waiting = false "
    "FROM (SELECT id FROM postbox.outbox "
    "      WHERE waiting AND next_attempt_at <= now() "
    "      ORDER BY next_attempt_at, id LIMIT $1 "
    "      FOR UPDATE SKIP LOCKED) due "
    "WHERE o.id = due.id";

/* The claim: the next $1 rows in publish order that do not wait (outbox_ready) and are not in
 * one of this relay's batches still in flight ($4, a multirange of ids). It takes no row locks:
 * the shard locks already make this relay the only one claiming these rows (relay/shards.h), and
 * the ids in flight are exactly what SKIP LOCKED used to skip. Skipping locked rows cost more
 * than the claim itself: with two batches in flight, every claim tried and failed to lock the
 * 2 × batch rows ahead of its own, and wrote a lock to each row it took.
 *
 * Per aggregate order: a candidate behind an earlier waiting event of its aggregate (found
 * through outbox_waiting) must not overtake it; blocked_until is then that event's retry time,
 * and pb_outbox_claim parks the candidate (park_sql) instead of returning it for publishing: it
 * waits too, so no later claim walks over it again. While nothing waits (checked once per
 * statement) no candidate looks, and park_sql never runs. $2 is relay.shards, $3 the shards
 * this instance owns (see relay/shards.h). */
static const char claim_sql[] =
    "SELECT o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.event_type, o.payload::text, "
    "       o.headers::text, o.destination, "
    "       (extract(epoch FROM o.created_at) * 1000000)::bigint, o.attempts, "
    "       CASE WHEN (SELECT EXISTS (SELECT FROM postbox.outbox w WHERE w.waiting)) THEN "
    "       (SELECT b.next_attempt_at FROM postbox.outbox b "
    "        WHERE b.waiting AND b.aggregate_type = o.aggregate_type "
    "          AND b.aggregate_id = o.aggregate_id AND b.id < o.id "
    "        ORDER BY b.id DESC LIMIT 1) END AS blocked_until "
    "FROM postbox.outbox o "
    "WHERE o.published_at IS NULL AND NOT o.waiting AND NOT ($4::int8multirange @> o.id) "
    "  AND ($2::int = 1 OR " PB_OUTBOX_SHARD_SQL("o") " % $2::int = ANY($3::int[])) "
    "ORDER BY o.id LIMIT $1";

/* Parks claimed rows ($1) until the retry times ($2) of the events they wait behind. */
static const char park_sql[] =
    "UPDATE postbox.outbox o SET waiting = true, "
    "    next_attempt_at = greatest(o.next_attempt_at, p.until) "
    "FROM unnest($1::bigint[], $2::timestamptz[]) AS p(id, until) WHERE o.id = p.id";

/* Settling the published rows, one statement per batch: $1 names them densely or sparsely (see
 * pb_outbox_ids_literal). */
static const char delete_sql[] = "DELETE FROM postbox.outbox o WHERE " PB_OUTBOX_IDS_IN_RANGES("o");
static const char delete_sparse_sql[] =
    "DELETE FROM postbox.outbox o WHERE " PB_OUTBOX_IDS_IN_ARRAY("o");
static const char mark_sql[] =
    "WITH " PB_OUTBOX_MOVE_PUBLISHED_CTES(PB_OUTBOX_IDS_IN_RANGES("o")) "SELECT count(*) FROM kept";
static const char mark_sparse_sql[] =
    "WITH " PB_OUTBOX_MOVE_PUBLISHED_CTES(PB_OUTBOX_IDS_IN_ARRAY("o")) "SELECT count(*) FROM kept";

static const char retry_sql[] =
    "UPDATE postbox.outbox o "
    "SET attempts = o.attempts + 1, last_error = f.err, waiting = true, "
    "    next_attempt_at = now() + f.delay_ms * interval '1 millisecond' "
    "FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS f(id, err, delay_ms) "
    "WHERE o.id = f.id";

static const char dead_sql[] =
    "WITH f AS (SELECT * FROM unnest($1::bigint[], $2::text[]) AS f(id, reason)), "
    "moved AS (DELETE FROM postbox.outbox o USING f WHERE o.id = f.id "
    "          RETURNING o.*, f.reason) "
    "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id, "
    "    event_type, payload, headers, destination, created_at, attempts, last_error, reason) "
    "SELECT id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, "
    "       destination, created_at, attempts + 1, last_error, reason FROM moved";

static const char pending_sql[] =
    "SELECT count(*) FROM postbox.outbox WHERE published_at IS NULL";

void pb_outbox_init(pb_outbox_t *ob, PGconn *conn, bool delete_on_publish)
{
    memset(ob, 0, sizeof *ob);
    ob->conn = conn;
    ob->delete_on_publish = delete_on_publish;
}

static void clear_batch(pb_outbox_t *ob)
{
    PQclear(ob->batch);
    ob->batch = NULL;
    ob->n_events = 0;
    ob->n_parked = 0;
}

void pb_outbox_free(pb_outbox_t *ob)
{
    clear_batch(ob);
    free(ob->events);
    ob->events = NULL;
    free(ob->published);
    ob->published = NULL;
    ob->cap_events = ob->cap_published = 0;
    pb_buf_free(&ob->published_ids);
    pb_buf_free(&ob->retry_ids);
    pb_buf_free(&ob->retry_errors);
    pb_buf_free(&ob->retry_delays);
    pb_buf_free(&ob->dead_ids);
    pb_buf_free(&ob->dead_reasons);
    pb_buf_free(&ob->park_ids);
    pb_buf_free(&ob->park_until);
}

static pb_status_t prepare(PGconn *conn, const char *name, const char *sql, pb_error_t *err)
{
    PGresult *res = PQprepare(conn, name, sql, 0, NULL);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, name, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

pb_status_t pb_outbox_prepare(pb_outbox_t *ob, pb_error_t *err)
{
    pb_status_t st;
    if ((st = prepare(ob->conn, "pb_due", due_sql, err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_wake", wake_sql, err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_claim", claim_sql, err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_park", park_sql, err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_publish", ob->delete_on_publish ? delete_sql : mark_sql,
                      err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_publish_sparse",
                      ob->delete_on_publish ? delete_sparse_sql : mark_sparse_sql, err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_retry", retry_sql, err)) != PB_OK ||
        (st = prepare(ob->conn, "pb_dead", dead_sql, err)) != PB_OK)
        return st;
    return PB_OK;
}

static int compare_ids(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static void sort_ids(int64_t *ids, size_t n)
{
    if (n > 1)
        qsort(ids, n, sizeof *ids, compare_ids);
}

/* pb_outbox_id_ranges of ids already sorted */
static void write_ranges(const int64_t *ids, size_t n, pb_buf_t *out)
{
    pb_buf_reset(out);
    pb_buf_putc(out, '{');
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && ids[j - 1] < INT64_MAX && ids[j] <= ids[j - 1] + 1)
            j++;
        if (ids[j - 1] == INT64_MAX) /* [x,MAX] would overflow to [x,MAX+1): unbounded */
            pb_buf_printf(out, "%s[%lld,)", i ? "," : "", (long long)ids[i]);
        else
            pb_buf_printf(out, "%s[%lld,%lld]", i ? "," : "", (long long)ids[i],
                          (long long)ids[j - 1]);
        i = j;
    }
    pb_buf_putc(out, '}');
}

void pb_outbox_id_ranges(int64_t *ids, size_t n, pb_buf_t *out)
{
    sort_ids(ids, n);
    write_ranges(ids, n, out);
}

#define SPARSE_FACTOR 2

bool pb_outbox_ids_literal(int64_t *ids, size_t n, pb_buf_t *out)
{
    sort_ids(ids, n);
    bool sparse = n == 0 || ids[n - 1] == INT64_MAX ||
                  (uint64_t)ids[n - 1] - (uint64_t)ids[0] >= SPARSE_FACTOR * n;
    if (!sparse) {
        write_ranges(ids, n, out);
        return false;
    }
    pb_buf_reset(out);
    pb_buf_putc(out, '{');
    for (size_t i = 0; i < n; i++)
        pb_buf_printf(out, "%s%lld", i ? "," : "", (long long)ids[i]);
    pb_buf_putc(out, '}');
    return true;
}

pb_status_t pb_outbox_claim(pb_outbox_t *ob, int limit, int shards, const char *owned,
                            const char *in_flight, pb_error_t *err)
{
    clear_batch(ob);
    char limit_text[16], shards_text[16];
    snprintf(limit_text, sizeof limit_text, "%d", limit);
    snprintf(shards_text, sizeof shards_text, "%d", shards);
    const char *params[4] = {limit_text, shards_text, owned, in_flight};
    /* in a transaction of its own: the woken rows are not held locked while this batch is out
     * (inside an open one, other sessions would see them waiting and locked, and park the events
     * behind them until that transaction ends) */
    if (PQtransactionStatus(ob->conn) != PQTRANS_IDLE)
        return pb_fail(err, PB_TRANSIENT, "claim on a connection with a transaction still open");
    PGresult *res = PQexecPrepared(ob->conn, "pb_due", 0, NULL, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(ob->conn, res, PGRES_TUPLES_OK, "look for due waiting events", err);
    if (st != PB_OK)
        return st;
    bool due = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (due) {
        res = PQexecPrepared(ob->conn, "pb_wake", 1, params, NULL, NULL, 0);
        st = pb_pg_check(ob->conn, res, PGRES_COMMAND_OK, "wake waiting events", err);
        if (st != PB_OK)
            return st;
        PQclear(res);
    }
    if ((st = pb_pg_exec(ob->conn, "BEGIN", err)) != PB_OK)
        return st;
    res = PQexecPrepared(ob->conn, "pb_claim", 4, params, NULL, NULL, 0);
    if ((st = pb_pg_check(ob->conn, res, PGRES_TUPLES_OK, "claim outbox batch", err)) != PB_OK) {
        pb_outbox_rollback(ob);
        return st;
    }
    size_t n = (size_t)PQntuples(res);
    if (n > ob->cap_events) {
        ob->events = pb_realloc(ob->events, n * sizeof *ob->events);
        ob->cap_events = n;
    }
    size_t k = 0; /* the batch from the front, the parked rows from the back */
    pb_buf_reset(&ob->park_ids);
    pb_buf_reset(&ob->park_until);
    for (size_t i = 0; i < n; i++) {
        int r = (int)i;
        bool parked = !PQgetisnull(res, r, 10);
        pb_event_t *ev = parked ? &ob->events[n - 1 - ob->n_parked++] : &ob->events[k++];
        if (parked) {
            const char *sep = ob->n_parked > 1 ? "," : "{";
            pb_buf_printf(&ob->park_ids, "%s%s", sep, PQgetvalue(res, r, 0));
            pb_buf_puts(&ob->park_until, sep);
            pb_buf_append_array_text(&ob->park_until, PQgetvalue(res, r, 10));
        }
        ev->id = strtoll(PQgetvalue(res, r, 0), NULL, 10);
        ev->event_id = PQgetvalue(res, r, 1);
        ev->aggregate_type = PQgetvalue(res, r, 2);
        ev->aggregate_id = PQgetvalue(res, r, 3);
        ev->event_type = PQgetvalue(res, r, 4);
        ev->payload = PQgetvalue(res, r, 5);
        ev->payload_len = (size_t)PQgetlength(res, r, 5);
        ev->headers = PQgetvalue(res, r, 6);
        ev->destination = PQgetisnull(res, r, 7) ? NULL : PQgetvalue(res, r, 7);
        ev->created_at_us = strtoll(PQgetvalue(res, r, 8), NULL, 10);
        ev->attempts = atoi(PQgetvalue(res, r, 9));
    }
    ob->batch = res;
    ob->n_events = k;
    if (ob->n_parked == 0)
        return PB_OK;
    pb_buf_putc(&ob->park_ids, '}');
    pb_buf_putc(&ob->park_until, '}');
    const char *park_params[2] = {ob->park_ids.data, ob->park_until.data};
    res = PQexecPrepared(ob->conn, "pb_park", 2, park_params, NULL, NULL, 0);
    if ((st = pb_pg_check(ob->conn, res, PGRES_COMMAND_OK, "set aside waiting events", err)) !=
        PB_OK) {
        pb_outbox_rollback(ob);
        return st;
    }
    PQclear(res);
    return PB_OK;
}

void pb_outbox_build_arrays(pb_outbox_t *ob, const pb_result_t *results,
                            const pb_settle_plan_t *plans, pb_settle_counts_t *counts)
{
    pb_buf_t *bufs[] = {&ob->retry_ids, &ob->retry_errors,
                        &ob->retry_delays, &ob->dead_ids, &ob->dead_reasons};
    const size_t n_bufs = sizeof bufs / sizeof bufs[0];
    for (size_t b = 0; b < n_bufs; b++) {
        pb_buf_reset(bufs[b]);
        pb_buf_putc(bufs[b], '{');
    }
    memset(counts, 0, sizeof *counts);
    if (ob->n_events > ob->cap_published) {
        ob->published = pb_realloc(ob->published, ob->n_events * sizeof *ob->published);
        ob->cap_published = ob->n_events;
    }
    for (size_t i = 0; i < ob->n_events; i++) {
        long long id = (long long)ob->events[i].id;
        switch (results[i].outcome) {
        case PB_OUT_PUBLISHED:
            ob->published[counts->published++] = (int64_t)id;
            break;
        case PB_OUT_RETRY:
        case PB_OUT_REJECT:
            if (plans[i].dead) {
                const char *sep = counts->dead ? "," : "";
                pb_buf_printf(&ob->dead_ids, "%s%lld", sep, id);
                pb_buf_puts(&ob->dead_reasons, sep);
                pb_buf_append_array_text(&ob->dead_reasons, plans[i].reason);
                counts->dead++;
            } else {
                const char *sep = counts->retried ? "," : "";
                pb_buf_printf(&ob->retry_ids, "%s%lld", sep, id);
                pb_buf_puts(&ob->retry_errors, sep);
                pb_buf_append_array_text(&ob->retry_errors, results[i].error);
                pb_buf_printf(&ob->retry_delays, "%s%lld", sep, (long long)plans[i].retry_delay_ms);
                counts->retried++;
            }
            break;
        default:
            counts->untried++;
            break;
        }
    }
    for (size_t b = 0; b < n_bufs; b++)
        pb_buf_putc(bufs[b], '}');
    ob->published_sparse = pb_outbox_ids_literal(ob->published, counts->published,
                                                 &ob->published_ids);
}

static pb_status_t exec_prepared(pb_outbox_t *ob, const char *name, int nparams,
                                 const char *const *params, ExecStatusType expect,
                                 pb_error_t *err)
{
    PGresult *res = PQexecPrepared(ob->conn, name, nparams, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(ob->conn, res, expect, name, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

pb_status_t pb_outbox_settle(pb_outbox_t *ob, const pb_result_t *results,
                             const pb_settle_plan_t *plans, pb_settle_counts_t *counts,
                             pb_error_t *err)
{
    pb_outbox_build_arrays(ob, results, plans, counts);
    pb_status_t st = PB_OK;
    if (counts->published) {
        const char *p[1] = {ob->published_ids.data};
        st = exec_prepared(ob, ob->published_sparse ? "pb_publish_sparse" : "pb_publish", 1, p,
                           ob->delete_on_publish ? PGRES_COMMAND_OK : PGRES_TUPLES_OK, err);
    }
    if (st == PB_OK && counts->retried) {
        const char *p[3] = {ob->retry_ids.data, ob->retry_errors.data, ob->retry_delays.data};
        st = exec_prepared(ob, "pb_retry", 3, p, PGRES_COMMAND_OK, err);
    }
    if (st == PB_OK && counts->dead) {
        const char *p[2] = {ob->dead_ids.data, ob->dead_reasons.data};
        st = exec_prepared(ob, "pb_dead", 2, p, PGRES_COMMAND_OK, err);
    }
    if (st == PB_OK)
        st = pb_pg_exec(ob->conn, "COMMIT", err);
    else
        pb_outbox_rollback(ob);
    clear_batch(ob);
    return st;
}

void pb_outbox_rollback(pb_outbox_t *ob)
{
    if (PQstatus(ob->conn) == CONNECTION_OK)
        PQclear(PQexec(ob->conn, "ROLLBACK"));
    clear_batch(ob);
}

pb_status_t pb_outbox_pending(pb_outbox_t *ob, int64_t *count, pb_error_t *err)
{
    PGresult *res = PQexec(ob->conn, pending_sql);
    pb_status_t st = pb_pg_check(ob->conn, res, PGRES_TUPLES_OK, "count pending events", err);
    if (st != PB_OK)
        return st;
    *count = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return PB_OK;
}
