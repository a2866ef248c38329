#include "inbox/sequence.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "inbox/inbox.h"
#include "store/pg.h"

#define FAC "inbox"


void pb_inbox_seq_free(pb_inbox_seq_t *sq)
{
    free(sq->order);
    free(sq->base);
    free(sq->expected);
    free(sq->cls);
    free(sq->disorder);
    free(sq->purged);
    for (int k = 0; k < 4; k++)
        pb_buf_free(&sq->text[k]);
    bool wait = sq->wait_for_gaps;
    memset(sq, 0, sizeof *sq);
    sq->wait_for_gaps = wait;
}

typedef struct entry {
    const char *type, *id;
    size_t index;
} entry_t;

static int compare_entries(const void *pa, const void *pb)
{
    const entry_t *a = pa, *b = pb;
    int c = strcmp(a->type, b->type);
    if (!c)
        c = strcmp(a->id, b->id);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

#define type_of pb_inbox_seq_type

size_t pb_inbox_seq_group(pb_inbox_seq_t *sq, const pb_message_t *msgs, size_t n)
{
    if (n > sq->cap) {
        sq->order = pb_realloc(sq->order, n * sizeof *sq->order);
        sq->base = pb_realloc(sq->base, n * sizeof *sq->base);
        sq->expected = pb_realloc(sq->expected, n * sizeof *sq->expected);
        sq->cls = pb_realloc(sq->cls, n);
        sq->disorder = pb_realloc(sq->disorder, n);
        sq->purged = pb_realloc(sq->purged, n);
        sq->cap = n;
    }
    memset(sq->cls, PB_SEQ_NONE, n);
    memset(sq->purged, 0, n);
    memset(sq->disorder, PB_DISORDER_NONE, n);
    entry_t *e = pb_malloc((n ? n : 1) * sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (pb_inbox_seq_has(&msgs[i]))
            e[k++] = (entry_t){type_of(&msgs[i]), msgs[i].aggregate_id, i};
    qsort(e, k, sizeof *e, compare_entries);
    for (size_t j = 0; j < k; j++)
        sq->order[j] = e[j].index;
    free(e);
    sq->n_order = k;
    return k;
}

/* Whether order[j] starts a new aggregate. */
static bool starts_group(const pb_inbox_seq_t *sq, const pb_message_t *msgs, size_t j)
{
    return j == 0 || !pb_inbox_same_aggregate(&msgs[sq->order[j]], &msgs[sq->order[j - 1]]);
}

static void reset_arrays(pb_inbox_seq_t *sq, int count)
{
    for (int k = 0; k < count; k++) {
        pb_buf_reset(&sq->text[k]);
        pb_buf_putc(&sq->text[k], '{');
    }
}

static void put_text(pb_buf_t *b, const char *s)
{
    if (b->len > 1)
        pb_buf_putc(b, ',');
    pb_buf_append_array_text(b, s);
}

static void put_number(pb_buf_t *b, int64_t v)
{
    if (b->len > 1)
        pb_buf_putc(b, ',');
    pb_buf_put_int64(b, v);
}

static void close_arrays(pb_inbox_seq_t *sq, int count)
{
    for (int k = 0; k < count; k++)
        pb_buf_putc(&sq->text[k], '}');
}

bool pb_inbox_seq_fast(pb_inbox_seq_t *sq, const pb_message_t *msgs, const uint8_t *flags,
                       size_t n, const char *consumer, const char **stmt, const char *params[5])
{
    (void)n;
    reset_arrays(sq, 4);
    for (size_t j = 0; j < sq->n_order; j++) {
        size_t i = sq->order[j];
        if (flags && flags[i])
            return false;
        bool first = starts_group(sq, msgs, j);
        int64_t prev = first ? 0 : msgs[sq->order[j - 1]].sequence;
        if (!first && (sq->wait_for_gaps ? msgs[i].sequence != prev + 1 : msgs[i].sequence <= prev))
            return false; /* a gap, a repeat or a step back: the careful way tells which */
        if (first) {
            put_text(&sq->text[0], type_of(&msgs[i]));
            put_text(&sq->text[1], msgs[i].aggregate_id);
            put_number(&sq->text[2], msgs[i].sequence);
        }
        if (j + 1 == sq->n_order || starts_group(sq, msgs, j + 1))
            put_number(&sq->text[3], msgs[i].sequence);
    }
    close_arrays(sq, 4);
    *stmt = sq->wait_for_gaps ? "pb_inbox_seq_advance" : "pb_inbox_seq_advance_past";
    params[0] = consumer;
    for (int k = 0; k < 4; k++)
        params[k + 1] = sq->text[k].data;
    return true;
}

/* The aggregates of the batch as parameter arrays (types, ids), one element per group. */
static size_t put_groups(pb_inbox_seq_t *sq, const pb_message_t *msgs)
{
    reset_arrays(sq, 2);
    size_t groups = 0;
    for (size_t j = 0; j < sq->n_order; j++) {
        if (!starts_group(sq, msgs, j))
            continue;
        put_text(&sq->text[0], type_of(&msgs[sq->order[j]]));
        put_text(&sq->text[1], msgs[sq->order[j]].aggregate_id);
        groups++;
    }
    close_arrays(sq, 2);
    return groups;
}

pb_status_t pb_inbox_seq_check(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                               const pb_message_t *msgs, const uint8_t *flags, size_t n,
                               pb_error_t *err)
{
    (void)n;
    if (sq->n_order == 0)
        return PB_OK;
    size_t groups = put_groups(sq, msgs);
    const char *params[3] = {consumer, sq->text[0].data, sq->text[1].data};
    PGresult *res = PQexecPrepared(conn, "pb_inbox_seq_get", 3, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read inbox sequences", err);
    if (st != PB_OK)
        return st;
    int64_t *last = pb_malloc(groups * sizeof *last);
    bool *purged = pb_malloc(groups);
    memset(last, 0, groups * sizeof *last);
    memset(purged, 0, groups);
    for (int r = 0; r < PQntuples(res); r++) {
        long long o = strtoll(PQgetvalue(res, r, 0), NULL, 10);
        if (o >= 1 && (size_t)o <= groups) {
            last[o - 1] = strtoll(PQgetvalue(res, r, 1), NULL, 10);
            purged[o - 1] = PQgetvalue(res, r, 2)[0] == 't';
        }
    }
    PQclear(res);
    size_t g = 0;
    int64_t base = 0, expected = 1;
    bool folded = false;
    for (size_t j = 0; j < sq->n_order; j++) {
        size_t i = sq->order[j];
        int64_t seq = msgs[i].sequence;
        if (starts_group(sq, msgs, j)) {
            folded = purged[g];
            base = last[g++];
            expected = base + 1;
        }
        sq->base[i] = base;
        sq->purged[i] = folded;
        if (flags && (flags[i] & PB_INBOX_SKIP_GAP) && seq > expected) {
            char missing[48];
            if (seq - 1 > expected)
                snprintf(missing, sizeof missing, "%lld..%lld", (long long)expected,
                         (long long)(seq - 1));
            else
                snprintf(missing, sizeof missing, "%lld", (long long)expected);
            log_warn(FAC, "aggregate %s/%s: gave up waiting for sequence %s (consume.gap_timeout), "
                          "going on at %lld with message %s",
                     type_of(&msgs[i]), msgs[i].aggregate_id, missing, (long long)seq,
                     msgs[i].message_id ? msgs[i].message_id : "(no id)");
            expected = seq;
            sq->disorder[i] = PB_DISORDER_GAP_SKIPPED;
        }
        if (seq <= base) {
            sq->cls[i] = PB_SEQ_LATE;
            sq->disorder[i] = PB_DISORDER_LATE;
        } else if (seq == expected || !sq->wait_for_gaps) {
            sq->cls[i] = PB_SEQ_NEXT;
            expected = seq + 1;
        } else if (seq < expected) {
            sq->cls[i] = PB_SEQ_NEXT; /* a repeat within the batch: the inbox row decides */
        } else {
            sq->cls[i] = PB_SEQ_EARLY;
            sq->expected[i] = expected;
        }
    }
    free(last);
    free(purged);
    return PB_OK;
}

pb_status_t pb_inbox_seq_purged(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                                const pb_message_t *msgs, size_t n, bool *look, pb_error_t *err)
{
    size_t *asked = pb_malloc((n ? n : 1) * sizeof *asked);
    size_t k = 0;
    reset_arrays(sq, 4);
    for (size_t i = 0; i < n; i++) {
        if (look[i] && sq->cls[i] == PB_SEQ_LATE && sq->purged[i] && msgs[i].timestamp > 0) {
            put_text(&sq->text[0], type_of(&msgs[i]));
            put_text(&sq->text[1], msgs[i].aggregate_id);
            put_number(&sq->text[2], msgs[i].sequence);
            put_number(&sq->text[3], msgs[i].timestamp);
            asked[k++] = i;
        }
        look[i] = false;
    }
    close_arrays(sq, 4);
    if (k == 0) {
        free(asked);
        return PB_OK;
    }
    const char *params[5] = {consumer, sq->text[0].data, sq->text[1].data, sq->text[2].data,
                             sq->text[3].data};
    PGresult *res = PQexecPrepared(conn, "pb_inbox_seq_purged", 5, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read purged sequences", err);
    if (st == PB_OK) {
        for (int r = 0; r < PQntuples(res); r++) {
            long long o = strtoll(PQgetvalue(res, r, 0), NULL, 10);
            if (o >= 1 && (size_t)o <= k)
                look[asked[o - 1]] = true;
        }
        PQclear(res);
    }
    free(asked);
    return st;
}

pb_status_t pb_inbox_seq_store(pb_inbox_seq_t *sq, PGconn *conn, const char *consumer,
                               const pb_message_t *msgs, size_t n, const bool *settled,
                               pb_error_t *err)
{
    (void)n;
    reset_arrays(sq, 3);
    size_t rows = 0;
    int64_t high = 0;
    for (size_t j = 0; j < sq->n_order; j++) {
        size_t i = sq->order[j];
        if (starts_group(sq, msgs, j))
            high = sq->base[i];
        if (settled[i] && msgs[i].sequence > high)
            high = msgs[i].sequence;
        bool last_of_group = j + 1 == sq->n_order || starts_group(sq, msgs, j + 1);
        if (last_of_group && high > sq->base[i]) {
            put_text(&sq->text[0], type_of(&msgs[i]));
            put_text(&sq->text[1], msgs[i].aggregate_id);
            put_number(&sq->text[2], high);
            rows++;
        }
    }
    close_arrays(sq, 3);
    if (rows == 0)
        return PB_OK;
    const char *params[4] = {consumer, sq->text[0].data, sq->text[1].data, sq->text[2].data};
    PGresult *res = PQexecPrepared(conn, "pb_inbox_seq_put", 4, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(conn, res, PGRES_COMMAND_OK, "write inbox sequences", err);
    if (st == PB_OK)
        PQclear(res);
    return st;
}
