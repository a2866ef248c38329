#include "inbox/inbox.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include <sys/types.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/str.h"
#include "store/inbox_sql.h"
#include "store/pg_array.h"
#include "store/pg.h"

#define FAC "inbox"
#define SAVEPOINT "pb_msg"

/* Messages per pipeline sync: bounds what libpq and the server buffer while we are still
 * sending (we read results only after the sync). */
#define PIPELINE_CHUNK 256

/* Batches run with savepoints after a handler failed in one without them; batches skip the
 * fast path after it met a duplicate. */
#define CAREFUL_BATCHES 20

enum msg_state {
    ST_NEW = 0, /* to be handled */
    ST_NO_ID,   /* no message id: dead letter */
    ST_DUP,     /* in the inbox already, or earlier in this batch */
    ST_DONE,    /* handler ran */
    ST_FAILED,  /* handler (or the inbox insert) failed: errors[i] */
    ST_HELD,    /* not run: an earlier message of its aggregate failed */
    ST_REFUSED, /* cannot be handled whatever the retries (size, NUL byte): dead letter, errors[i] */
    ST_OVERDELIVERED, /* delivered more than max_attempts times, never acknowledged: dead letter
                       * without running the handler */
    ST_EARLY,   /* beyond its aggregate's next sequence number: held */
};


static pb_status_t prepare(PGconn *conn, const char *name, const char *sql, int nparams,
                           const Oid *types, const char *what, pb_error_t *err)
{
    PGresult *res = PQprepare(conn, name, sql, nparams, types);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, what, err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

/* Handler statements take three text parameters, used or not: payload, headers, metadata. */
static const Oid handler_param_types[3] = {25, 25, 25};

pb_status_t pb_inbox_init(pb_inbox_t *ib, PGconn *conn, const pb_config_t *cfg, pb_error_t *err)
{
    memset(ib, 0, sizeof *ib);
    ib->conn = conn;
    ib->cfg = cfg;
    pb_status_t st;
    if ((st = pb_inbox_sql_prepare(conn, err)) != PB_OK)
        goto fail;
    /* handlers: one per [handlers] entry, then the default (type NULL) */
    ib->n_handlers = cfg->n_handlers + (*cfg->consume_handler ? 1 : 0);
    ib->handler_types = pb_malloc((ib->n_handlers + 1) * sizeof *ib->handler_types);
    ib->handler_names = pb_malloc((ib->n_handlers + 1) * sizeof *ib->handler_names);
    for (size_t h = 0; h < ib->n_handlers; h++) {
        bool dflt = h == cfg->n_handlers;
        const char *sql = dflt ? cfg->consume_handler : cfg->handler_sql[h];
        ib->handler_types[h] = dflt ? NULL : cfg->handler_types[h];
        char *name = ib->handler_names[h], what[300];
        snprintf(name, sizeof ib->handler_names[h], "pb_handler_%zu", h);
        snprintf(what, sizeof what, "handler for %s%s%s", dflt ? "" : "message type \"",
                 dflt ? "other message types (consume.handler)" : cfg->handler_types[h],
                 dflt ? "" : "\"");
        if ((st = prepare(conn, name, sql, 3, handler_param_types, what, err)) != PB_OK)
            goto fail;
    }
    return PB_OK;
fail:
    pb_inbox_free(ib);
    return st;
}

void pb_inbox_free(pb_inbox_t *ib)
{
    free(ib->handler_types);
    free(ib->handler_names);
    free(ib->handler_of);
    free(ib->state);
    free(ib->errors);
    free(ib->settled);
    pb_buf_free(&ib->scratch);
    pb_inbox_seq_free(&ib->seq);
    pb_screen_free(&ib->screen);
    memset(ib, 0, sizeof *ib);
}

static void reserve(pb_inbox_t *ib, size_t n)
{
    if (n <= ib->cap)
        return;
    ib->handler_of = pb_realloc(ib->handler_of, n * sizeof *ib->handler_of);
    ib->state = pb_realloc(ib->state, n * sizeof *ib->state);
    ib->errors = pb_realloc(ib->errors, n * sizeof *ib->errors);
    ib->settled = pb_realloc(ib->settled, n * sizeof *ib->settled);
    ib->cap = n;
}

static int find_handler(const pb_inbox_t *ib, const char *type)
{
    for (size_t h = 0; h < ib->n_handlers; h++) {
        const char *t = ib->handler_types[h];
        if (!t || (type && strcmp(t, type) == 0))
            return (int)h;
    }
    return -1;
}

/* prefix and msg as one line of text for inbox_failures/inbox_dead and the log: cut on a UTF-8
 * character boundary (PostgreSQL rejects half a character), newlines as spaces. */
static void clean_error(char *dst, size_t n, const char *prefix, const char *msg)
{
    char whole[1024];
    snprintf(whole, sizeof whole, "%s%s", prefix, msg && *msg ? msg : "unknown error");
    size_t len = pb_text_copy(dst, n, whole);
    while (len && dst[len - 1] == ' ')
        dst[--len] = '\0';
}

static bool same_text(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

bool pb_inbox_same_aggregate(const pb_message_t *a, const pb_message_t *b)
{
    return a->aggregate_id && b->aggregate_id && strcmp(a->aggregate_id, b->aggregate_id) == 0 &&
           same_text(a->aggregate_type, b->aggregate_type);
}

/* Message i failed: the later messages of its aggregate that were to run wait behind it. */
static void hold_behind(pb_inbox_t *ib, const pb_message_t *msgs, size_t n, size_t i)
{
    if (!msgs[i].aggregate_id)
        return;
    for (size_t j = i + 1; j < n; j++)
        if ((ib->state[j] == ST_NEW || ib->state[j] == ST_FAILED) &&
            pb_inbox_same_aggregate(&msgs[i], &msgs[j]))
            ib->state[j] = ST_HELD;
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The parameters of the inbox rows' claim (pb_inbox_claim_batch, pb_inbox_claim_all): the
 * consumer, then binary arrays of the messages in state ST_NEW, one after the other in the
 * scratch buffer. */
typedef enum claim_array { CLAIM_IDS, CLAIM_TYPES, CLAIM_AGG_TYPES, CLAIM_AGG_IDS, CLAIM_SEQS,
                           CLAIM_ARRAYS } claim_array_t;
enum { CLAIM_PARAMS = 1 + CLAIM_ARRAYS };

typedef struct claim_params {
    const char *values[CLAIM_PARAMS];
    int lengths[CLAIM_PARAMS];
    int formats[CLAIM_PARAMS];
    size_t rows;
} claim_params_t;

static void put_claim_element(pb_buf_t *b, pb_pg_array_t *a, claim_array_t which,
                              const pb_message_t *m)
{
    bool numbered = pb_inbox_seq_has(m); /* only numbered rows are folded by the purge */
    switch (which) {
    case CLAIM_IDS:
        pb_pg_array_text(a, b, m->message_id);
        break;
    case CLAIM_TYPES:
        pb_pg_array_text(a, b, m->type);
        break;
    case CLAIM_AGG_TYPES:
        pb_pg_array_text(a, b, numbered ? pb_inbox_seq_type(m) : NULL);
        break;
    case CLAIM_AGG_IDS:
        pb_pg_array_text(a, b, numbered ? m->aggregate_id : NULL);
        break;
    default:
        if (numbered)
            pb_pg_array_int8(a, b, m->sequence);
        else
            pb_pg_array_null(a, b);
        break;
    }
}

static void put_claim_arrays(pb_inbox_t *ib, const pb_message_t *msgs, size_t n,
                             claim_params_t *p)
{
    pb_buf_t *b = &ib->scratch;
    pb_buf_reset(b);
    pb_pg_array_t arrays[CLAIM_ARRAYS];
    p->rows = 0;
    for (int k = 0; k < CLAIM_ARRAYS; k++) {
        pb_pg_array_begin(&arrays[k], b, k == CLAIM_SEQS ? PB_PG_OID_INT8 : PB_PG_OID_TEXT);
        for (size_t i = 0; i < n; i++)
            if (ib->state[i] == ST_NEW)
                put_claim_element(b, &arrays[k], (claim_array_t)k, &msgs[i]);
        pb_pg_array_end(&arrays[k], b);
    }
    p->rows = arrays[0].count;
    p->values[0] = ib->cfg->consume_consumer;
    p->lengths[0] = 0;
    p->formats[0] = 0;
    for (int k = 0; k < CLAIM_ARRAYS; k++) { /* the buffer is final: no more growth */
        p->values[1 + k] = pb_pg_array_value(&arrays[k], b);
        p->lengths[1 + k] = pb_pg_array_length(&arrays[k]);
        p->formats[1 + k] = 1;
    }
}

/* Inserts the inbox rows of the batch; messages whose row existed already, or that repeat an
 * earlier message of the batch, become duplicates. */
static pb_status_t claim_batch(pb_inbox_t *ib, const pb_message_t *msgs, size_t n, pb_error_t *err)
{
    claim_params_t p;
    put_claim_arrays(ib, msgs, n, &p);
    if (p.rows == 0)
        return PB_OK;
    PGresult *res = PQexecPrepared(ib->conn, "pb_inbox_claim_batch", CLAIM_PARAMS, p.values,
                                   p.lengths, p.formats, 0);
    pb_status_t st = pb_pg_check(ib->conn, res, PGRES_TUPLES_OK, "inbox insert", err);
    if (st != PB_OK)
        return st;
    /* the new ids, sorted: each may be taken by its first message only */
    size_t n_new = (size_t)PQntuples(res);
    const char **fresh = pb_malloc((n_new ? n_new : 1) * sizeof *fresh);
    bool *taken = pb_malloc(n_new ? n_new : 1);
    for (size_t r = 0; r < n_new; r++) {
        fresh[r] = PQgetvalue(res, (int)r, 0);
        taken[r] = false;
    }
    qsort(fresh, n_new, sizeof *fresh, compare_strings);
    for (size_t i = 0; i < n; i++) {
        if (ib->state[i] != ST_NEW)
            continue;
        const char *key = msgs[i].message_id;
        const char **hit = bsearch(&key, fresh, n_new, sizeof *fresh, compare_strings);
        size_t at = hit ? (size_t)(hit - fresh) : 0;
        if (hit && !taken[at])
            taken[at] = true;
        else
            ib->state[i] = ST_DUP;
    }
    free(taken);
    free(fresh);
    PQclear(res);
    return PB_OK;
}

static void build_metadata(pb_inbox_t *ib, const pb_message_t *m)
{
    pb_buf_t *b = &ib->scratch;
    pb_buf_reset(b);
    pb_buf_puts(b, "{\"message_id\":");
    pb_buf_append_json_string(b, m->message_id);
    pb_buf_puts(b, ",\"type\":");
    if (m->type)
        pb_buf_append_json_string(b, m->type);
    else
        pb_buf_puts(b, "null");
    pb_buf_puts(b, ",\"routing_key\":");
    pb_buf_append_json_string(b, m->routing_key ? m->routing_key : "");
    pb_buf_puts(b, ",\"exchange\":");
    pb_buf_append_json_string(b, m->exchange ? m->exchange : "");
    pb_buf_puts(b, m->redelivered ? ",\"redelivered\":true,\"timestamp\":"
                                  : ",\"redelivered\":false,\"timestamp\":");
    pb_buf_put_int64(b, m->timestamp);
    pb_buf_puts(b, ",\"consumer\":");
    pb_buf_append_json_string(b, ib->cfg->consume_consumer);
    pb_buf_putc(b, '}');
}

static bool send_simple(PGconn *conn, const char *sql)
{
    return PQsendQueryParams(conn, sql, 0, NULL, NULL, NULL, NULL, 0) == 1;
}

/* Copies src into dst of n bytes when it fits whole; false (dst unchanged) when not. */
static bool copy_whole(char *dst, size_t n, const char *src)
{
    size_t len = strlen(src);
    if (len >= n)
        return false;
    memcpy(dst, src, len + 1);
    return true;
}

/* A new transaction holds no trace context. */
static void trace_begin(pb_inbox_t *ib)
{
    ib->trace_known = true;
    ib->trace_parent[0] = ib->trace_state[0] = '\0';
}

/* Whether the handler of m needs the statement that sets its trace context: it has another one
 * than the transaction holds (its own, or none where an earlier message left one), or what the
 * transaction holds is not known. */
static bool trace_differs(const pb_inbox_t *ib, const pb_message_t *m)
{
    const char *tp = m->traceparent ? m->traceparent : "";
    const char *ts = m->traceparent && m->tracestate ? m->tracestate : "";
    return !ib->trace_known || strcmp(ib->trace_parent, tp) != 0 ||
           strcmp(ib->trace_state, ts) != 0;
}

/* Sends the statement that gives the handler of m its trace context in the session settings
 * postbox.traceparent and postbox.tracestate ("" when m has none). */
static bool send_trace(pb_inbox_t *ib, const pb_message_t *m)
{
    const char *tp[2] = {m->traceparent ? m->traceparent : "",
                         m->traceparent && m->tracestate ? m->tracestate : ""};
    if (PQsendQueryPrepared(ib->conn, "pb_inbox_trace", 2, tp, NULL, NULL, 0) != 1)
        return false;
    ib->trace_known = copy_whole(ib->trace_parent, sizeof ib->trace_parent, tp[0]) &&
                      copy_whole(ib->trace_state, sizeof ib->trace_state, tp[1]);
    return true;
}

/* Sends the handler of message i (its inbox row is in already), between a savepoint and its
 * release when asked to. Before the handler, in the same pipeline (no round trip of its own),
 * the statement setting its trace context when the transaction holds another one
 * (trace_differs). Returns how many statements were sent (0: a send failed) and sets
 * *handler_q to the handler's place among them. */
static int send_message(pb_inbox_t *ib, const pb_message_t *m, int handler, bool savepoints,
                        int *handler_q)
{
    const char *name = ib->handler_names[handler];
    build_metadata(ib, m);
    const char *hp[3] = {m->body, m->headers ? m->headers : "{}", ib->scratch.data};
    bool trace = trace_differs(ib, m);
    int q = 0;
    if (savepoints && (q++, !send_simple(ib->conn, "SAVEPOINT " SAVEPOINT)))
        return 0;
    if (trace && (q++, !send_trace(ib, m)))
        return 0;
    *handler_q = q++;
    if (PQsendQueryPrepared(ib->conn, name, 3, hp, NULL, NULL, 0) != 1)
        return 0;
    if (savepoints && (q++, !send_simple(ib->conn, "RELEASE SAVEPOINT " SAVEPOINT)))
        return 0;
    return q;
}

/* Runs the handlers of messages from *next on in pipelines. With savepoints: returns at the
 * first failure with *next just after the failed message (its savepoint rolled back), or with
 * *next = n. Without: a failure sets *aborted, and the whole transaction is lost. */
static pb_status_t run_pipeline(pb_inbox_t *ib, const pb_message_t *msgs, size_t n, size_t *next,
                                bool savepoints, bool *aborted, pb_error_t *err)
{
    PGconn *conn = ib->conn;
    size_t sent_idx[PIPELINE_CHUNK];
    int sent_q[PIPELINE_CHUNK], sent_handler_q[PIPELINE_CHUNK];
    size_t n_sent = 0;
    size_t i = *next;
    if (PQenterPipelineMode(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "cannot enter pipeline mode: %s", PQerrorMessage(conn));
    for (; i < n && n_sent < PIPELINE_CHUNK; i++) {
        if (ib->state[i] != ST_NEW)
            continue;
        int q = send_message(ib, &msgs[i], ib->handler_of[i], savepoints, &sent_handler_q[n_sent]);
        if (q == 0) {
            PQexitPipelineMode(conn);
            return pb_fail(err, PB_TRANSIENT, "send to postgresql: %s", PQerrorMessage(conn));
        }
        sent_q[n_sent] = q;
        sent_idx[n_sent++] = i;
    }
    size_t resume = i;
    if (PQpipelineSync(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "send to postgresql: %s", PQerrorMessage(conn));

    /* per_message results per message, then the sync */
    ssize_t failed_at = -1;
    for (size_t s = 0; s < n_sent; s++) {
        size_t m = sent_idx[s];
        for (int q = 0; q < sent_q[s]; q++) {
            PGresult *res = PQgetResult(conn);
            if (!res)
                return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s",
                               PQerrorMessage(conn));
            ExecStatusType rs = PQresultStatus(res);
            if (rs == PGRES_FATAL_ERROR && failed_at < 0) {
                ib->state[m] = ST_FAILED;
                clean_error(ib->errors[m], sizeof ib->errors[m],
                            q == sent_handler_q[s] ? "handler failed: "
                            : savepoints && q == 0 ? "savepoint failed: "
                                                   : "setting the trace context failed: ",
                            PQresultErrorMessage(res));
                failed_at = (ssize_t)s;
            } else if (rs != PGRES_COMMAND_OK && rs != PGRES_TUPLES_OK &&
                       rs != PGRES_PIPELINE_ABORTED && rs != PGRES_FATAL_ERROR) {
                PQclear(res);
                return pb_fail(err, PB_TRANSIENT, "unexpected pipeline result %s",
                               PQresStatus(rs));
            }
            PQclear(res);
            res = PQgetResult(conn); /* the NULL that ends each query's results */
            PQclear(res);
        }
        if (failed_at < 0 && ib->state[m] == ST_NEW)
            ib->state[m] = ST_DONE;
    }
    PGresult *sync = PQgetResult(conn);
    bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (!synced || PQexitPipelineMode(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "pipeline did not end cleanly: %s", PQerrorMessage(conn));

    if (failed_at >= 0 && !savepoints) {
        *aborted = true; /* the caller rolls back and does the batch again, carefully */
        return PB_OK;
    }
    if (failed_at >= 0) {
        /* the failed message's savepoint is still open: undo its work, keep the batch's */
        pb_status_t st = pb_pg_exec(conn, "ROLLBACK TO SAVEPOINT " SAVEPOINT "; RELEASE SAVEPOINT " SAVEPOINT, err);
        if (st != PB_OK)
            return st;
        /* the rollback may have brought back an earlier message's trace context */
        ib->trace_known = false;
        /* messages after the failure were not run: resume right after it */
        *next = sent_idx[failed_at] + 1;
        for (size_t s = (size_t)failed_at + 1; s < n_sent; s++)
            ib->state[sent_idx[s]] = ST_NEW;
        hold_behind(ib, msgs, n, sent_idx[failed_at]);
        return PB_OK;
    }
    *next = resume;
    return PB_OK;
}

/* PQgetResult, but while it would block the wait hook gets the time (the consumer reads the
 * broker meanwhile). */
static PGresult *next_result(pb_inbox_t *ib)
{
    PGconn *conn = ib->conn;
    while (ib->wait_fn && PQisBusy(conn)) {
        int fd = PQsocket(conn);
        if (fd < 0)
            break; /* PQgetResult reports the broken connection */
        ib->wait_fn(ib->wait_arg, fd);
        if (PQconsumeInput(conn) != 1)
            break;
    }
    return PQgetResult(conn);
}

/* Why message i of the batch cannot reach its handler whole, whatever the retries, into why
 * (false: it can): see screen.h. */
static bool refused(const pb_inbox_t *ib, size_t i, char *why, size_t n)
{
    if (!ib->screen.why[i][0])
        return false;
    snprintf(why, n, "%s", ib->screen.why[i]);
    return true;
}

/* A batch of first deliveries, each with an id and a handler, and each aggregate's sequence
 * numbers consecutive, is likely all new and next in line. */
static bool fits_fast_path(pb_inbox_t *ib, const pb_message_t *msgs, const uint8_t *flags,
                           size_t n)
{
    /* one pipeline without reading in between: as bounded as run_pipeline's chunks */
    if (ib->careful_batches > 0 || ib->slow_batches > 0 || n > PIPELINE_CHUNK)
        return false;
    for (size_t i = 0; i < n; i++)
        /* a redelivery may be a duplicate, or have inbox_failures to clear */
        if (!msgs[i].message_id || !*msgs[i].message_id || msgs[i].redelivered ||
            msgs[i].deliveries > 1 || ib->handler_of[i] < 0)
            return false;
    char why[256];
    for (size_t i = 0; i < n; i++)
        if (refused(ib, i, why, sizeof why))
            return false;
    return ib->seq.n_order == 0 ||
           pb_inbox_seq_fast(&ib->seq, msgs, flags, n, ib->cfg->consume_consumer, &ib->seq_stmt,
                             ib->seq_params);
}

/* The fast path: BEGIN, the claim of every message (it fails if one of them is in the inbox
 * already, so that no handler of a duplicate runs), with sequence numbers the advance of the
 * aggregates' last handled ones (it fails unless each batch follows on its aggregate's last),
 * the handlers without savepoints and COMMIT, all in one pipeline: one round trip. *committed false: nothing was committed, and
 * *handler_failed says whether a handler was the cause. */
static pb_status_t handle_fast(pb_inbox_t *ib, const pb_message_t *msgs, size_t n, bool *committed,
                               bool *handler_failed, pb_error_t *err)
{
    PGconn *conn = ib->conn;
    *committed = *handler_failed = false;
    for (size_t i = 0; i < n; i++)
        ib->state[i] = ST_NEW;
    claim_params_t cp;
    put_claim_arrays(ib, msgs, n, &cp);
    if (PQenterPipelineMode(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "cannot enter pipeline mode: %s", PQerrorMessage(conn));
    /* the flush lets the server work on the claim while the handlers are put together */
    const size_t pre = ib->seq.n_order ? 3 : 2; /* statements before the handlers */
    trace_begin(ib);
    size_t n_handler_q = 0; /* statements of the messages: handlers and trace contexts */
    bool sent = send_simple(conn, "BEGIN") &&
                PQsendQueryPrepared(conn, "pb_inbox_claim_all", CLAIM_PARAMS, cp.values,
                                    cp.lengths, cp.formats, 0) == 1 &&
                (pre == 2 || PQsendQueryPrepared(conn, ib->seq_stmt, 5, ib->seq_params,
                                                 NULL, NULL, 0) == 1) &&
                PQflush(conn) == 0;
    for (size_t i = 0; sent && i < n; i++) {
        int handler_q, q = send_message(ib, &msgs[i], ib->handler_of[i], false, &handler_q);
        n_handler_q += (size_t)q;
        sent = q > 0;
    }
    if (!sent || !send_simple(conn, "COMMIT") || PQpipelineSync(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "send to postgresql: %s", PQerrorMessage(conn));

    /* BEGIN, the claim, (the advance,) n handlers (each after its trace context, if any),
     * COMMIT: each a result and a NULL; then the sync */
    const size_t total = n_handler_q + pre + 1;
    ssize_t failed_at = -1;
    char why[256] = "";
    bool commit_ok = false;
    for (size_t q = 0; q < total; q++) {
        PGresult *res = next_result(ib);
        if (!res)
            return pb_fail(err, PB_TRANSIENT, "postgresql connection lost: %s",
                           PQerrorMessage(conn));
        ExecStatusType rs = PQresultStatus(res);
        if (rs == PGRES_FATAL_ERROR && failed_at < 0) {
            failed_at = (ssize_t)q;
            clean_error(why, sizeof why, "", PQresultErrorMessage(res));
        } else if (rs == PGRES_COMMAND_OK || rs == PGRES_TUPLES_OK) {
            /* a COMMIT of an aborted transaction says ROLLBACK */
            if (q == total - 1)
                commit_ok = strcmp(PQcmdStatus(res), "COMMIT") == 0;
        } else if (rs != PGRES_PIPELINE_ABORTED && rs != PGRES_FATAL_ERROR) {
            PQclear(res);
            return pb_fail(err, PB_TRANSIENT, "unexpected pipeline result %s", PQresStatus(rs));
        }
        PQclear(res);
        if ((res = next_result(ib)) != NULL) { /* the NULL that ends each statement's results */
            PQclear(res);
            return pb_fail(err, PB_TRANSIENT, "unexpected second result in the pipeline");
        }
    }
    PGresult *sync = next_result(ib);
    bool synced = sync && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    if (!synced || PQexitPipelineMode(conn) != 1)
        return pb_fail(err, PB_TRANSIENT, "pipeline did not end cleanly: %s", PQerrorMessage(conn));
    if (failed_at < 0 && commit_ok) {
        *committed = true;
        return PB_OK;
    }
    /* a failure aborted the transaction (or COMMIT failed, which ended it) */
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        pb_status_t st = pb_pg_exec(conn, "ROLLBACK", err);
        if (st != PB_OK)
            return st;
    }
    *handler_failed = failed_at >= (ssize_t)pre && (size_t)failed_at < n_handler_q + pre;
    log_debug(FAC, "batch of %zu not committed on the fast path (%s: %s): doing it the careful way",
              n, failed_at == 1 ? "inbox claim" : failed_at == 2 && pre == 3 ? "sequence numbers"
                 : *handler_failed ? "handler" : "transaction",
              *why ? why : "no error");
    return PB_OK;
}

/* Records one failure; decides between redelivery later and the dead-letter table. */
static pb_status_t settle_failure(pb_inbox_t *ib, const pb_message_t *m, int state, const char *error,
                                  pb_inbox_verdict_t *v, pb_inbox_counts_t *counts, pb_error_t *err)
{
    const pb_config_t *cfg = ib->cfg;
    int attempts = 0;
    pb_status_t st;
    /* the text reaches PostgreSQL: one message's error must not fail the statement that
     * records it (SQLSTATE 22021), which would stop the consumer */
    char text[sizeof *ib->errors];
    pb_text_copy(text, sizeof text, error);
    error = text;
    if (state == ST_FAILED || state == ST_REFUSED || state == ST_OVERDELIVERED) {
        /* give the inbox row back: the retry must not look like a duplicate, and the dead
         * letter marks it unprocessed */
        const char *rp[2] = {cfg->consume_consumer, m->message_id};
        PGresult *rr = PQexecPrepared(ib->conn, "pb_inbox_release", 2, rp, NULL, NULL, 0);
        if ((st = pb_pg_check(ib->conn, rr, PGRES_TUPLES_OK, "release inbox row", err)) != PB_OK)
            return st;
        PQclear(rr);
    }
    if (state == ST_OVERDELIVERED)
        attempts = m->deliveries - 1; /* deliveries that never reached a commit */
    if (state == ST_FAILED) {
        const char *fp[3] = {cfg->consume_consumer, m->message_id, error};
        PGresult *res = PQexecPrepared(ib->conn, "pb_inbox_fail", 3, fp, NULL, NULL, 0);
        if ((st = pb_pg_check(ib->conn, res, PGRES_TUPLES_OK, "record handler failure", err)) != PB_OK)
            return st;
        attempts = atoi(PQgetvalue(res, 0, 0));
        PQclear(res);
        counts->failed++;
        if (attempts < cfg->consume_max_attempts) {
            v->action = PB_INBOX_REQUEUE;
            v->delay_ms = pb_backoff_ms(attempts, cfg->consume_backoff_base,
                                        cfg->consume_backoff_cap, pb_random_unit());
            log_warn(FAC, "message %s (%s) attempt %d failed, redelivery in %lld ms: %s",
                     m->message_id, m->type ? m->type : "no type", attempts,
                     (long long)v->delay_ms, error);
            return PB_OK;
        }
    }
    char attempts_text[16];
    snprintf(attempts_text, sizeof attempts_text, "%d", attempts);
    /* inbox_dead.headers is jsonb: headers that are not a JSON object (a Redis entry's field
     * can hold any text) are kept as a string under one key */
    pb_buf_t kept = {0};
    const char *headers = m->headers ? m->headers : "{}";
    json_t *parsed = json_loads(headers, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(parsed)) {
        pb_buf_puts(&kept, "{\"postbox_unparsed_headers\":");
        pb_buf_append_json_string(&kept, headers);
        pb_buf_putc(&kept, '}');
        headers = kept.data;
    }
    json_decref(parsed);
    bool numbered = pb_inbox_seq_has(m);
    char seq_text[24];
    snprintf(seq_text, sizeof seq_text, "%lld", (long long)m->sequence);
    const char *dp[12] = {cfg->consume_consumer, m->message_id, m->type, m->exchange,
                          m->routing_key, headers, m->body, error, attempts_text,
                          numbered ? pb_inbox_seq_type(m) : NULL,
                          numbered ? m->aggregate_id : NULL, numbered ? seq_text : NULL};
    int lengths[12] = {0, 0, 0, 0, 0, 0, (int)m->body_len, 0, 0, 0, 0, 0};
    int formats[12] = {0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
    PGresult *res = PQexecPrepared(ib->conn, "pb_inbox_dead", 12, dp, lengths, formats, 0);
    pb_buf_free(&kept);
    if ((st = pb_pg_check(ib->conn, res, PGRES_COMMAND_OK, "write inbox dead letter", err)) != PB_OK)
        return st;
    PQclear(res);
    counts->dead++;
    v->action = PB_INBOX_DEAD;
    log_warn(FAC, "message %s (%s) moved to inbox_dead after %d attempts: %s",
             m->message_id ? m->message_id : "(no id)", m->type ? m->type : "no type", attempts,
             error);
    return PB_OK;
}

/* Clears the failure records of redelivered messages that have now been handled. */
static pb_status_t clear_failures(pb_inbox_t *ib, const pb_message_t *msgs, size_t n, pb_error_t *err)
{
    pb_buf_t *b = &ib->scratch;
    pb_buf_reset(b);
    pb_buf_putc(b, '{');
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (ib->state[i] != ST_DONE || !msgs[i].redelivered)
            continue;
        if (any)
            pb_buf_putc(b, ',');
        pb_buf_append_array_text(b, msgs[i].message_id);
        any = true;
    }
    pb_buf_putc(b, '}');
    if (!any)
        return PB_OK;
    const char *params[2] = {ib->cfg->consume_consumer, b->data};
    PGresult *res = PQexecPrepared(ib->conn, "pb_inbox_clear", 2, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(ib->conn, res, PGRES_COMMAND_OK, "clear inbox failures", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

/* Gives back the inbox rows of the messages held behind a failure (claimed with the batch), so
 * that they are not taken for duplicates when they run. */
static pb_status_t release_held(pb_inbox_t *ib, const pb_message_t *msgs, size_t n, pb_error_t *err)
{
    pb_buf_t *b = &ib->scratch;
    pb_buf_reset(b);
    pb_buf_putc(b, '{');
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (ib->state[i] != ST_HELD)
            continue;
        if (k++)
            pb_buf_putc(b, ',');
        pb_buf_append_array_text(b, msgs[i].message_id);
    }
    pb_buf_putc(b, '}');
    if (k == 0)
        return PB_OK;
    const char *params[2] = {ib->cfg->consume_consumer, b->data};
    PGresult *res = PQexecPrepared(ib->conn, "pb_inbox_release_many", 2, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(ib->conn, res, PGRES_COMMAND_OK, "release held inbox rows", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}

static pb_status_t handle_in_tx(pb_inbox_t *ib, const pb_message_t *msgs, const uint8_t *flags,
                                size_t n, pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                                bool savepoints, bool *aborted, pb_error_t *err)
{
    pb_status_t st;
    for (size_t i = 0; i < n; i++) {
        verdicts[i] = (pb_inbox_verdict_t){PB_INBOX_DONE, 0, 0};
        ib->errors[i][0] = '\0';
        ib->state[i] = msgs[i].message_id && *msgs[i].message_id ? ST_NEW : ST_NO_ID;
        ib->handler_of[i] = find_handler(ib, msgs[i].type);
    }
    if ((st = pb_inbox_seq_check(&ib->seq, ib->conn, ib->cfg->consume_consumer, msgs, flags, n,
                                 err)) != PB_OK)
        return st;
    for (size_t i = 0; i < n; i++) {
        if (ib->seq.cls[i] == PB_SEQ_EARLY)
            ib->state[i] = ST_EARLY;
    }
    if ((st = claim_batch(ib, msgs, n, err)) != PB_OK)
        return st;
    /* ib->settled is free until the sequences are stored: the new ids to ask about */
    for (size_t i = 0; i < n; i++)
        ib->settled[i] = ib->state[i] == ST_NEW;
    if ((st = pb_inbox_seq_purged(&ib->seq, ib->conn, ib->cfg->consume_consumer, msgs, n,
                                  ib->settled, err)) != PB_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        if (ib->settled[i])
            ib->state[i] = ST_DUP; /* handled before the purge deleted its row */
    for (size_t i = 0; i < n; i++) {
        char why[512];
        /* new to the inbox, yet handed out again and again: each consumer that took it died
         * (or lost its connection) before its transaction committed */
        if (ib->state[i] == ST_NEW && msgs[i].deliveries > ib->cfg->consume_max_attempts) {
            ib->state[i] = ST_OVERDELIVERED;
            snprintf(why, sizeof why, "delivered %d times (consume.max_attempts %lld) and never "
                                      "acknowledged: each consumer that took it stopped before "
                                      "its transaction committed", msgs[i].deliveries,
                     (long long)ib->cfg->consume_max_attempts);
            clean_error(ib->errors[i], sizeof ib->errors[i], "", why);
            continue;
        }
        if (ib->state[i] == ST_NEW && refused(ib, i, why, sizeof why)) {
            ib->state[i] = ST_REFUSED;
            clean_error(ib->errors[i], sizeof ib->errors[i], "", why);
        }
        if (ib->state[i] == ST_NEW && ib->handler_of[i] < 0) {
            ib->state[i] = ST_FAILED;
            snprintf(why, sizeof why,
                     "no handler for message type \"%s\" (set [handlers] or consume.handler)",
                     msgs[i].type ? msgs[i].type : "");
            clean_error(ib->errors[i], sizeof ib->errors[i], "", why);
        }
    }
    for (size_t i = 0; i < n; i++)
        if (ib->state[i] == ST_FAILED)
            hold_behind(ib, msgs, n, i);
    for (size_t next = 0; next < n && !*aborted;)
        if ((st = run_pipeline(ib, msgs, n, &next, savepoints, aborted, err)) != PB_OK)
            return st;
    if (*aborted)
        return PB_OK;
    for (size_t i = 0; i < n; i++) {
        switch (ib->state[i]) {
        case ST_DONE:
            counts->processed++;
            if (ib->seq.disorder[i] == PB_DISORDER_NONE)
                break;
            if (ib->seq.disorder[i] == PB_DISORDER_LATE)
                counts->late++;
            else
                counts->gap_skipped++;
            pb_disorder_log(&ib->disorder, ib->cfg->consume_consumer, &msgs[i],
                            (pb_seq_disorder_t)ib->seq.disorder[i], ib->seq.base[i],
                            pb_monotonic_ms());
            break;
        case ST_DUP:
            counts->duplicates++;
            log_info_f(FAC,
                       PB_FIELDS(PB_LF_STR("consumer", ib->cfg->consume_consumer),
                                 PB_LF_STR("message_id", msgs[i].message_id),
                                 PB_LF_STR("message_type", msgs[i].type)),
                       "duplicate message %s (%s) acknowledged without running the handler",
                       msgs[i].message_id, msgs[i].type ? msgs[i].type : "no type");
            break;
        case ST_NO_ID: {
            char why[160];
            snprintf(why, sizeof why, "message has no id (%s is empty)",
                     *ib->cfg->consume_message_id_header ? ib->cfg->consume_message_id_header
                                                         : "the message_id property");
            if ((st = settle_failure(ib, &msgs[i], ST_NO_ID, why, &verdicts[i], counts, err)))
                return st;
            break;
        }
        case ST_FAILED:
        case ST_REFUSED:
        case ST_OVERDELIVERED:
            if ((st = settle_failure(ib, &msgs[i], (int)ib->state[i], ib->errors[i], &verdicts[i],
                                     counts, err)) != PB_OK)
                return st;
            break;
        case ST_HELD:
            verdicts[i] = (pb_inbox_verdict_t){PB_INBOX_HOLD, 0, 0};
            break;
        case ST_EARLY:
            verdicts[i] = (pb_inbox_verdict_t){PB_INBOX_HOLD, 0, ib->seq.expected[i]};
            break;
        default:
            break;
        }
    }
    if ((st = release_held(ib, msgs, n, err)) != PB_OK)
        return st;
    for (size_t i = 0; i < n; i++)
        ib->settled[i] = pb_inbox_settles(&verdicts[i]);
    if ((st = pb_inbox_seq_store(&ib->seq, ib->conn, ib->cfg->consume_consumer, msgs, n,
                                 ib->settled, err)) != PB_OK)
        return st;
    return clear_failures(ib, msgs, n, err);
}

/* Runs a statement whose parameters are (consumer, message_id[, message_type]), nparams of
 * them; *rows receives the row count. */
static pb_status_t exec_msg(pb_inbox_t *ib, const char *stmt, int nparams, const pb_message_t *m,
                            ExecStatusType expected, int *rows, pb_error_t *err)
{
    const char *p[3] = {ib->cfg->consume_consumer, m->message_id, m->type};
    PGresult *res = PQexecPrepared(ib->conn, stmt, nparams, p, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(ib->conn, res, expected, stmt, err);
    if (st != PB_OK)
        return st;
    if (rows)
        *rows = expected == PGRES_TUPLES_OK ? PQntuples(res) : atoi(PQcmdTuples(res));
    PQclear(res);
    return PB_OK;
}

/* Runs the handler of m in its own transaction, marking the inbox row done with it. */
static pb_status_t run_handler_alone(pb_inbox_t *ib, const pb_message_t *m, int handler,
                                     bool *ok, pb_error_t *err)
{
    pb_status_t st = pb_pg_exec(ib->conn, "BEGIN", err);
    if (st != PB_OK)
        return st;
    if (m->traceparent) { /* a round trip of its own, but commit_inbox_first has many */
        const char *tp[2] = {m->traceparent, m->tracestate ? m->tracestate : ""};
        PGresult *tr = PQexecPrepared(ib->conn, "pb_inbox_trace", 2, tp, NULL, NULL, 0);
        if ((st = pb_pg_check(ib->conn, tr, PGRES_TUPLES_OK, "set the trace context", err)) != PB_OK)
            return st;
        PQclear(tr);
    }
    build_metadata(ib, m);
    const char *hp[3] = {m->body, m->headers ? m->headers : "{}", ib->scratch.data};
    PGresult *res = PQexecPrepared(ib->conn, ib->handler_names[handler], 3, hp, NULL, NULL, 0);
    ExecStatusType rs = PQresultStatus(res);
    *ok = rs == PGRES_COMMAND_OK || rs == PGRES_TUPLES_OK;
    if (!*ok) {
        clean_error(ib->errors[0], sizeof ib->errors[0], "handler failed: ", PQresultErrorMessage(res));
        PQclear(res);
        if (PQstatus(ib->conn) != CONNECTION_OK)
            return pb_fail(err, PB_TRANSIENT, "postgresql connection lost during the handler");
        return pb_pg_exec(ib->conn, "ROLLBACK", err);
    }
    PQclear(res);
    if ((st = exec_msg(ib, "pb_inbox_done", 2, m, PGRES_TUPLES_OK, NULL, err)) != PB_OK)
        return st;
    return pb_pg_exec(ib->conn, "COMMIT", err);
}

/* Whether an earlier message of msgs[i]'s aggregate failed or is held (commit_inbox_first). */
static bool behind_failure(const pb_message_t *msgs, const pb_inbox_verdict_t *verdicts, size_t i)
{
    for (size_t j = 0; msgs[i].aggregate_id && j < i; j++)
        if (!pb_inbox_settles(&verdicts[j]) && pb_inbox_same_aggregate(&msgs[i], &msgs[j]))
            return true;
    return false;
}

/* commit_inbox_first: for handlers with effects outside the database. Each message: commit the
 * inbox row, then run the handler in its own transaction. A crash in between leaves the row, so
 * the redelivery is taken as a duplicate: the handler runs at most once, never twice. A handler
 * that reports a failure gives its row back so that the retry can run. */
static pb_status_t handle_commit_first(pb_inbox_t *ib, const pb_message_t *msgs, size_t n,
                                       pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                                       pb_error_t *err)
{
    pb_status_t st;
    for (size_t i = 0; i < n; i++) {
        const pb_message_t *m = &msgs[i];
        verdicts[i] = (pb_inbox_verdict_t){PB_INBOX_DONE, 0, 0};
        if (behind_failure(msgs, verdicts, i)) {
            verdicts[i].action = PB_INBOX_HOLD;
            continue;
        }
        if (!m->message_id || !*m->message_id) {
            if ((st = pb_pg_exec(ib->conn, "BEGIN", err)) != PB_OK ||
                (st = settle_failure(ib, m, ST_NO_ID, "message has no id", &verdicts[i], counts,
                                     err)) != PB_OK ||
                (st = pb_pg_exec(ib->conn, "COMMIT", err)) != PB_OK)
                return st;
            continue;
        }
        int fresh = 0;
        if ((st = exec_msg(ib, "pb_inbox_claim", 3, m, PGRES_TUPLES_OK, &fresh, err)) != PB_OK)
            return st;
        if (!fresh) {
            counts->duplicates++;
            log_info_f(FAC,
                       PB_FIELDS(PB_LF_STR("consumer", ib->cfg->consume_consumer),
                                 PB_LF_STR("message_id", m->message_id),
                                 PB_LF_STR("message_type", m->type)),
                       "duplicate message %s acknowledged without running the handler",
                       m->message_id);
            continue;
        }
        int handler = find_handler(ib, m->type);
        bool ok = false;
        char why[512];
        if (refused(ib, i, why, sizeof why)) {
            clean_error(ib->errors[0], sizeof ib->errors[0], "", why);
            if ((st = pb_pg_exec(ib->conn, "BEGIN", err)) != PB_OK ||
                (st = settle_failure(ib, m, ST_REFUSED, ib->errors[0], &verdicts[i], counts,
                                     err)) != PB_OK ||
                (st = pb_pg_exec(ib->conn, "COMMIT", err)) != PB_OK)
                return st;
            continue;
        }
        if (handler < 0) {
            snprintf(why, sizeof why, "no handler for message type \"%s\"", m->type ? m->type : "");
            clean_error(ib->errors[0], sizeof ib->errors[0], "", why);
        }
        else if ((st = run_handler_alone(ib, m, handler, &ok, err)) != PB_OK)
            return st;
        if (ok) {
            counts->processed++;
            continue;
        }
        if ((st = pb_pg_exec(ib->conn, "BEGIN", err)) != PB_OK ||
            (st = settle_failure(ib, m, ST_FAILED, ib->errors[0], &verdicts[i], counts, err)) != PB_OK ||
            (st = pb_pg_exec(ib->conn, "COMMIT", err)) != PB_OK)
            return st;
    }
    return PB_OK;
}

pb_status_t pb_inbox_handle(pb_inbox_t *ib, const pb_message_t *msgs, const uint8_t *flags, size_t n,
                            pb_inbox_verdict_t *verdicts, pb_inbox_counts_t *counts,
                            pb_error_t *err)
{
    if (n == 0)
        return PB_OK;
    reserve(ib, n);
    /* from here on the inbox sees the messages as PostgreSQL can take them */
    pb_screen_batch(&ib->screen, msgs, n, ib->cfg->consume_max_message_size);
    msgs = ib->screen.safe;
    if (ib->cfg->consume_commit_inbox_first)
        return handle_commit_first(ib, msgs, n, verdicts, counts, err);
    pb_status_t st;
    for (size_t i = 0; i < n; i++)
        ib->handler_of[i] = find_handler(ib, msgs[i].type);
    pb_inbox_seq_group(&ib->seq, msgs, n);
    if (fits_fast_path(ib, msgs, flags, n)) {
        bool committed, handler_failed;
        if ((st = handle_fast(ib, msgs, n, &committed, &handler_failed, err)) != PB_OK) {
            if (PQstatus(ib->conn) == CONNECTION_OK)
                PQclear(PQexec(ib->conn, "ROLLBACK"));
            return st;
        }
        if (committed) {
            for (size_t i = 0; i < n; i++)
                verdicts[i] = (pb_inbox_verdict_t){PB_INBOX_DONE, 0, 0};
            counts->processed += n;
            return PB_OK;
        }
        /* failures and duplicates come in runs: the next batches go the careful way too */
        if (handler_failed)
            ib->careful_batches = CAREFUL_BATCHES + 1;
        else
            ib->slow_batches = CAREFUL_BATCHES + 1;
    }
    if (ib->slow_batches > 0)
        ib->slow_batches--;
    /* Optimistic first: no savepoints (each costs a subtransaction per message). A failing
     * handler then aborts the whole transaction, which is done again with savepoints, and the
     * next batches keep them for a while, since failures tend to come in runs. */
    pb_inbox_counts_t local = {0};
    bool savepoints = ib->careful_batches > 0;
    if (savepoints)
        ib->careful_batches--;
    st = pb_pg_exec(ib->conn, "BEGIN", err);
    if (st != PB_OK)
        return st;
    trace_begin(ib);
    bool aborted = false;
    st = handle_in_tx(ib, msgs, flags, n, verdicts, &local, savepoints, &aborted, err);
    if (st == PB_OK && aborted) {
        log_debug(FAC, "a handler failed in a batch without savepoints: doing it again with them");
        ib->careful_batches = CAREFUL_BATCHES;
        local = (pb_inbox_counts_t){0};
        aborted = false;
        trace_begin(ib);
        if ((st = pb_pg_exec(ib->conn, "ROLLBACK", err)) == PB_OK &&
            (st = pb_pg_exec(ib->conn, "BEGIN", err)) == PB_OK)
            st = handle_in_tx(ib, msgs, flags, n, verdicts, &local, true, &aborted, err);
    }
    if (st == PB_OK)
        st = pb_pg_exec(ib->conn, "COMMIT", err);
    if (st != PB_OK) {
        if (PQstatus(ib->conn) == CONNECTION_OK)
            PQclear(PQexec(ib->conn, "ROLLBACK"));
        return st;
    }
    counts->processed += local.processed;
    counts->duplicates += local.duplicates;
    counts->failed += local.failed;
    counts->dead += local.dead;
    counts->late += local.late;
    counts->gap_skipped += local.gap_skipped;
    return PB_OK;
}
