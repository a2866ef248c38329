/* postbox dlq [--inbox] list|show|replay|drop [filters]: the dead letters of the outbox
 * (postbox.dead_letters) or of the consumers (postbox.inbox_dead).
 *
 *   list    one line per dead letter (newest first, --limit, default 100), or --json
 *   show    every column of the matching dead letters, payload included
 *   replay  outbox: moves them back into postbox.outbox with attempts reset (new ids, so they
 *           are published after what is pending now; the event_id, the message id, stays), in
 *           one transaction; the relay is woken by the outbox's NOTIFY trigger.
 *           inbox: publishes each message again, as it was received (message id, type,
 *           headers, body), where it was read from (amqp: to amqp.exchange with its routing key;
 *           nats: its subject; redis: its stream; kafka: its topic), after releasing its inbox
 *           row and failure record, so that the consumer handles the redelivery; a dead letter
 *           is deleted only once the broker confirmed its message (a crash in between publishes
 *           it twice at worst, and the inbox absorbs the second).
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
#include <time.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "common/event.h"
#include "common/str.h"
#include "sink/sink.h"
#include "source/source.h"
#include "store/dead_letters.h"
#include "store/pg.h"

static int usage_error(const char *msg, const char *arg)
{
    pb_args_error("postbox dlq: %s%s%s%s (see postbox --help)", msg, arg ? " \"" : "",
                  arg ? arg : "", arg ? "\"" : "");
    return PB_EXIT_USAGE;
}

static int failure(const pb_error_t *err)
{
    fprintf(stderr, "postbox dlq: %s\n", err->msg);
    return PB_EXIT_FAILURE;
}

/* A stored value as the terminal gets it: payloads, headers and reasons come from outside, and
 * their control characters (an escape sequence rewrites the screen) are shown escaped. */
static void print_terminal_text(const char *v)
{
    size_t cap = strlen(v) * 6 + 1; /* the longest escape, \u009b, for a 2-byte character */
    char *buf = pb_malloc(cap);
    pb_text_escape(buf, cap, v);
    fputs(buf, stdout);
    free(buf);
}

/* The aggregate headers the sink writes from the event: taken from the stored headers. */
static const char *header_text(json_t *headers, const char *key)
{
    json_t *v = json_object_get(headers, key);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* The aggregate_sequence header (a number, or its text as NATS and Redis keep it), 0 if none. */
static int64_t header_sequence(json_t *headers)
{
    json_t *v = json_object_get(headers, PB_SEQUENCE_HEADER);
    if (json_is_integer(v))
        return json_integer_value(v) > 0 ? (int64_t)json_integer_value(v) : 0;
    if (json_is_string(v))
        return pb_source_sequence(json_string_value(v), json_string_length(v));
    return 0;
}

/* The created_at header as the sinks write it ("2026-01-02T03:04:05.678901Z"), in unix
 * microseconds; fallback when there is none or it does not parse. */
static int64_t header_created_us(json_t *headers, int64_t fallback)
{
    const char *text = header_text(headers, "created_at");
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *rest = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!rest)
        return fallback;
    long frac = 0;
    int digits = 0;
    if (*rest == '.')
        for (rest++; *rest >= '0' && *rest <= '9' && digits < 6; rest++, digits++)
            frac = frac * 10 + (*rest - '0');
    for (; digits < 6; digits++)
        frac *= 10;
    while (*rest >= '0' && *rest <= '9')
        rest++;
    if (strcmp(rest, "Z") != 0)
        return fallback;
    return (int64_t)timegm(&tm) * 1000000 + frac;
}

/* Where a dead message goes back to: the sink of the broker the consumer reads (consume.source),
 * made by the generic constructor. cfg receives the configuration the sink borrows. */
static pb_status_t source_sink(const pb_cli_t *cli, pb_config_t *cfg, pb_sink_t **snk,
                               pb_error_t *err)
{
    static char no_prefix[1];
    *cfg = cli->cfg; /* shallow: the strings stay cli->cfg's */
    cfg->relay_sink = cli->cfg.consume_source;
    /* a stored stream is a full name (redis.streams): the sink must not prefix it again */
    cfg->redis_stream_prefix = no_prefix;
    pb_status_t st = pb_sink_new(cfg, snk, err);
    if (st == PB_OK)
        st = (*snk)->ops->connect(*snk, err);
    return st;
}

/* The destination that makes the sink publish to the message's original routing key, subject,
 * stream or topic. NATS: the sink puts nats.subject_prefix before a destination, and the stored
 * subject has it already. NULL when the subject lies outside the prefix. Redis and Kafka: the
 * stored stream or topic as it is (source_sink drops redis.stream_prefix). */
static const char *destination_of(const pb_config_t *cfg, const char *routing_key)
{
    if (strcmp(cfg->consume_source, "nats") != 0)
        return routing_key;
    size_t plen = strlen(cfg->nats_subject_prefix);
    if (strncmp(routing_key, cfg->nats_subject_prefix, plen) != 0 || !routing_key[plen])
        return NULL;
    return routing_key + plen;
}

/* dlq --inbox replay: see the comment at the top. */
static int replay_inbox(pb_cli_t *cli, PGconn *conn, const pb_dlq_filter_t *f)
{
    PGresult *rows;
    pb_error_t err;
    if (pb_dlq_inbox_read(conn, f, &rows, &err) != PB_OK)
        return failure(&err);
    size_t n = (size_t)PQntuples(rows);
    if (n == 0) {
        printf("replayed 0 dead letter(s) of postbox.inbox_dead\n");
        PQclear(rows);
        return PB_EXIT_OK;
    }
    pb_event_t *events = pb_malloc(n * sizeof *events);
    pb_result_t *results = pb_malloc(n * sizeof *results);
    json_t **headers = pb_malloc(n * sizeof *headers);
    for (size_t i = 0; i < n; i++) {
        int r = (int)i;
        headers[i] = json_loads(PQgetvalue(rows, r, 4), 0, NULL);
        const char *dest = destination_of(&cli->cfg, PQgetvalue(rows, r, 3));
        events[i] = (pb_event_t){
            .event_id = PQgetvalue(rows, r, 1),
            .event_type = PQgetvalue(rows, r, 2),
            .destination = dest ? dest : "",
            .headers = PQgetvalue(rows, r, 4),
            .payload = PQgetvalue(rows, r, 5),
            .payload_len = (size_t)PQgetlength(rows, r, 5),
            .aggregate_type = header_text(headers[i], "aggregate_type"),
            .aggregate_id = header_text(headers[i], "aggregate_id"),
            .sequence = header_sequence(headers[i]),
            .created_at_us =
                header_created_us(headers[i], strtoll(PQgetvalue(rows, r, 6), NULL, 10)),
        };
        if (dest)
            pb_result_set(&results[i], PB_OUT_UNTRIED, NULL);
        else
            pb_result_setf(&results[i], PB_OUT_REJECT,
                           "its subject \"%.120s\" does not start with nats.subject_prefix \"%.60s\"",
                           PQgetvalue(rows, r, 3), cli->cfg.nats_subject_prefix);
    }
    int rc = PB_EXIT_FAILURE;
    pb_config_t scfg;
    pb_sink_t *snk = NULL;
    if (source_sink(cli, &scfg, &snk, &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
        goto done;
    }
    for (size_t i = 0; i < n; i++) /* headers parsed, and what the sink can never publish */
        if (results[i].outcome == PB_OUT_UNTRIED)
            (void)pb_sink_prepare(snk, &events[i], &results[i]);
    /* released only with the broker at hand; before publishing, so that the consumer does not
     * take the redelivery for a duplicate */
    if (pb_dlq_inbox_release(conn, f, &err) != PB_OK) {
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
        goto done;
    }
    pb_sink_batch_t batch = {.events = events, .results = results, .n = n};
    if (pb_sink_publish(snk, &batch, &err) != PB_OK) /* per message below */
        fprintf(stderr, "postbox dlq: %s\n", err.msg);
    pb_buf_t ids = {0};
    pb_buf_putc(&ids, '{');
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome == PB_OUT_PUBLISHED && results[i].duplicate)
            /* the broker dropped it as a copy of the delivery that failed: the consumer would
             * never see it again, so the dead letter stays */
            fprintf(stderr, "postbox dlq: message %s not republished: the broker still holds it "
                            "within its duplicate window (nats.duplicate_window); replay it once "
                            "the window has passed\n", events[i].event_id);
        else if (results[i].outcome == PB_OUT_PUBLISHED)
            pb_buf_printf(&ids, "%s%s", ok++ ? "," : "", PQgetvalue(rows, (int)i, 0));
        else
            fprintf(stderr, "postbox dlq: message %s not republished: %s\n", events[i].event_id,
                    results[i].error);
    }
    pb_buf_putc(&ids, '}');
    bool forgot = pb_dlq_inbox_forget(conn, ids.data, &err) == PB_OK;
    if (!forgot)
        fprintf(stderr, "postbox dlq: %s (the messages were republished; the consumer's inbox "
                        "absorbs a second replay)\n", err.msg);
    pb_buf_free(&ids);
    const char *source = cli->cfg.consume_source;
    if (strcmp(source, "nats") == 0)
        printf("replayed %zu of %zu dead letter(s) of postbox.inbox_dead: republished to stream "
               "\"%s\" with their subjects\n", ok, n, cli->cfg.nats_stream);
    else if (strcmp(source, "redis") == 0 || strcmp(source, "kafka") == 0)
        printf("replayed %zu of %zu dead letter(s) of postbox.inbox_dead: republished to the %s "
               "they were read from\n", ok, n, source[0] == 'r' ? "streams" : "topics");
    else
        printf("replayed %zu of %zu dead letter(s) of postbox.inbox_dead: republished to exchange "
               "\"%s\" with their routing keys\n", ok, n, cli->cfg.amqp_exchange);
    rc = ok == n && forgot ? PB_EXIT_OK : PB_EXIT_FAILURE;
done:
    pb_sink_free(snk);
    for (size_t i = 0; i < n; i++) {
        pb_sink_release(&events[i]);
        json_decref(headers[i]);
    }
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
    pb_dlq_filter_t f = {0};
    int rc = PB_EXIT_USAGE;
    for (int i = 0; i < cli->n_args; i++) {
        const char *a = cli->args[i], *v;
        bool room = true;
        int64_t ms;
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
            room = pb_dlq_filter_add(&f, PB_DLQ_ID, v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--event-type"))) {
            if (!*v)
                goto bad_value;
            room = pb_dlq_filter_add(&f, PB_DLQ_TYPE, v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--consumer"))) {
            if (!*v)
                goto bad_value;
            room = pb_dlq_filter_add(&f, PB_DLQ_CONSUMER, v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--aggregate"))) {
            if (!*v)
                goto bad_value;
            const char *colon = strchr(v, ':');
            size_t tlen = colon ? (size_t)(colon - v) : strlen(v);
            char type[64];
            if (tlen == 0 || tlen >= sizeof type)
                goto bad_value;
            memcpy(type, v, tlen);
            type[tlen] = '\0';
            room = pb_dlq_filter_add(&f, PB_DLQ_AGGREGATE_TYPE, type);
            if (room && colon && colon[1])
                room = pb_dlq_filter_add(&f, PB_DLQ_AGGREGATE_ID, colon + 1);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--since")) ||
                   (v = pb_args_value(cli->args, cli->n_args, &i, "--until"))) {
            if (!*v)
                goto bad_value;
            pb_dlq_field_t field = strncmp(a, "--since", 7) == 0 ? PB_DLQ_SINCE : PB_DLQ_UNTIL;
            room = pb_args_duration_ms(v, &ms) ? pb_dlq_filter_add_age(&f, field, ms)
                                               : pb_dlq_filter_add(&f, field, v);
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--limit"))) {
            if (!*v || !pb_args_count(v, &limit))
                goto bad_value;
        } else if (a[0] != '-' && !action) {
            action = a;
        } else if (a[0] != '-' && action && strcmp(action, "show") == 0) {
            int64_t id; /* show N */
            if (!pb_args_count(a, &id))
                goto bad_value;
            room = pb_dlq_filter_add(&f, PB_DLQ_ID, a);
        } else {
            rc = usage_error("unknown argument", a);
            goto out;
        }
        if (!room || f.n > PB_DLQ_MAX_CONDS - 2) {
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
    if (changes && f.n == 0 && !all) {
        rc = usage_error("replay and drop need a filter (--id, --event-type, --aggregate, "
                         "--consumer, --since, --until) or --all",
                         NULL);
        goto out;
    }

    PGconn *conn;
    pb_error_t err;
    /* list and show read, and a standby serves them */
    pb_status_t st = changes ? pb_pg_connect_primary(cli->cfg.postgres_dsn, &conn, &err)
                             : pb_pg_connect(cli->cfg.postgres_dsn, &conn, &err);
    if (st != PB_OK) {
        fprintf(stderr, "postbox dlq: cannot connect to postgresql: %s\n", err.msg);
        rc = PB_EXIT_FAILURE;
        goto out;
    }
    rc = PB_EXIT_FAILURE;
    pb_dlq_table_t table = inbox ? PB_DLQ_INBOX : PB_DLQ_OUTBOX;
    PGresult *res = NULL;
    int64_t rows;
    if (strcmp(action, "list") == 0 || strcmp(action, "show") == 0) {
        bool show = strcmp(action, "show") == 0;
        if (pb_dlq_list(conn, table, &f, show, limit, &res, &err) != PB_OK) {
            rc = failure(&err);
            goto done;
        }
        if (as_json) {
            print_rows_json(res);
        } else if (show) {
            for (int r = 0; r < PQntuples(res); r++) {
                printf("%s-- dead letter %s\n", r ? "\n" : "", PQgetvalue(res, r, 0));
                for (int c = 1; c < PQnfields(res); c++) {
                    printf("%-15s ", PQfname(res, c));
                    print_terminal_text(PQgetisnull(res, r, c) ? "(null)" : PQgetvalue(res, r, c));
                    putchar('\n');
                }
            }
        } else {
            /* columns (store/dead_letters.h): outbox id, event_id, event_type, aggregate_type,
             * aggregate_id, dead_at, attempts, reason; inbox id, consumer, message_id,
             * message_type, dead_at, attempts, error */
            int type_col = inbox ? 3 : 2, who = inbox ? 1 : 3, what = inbox ? 2 : 4,
                dead_col = inbox ? 4 : 5;
            printf("%-8s %-20s %-24s %-28s %8s  %s\n", "id", "dead at",
                   inbox ? "message type" : "event type", inbox ? "consumer / message id" : "aggregate",
                   "attempts", inbox ? "error" : "reason");
            for (int r = 0; r < PQntuples(res); r++) {
                char raw[256], agg[256], type[256], reason[81];
                snprintf(raw, sizeof raw, "%s%s%s", PQgetvalue(res, r, who), inbox ? " / " : ":",
                         PQgetvalue(res, r, what));
                pb_text_escape(agg, sizeof agg, raw);
                pb_text_escape(type, sizeof type, PQgetvalue(res, r, type_col));
                pb_text_escape(reason, sizeof reason, PQgetvalue(res, r, dead_col + 2));
                printf("%-8s %-20s %-24s %-28s %8s  %s\n", PQgetvalue(res, r, 0),
                       PQgetvalue(res, r, dead_col), type, agg, PQgetvalue(res, r, dead_col + 1),
                       reason);
            }
        }
        if (!as_json && PQntuples(res) == (int)limit)
            fprintf(stderr, "(first %lld shown: --limit N for more)\n", (long long)limit);
        rc = PB_EXIT_OK;
    } else if (strcmp(action, "drop") == 0) {
        if (pb_dlq_drop(conn, table, &f, &rows, &err) != PB_OK) {
            rc = failure(&err);
            goto done;
        }
        printf("dropped %lld dead letter(s) from %s\n", (long long)rows, pb_dlq_table_name(table));
        rc = PB_EXIT_OK;
    } else if (inbox) {
        rc = replay_inbox(cli, conn, &f);
    } else {
        /* one statement, so one transaction; the relay publishes what it puts back */
        if (pb_dlq_replay_outbox(conn, &f, &rows, &err) != PB_OK) {
            rc = failure(&err);
            goto done;
        }
        printf("replayed %lld dead letter(s) into postbox.outbox (attempts reset)\n",
               (long long)rows);
        rc = PB_EXIT_OK;
    }
done:
    PQclear(res);
    PQfinish(conn);
out:
    pb_dlq_filter_free(&f);
    return rc;
}
