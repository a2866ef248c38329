#include "store/dead_letters.h"

#include <stdio.h>
#include <stdlib.h>

#include "store/pg.h"

/* Dead letters for events the relay gave up on, one statement for a whole batch; each event's
 * outbox row (id > 0) goes at the same time. */
static const char dead_events_sql[] =
    "WITH f AS (SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::text[], $4::text[], "
    "    $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[], $10::int[], $11::text[], "
    "    $12::bigint[], $13::bigint[], $14::bigint[]) "
    "    AS f(id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, "
    "         destination, created_us, attempts, reason, sequence, available_us, expires_us)), "
    "gone AS (DELETE FROM postbox.outbox o USING f WHERE o.id = f.id) "
    "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id, "
    "    event_type, payload, headers, destination, created_at, attempts, last_error, reason, "
    "    sequence, available_at, expires_at) "
    "SELECT nullif(id, 0), event_id, aggregate_type, aggregate_id, event_type, payload::jsonb, "
    "       coalesce(headers::jsonb, '{}'), destination, to_timestamp(created_us / 1000000.0), "
    "       attempts, reason, reason, nullif(sequence, 0), "
    "       'epoch'::timestamptz + nullif(available_us, 0) * interval '1 microsecond', "
    "       'epoch'::timestamptz + nullif(expires_us, 0) * interval '1 microsecond' FROM f";

/* Appends a text element to an array literal, or NULL. */
static void put_text(pb_buf_t *b, size_t i, const char *s)
{
    pb_buf_puts(b, i ? "," : "{");
    if (s)
        pb_buf_append_array_text(b, s);
    else
        pb_buf_puts(b, "NULL");
}

pb_status_t pb_dead_letter_events(PGconn *conn, const pb_event_t *const *evs, const int *attempts,
                                  const char *const *reasons, size_t n, pb_error_t *err)
{
    if (n == 0)
        return PB_OK;
    enum { N_COLS = 14 };
    pb_buf_t cols[N_COLS] = {{0}};
    for (size_t i = 0; i < n; i++) {
        const pb_event_t *ev = evs[i];
        pb_buf_printf(&cols[0], "%s%lld", i ? "," : "{", (long long)ev->id);
        put_text(&cols[1], i, ev->event_id);
        put_text(&cols[2], i, ev->aggregate_type);
        put_text(&cols[3], i, ev->aggregate_id);
        put_text(&cols[4], i, ev->event_type);
        put_text(&cols[5], i, ev->payload);
        put_text(&cols[6], i, ev->headers);
        put_text(&cols[7], i, ev->destination);
        pb_buf_printf(&cols[8], "%s%lld", i ? "," : "{", (long long)ev->created_at_us);
        pb_buf_printf(&cols[9], "%s%d", i ? "," : "{", attempts[i]);
        put_text(&cols[10], i, reasons[i]);
        pb_buf_printf(&cols[11], "%s%lld", i ? "," : "{", (long long)ev->sequence);
        pb_buf_printf(&cols[12], "%s%lld", i ? "," : "{", (long long)ev->available_at_us);
        pb_buf_printf(&cols[13], "%s%lld", i ? "," : "{", (long long)ev->expires_at_us);
    }
    const char *params[N_COLS];
    for (int c = 0; c < N_COLS; c++) {
        pb_buf_putc(&cols[c], '}');
        params[c] = cols[c].data;
    }
    PGresult *res = PQexecParams(conn, dead_events_sql, N_COLS, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "write dead letters", err);
    if (st == PB_OK)
        PQclear(res);
    for (int c = 0; c < N_COLS; c++)
        pb_buf_free(&cols[c]);
    return st;
}

const char *pb_dlq_table_name(pb_dlq_table_t table)
{
    return table == PB_DLQ_INBOX ? "postbox.inbox_dead" : "postbox.dead_letters";
}

bool pb_dlq_filter_add(pb_dlq_filter_t *f, pb_dlq_field_t field, const char *value)
{
    if (f->n >= PB_DLQ_MAX_CONDS)
        return false;
    f->cond[f->n++] = (pb_dlq_cond_t){.field = field, .value = pb_strdup(value)};
    return true;
}

bool pb_dlq_filter_add_age(pb_dlq_filter_t *f, pb_dlq_field_t field, int64_t age_ms)
{
    char text[24];
    snprintf(text, sizeof text, "%lld", (long long)age_ms);
    if (!pb_dlq_filter_add(f, field, text))
        return false;
    f->cond[f->n - 1].age = true;
    return true;
}

void pb_dlq_filter_free(pb_dlq_filter_t *f)
{
    for (int i = 0; i < f->n; i++)
        free(f->cond[i].value);
    f->n = 0;
}

/* The WHERE clause of f for table ("TRUE AND ..."), $1.. its parameters in params. */
static pb_status_t where(pb_dlq_table_t table, const pb_dlq_filter_t *f, pb_buf_t *out,
                         const char **params, pb_error_t *err)
{
    bool inbox = table == PB_DLQ_INBOX;
    pb_buf_puts(out, "TRUE");
    for (int i = 0; i < f->n; i++) {
        const pb_dlq_cond_t *c = &f->cond[i];
        int p = i + 1;
        params[i] = c->value;
        switch (c->field) {
        case PB_DLQ_ID:
            pb_buf_printf(out, " AND id = $%d::bigint", p);
            break;
        case PB_DLQ_TYPE:
            pb_buf_printf(out, " AND %s = $%d", inbox ? "message_type" : "event_type", p);
            break;
        case PB_DLQ_AGGREGATE_TYPE:
            pb_buf_printf(out, " AND %s = $%d",
                          inbox ? "headers->>'aggregate_type'" : "aggregate_type", p);
            break;
        case PB_DLQ_AGGREGATE_ID:
            pb_buf_printf(out, " AND %s = $%d", inbox ? "headers->>'aggregate_id'" : "aggregate_id",
                          p);
            break;
        case PB_DLQ_CONSUMER:
            if (!inbox)
                return pb_fail(err, PB_FATAL, "%s has no consumer: a consumer filter applies to "
                                              "postbox.inbox_dead only", pb_dlq_table_name(table));
            pb_buf_printf(out, " AND consumer = $%d", p);
            break;
        case PB_DLQ_SINCE:
        case PB_DLQ_UNTIL: {
            const char *op = c->field == PB_DLQ_SINCE ? ">=" : "<";
            if (c->age)
                pb_buf_printf(out, " AND dead_at %s now() - $%d::bigint * interval '1 millisecond'",
                              op, p);
            else
                pb_buf_printf(out, " AND dead_at %s $%d::timestamptz", op, p);
            break;
        }
        }
    }
    return PB_OK;
}

/* Runs sql, whose one %s is f's WHERE clause for table, with f's parameters. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static pb_status_t run(PGconn *conn, pb_dlq_table_t table, const pb_dlq_filter_t *f,
                       const char *sql_fmt, int result_format, ExecStatusType expect,
                       const char *what, PGresult **out, pb_error_t *err)
{
    *out = NULL;
    const char *params[PB_DLQ_MAX_CONDS];
    pb_buf_t w = {0}, sql = {0};
    pb_status_t st = where(table, f, &w, params, err);
    if (st == PB_OK) {
        pb_buf_printf(&sql, sql_fmt, w.data);
        PGresult *res = PQexecParams(conn, sql.data, f->n, NULL, params, NULL, NULL, result_format);
        if ((st = pb_pg_check(conn, res, expect, what, err)) == PB_OK)
            *out = res;
    }
    pb_buf_free(&w);
    pb_buf_free(&sql);
    return st;
}
#pragma GCC diagnostic pop

#define UTC_TEXT(col, fmt) "to_char(" col " AT TIME ZONE 'UTC', '" fmt "') AS " col
#define SECONDS "YYYY-MM-DD\"T\"HH24:MI:SS\"Z\""
#define MILLIS "YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\""

static const char list_outbox_sql[] =
    "SELECT id, event_id, event_type, aggregate_type, aggregate_id, " UTC_TEXT("dead_at", SECONDS)
    ", attempts, reason FROM postbox.dead_letters WHERE %s ORDER BY id DESC LIMIT ";
static const char show_outbox_sql[] =
    "SELECT id, event_id, event_type, aggregate_type, aggregate_id, outbox_id, destination, "
    "payload, headers, last_error, " UTC_TEXT("created_at", MILLIS) ", "
    UTC_TEXT("available_at", MILLIS) ", " UTC_TEXT("expires_at", MILLIS) ", "
    UTC_TEXT("dead_at", SECONDS) ", attempts, reason FROM postbox.dead_letters WHERE %s "
    "ORDER BY id DESC LIMIT ";
static const char list_inbox_sql[] =
    "SELECT id, consumer, message_id, message_type, " UTC_TEXT("dead_at", SECONDS)
    ", attempts, error FROM postbox.inbox_dead WHERE %s ORDER BY id DESC LIMIT ";
static const char show_inbox_sql[] =
    "SELECT id, consumer, message_id, message_type, exchange, routing_key, headers, "
    "encode(body, 'escape') AS body, " UTC_TEXT("dead_at", SECONDS)
    ", attempts, error FROM postbox.inbox_dead WHERE %s ORDER BY id DESC LIMIT ";

pb_status_t pb_dlq_list(PGconn *conn, pb_dlq_table_t table, const pb_dlq_filter_t *f, bool detail,
                        int64_t limit, PGresult **out, pb_error_t *err)
{
    bool inbox = table == PB_DLQ_INBOX;
    pb_buf_t sql = {0};
    pb_buf_puts(&sql, inbox ? (detail ? show_inbox_sql : list_inbox_sql)
                            : (detail ? show_outbox_sql : list_outbox_sql));
    pb_buf_printf(&sql, "%lld", (long long)limit);
    pb_status_t st = run(conn, table, f, sql.data, 0, PGRES_TUPLES_OK,
                         detail ? "show dead letters" : "list dead letters", out, err);
    pb_buf_free(&sql);
    return st;
}

pb_status_t pb_dlq_drop(PGconn *conn, pb_dlq_table_t table, const pb_dlq_filter_t *f,
                        int64_t *rows, pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = run(conn, table, f,
                         table == PB_DLQ_INBOX ? "DELETE FROM postbox.inbox_dead WHERE %s"
                                               : "DELETE FROM postbox.dead_letters WHERE %s",
                         0, PGRES_COMMAND_OK, "drop dead letters", &res, err);
    if (st != PB_OK)
        return st;
    *rows = strtoll(PQcmdTuples(res), NULL, 10);
    PQclear(res);
    return PB_OK;
}

static const char replay_outbox_sql[] =
    "WITH moved AS (DELETE FROM postbox.dead_letters WHERE %s RETURNING *), "
    "ins AS (INSERT INTO postbox.outbox (event_id, aggregate_type, aggregate_id, "
    "            event_type, payload, headers, destination, created_at) "
    "        SELECT event_id, aggregate_type, aggregate_id, event_type, payload, "
    "               headers, destination, created_at "
    "        FROM moved ORDER BY outbox_id NULLS LAST, id RETURNING 1) "
    "SELECT count(*) FROM ins";

pb_status_t pb_dlq_replay_outbox(PGconn *conn, const pb_dlq_filter_t *f, int64_t *rows,
                                 pb_error_t *err)
{
    PGresult *res;
    pb_status_t st = run(conn, PB_DLQ_OUTBOX, f, replay_outbox_sql, 0, PGRES_TUPLES_OK,
                         "replay dead letters", &res, err);
    if (st != PB_OK)
        return st;
    *rows = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return PB_OK;
}

pb_status_t pb_dlq_inbox_read(PGconn *conn, const pb_dlq_filter_t *f, PGresult **out,
                              pb_error_t *err)
{
    return run(conn, PB_DLQ_INBOX, f,
               "SELECT id::text, message_id, coalesce(message_type, ''), routing_key, "
               "       headers::text, body, "
               "       (extract(epoch FROM dead_at) * 1000000)::bigint::text FROM postbox.inbox_dead "
               "WHERE message_id IS NOT NULL AND %s ORDER BY id",
               1, PGRES_TUPLES_OK, "read inbox dead letters", out, err);
}

pb_status_t pb_dlq_inbox_release(PGconn *conn, const pb_dlq_filter_t *f, pb_error_t *err)
{
    PGresult *res;
    pb_status_t st =
        run(conn, PB_DLQ_INBOX, f,
            "WITH d AS (SELECT consumer, message_id FROM postbox.inbox_dead "
            "           WHERE message_id IS NOT NULL AND %s), "
            "f AS (DELETE FROM postbox.inbox_failures x USING d "
            "      WHERE x.consumer = d.consumer AND x.message_id = d.message_id) "
            "DELETE FROM postbox.inbox i USING d "
            "WHERE i.consumer = d.consumer AND i.message_id = d.message_id "
            "  AND i.processed_at IS NULL",
            0, PGRES_COMMAND_OK, "release inbox rows", &res, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

pb_status_t pb_dlq_inbox_forget(PGconn *conn, const char *ids, pb_error_t *err)
{
    const char *p[1] = {ids};
    PGresult *res = PQexecParams(conn, "DELETE FROM postbox.inbox_dead WHERE id = ANY($1::bigint[])",
                                 1, NULL, p, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "delete replayed dead letters", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}
