#include "consume/hold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"

/* One held message: a copy whose strings live in mem. */
typedef struct item {
    pb_message_t msg;
    char *mem;
    size_t bytes; /* of mem, for the byte bound */
    uint64_t arrival;
    bool in_flight; /* handed out by pb_hold_take, its verdict is pending */
    bool retry;     /* its handler failed: goes on at due_ms */
    int64_t due_ms;
} item_t;

typedef struct agg {
    char *key;
    item_t *items; /* sorted by (sequence, arrival) */
    size_t n, cap;
    int64_t waiting_for; /* the sequence number the inbox expects next (0: none) */
    int64_t gap_since;   /* since when it waits for it */
    bool ready;          /* may go on at the next take */
    /* during a settle */
    bool touched, progress;
    int64_t expected;
} agg_t;

struct pb_hold {
    int64_t gap_timeout_ms;
    agg_t **aggs;
    size_t n_aggs, cap_aggs;
    size_t *slots; /* open addressing over aggs: index + 1, 0 = empty */
    size_t n_slots;
    size_t count;
    size_t bytes; /* of the held copies */
    uint64_t arrivals;
    pb_buf_t key; /* scratch */
};

/* ---- keys and the aggregate table ------------------------------------------------------------ */

/* The order key: aggregate_type US aggregate_id; without aggregate_id the message is its own
 * aggregate (RS and its tag). */
static const char *key_of(pb_hold_t *h, const pb_message_t *m)
{
    pb_buf_reset(&h->key);
    if (m->aggregate_id) {
        pb_buf_puts(&h->key, m->aggregate_type ? m->aggregate_type : "");
        pb_buf_putc(&h->key, '\x1f');
        pb_buf_puts(&h->key, m->aggregate_id);
    } else {
        pb_buf_putc(&h->key, '\x1e');
        pb_buf_put_int64(&h->key, (int64_t)m->tag);
    }
    return h->key.data;
}

static uint64_t hash_of(const char *s)
{
    uint64_t x = 14695981039346656037ull;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        x = (x ^ *p) * 1099511628211ull;
    return x;
}

static void rebuild_slots(pb_hold_t *h)
{
    size_t want = 64;
    while (want < h->n_aggs * 2)
        want *= 2;
    if (want != h->n_slots) {
        free(h->slots);
        h->slots = pb_malloc(want * sizeof *h->slots);
        h->n_slots = want;
    }
    memset(h->slots, 0, h->n_slots * sizeof *h->slots);
    for (size_t a = 0; a < h->n_aggs; a++) {
        size_t s = (size_t)hash_of(h->aggs[a]->key) & (h->n_slots - 1);
        while (h->slots[s])
            s = (s + 1) & (h->n_slots - 1);
        h->slots[s] = a + 1;
    }
}

static agg_t *find(const pb_hold_t *h, const char *key)
{
    if (!h->n_slots)
        return NULL;
    size_t s = (size_t)hash_of(key) & (h->n_slots - 1);
    for (; h->slots[s]; s = (s + 1) & (h->n_slots - 1))
        if (strcmp(h->aggs[h->slots[s] - 1]->key, key) == 0)
            return h->aggs[h->slots[s] - 1];
    return NULL;
}

static agg_t *find_or_add(pb_hold_t *h, const char *key)
{
    agg_t *a = find(h, key);
    if (a)
        return a;
    if (h->n_aggs == h->cap_aggs) {
        h->cap_aggs = h->cap_aggs ? h->cap_aggs * 2 : 64;
        h->aggs = pb_realloc(h->aggs, h->cap_aggs * sizeof *h->aggs);
    }
    a = pb_malloc(sizeof *a);
    memset(a, 0, sizeof *a);
    a->key = pb_strdup(key);
    h->aggs[h->n_aggs++] = a;
    if (h->n_aggs * 2 > h->n_slots)
        rebuild_slots(h);
    else {
        size_t s = (size_t)hash_of(key) & (h->n_slots - 1);
        while (h->slots[s])
            s = (s + 1) & (h->n_slots - 1);
        h->slots[s] = h->n_aggs;
    }
    return a;
}

static void free_agg(agg_t *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->items[i].mem);
    free(a->items);
    free(a->key);
    free(a);
}

/* Drops the aggregates that hold nothing any more. */
static void compact(pb_hold_t *h)
{
    size_t kept = 0;
    for (size_t a = 0; a < h->n_aggs; a++) {
        if (h->aggs[a]->n)
            h->aggs[kept++] = h->aggs[a];
        else
            free_agg(h->aggs[a]);
    }
    if (kept != h->n_aggs) {
        h->n_aggs = kept;
        rebuild_slots(h);
    }
}

/* ---- items ------------------------------------------------------------------------------------ */

static size_t len_of(const char *s)
{
    return s ? strlen(s) + 1 : 0;
}

static const char *put(char **at, const char *s)
{
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = *at;
    memcpy(d, s, n);
    *at += n;
    return d;
}

/* The bytes a copy of m takes. */
static size_t size_of(const pb_message_t *m)
{
    return len_of(m->message_id) + len_of(m->type) + len_of(m->aggregate_type) +
           len_of(m->aggregate_id) + len_of(m->routing_key) + len_of(m->exchange) +
           len_of(m->headers) + len_of(m->traceparent) + len_of(m->tracestate) + m->body_len + 1;
}

/* A copy of m that owns its strings. */
static item_t copy_of(const pb_message_t *m, uint64_t arrival)
{
    size_t total = size_of(m);
    item_t it = {.msg = *m, .arrival = arrival, .bytes = total};
    it.mem = pb_malloc(total);
    char *at = it.mem;
    it.msg.message_id = put(&at, m->message_id);
    it.msg.type = put(&at, m->type);
    it.msg.aggregate_type = put(&at, m->aggregate_type);
    it.msg.aggregate_id = put(&at, m->aggregate_id);
    it.msg.routing_key = put(&at, m->routing_key);
    it.msg.exchange = put(&at, m->exchange);
    it.msg.headers = put(&at, m->headers);
    it.msg.traceparent = put(&at, m->traceparent);
    it.msg.tracestate = put(&at, m->tracestate);
    if (m->body_len)
        memcpy(at, m->body, m->body_len);
    at[m->body_len] = '\0';
    it.msg.body = at;
    return it;
}

static bool before(int64_t seq_a, uint64_t arr_a, int64_t seq_b, uint64_t arr_b)
{
    return seq_a != seq_b ? seq_a < seq_b : arr_a < arr_b;
}

static item_t *insert(pb_hold_t *h, agg_t *a, const pb_message_t *m)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 4;
        a->items = pb_realloc(a->items, a->cap * sizeof *a->items);
    }
    item_t it = copy_of(m, ++h->arrivals);
    size_t at = a->n;
    while (at > 0 && before(it.msg.sequence, it.arrival, a->items[at - 1].msg.sequence,
                            a->items[at - 1].arrival))
        at--;
    memmove(a->items + at + 1, a->items + at, (a->n - at) * sizeof *a->items);
    a->items[at] = it;
    a->n++;
    h->count++;
    h->bytes += it.bytes;
    return &a->items[at];
}

static void remove_item(pb_hold_t *h, agg_t *a, size_t i)
{
    h->bytes -= a->items[i].bytes;
    free(a->items[i].mem);
    memmove(a->items + i, a->items + i + 1, (a->n - i - 1) * sizeof *a->items);
    a->n--;
    h->count--;
}

static item_t *in_flight_item(agg_t *a, uint64_t tag)
{
    for (size_t i = 0; a && i < a->n; i++)
        if (a->items[i].in_flight && a->items[i].msg.tag == tag)
            return &a->items[i];
    return NULL;
}

/* ---- the state of an aggregate ---------------------------------------------------------------- */

/* The earliest due time of a failed message of a, or INT64_MAX. */
static int64_t retry_due(const agg_t *a)
{
    int64_t due = INT64_MAX;
    for (size_t i = 0; i < a->n; i++)
        if (a->items[i].retry && a->items[i].due_ms < due)
            due = a->items[i].due_ms;
    return due;
}

static bool gap_expired(const pb_hold_t *h, const agg_t *a, int64_t now)
{
    return a->waiting_for > 0 && now - a->gap_since >= h->gap_timeout_ms;
}

/* 0 when a may go on now; else how long until it may (INT64_MAX: until a message arrives). */
static int64_t wait_of(const pb_hold_t *h, const agg_t *a, int64_t now)
{
    int64_t due = retry_due(a);
    if (due != INT64_MAX)
        return due <= now ? 0 : due - now;
    if (a->ready || gap_expired(h, a, now))
        return 0;
    if (a->waiting_for > 0)
        return a->gap_since + h->gap_timeout_ms - now;
    return 0;
}

/* ---- the interface ---------------------------------------------------------------------------- */

pb_hold_t *pb_hold_new(int64_t gap_timeout_ms)
{
    pb_hold_t *h = pb_malloc(sizeof *h);
    memset(h, 0, sizeof *h);
    h->gap_timeout_ms = gap_timeout_ms;
    return h;
}

void pb_hold_clear(pb_hold_t *h)
{
    for (size_t a = 0; a < h->n_aggs; a++)
        free_agg(h->aggs[a]);
    h->n_aggs = 0;
    h->count = 0;
    h->bytes = 0;
    rebuild_slots(h);
}

void pb_hold_free(pb_hold_t *h)
{
    if (!h)
        return;
    pb_hold_clear(h);
    free(h->aggs);
    free(h->slots);
    pb_buf_free(&h->key);
    free(h);
}

size_t pb_hold_count(const pb_hold_t *h)
{
    return h->count;
}

size_t pb_hold_bytes(const pb_hold_t *h)
{
    return h->bytes;
}

size_t pb_hold_take(pb_hold_t *h, pb_message_t *out, uint8_t *flags, size_t cap, int64_t now)
{
    size_t k = 0;
    for (size_t i = 0; i < h->n_aggs && k < cap; i++) {
        agg_t *a = h->aggs[i];
        if (!a->n || wait_of(h, a, now) > 0)
            continue;
        bool skip = retry_due(a) == INT64_MAX && !a->ready && gap_expired(h, a, now);
        for (size_t j = 0; j < a->n && k < cap; j++) {
            a->items[j].in_flight = true;
            out[k] = a->items[j].msg;
            flags[k++] = skip && j == 0 ? PB_INBOX_SKIP_GAP : 0;
        }
        a->ready = false;
    }
    return k;
}

typedef struct sort_entry {
    const char *key;
    int64_t seq;
    size_t index;
    pb_message_t msg;
    uint8_t flag;
} sort_entry_t;

static int compare_entries(const void *pa, const void *pb)
{
    const sort_entry_t *a = pa, *b = pb;
    int c = strcmp(a->key, b->key);
    if (c)
        return c;
    if (a->seq != b->seq)
        return a->seq < b->seq ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

size_t pb_hold_admit(pb_hold_t *h, pb_message_t *out, uint8_t *flags, size_t k, size_t n,
                     bool full, uint64_t *back, size_t *n_back)
{
    size_t len = k;
    *n_back = 0;
    for (size_t i = k; i < k + n; i++) {
        agg_t *a = find(h, key_of(h, &out[i]));
        bool waits = false;
        for (size_t j = 0; a && j < a->n && !waits; j++)
            waits = !a->items[j].in_flight;
        if (!waits) {
            out[len] = out[i];
            flags[len++] = 0;
            continue;
        }
        /* behind held messages of its aggregate: kept, and it may be the missing one */
        int64_t seq = out[i].sequence;
        bool may_fill = a->waiting_for > 0 && (seq == 0 || seq <= a->waiting_for);
        if (full && !may_fill) {
            back[(*n_back)++] = out[i].tag;
            continue;
        }
        if (a->waiting_for == 0 || may_fill)
            a->ready = true;
        insert(h, a, &out[i]);
    }
    if (len < 2)
        return len;
    /* per aggregate in order: keys in one buffer (offsets first: it may move while it grows) */
    sort_entry_t *e = pb_malloc(len * sizeof *e);
    pb_buf_t keys = {0};
    size_t *at = pb_malloc(len * sizeof *at);
    for (size_t i = 0; i < len; i++) {
        at[i] = keys.len;
        pb_buf_puts(&keys, key_of(h, &out[i]));
        pb_buf_putc(&keys, '\0');
    }
    for (size_t i = 0; i < len; i++)
        e[i] = (sort_entry_t){keys.data + at[i], out[i].sequence, i, out[i], flags[i]};
    qsort(e, len, sizeof *e, compare_entries);
    for (size_t i = 0; i < len; i++) {
        out[i] = e[i].msg;
        flags[i] = e[i].flag;
    }
    free(at);
    pb_buf_free(&keys);
    free(e);
    return len;
}

void pb_hold_settle(pb_hold_t *h, const pb_message_t *batch, const pb_inbox_verdict_t *v,
                    size_t n, int64_t now, pb_settle_t *settled, size_t *n_settled)
{
    *n_settled = 0;
    for (size_t i = 0; i < n; i++) {
        const char *key = key_of(h, &batch[i]);
        agg_t *a = find(h, key);
        item_t *it = in_flight_item(a, batch[i].tag);
        if (pb_inbox_settles(&v[i])) {
            settled[(*n_settled)++] = (pb_settle_t){
                batch[i].tag, v[i].action == PB_INBOX_DEAD ? PB_SETTLE_DEAD : PB_SETTLE_DONE};
            if (a) {
                a->touched = a->progress = true;
                if (it)
                    remove_item(h, a, (size_t)(it - a->items));
            }
            continue;
        }
        if (!a)
            a = find_or_add(h, key);
        if (!it)
            it = insert(h, a, &batch[i]);
        it->in_flight = false;
        it->retry = v[i].action == PB_INBOX_REQUEUE;
        it->due_ms = now + v[i].delay_ms;
        if (it->retry)
            it->msg.redelivered = true; /* its retry is a delivery again (its failures are
                                         * cleared when it succeeds) */
        a->touched = true;
        if (v[i].action == PB_INBOX_HOLD && v[i].expected > a->expected)
            a->expected = v[i].expected;
    }
    for (size_t i = 0; i < h->n_aggs; i++) {
        agg_t *a = h->aggs[i];
        if (!a->touched)
            continue;
        for (size_t j = 0; j < a->n; j++)
            a->items[j].in_flight = false;
        if (a->expected > 0) {
            /* waits for a missing sequence number: the timeout runs from the last progress */
            if (a->progress || a->waiting_for == 0)
                a->gap_since = now;
            a->waiting_for = a->expected;
            a->ready = false;
        } else {
            /* held behind a failure of this batch (retry_due tells when), or behind one that
             * has gone to the dead letters since: may go on at once */
            a->waiting_for = 0;
            a->ready = retry_due(a) == INT64_MAX;
        }
        a->touched = a->progress = false;
        a->expected = 0;
    }
    compact(h);
}

int64_t pb_hold_wait_ms(const pb_hold_t *h, int64_t now, int64_t max)
{
    int64_t wait = max;
    for (size_t i = 0; i < h->n_aggs && wait > 0; i++) {
        int64_t w = wait_of(h, h->aggs[i], now);
        if (w < wait)
            wait = w;
    }
    return wait < 0 ? 0 : wait;
}
