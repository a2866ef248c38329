/* postbox dlq [--inbox] list|show|replay|drop [filters]: the dead letters of the outbox
 * (postbox.dead_letters) or of the consumers (postbox.inbox_dead).
 *
 *   list    one line per dead letter (newest first, --limit, default 100), or --json
 *   show    every column of the matching dead letters, payload included
 *   replay  outbox: moves them back into postbox.outbox with attempts reset (new ids, so they
 *           are published after what is pending now; the event_id, the message id, stays), in
 *           one transaction; the relay is woken by the outbox's NOTIFY trigger.
 *           inbox: publishes each message again, as it was received (message id, type,
 *           headers, body), to amqp.exchange with its original routing key, after releasing its
 *           inbox row and failure record, so that the consumer handles the redelivery; a dead
 *           letter is deleted only once the broker confirmed its message (a crash in between
 *           publishes it twice at worst, and the inbox absorbs the second).
 *   drop    deletes them, in one transaction
 * Filters (ANDed): --id N, --event-type T (inbox: the message type), --aggregate TYPE[:ID]
 * (inbox: the aggregate_type/aggregate_id headers), --consumer C (inbox), --since/--until
 * TIME (a timestamp, or an age such as 90m or 2d) on dead_at. replay and drop need a filter or
 * --all. Both print how many rows they changed. */
#include <jansson.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "common/str.h"
#include "sink/sink.h"
#include "store/pg.h"

#define MAX_PARAMS 10

typedef struct filter {
    pb_buf_t where; /* "TRUE AND ..." */
    const char *params[MAX_PARAMS];
    char owned[MAX_PARAMS][64]; /* parameter texts built here */
    int n;
    bool any;
} filter_t;

static const char *add_param(filter_t *f, const char *v)
{
    f->params[f->n] = v;
    f->n++;
    return NULL;
}

/* Appends " AND <cond>" where cond uses $N for the next parameter (written as %d); cond_fmt is
 * always a literal of this file. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static void add_cond(filter_t *f, const char *cond_fmt, const char *value)
{
    pb_buf_puts(&f->where, " AND ");
    pb_buf_printf(&f->where, cond_fmt, f->n + 1);
    add_param(f, value);
    f->any = true;
}
#pragma GCC diagnostic pop

static bool add_time(filter_t *f, const char *op, const char *v)
{
    int64_t ms;
    if (pb_args_duration_ms(v, &ms)) {
        snprintf(f->owned[f->n], sizeof f->owned[f->n], "%lld", (long long)ms);
        pb_buf_printf(&f->where, " AND dead_at %s now() - $%d::bigint * interval '1 millisecond'",
                      op, f->n + 1);
        add_param(f, f->owned[f->n]);
    } else {
        pb_buf_printf(&f->where, " AND dead_at %s $%d::timestamptz", op, f->n + 1);
        add_param(f, v);
    }
    f->any = true;
    return true;
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "postbox dlq: %s%s%s%s (see postbox --help)\n", msg, arg ? " \"" : "",
            arg ? arg : "", arg ? "\"" : "");
    return PB_EXIT_USAGE;
}

static PGresult *run(PGconn *conn, const char *sql, const filter_t *f, ExecStatusType expect,
                     const char *what)
{
    PGresult *res = PQexecParams(conn, sql, f->n, NULL, f->params, NULL, NULL, 0);
    pb_error_t err;
    if (pb_pg_check(conn, res, expect, what, &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
        return NULL;
    }
    return res;
}

/* The aggregate headers the sink writes from the event: taken from the stored headers. */
static const char *header_text(json_t *headers, const char *key)
{
    json_t *v = json_object_get(headers, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* dlq --inbox replay: see the comment at the top. */
static int replay_inbox(pb_cli_t *cli, PGconn *conn, const filter_t *f)
{
    pb_buf_t sql = {0};
    pb_buf_printf(&sql,
                  "SELECT id::text, message_id, coalesce(message_type, ''), routing_key, "
                  "       headers::text, body FROM postbox.inbox_dead "
                  "WHERE message_id IS NOT NULL AND %s ORDER BY id",
                  f->where.data);
    /* binary results: the body comes back byte for byte; the text columns as their bytes */
    PGresult *rows = PQexecParams(conn, sql.data, f->n, NULL, f->params, NULL, NULL, 1);
    pb_buf_free(&sql);
    pb_error_t err;
    if (pb_pg_check(conn, rows, PGRES_TUPLES_OK, "read inbox dead letters", &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
        return PB_EXIT_FAILURE;
    }
    size_t n = (size_t)PQntuples(rows);
    if (n == 0) {
        printf("replayed 0 dead letter(s) of postbox.inbox_dead\n");
        PQclear(rows);
        return PB_EXIT_OK;
    }
    /* release the inbox rows first: a redelivery must not be taken for a duplicate */
    pb_buf_t rel = {0};
    pb_buf_printf(&rel,
                  "WITH d AS (SELECT consumer, message_id FROM postbox.inbox_dead "
                  "           WHERE message_id IS NOT NULL AND %s), "
                  "f AS (DELETE FROM postbox.inbox_failures x USING d "
                  "      WHERE x.consumer = d.consumer AND x.message_id = d.message_id) "
                  "DELETE FROM postbox.inbox i USING d "
                  "WHERE i.consumer = d.consumer AND i.message_id = d.message_id "
                  "  AND i.processed_at IS NULL",
                  f->where.data);
    PGresult *res = PQexecParams(conn, rel.data, f->n, NULL, f->params, NULL, NULL, 0);
    pb_buf_free(&rel);
    if (pb_pg_check(conn, res, PGRES_COMMAND_OK, "release inbox rows", &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
        PQclear(rows);
        return PB_EXIT_FAILURE;
    }
    PQclear(res);

    pb_event_t *events = pb_malloc(n * sizeof *events);
    pb_result_t *results = pb_malloc(n * sizeof *results);
    json_t **headers = pb_malloc(n * sizeof *headers);
    for (size_t i = 0; i < n; i++) {
        int r = (int)i;
        headers[i] = json_loads(PQgetvalue(rows, r, 4), 0, NULL);
        events[i] = (pb_event_t){
            .event_id = PQgetvalue(rows, r, 1),
            .event_type = PQgetvalue(rows, r, 2),
            .destination = PQgetvalue(rows, r, 3),
            .headers = PQgetvalue(rows, r, 4),
            .payload = PQgetvalue(rows, r, 5),
            .payload_len = (size_t)PQgetlength(rows, r, 5),
            .aggregate_type = header_text(headers[i], "aggregate_type"),
            .aggregate_id = header_text(headers[i], "aggregate_id"),
        };
        results[i].outcome = PB_OUT_UNTRIED;
        results[i].error[0] = '\0';
    }
    int rc = PB_EXIT_FAILURE;
    pb_sink_t *snk = NULL;
    if (pb_sink_amqp_new(&cli->cfg, &snk, &err) != PB_OK || snk->ops->connect(snk, &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
        goto done;
    }
    (void)snk->ops->publish(snk, events, n, results, &err);
    pb_buf_t ids = {0};
    pb_buf_putc(&ids, '{');
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome == PB_OUT_PUBLISHED)
            pb_buf_printf(&ids, "%s%s", ok++ ? "," : "", PQgetvalue(rows, (int)i, 0));
        else
            fprintf(stderr, "postbox dlq: message %s not republished: %s\n", events[i].event_id,
                    results[i].error);
    }
    pb_buf_putc(&ids, '}');
    const char *p[1] = {ids.data};
    res = PQexecParams(conn, "DELETE FROM postbox.inbox_dead WHERE id = ANY($1::bigint[])", 1, NULL,
                       p, NULL, NULL, 0);
    if (pb_pg_check(conn, res, PGRES_COMMAND_OK, "delete replayed dead letters", &err) != PB_OK)
        fprintf(stderr, "postbox dlq: %s (the messages were republished; the consumer's inbox "
                        "absorbs a second replay)\n", err.msg);
    else
        PQclear(res);
    pb_buf_free(&ids);
    printf("replayed %zu of %zu dead letter(s) of postbox.inbox_dead: republished to exchange "
           "\"%s\" with their routing keys\n", ok, n, cli->cfg.amqp_exchange);
    rc = ok == n ? PB_EXIT_OK : PB_EXIT_FAILURE;
done:
    pb_sink_free(snk);
    for (size_t i = 0; i < n; i++)
        json_decref(headers[i]);
    free(headers);
    free(events);
    free(results);
    PQclear(rows);
    return rc;
}

static void print_rows_json(PGresult *res)
{
    json_t *arr = json_array();
    for (int r = 0; r < PQntuples(res); r++) {
        json_t *row = json_object();
        for (int c = 0; c < PQnfields(res); c++) {
            const char *name = PQfname(res, c);
            if (PQgetisnull(res, r, c)) {
                json_object_set_new(row, name, json_null());
                continue;
            }
            const char *v = PQgetvalue(res, r, c);
            json_t *j = NULL;
            if (strcmp(name, "payload") == 0 || strcmp(name, "headers") == 0)
                j = json_loads(v, JSON_DECODE_ANY, NULL);
            else if (strcmp(name, "id") == 0 || strcmp(name, "attempts") == 0 ||
                     strcmp(name, "outbox_id") == 0)
                j = json_integer(strtoll(v, NULL, 10));
            json_object_set_new(row, name, j ? j : json_string(v));
        }
        json_array_append_new(arr, row);
    }
    char *text = json_dumps(arr, JSON_INDENT(2));
    if (text)
        puts(text);
    free(text);
    json_decref(arr);
}

int pb_cmd_dlq(pb_cli_t *cli)
{
    bool inbox = false, all = false, as_json = false;
    const char *action = NULL;
    int64_t limit = 100;
    filter_t f = {0};
    pb_buf_puts(&f.where, "TRUE");
    int rc = PB_EXIT_USAGE;
    for (int i = 0; i < cli->n_args; i++) {
        const char *a = cli->args[i], *v;
        if (strcmp(a, "--inbox") == 0) {
            inbox = true;
        } else if (strcmp(a, "--all") == 0) {
            all = true;
        } else if (strcmp(a, "--json") == 0) {
            as_json = true;
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--id"))) {
            int64_t id;
            if (!*v || !pb_args_count(v, &id))
                goto bad_value;
            add_cond(&f, "id = $%d::bigint", v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--event-type"))) {
            if (!*v)
                goto bad_value;
            add_cond(&f, inbox ? "message_type = $%d" : "event_type = $%d", v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--consumer"))) {
            if (!*v)
                goto bad_value;
            add_cond(&f, "consumer = $%d", v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--aggregate"))) {
            if (!*v)
                goto bad_value;
            const char *colon = strchr(v, ':');
            size_t tlen = colon ? (size_t)(colon - v) : strlen(v);
            if (tlen == 0 || tlen >= sizeof f.owned[0])
                goto bad_value;
            memcpy(f.owned[f.n], v, tlen);
            f.owned[f.n][tlen] = '\0';
            add_cond(&f, inbox ? "headers->>'aggregate_type' = $%d" : "aggregate_type = $%d",
                     f.owned[f.n]);
            if (colon && colon[1])
                add_cond(&f, inbox ? "headers->>'aggregate_id' = $%d" : "aggregate_id = $%d",
                         colon + 1);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--since"))) {
            if (!*v)
                goto bad_value;
            add_time(&f, ">=", v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--until"))) {
            if (!*v)
                goto bad_value;
            add_time(&f, "<", v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--limit"))) {
            if (!*v || !pb_args_count(v, &limit))
                goto bad_value;
        } else if (a[0] != '-' && !action) {
            action = a;
        } else if (a[0] != '-' && action && strcmp(action, "show") == 0) {
            int64_t id; /* show N */
            if (!pb_args_count(a, &id))
                goto bad_value;
            add_cond(&f, "id = $%d::bigint", a);
        } else {
            rc = usage_error("unknown argument", a);
            goto out;
        }
        if (f.n > MAX_PARAMS - 2) {
            rc = usage_error("too many filters", NULL);
            goto out;
        }
        continue;
    bad_value:
        rc = usage_error("bad value for", a);
        goto out;
    }
    if (!action) {
        rc = usage_error("which action? list, show, replay or drop", NULL);
        goto out;
    }
    bool changes = strcmp(action, "replay") == 0 || strcmp(action, "drop") == 0;
    if (!changes && strcmp(action, "list") != 0 && strcmp(action, "show") != 0) {
        rc = usage_error("unknown action", action);
        goto out;
    }
    if (changes && !f.any && !all) {
        rc = usage_error("replay and drop need a filter (--id, --event-type, --aggregate, "
                         "--consumer, --since, --until) or --all",
                         NULL);
        goto out;
    }

    PGconn *conn;
    pb_error_t err;
    if (pb_pg_connect(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: cannot connect to postgresql: %s\n", err.msg);
        rc = PB_EXIT_FAILURE;
        goto out;
    }
    rc = PB_EXIT_FAILURE;
    const char *table = inbox ? "postbox.inbox_dead" : "postbox.dead_letters";
    pb_buf_t sql = {0};
    PGresult *res = NULL;
    if (strcmp(action, "list") == 0 || strcmp(action, "show") == 0) {
        bool show = strcmp(action, "show") == 0;
        if (inbox)
            pb_buf_printf(&sql,
                          "SELECT id, consumer, message_id, message_type, %s "
                          "to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS dead_at, "
                          "attempts, error FROM %s WHERE %s ORDER BY id DESC LIMIT %lld",
                          show ? "exchange, routing_key, headers, "
                                 "encode(body, 'escape') AS body, "
                               : "",
                          table, f.where.data, (long long)limit);
        else
            pb_buf_printf(&sql,
                          "SELECT id, event_id, event_type, aggregate_type, aggregate_id, %s "
                          "to_char(dead_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS dead_at, "
                          "attempts, reason FROM %s WHERE %s ORDER BY id DESC LIMIT %lld",
                          show ? "outbox_id, destination, payload, headers, last_error, "
                                 "to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS created_at, "
                               : "",
                          table, f.where.data, (long long)limit);
        if (!(res = run(conn, sql.data, &f, PGRES_TUPLES_OK, action)))
            goto done;
        if (as_json) {
            print_rows_json(res);
        } else if (show) {
            for (int r = 0; r < PQntuples(res); r++) {
                printf("%s-- dead letter %s\n", r ? "\n" : "", PQgetvalue(res, r, 0));
                for (int c = 1; c < PQnfields(res); c++)
                    printf("%-15s %s\n", PQfname(res, c),
                           PQgetisnull(res, r, c) ? "(null)" : PQgetvalue(res, r, c));
            }
        } else {
            printf("%-8s %-20s %-24s %-28s %8s  %s\n", "id", "dead at",
                   inbox ? "message type" : "event type", inbox ? "consumer / message id" : "aggregate",
                   "attempts", inbox ? "error" : "reason");
            for (int r = 0; r < PQntuples(res); r++) {
                char agg[256];
                snprintf(agg, sizeof agg, "%s%s%s", PQgetvalue(res, r, inbox ? 1 : 3),
                         inbox ? " / " : ":", PQgetvalue(res, r, inbox ? 2 : 4));
                printf("%-8s %-20s %-24s %-28s %8s  %.80s\n", PQgetvalue(res, r, 0),
                       PQgetvalue(res, r, 5), PQgetvalue(res, r, inbox ? 3 : 2), agg,
                       PQgetvalue(res, r, 6), PQgetvalue(res, r, 7));
            }
        }
        if (!as_json && PQntuples(res) == (int)limit)
            fprintf(stderr, "(first %lld shown: --limit N for more)\n", (long long)limit);
        rc = PB_EXIT_OK;
        goto done;
    }

    if (strcmp(action, "drop") == 0) {
        pb_buf_printf(&sql, "DELETE FROM %s WHERE %s", table, f.where.data);
        if (!(res = run(conn, sql.data, &f, PGRES_COMMAND_OK, "drop")))
            goto done;
        printf("dropped %s dead letter(s) from %s\n", PQcmdTuples(res), table);
        rc = PB_EXIT_OK;
        goto done;
    }

    /* replay: one statement, so one transaction */
    if (inbox) {
        rc = replay_inbox(cli, conn, &f);
        goto done;
    }
    else
        pb_buf_printf(&sql,
                      "WITH moved AS (DELETE FROM postbox.dead_letters WHERE %s RETURNING *), "
                      "ins AS (INSERT INTO postbox.outbox (event_id, aggregate_type, aggregate_id, "
                      "            event_type, payload, headers, destination, created_at) "
                      "        SELECT event_id, aggregate_type, aggregate_id, event_type, payload, "
                      "               headers, destination, created_at "
                      "        FROM moved ORDER BY outbox_id NULLS LAST, id RETURNING 1) "
                      "SELECT (SELECT count(*) FROM ins), 0",
                      f.where.data);
    if (!(res = run(conn, sql.data, &f, PGRES_TUPLES_OK, "replay")))
        goto done;
    printf("replayed %s dead letter(s) into postbox.outbox (attempts reset)\n",
           PQgetvalue(res, 0, 0));
    rc = PB_EXIT_OK;
done:
    PQclear(res);
    pb_buf_free(&sql);
    PQfinish(conn);
out:
    pb_buf_free(&f.where);
    return rc;
}
