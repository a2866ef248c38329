/* Redis Streams source (hiredis 0.14.1): one consumer of a consumer group on the streams of
 * redis.streams, one blocking connection.
 *
 * At connect the group is created on every stream that lacks it (XGROUP CREATE ... 0 MKSTREAM:
 * a new group starts at the beginning of the stream, which the relay's bound keeps finite).
 * Each receive then takes, in this order and up to the batch size and consume.batch_bytes:
 *   1. the entries settled "retry later" (what the consumer cannot hold now, consume.max_held),
 *      a second later: Redis has no negative acknowledgement, so such an entry stays pending
 *      on this consumer (XCLAIM ... JUSTID keeps its idle time fresh and its delivery count as
 *      it was) and is read again (XRANGE) and handed out from here; and the entries deferred by
 *      an earlier read (below), read again at once, before any new entry;
 *   2. after a (re)connect, this consumer's own pending entries (XREADGROUP ... 0): delivered
 *      before the connection was lost and never acknowledged;
 *   3. entries pending on other consumers of the group (dead ones) for longer than
 *      redis.claim_idle, oldest first (XPENDING ... IDLE over the whole pending list, then
 *      XCLAIM), looked for again every claim_idle / 2 while there are none;
 *      an entry of 2. or 3. is handed out alone, in a batch of one, with its delivery count
 *      (XPENDING), so that an entry that kills its consumers is dead-lettered by the inbox after
 *      consume.max_attempts deliveries without taking other entries with it;
 *   4. new entries (XREADGROUP ... >), waiting up to wait_ms for the first and up to
 *      batch_wait_ms more for the rest.
 * Every reply holding entries is read with bounded memory (broker/redis/bounded.h): a payload
 * above consume.max_message_size, or other fields together above that (at least 64 KiB), are
 * read past, not kept, and the entry is handed out with body_dropped = its size (the inbox
 * dead-letters it); entries a read delivers beyond the batch's size or consume.batch_bytes are
 * deferred: pending on this consumer, their fields not kept, handed out by the next receive
 * (touched like held entries meanwhile). With several streams, one XREADGROUP may deliver up
 * to the batch size from each: the surplus is deferred the same way.
 * An entry is acknowledged (XACK, settled done or dead) only when the consumer core says so,
 * after the PostgreSQL transaction with its inbox row committed, in any order. While the core holds an entry back
 * (a failed one retried after its backoff, and the later ones of its aggregate), receive resets
 * the entry's idle time every claim_idle / 3 (XCLAIM ... JUSTID), so no other consumer claims it
 * meanwhile.
 *
 * A consumer of the group that holds nothing and has been silent for 10 x redis.claim_idle is
 * removed from the group when a look for idle entries finds none (every restarted process has a
 * new name).
 *
 * An entry trimmed from its stream (MAXLEN/MINID) while pending cannot be delivered again:
 * XCLAIM drops it from the group's pending list (Redis 7), and that is logged as a warning.
 *
 * pb_message_t: message_id = the entry's event_id field (or consume.message_id_header), type =
 * event_type, aggregate_type, aggregate_id, sequence = PB_SEQUENCE_HEADER, body = payload, headers = the
 * headers field (a JSON object) with event_type, aggregate_type, aggregate_id, created_at,
 * the sequence, traceparent, tracestate and the ce_ fields added (headers_of), routing_key = exchange = the stream, redelivered when the entry was
 * delivered before, deliveries = the group's delivery count of the entry (XPENDING, for entries
 * handed out again; 1 for new ones), timestamp = the entry id's milliseconds (when Redis stored
 * it).
 * pb_message_t.tag is a sequence number of this source, never reused; the entries handed out
 * and not acknowledged are kept in a table indexed by tag - first tag.
 *
 * @thread loop: the consumer's thread only. */
#include "source/source.h"
#include "source/tags.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <jansson.h>

#include "broker/redis/bounded.h"
#include "broker/redis/conn.h"
#include "broker/redis/stats.h"
#include "common/clock.h"
#include "common/event.h"
#include "common/log.h"
#include "common/str.h"
#include "metrics/metrics.h"

#define FAC "source.redis"
#define MIN_CLAIM_PASS_MS 1000
#define CLAIM_LOOKAHEAD 16 /* idle pending entries looked at per claim, beyond our ones to retry */
#define IDS_PER_COMMAND 500 /* entry ids per XACK / XCLAIM */
#define RETRY_DELAY_MS 1000 /* an entry to retry comes again after this (consume.max_held) */
#define RETRY_MIN_IDLE "500" /* ms, below RETRY_DELAY_MS */
#define DEAD_CONSUMER_IDLES 10 /* a consumer silent for this many claim_idle is gone */
#define OTHER_FIELDS_MIN 65536 /* bytes of an entry's fields besides the payload kept at least */

/* An entry id, ms-seq. */
typedef struct entry_id {
    uint64_t ms, seq;
} entry_id_t;

/* An entry handed out and not settled yet. */
typedef struct outstanding {
    uint32_t stream;
    entry_id_t id;
    int64_t touched_ms; /* its idle time was last reset (delivered, claimed) */
    int deliveries;     /* as handed out (pb_message_t.deliveries) */
    struct outstanding *next_spare; /* on the source's spare list once closed */
} outstanding_t;

/* An entry pending on this consumer to be read again (XRANGE) and handed out: given back by
 * "retry later", or deferred (delivered by a read but beyond the batch's size or bytes). */
typedef struct again {
    uint32_t stream;
    entry_id_t id;
    int deliveries; /* its count stays: a retry later is not a delivery that failed */
    int64_t due_ms; /* handed out again from then on */
    bool ours;      /* deferred: surely still ours (touched like a held entry), no XCLAIM first */
    bool redelivered;
    int64_t touched_ms; /* ours: its idle time was last reset */
} again_t;

typedef struct stream_state {
    char *name;
    bool history;         /* this consumer's own pending entries are still to be read */
    entry_id_t history_from;
    int64_t claim_due_ms; /* next look for entries idle on other consumers */
} stream_state_t;

typedef struct redis_source {
    pb_source_t base;
    redisContext *c; /* NULL while disconnected */
    pb_redis_server_t srv;
    char group[256];
    char consumer[256];
    stream_state_t *streams;
    size_t nstreams;

    pb_tags_t out; /* entries handed out, not settled (item: outstanding_t) */
    outstanding_t *spare; /* closed records, reused so that a delivery allocates nothing */

    again_t *again; /* settled "retry later" or deferred, to be claimed and handed out again */
    size_t nagain, capagain;

    /* what the strings of the last batch point into, freed at the next receive */
    redisReply **replies;
    size_t nreplies, capreplies;
    char **texts;
    size_t ntexts, captexts;

    int64_t sample_due_ms; /* next /metrics sample of the streams and the group */
    int64_t budget_left;   /* bytes the batch being received may still take (consume.batch_bytes) */
} redis_source_t;

/* ---- small helpers -------------------------------------------------------------------------- */

static void keep_reply(redis_source_t *s, redisReply *r)
{
    if (s->nreplies == s->capreplies) {
        s->capreplies = s->capreplies ? s->capreplies * 2 : 16;
        s->replies = pb_realloc(s->replies, s->capreplies * sizeof *s->replies);
    }
    s->replies[s->nreplies++] = r;
}

static char *keep_text(redis_source_t *s, char *t)
{
    if (s->ntexts == s->captexts) {
        s->captexts = s->captexts ? s->captexts * 2 : 256;
        s->texts = pb_realloc(s->texts, s->captexts * sizeof *s->texts);
    }
    s->texts[s->ntexts++] = t;
    return t;
}

/* Frees what the previous batch's strings pointed into. */
static void release_batch(redis_source_t *s)
{
    for (size_t i = 0; i < s->nreplies; i++)
        freeReplyObject(s->replies[i]);
    s->nreplies = 0;
    for (size_t i = 0; i < s->ntexts; i++)
        free(s->texts[i]);
    s->ntexts = 0;
}

static bool parse_id(const char *text, entry_id_t *id)
{
    char *end;
    id->ms = strtoull(text, &end, 10);
    if (end == text || *end != '-')
        return false;
    const char *q = end + 1;
    id->seq = strtoull(q, &end, 10);
    return end != q && *end == '\0';
}

static void format_id(entry_id_t id, char *buf, size_t n)
{
    snprintf(buf, n, "%" PRIu64 "-%" PRIu64, id.ms, id.seq);
}

static outstanding_t *find(redis_source_t *s, uint64_t tag)
{
    pb_tag_entry_t *e = pb_tags_find(&s->out, tag);
    return e ? e->item : NULL;
}

/* Settled: forgets e. */
static void close_entry(redis_source_t *s, pb_tag_entry_t *e)
{
    outstanding_t *o = e->item;
    o->next_spare = s->spare;
    s->spare = o;
    pb_tags_settle(&s->out, e);
}

/* Whether the entry is handed out already or to retry (XPENDING ... IDLE may list one of our
 * own). */
static bool is_outstanding(const redis_source_t *s, uint32_t stream, entry_id_t id)
{
    for (pb_tag_entry_t *e = pb_tags_first(&s->out); e; e = pb_tags_next(&s->out, e)) {
        const outstanding_t *o = e->item;
        if (o->stream == stream && o->id.ms == id.ms && o->id.seq == id.seq)
            return true;
    }
    for (size_t i = 0; i < s->nagain; i++)
        if (s->again[i].stream == stream && s->again[i].id.ms == id.ms &&
            s->again[i].id.seq == id.seq)
            return true; /* to retry, coming again from take_again */
    return false;
}

static uint64_t add_outstanding(redis_source_t *s, uint32_t stream, entry_id_t id)
{
    outstanding_t *o = s->spare;
    if (o)
        s->spare = o->next_spare;
    else
        o = pb_malloc(sizeof *o);
    int64_t now = pb_monotonic_ms();
    *o = (outstanding_t){stream, id, now, 1, NULL};
    return pb_tags_add(&s->out, o, 0, now);
}

/* Forgets the outstanding entries (the table's tags go on rising). */
static void forget_outstanding(redis_source_t *s)
{
    for (pb_tag_entry_t *e = pb_tags_first(&s->out); e; e = pb_tags_next(&s->out, e))
        close_entry(s, e);
    pb_tags_clear(&s->out);
}

/* Forgets every outstanding entry and every one to retry: on a new connection this consumer's pending
 * entries are read again from the group (history). */
static void forget_all(redis_source_t *s)
{
    forget_outstanding(s);
    s->nagain = 0;
    for (size_t i = 0; i < s->nstreams; i++) {
        s->streams[i].history = true;
        s->streams[i].history_from = (entry_id_t){0, 0};
        s->streams[i].claim_due_ms = 0;
    }
}

static void drop_connection(redis_source_t *s)
{
    if (s->c) {
        redisFree(s->c);
        s->c = NULL;
    }
}

static pb_status_t lost(redis_source_t *s, const char *what, pb_error_t *err)
{
    pb_redis_context_fail(s->c, s->srv.where, what, err);
    drop_connection(s);
    err->status = PB_TRANSIENT;
    return PB_TRANSIENT;
}

/* Runs a command; an error reply is returned as PB_FATAL or PB_TRANSIENT (then the connection
 * is dropped, as after a lost connection). */
static pb_status_t run(redis_source_t *s, const char *what, int argc, const char **argv,
                       redisReply **reply, pb_error_t *err)
{
    pb_status_t st = pb_redis_run(s->c, s->srv.where, what, argc, argv, reply, err);
    if (st == PB_TRANSIENT)
        drop_connection(s);
    return st;
}

/* The limits of a read into a batch of n messages (at most max): the bytes of an entry as
 * consume.max_message_size allows, the rest of the batch's consume.batch_bytes (the first entry
 * of a batch is taken whatever its size). */
static pb_redis_limits_t limits(const redis_source_t *s, size_t n, size_t max)
{
    uint64_t size = (uint64_t)s->base.cfg->consume_max_message_size;
    bool full = n >= max || (n > 0 && s->budget_left <= 0);
    return (pb_redis_limits_t){
        .payload_max = size,
        .other_max = size > OTHER_FIELDS_MIN ? size : OTHER_FIELDS_MIN,
        .budget = s->budget_left > 0 ? (uint64_t)s->budget_left : 1,
        .max_entries = full ? 0 : max - n,
    };
}

static bool batch_full(const redis_source_t *s, size_t n, size_t max)
{
    return n >= max || (n > 0 && s->budget_left <= 0);
}

/* Reads the reply of an entry-reading command queued on the context with bounded memory
 * (broker/redis/bounded.h) and charges its bytes to the batch; errors as run(). */
static pb_status_t read_entries(redis_source_t *s, const char *what, pb_redis_shape_t shape,
                                const pb_redis_limits_t *lim, redisReply **reply, pb_error_t *err)
{
    *reply = NULL;
    redisReply *r = NULL;
    uint64_t kept = 0;
    if (pb_redis_get_reply_bounded(s->c, shape, lim, &r, &kept) != REDIS_OK)
        return lost(s, what, err);
    s->budget_left -= (int64_t)kept;
    if (r->type == REDIS_REPLY_ERROR) {
        pb_status_t st = pb_redis_error_transient(r->str) ? PB_TRANSIENT : PB_FATAL;
        pb_fail(err, st, "redis at %s: %s: %s", s->srv.where, what, r->str);
        freeReplyObject(r);
        if (st == PB_TRANSIENT)
            drop_connection(s);
        return st;
    }
    *reply = r;
    return PB_OK;
}

/* run() for a command that reads entries: its reply read by read_entries. */
static pb_status_t run_entries(redis_source_t *s, const char *what, int argc, const char **argv,
                               pb_redis_shape_t shape, const pb_redis_limits_t *lim,
                               redisReply **reply, pb_error_t *err)
{
    *reply = NULL;
    if (redisAppendCommandArgv(s->c, argc, argv, NULL) != REDIS_OK)
        return lost(s, what, err);
    return read_entries(s, what, shape, lim, reply, err);
}

/* ---- connect -------------------------------------------------------------------------------- */

static pb_status_t create_groups(redis_source_t *s, pb_error_t *err)
{
    for (size_t i = 0; i < s->nstreams; i++) {
        const char *argv[] = {"XGROUP", "CREATE", s->streams[i].name, s->group, "0", "MKSTREAM"};
        redisReply *r = redisCommandArgv(s->c, 6, argv, NULL);
        if (!r)
            return lost(s, "XGROUP CREATE", err);
        bool exists = r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSYGROUP", 9) == 0;
        if (r->type == REDIS_REPLY_ERROR && !exists) {
            pb_status_t st = pb_redis_error_transient(r->str) ? PB_TRANSIENT : PB_FATAL;
            pb_fail(err, st, "redis at %s: creating group \"%s\" on stream \"%s\": %s",
                    s->srv.where, s->group, s->streams[i].name, r->str);
            freeReplyObject(r);
            return st;
        }
        if (!exists)
            log_info(FAC, "created consumer group \"%s\" on stream \"%s\"", s->group,
                     s->streams[i].name);
        freeReplyObject(r);
    }
    return PB_OK;
}

static pb_status_t src_connect(pb_source_t *src, pb_error_t *err)
{
    redis_source_t *s = (redis_source_t *)src;
    drop_connection(s);
    release_batch(s);
    forget_all(s);
    pb_status_t st = pb_redis_connect(src->cfg, &s->c, &s->srv, err);
    if (st != PB_OK)
        return st;
    if ((st = create_groups(s, err)) != PB_OK) {
        drop_connection(s);
        return st;
    }
    log_info(FAC, "consuming %zu stream%s from redis at %s (redis %s) as \"%s\" in group \"%s\"; "
                  "entries idle for %lld ms on another consumer are claimed",
             s->nstreams, s->nstreams == 1 ? "" : "s", s->srv.where,
             s->srv.version[0] ? s->srv.version : "of unknown version", s->consumer, s->group,
             (long long)src->cfg->redis_claim_idle);
    return PB_OK;
}

/* ---- taking entries ------------------------------------------------------------------------- */

/* The value of the first field `key` in an entry's field array, or NULL: a string, or an
 * integer for a value not kept (its length, see bounded.h). */
static const redisReply *field_any(const redisReply *fields, const char *key)
{
    for (size_t k = 0; k + 1 < fields->elements; k += 2) {
        const redisReply *f = fields->element[k];
        if (f->type == REDIS_REPLY_STRING && strcmp(f->str, key) == 0)
            return fields->element[k + 1];
    }
    return NULL;
}

/* The value of field `key` when it is a string that was kept, or NULL. */
static const redisReply *field(const redisReply *fields, const char *key)
{
    const redisReply *v = field_any(fields, key);
    return v && v->type == REDIS_REPLY_STRING ? v : NULL;
}

/* A field as text for SQL: NULL when absent, empty or not UTF-8. */
static const char *text_field(const redisReply *fields, const char *key)
{
    const redisReply *v = field(fields, key);
    if (!v || !v->len || !pb_utf8_valid(v->str, v->len) || strlen(v->str) != v->len)
        return NULL;
    return v->str;
}

/* The headers the handler sees: the entry's headers object plus the entry's own fields. */
static const char *headers_of(redis_source_t *s, const redisReply *fields)
{
    const redisReply *h = field(fields, "headers");
    json_t *obj = h ? json_loadb(h->str, h->len, 0, NULL) : NULL;
    if (!json_is_object(obj)) {
        json_decref(obj);
        obj = json_object();
    }
    /* the entry's fields of its own, the trace context and the CloudEvents attributes
     * (cloudevents.h's Redis mapping, or another producer's ce_ fields) among them */
    static const char *const own[] = {"event_type", "aggregate_type", "aggregate_id",
                                      "created_at", PB_SEQUENCE_HEADER, "traceparent",
                                      "tracestate", "ce_specversion", "ce_id", "ce_source",
                                      "ce_type", "ce_subject", "ce_time",
                                      "ce_datacontenttype", "ce_traceparent", "ce_tracestate",
                                      "ce_aggregatesequence"};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) {
        const char *v = text_field(fields, own[k]);
        if (v && !json_object_get(obj, own[k]))
            json_object_set_new(obj, own[k], json_string(v));
    }
    char *txt = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return txt ? keep_text(s, txt) : "{}";
}

typedef enum taken { TAKEN, SKIPPED, DEFERRED } taken_t;

/* Whether an entry's fields were read whole; *size gets their bytes when not (a name or value
 * not kept arrives as its length, see bounded.h). */
static bool entry_whole(const redisReply *fields, uint64_t *size)
{
    bool whole = true;
    uint64_t bytes = 0;
    for (size_t k = 0; k < fields->elements; k++) {
        const redisReply *v = fields->element[k];
        if (v->type == REDIS_REPLY_INTEGER) {
            whole = false;
            bytes += v->integer > 0 ? (uint64_t)v->integer : 0;
        } else {
            bytes += v->len;
        }
    }
    *size = bytes;
    return whole;
}

static void push_again(redis_source_t *s, again_t a)
{
    if (s->nagain == s->capagain) {
        s->capagain = s->capagain ? s->capagain * 2 : 64;
        s->again = pb_realloc(s->again, s->capagain * sizeof *s->again);
    }
    s->again[s->nagain++] = a;
}

/* An entry delivered to this consumer that a read did not keep for the batch (beyond its size
 * or bytes): a later receive reads it again (take_again) before any new entry. */
static void defer(redis_source_t *s, uint32_t si, entry_id_t id, int deliveries,
                  bool redelivered)
{
    int64_t now = pb_monotonic_ms();
    push_again(s, (again_t){si, id, deliveries, now, true, redelivered, now});
}

/* Fills *m from one entry ([id, [field, value, ...], mark], see bounded.h) of stream si and
 * records it as outstanding (TAKEN). SKIPPED for an entry without fields (deleted) or a bad id,
 * DEFERRED (id in *deferred) for one the read did not keep. */
static taken_t take_entry(redis_source_t *s, uint32_t si, const redisReply *e, bool redelivered,
                          pb_message_t *m, entry_id_t *deferred)
{
    const pb_config_t *cfg = s->base.cfg;
    entry_id_t id;
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
        e->element[0]->type != REDIS_REPLY_STRING || !parse_id(e->element[0]->str, &id))
        return SKIPPED;
    if (e->elements >= 3 && e->element[2]->type == REDIS_REPLY_INTEGER &&
        e->element[2]->integer == PB_REDIS_DEFERRED) {
        *deferred = id;
        return DEFERRED;
    }
    const redisReply *fields = e->element[1];
    if (fields->type != REDIS_REPLY_ARRAY) {
        log_warn(FAC, "entry %s of stream \"%s\" was deleted (trimmed) before it was "
                      "acknowledged: it cannot be delivered again", e->element[0]->str,
                 s->streams[si].name);
        return SKIPPED;
    }
    memset(m, 0, sizeof *m);
    m->tag = add_outstanding(s, si, id);
    m->message_id = text_field(fields, *cfg->consume_message_id_header
                                           ? cfg->consume_message_id_header
                                           : "event_id");
    m->type = text_field(fields, "event_type");
    m->aggregate_id = text_field(fields, "aggregate_id");
    m->aggregate_type = text_field(fields, "aggregate_type");
    const char *seq = text_field(fields, PB_SEQUENCE_HEADER);
    m->sequence = seq ? pb_source_sequence(seq, strlen(seq)) : 0;
    const redisReply *body = field(fields, "payload");
    m->body = body ? body->str : "";
    m->body_len = body ? body->len : 0;
    uint64_t size = 0;
    if (!entry_whole(fields, &size)) { /* the inbox dead-letters it by what was too large */
        const redisReply *p = field_any(fields, "payload");
        bool payload_cut = p && p->type == REDIS_REPLY_INTEGER &&
                           p->integer > (long long)cfg->consume_max_message_size;
        m->body = "";
        m->body_len = 0;
        m->body_dropped = payload_cut ? (uint64_t)p->integer : size;
        log_debug(FAC, "entry %s of stream \"%s\" holds %llu bytes%s, above "
                       "consume.max_message_size (%lld bytes): not read whole",
                  e->element[0]->str, s->streams[si].name,
                  (unsigned long long)m->body_dropped,
                  payload_cut ? " in its payload" : " in its fields",
                  (long long)cfg->consume_max_message_size);
    }
    m->headers = headers_of(s, fields);
    m->routing_key = m->exchange = s->streams[si].name;
    m->redelivered = redelivered;
    m->deliveries = redelivered ? 0 : 1; /* a redelivery's count: fill_deliveries */
    m->timestamp = (int64_t)(id.ms / 1000);
    return TAKEN;
}

/* Takes the entries of one stream's entry array into msgs (up to max in all); the ones the read
 * deferred are handed out by a later receive. */
static void take_entries(redis_source_t *s, uint32_t si, const redisReply *entries,
                         bool redelivered, pb_message_t *msgs, size_t max, size_t *n)
{
    for (size_t k = 0; k < entries->elements; k++) {
        const redisReply *e = entries->element[k];
        entry_id_t id;
        taken_t t;
        if (*n < max) {
            t = take_entry(s, si, e, redelivered, &msgs[*n], &id);
        } else { /* the read's limits defer these already */
            bool has_id = e->type == REDIS_REPLY_ARRAY && e->elements >= 1 &&
                          e->element[0]->type == REDIS_REPLY_STRING &&
                          parse_id(e->element[0]->str, &id);
            t = has_id ? DEFERRED : SKIPPED;
        }
        if (t == TAKEN)
            (*n)++;
        else if (t == DEFERRED)
            defer(s, si, id, redelivered ? 0 : 1, redelivered);
    }
}

/* The stream index of a stream name in a reply. */
static long stream_index(const redis_source_t *s, const redisReply *name)
{
    if (name->type != REDIS_REPLY_STRING)
        return -1;
    for (size_t i = 0; i < s->nstreams; i++)
        if (strcmp(s->streams[i].name, name->str) == 0)
            return (long)i;
    return -1;
}

/* Takes an XREADGROUP reply ([[stream, entries], ...] or nil). Returns how many entries the
 * reply held, taken or not. */
static size_t take_read(redis_source_t *s, redisReply *r, bool redelivered, pb_message_t *msgs,
                        size_t max, size_t *n)
{
    size_t seen = 0;
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *pair = r->element[k];
        if (pair->type != REDIS_REPLY_ARRAY || pair->elements != 2)
            continue;
        long si = stream_index(s, pair->element[0]);
        const redisReply *entries = pair->element[1];
        if (si < 0 || entries->type != REDIS_REPLY_ARRAY)
            continue;
        seen += entries->elements;
        take_entries(s, (uint32_t)si, entries, redelivered, msgs, max, n);
    }
    return seen;
}

static int compare_ids(entry_id_t a, entry_id_t b)
{
    return a.ms != b.ms ? (a.ms < b.ms ? -1 : 1) : a.seq != b.seq ? (a.seq < b.seq ? -1 : 1) : 0;
}

/* The delivery counts of msgs[from..to), entries of stream si taken again just now (claimed,
 * re-read or to retry: pending on this consumer): one XPENDING over their id range. */
static pb_status_t fill_deliveries(redis_source_t *s, uint32_t si, pb_message_t *msgs,
                                   size_t from, size_t to, pb_error_t *err)
{
    if (from >= to)
        return PB_OK;
    entry_id_t lo = {UINT64_MAX, UINT64_MAX}, hi = {0, 0};
    for (size_t i = from; i < to; i++) {
        const outstanding_t *o = find(s, msgs[i].tag);
        if (o && compare_ids(o->id, lo) < 0)
            lo = o->id;
        if (o && compare_ids(o->id, hi) > 0)
            hi = o->id;
    }
    char a[48], b[48], count[24];
    format_id(lo, a, sizeof a);
    format_id(hi, b, sizeof b);
    snprintf(count, sizeof count, "%zu", s->out.live + 1); /* ours in the range: outstanding ones */
    const char *argv[] = {"XPENDING", s->streams[si].name, s->group, a, b, count, s->consumer};
    redisReply *r = NULL;
    pb_status_t st = run(s, "XPENDING", 7, argv, &r, err);
    if (st != PB_OK)
        return st;
    for (size_t k = 0; r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        const redisReply *e = r->element[k];
        entry_id_t id;
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 ||
            e->element[0]->type != REDIS_REPLY_STRING || !parse_id(e->element[0]->str, &id) ||
            e->element[3]->type != REDIS_REPLY_INTEGER)
            continue;
        for (size_t i = from; i < to; i++) {
            outstanding_t *o = find(s, msgs[i].tag);
            if (o && compare_ids(o->id, id) == 0) {
                msgs[i].deliveries = o->deliveries = (int)e->element[3]->integer;
                break;
            }
        }
    }
    freeReplyObject(r);
    return PB_OK;
}

/* Builds "CMD stream group consumer ... ids" in argv (caller-provided, ids formatted into idbuf
 * of 48 bytes each). */
typedef struct id_command {
    const char **argv;
    char (*idbuf)[48];
    int argc;
} id_command_t;

static void id_command_init(id_command_t *cmd, size_t nids)
{
    cmd->argv = pb_malloc((nids + 12) * sizeof *cmd->argv);
    cmd->idbuf = pb_malloc((nids ? nids : 1) * sizeof *cmd->idbuf);
    cmd->argc = 0;
}

static void id_command_free(id_command_t *cmd)
{
    free(cmd->argv);
    free(cmd->idbuf);
}

/* 1. entries to read again whose time has come, up to max: ones to retry (XCLAIM ... JUSTID
 * keeps them on this consumer with a fresh idle time and the same delivery count, a retry later
 * being no failed delivery) and deferred ones (ours: no XCLAIM), each read again with XRANGE.
 * The commands of all of them pipelined; one the batch has no room for stays deferred. */
static pb_status_t take_again(redis_source_t *s, pb_message_t *msgs, size_t max, size_t *n,
                                 pb_error_t *err)
{
    int64_t now = pb_monotonic_ms();
    again_t *due = pb_malloc((s->nagain ? s->nagain : 1) * sizeof *due);
    size_t ndue = 0, kept = 0;
    for (size_t i = 0; i < s->nagain; i++) {
        if (s->again[i].due_ms <= now && *n + ndue < max)
            due[ndue++] = s->again[i];
        else
            s->again[kept++] = s->again[i];
    }
    s->nagain = kept;
    pb_status_t st = PB_OK;
    for (size_t k = 0; k < ndue; k++) {
        char id[48];
        format_id(due[k].id, id, sizeof id);
        const char *name = s->streams[due[k].stream].name;
        /* min-idle: not when another consumer claimed it meanwhile (its idle time is fresh) */
        const char *claim[] = {"XCLAIM", name,  s->group, s->consumer, RETRY_MIN_IDLE,
                               id,       "JUSTID"};
        const char *range[] = {"XRANGE", name, id, id};
        if ((!due[k].ours && redisAppendCommandArgv(s->c, 7, claim, NULL) != REDIS_OK) ||
            redisAppendCommandArgv(s->c, 4, range, NULL) != REDIS_OK) {
            free(due);
            return lost(s, "XCLAIM", err);
        }
    }
    size_t gone = 0;
    for (size_t k = 0; k < ndue; k++) {
        bool ours = due[k].ours;
        if (!ours) {
            redisReply *claimed = NULL;
            if (redisGetReply(s->c, (void **)&claimed) != REDIS_OK || !claimed) {
                free(due);
                return lost(s, "XCLAIM", err);
            }
            if (claimed->type == REDIS_REPLY_ERROR && st == PB_OK)
                st = pb_fail(err, pb_redis_error_transient(claimed->str) ? PB_TRANSIENT : PB_FATAL,
                             "redis at %s: claiming an entry to retry: %s", s->srv.where,
                             claimed->str);
            ours = claimed->type == REDIS_REPLY_ARRAY && claimed->elements == 1;
            freeReplyObject(claimed);
        }
        /* not ours: read past its fields */
        pb_redis_limits_t lim = limits(s, *n, ours && st == PB_OK ? max : *n);
        redisReply *entry = NULL;
        uint64_t bytes = 0;
        if (pb_redis_get_reply_bounded(s->c, PB_REDIS_SHAPE_ENTRIES, &lim, &entry, &bytes) !=
            REDIS_OK) {
            free(due);
            return lost(s, "XRANGE", err);
        }
        s->budget_left -= (int64_t)bytes;
        keep_reply(s, entry);
        if (entry->type == REDIS_REPLY_ERROR && st == PB_OK)
            st = pb_fail(err, pb_redis_error_transient(entry->str) ? PB_TRANSIENT : PB_FATAL,
                         "redis at %s: reading an entry to retry again: %s", s->srv.where,
                         entry->str);
        taken_t t = SKIPPED;
        entry_id_t id;
        if (st == PB_OK && ours && entry->type == REDIS_REPLY_ARRAY && entry->elements >= 1)
            t = take_entry(s, due[k].stream, entry->element[0], due[k].redelivered, &msgs[*n], &id);
        if (t == TAKEN) {
            msgs[*n].deliveries = due[k].deliveries;
            find(s, msgs[*n].tag)->deliveries = due[k].deliveries;
            (*n)++;
        } else if (t == DEFERRED) { /* claimed just now: ours until read */
            defer(s, due[k].stream, due[k].id, due[k].deliveries, due[k].redelivered);
        } else if (st == PB_OK) {
            gone++;
        }
    }
    free(due);
    if (st == PB_TRANSIENT)
        drop_connection(s);
    if (gone)
        log_warn(FAC, "%zu entries to retry are no longer in their stream or group (trimmed or "
                      "claimed before they were acknowledged)", gone);
    return st;
}

/* 2. this consumer's own pending entries after a (re)connect: XREADGROUP ... <id>. */
static pb_status_t take_history(redis_source_t *s, pb_message_t *msgs, size_t max, size_t *n,
                                pb_error_t *err)
{
    for (size_t si = 0; si < s->nstreams && *n < max; si++) {
        stream_state_t *st_ = &s->streams[si];
        while (st_->history && *n < max) {
            char count[24], from[48];
            snprintf(count, sizeof count, "%zu", max - *n);
            format_id(st_->history_from, from, sizeof from);
            const char *argv[] = {"XREADGROUP", "GROUP", s->group, s->consumer, "COUNT", count,
                                  "STREAMS", st_->name, from};
            pb_redis_limits_t lim = limits(s, *n, max);
            redisReply *r = NULL;
            pb_status_t st = run_entries(s, "XREADGROUP (pending)", 9, argv,
                                         PB_REDIS_SHAPE_STREAMS, &lim, &r, err);
            if (st != PB_OK)
                return st;
            keep_reply(s, r);
            size_t before = s->out.live, first = *n;
            size_t seen = take_read(s, r, true, msgs, max, n);
            if ((st = fill_deliveries(s, (uint32_t)si, msgs, first, *n, err)) != PB_OK)
                return st;
            if (seen == 0) {
                st_->history = false;
                break;
            }
            /* next page after the last entry of this one (taken or deleted) */
            const redisReply *entries = r->element[0]->element[1];
            const redisReply *last = entries->element[entries->elements - 1];
            entry_id_t id;
            if (last->type != REDIS_REPLY_ARRAY || last->elements < 1 ||
                !parse_id(last->element[0]->str, &id)) {
                st_->history = false;
                break;
            }
            st_->history_from = id; /* XREADGROUP returns the entries after it */
            if (s->out.live > before)
                log_info(FAC, "%zu entries of stream \"%s\" were pending on this consumer: "
                              "handed out again", s->out.live - before, st_->name);
        }
    }
    return PB_OK;
}

/* The entry id of a message handed out, for log lines (a static buffer: one call per line). */
static const char *claimed_id(redis_source_t *s, const pb_message_t *m)
{
    static char buf[48];
    const outstanding_t *o = find(s, m->tag);
    if (!o)
        return "?";
    format_id(o->id, buf, sizeof buf);
    return buf;
}

/* Removes from the group the consumers that hold nothing and have not been heard of for
 * DEAD_CONSUMER_IDLES x redis.claim_idle (processes that died and whose entries were claimed):
 * every restart names a new consumer, and the group would keep them all. A consumer with
 * pending entries is never removed (XGROUP DELCONSUMER would drop its entries). */
static pb_status_t prune_consumers(redis_source_t *s, const stream_state_t *ss, pb_error_t *err)
{
    const char *argv[] = {"XINFO", "CONSUMERS", ss->name, s->group};
    redisReply *r = NULL;
    pb_status_t st = run(s, "XINFO CONSUMERS", 4, argv, &r, err);
    if (st != PB_OK)
        return st;
    long long dead_after = (long long)s->base.cfg->redis_claim_idle * DEAD_CONSUMER_IDLES;
    for (size_t k = 0; r->type == REDIS_REPLY_ARRAY && k < r->elements; k++) {
        const redisReply *c = r->element[k];
        const char *name = NULL;
        long long pending = -1, idle = -1;
        for (size_t f = 0; c->type == REDIS_REPLY_ARRAY && f + 1 < c->elements; f += 2) {
            const redisReply *key = c->element[f], *val = c->element[f + 1];
            if (key->type != REDIS_REPLY_STRING)
                continue;
            if (strcmp(key->str, "name") == 0 && val->type == REDIS_REPLY_STRING)
                name = val->str;
            else if (strcmp(key->str, "pending") == 0 && val->type == REDIS_REPLY_INTEGER)
                pending = val->integer;
            else if (strcmp(key->str, "idle") == 0 && val->type == REDIS_REPLY_INTEGER)
                idle = val->integer;
        }
        if (!name || strcmp(name, s->consumer) == 0 || pending != 0 || idle < dead_after)
            continue;
        const char *del[] = {"XGROUP", "DELCONSUMER", ss->name, s->group, name};
        if ((st = run(s, "XGROUP DELCONSUMER", 5, del, NULL, err)) != PB_OK) {
            freeReplyObject(r);
            return st;
        }
        log_info(FAC, "removed consumer \"%s\" from group \"%s\" of stream \"%s\": nothing "
                      "pending, silent for %lld s", name, s->group, ss->name, idle / 1000);
    }
    freeReplyObject(r);
    return PB_OK;
}

/* XCLAIM of one entry of stream si found idle on another consumer, with the same min-idle (not
 * when that consumer acknowledged or touched it meanwhile). Takes it into *m (true) unless it is
 * gone: trimmed from the stream (Redis then drops it from the pending list) or taken meanwhile. */
static pb_status_t claim_one(redis_source_t *s, uint32_t si, const char *id, const char *from,
                             pb_message_t *m, bool *taken, pb_error_t *err)
{
    char idle[24];
    snprintf(idle, sizeof idle, "%lld", (long long)s->base.cfg->redis_claim_idle);
    const char *argv[] = {"XCLAIM", s->streams[si].name, s->group, s->consumer, idle, id};
    pb_redis_limits_t lim = limits(s, 0, 1);
    redisReply *r = NULL;
    pb_status_t st = run_entries(s, "XCLAIM", 6, argv, PB_REDIS_SHAPE_ENTRIES, &lim, &r, err);
    if (st != PB_OK)
        return st;
    keep_reply(s, r);
    entry_id_t unused;
    *taken = r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
             take_entry(s, si, r->element[0], true, m, &unused) == TAKEN;
    if (*taken)
        return PB_OK;
    log_warn(FAC, "entry %s of stream \"%s\", idle on consumer \"%s\", could not be claimed: "
                  "deleted (trimmed) from the stream before it was acknowledged, or taken by "
                  "another consumer meanwhile", id, s->streams[si].name, from);
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_NIL) {
        /* Redis 6.2 claims a deleted entry (nil) and keeps it pending; 7 drops it at once */
        const char *ack[] = {"XACK", s->streams[si].name, s->group, id};
        return run(s, "XACK", 4, ack, NULL, err);
    }
    return PB_OK;
}

/* 3. an entry idle on another (dead) consumer for longer than redis.claim_idle: the first such
 * in id order, found with XPENDING ... IDLE (the server looks through the whole pending list),
 * then claimed (claim_one). Not XAUTOCLAIM: with COUNT 1 it looks at only 10 pending entries a
 * call, so behind a long list of entries this consumer holds back (the later ones of aggregates
 * waiting for the dead consumer's entries) a pass took minutes, and consume.gap_timeout let
 * those aggregates go on without the missing entries, which then came as "duplicates". When
 * nothing is idle elsewhere, the next look is claim_idle / 2 later, after a prune of the dead
 * consumers. At most one entry per stream is taken (src_receive asks for one: handed out
 * alone). */
static pb_status_t take_claimed(redis_source_t *s, pb_message_t *msgs, size_t max, size_t *n,
                                pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    int64_t now = pb_monotonic_ms();
    for (size_t si = 0; si < s->nstreams && *n < max; si++) {
        stream_state_t *ss = &s->streams[si];
        if (now < ss->claim_due_ms)
            continue;
        /* ours come too when idle (ones to retry wait untouched): room for them */
        char idle[24], count[24];
        snprintf(idle, sizeof idle, "%lld", (long long)cfg->redis_claim_idle);
        snprintf(count, sizeof count, "%zu", s->nagain + CLAIM_LOOKAHEAD);
        const char *argv[] = {"XPENDING", ss->name, s->group, "IDLE", idle, "-", "+", count};
        redisReply *r = NULL;
        pb_status_t st = run(s, "XPENDING IDLE", 8, argv, &r, err);
        if (st != PB_OK)
            return st;
        keep_reply(s, r);
        if (r->type != REDIS_REPLY_ARRAY)
            return pb_fail(err, PB_FATAL, "redis at %s: unexpected XPENDING reply", s->srv.where);
        size_t before = *n;
        const char *from = NULL;
        for (size_t k = 0; k < r->elements && *n == before; k++) {
            const redisReply *e = r->element[k]; /* [id, consumer, idle ms, deliveries] */
            entry_id_t id;
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 2 ||
                e->element[0]->type != REDIS_REPLY_STRING || !parse_id(e->element[0]->str, &id) ||
                e->element[1]->type != REDIS_REPLY_STRING || is_outstanding(s, (uint32_t)si, id))
                continue; /* one of ours, held back or to retry */
            bool taken = false;
            from = e->element[1]->str;
            if ((st = claim_one(s, (uint32_t)si, e->element[0]->str, from, &msgs[*n], &taken,
                                err)) != PB_OK)
                return st;
            *n += taken;
        }
        if (*n == before) { /* nothing idle elsewhere */
            int64_t pass = cfg->redis_claim_idle / 2;
            ss->claim_due_ms = now + (pass < MIN_CLAIM_PASS_MS ? MIN_CLAIM_PASS_MS : pass);
            if ((st = prune_consumers(s, ss, err)) != PB_OK)
                return st;
            continue;
        }
        if ((st = fill_deliveries(s, (uint32_t)si, msgs, before, *n, err)) != PB_OK)
            return st;
        log_info(FAC, "claimed entry %s of stream \"%s\" (message %s, delivered %d times), idle "
                      "for more than %lld ms on consumer \"%s\" of group \"%s\"",
                 claimed_id(s, &msgs[before]), ss->name,
                 msgs[before].message_id ? msgs[before].message_id : "without id",
                 msgs[before].deliveries, (long long)cfg->redis_claim_idle, from, s->group);
    }
    return PB_OK;
}

/* 4. new entries: XREADGROUP ... > on every stream, blocking up to block_ms (< 0: not at all). */
static pb_status_t take_new(redis_source_t *s, int64_t block_ms, pb_message_t *msgs, size_t max,
                            size_t *n, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    const char **argv = pb_malloc((9 + 2 * s->nstreams) * sizeof *argv); /* XREADGROUP GROUP g c COUNT n BLOCK ms STREAMS, 2 per stream */
    int argc = 0;
    char count[24], block[24];
    snprintf(count, sizeof count, "%zu", max - *n);
    argv[argc++] = "XREADGROUP";
    argv[argc++] = "GROUP";
    argv[argc++] = s->group;
    argv[argc++] = s->consumer;
    argv[argc++] = "COUNT";
    argv[argc++] = count;
    if (block_ms >= 0) {
        snprintf(block, sizeof block, "%lld", (long long)(block_ms > 0 ? block_ms : 1));
        argv[argc++] = "BLOCK";
        argv[argc++] = block;
    }
    argv[argc++] = "STREAMS";
    for (size_t i = 0; i < s->nstreams; i++)
        argv[argc++] = s->streams[i].name;
    for (size_t i = 0; i < s->nstreams; i++)
        argv[argc++] = ">";
    /* the socket must wait longer than the server blocks */
    if (block_ms >= 0)
        redisSetTimeout(s->c, pb_ms_timeval(block_ms + cfg->redis_timeout));
    pb_redis_limits_t lim = limits(s, *n, max);
    redisReply *r = NULL;
    pb_status_t st =
        run_entries(s, "XREADGROUP", argc, argv, PB_REDIS_SHAPE_STREAMS, &lim, &r, err);
    free(argv);
    if (st != PB_OK)
        return st;
    if (block_ms >= 0)
        redisSetTimeout(s->c, pb_ms_timeval(cfg->redis_timeout));
    keep_reply(s, r);
    take_read(s, r, false, msgs, max, n);
    return PB_OK;
}

/* Resets the idle time of entries the consumer core holds back, and of deferred ones, before
 * another consumer would claim them (after redis.claim_idle): XCLAIM ... JUSTID (the delivery
 * count stays). */
static pb_status_t touch_held(redis_source_t *s, pb_error_t *err)
{
    int64_t now = pb_monotonic_ms(), every = s->base.cfg->redis_claim_idle / 3;
    for (size_t si = 0; si < s->nstreams; si++) {
        size_t due = 0;
        for (pb_tag_entry_t *e = pb_tags_first(&s->out); e; e = pb_tags_next(&s->out, e)) {
            const outstanding_t *o = e->item;
            due += o->stream == si && now - o->touched_ms >= every;
        }
        for (size_t i = 0; i < s->nagain; i++)
            due += s->again[i].ours && s->again[i].stream == si &&
                   now - s->again[i].touched_ms >= every;
        if (!due)
            continue;
        id_command_t cmd;
        id_command_init(&cmd, due);
        const char *head[] = {"XCLAIM", s->streams[si].name, s->group, s->consumer, "0"};
        for (int k = 0; k < 5; k++)
            cmd.argv[cmd.argc++] = head[k];
        size_t k = 0;
        for (pb_tag_entry_t *e = pb_tags_first(&s->out); e; e = pb_tags_next(&s->out, e)) {
            outstanding_t *o = e->item;
            if (o->stream == si && now - o->touched_ms >= every) {
                format_id(o->id, cmd.idbuf[k], sizeof cmd.idbuf[k]);
                cmd.argv[cmd.argc++] = cmd.idbuf[k++];
                o->touched_ms = now;
            }
        }
        for (size_t i = 0; i < s->nagain; i++) {
            again_t *a = &s->again[i];
            if (a->ours && a->stream == si && now - a->touched_ms >= every) {
                format_id(a->id, cmd.idbuf[k], sizeof cmd.idbuf[k]);
                cmd.argv[cmd.argc++] = cmd.idbuf[k++];
                a->touched_ms = now;
            }
        }
        cmd.argv[cmd.argc++] = "JUSTID";
        pb_status_t st = run(s, "XCLAIM JUSTID", cmd.argc, cmd.argv, NULL, err);
        id_command_free(&cmd);
        if (st != PB_OK)
            return st;
    }
    return PB_OK;
}

/* Every metrics.sample_interval (with metrics.listen): each stream's length, the group's
 * pending entries, lag and oldest pending idle time, for /metrics. */
static pb_status_t sample(redis_source_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    int64_t now = pb_monotonic_ms();
    if (!*cfg->metrics_listen || cfg->metrics_sample_interval <= 0 || now < s->sample_due_ms)
        return PB_OK;
    s->sample_due_ms = now + cfg->metrics_sample_interval;
    for (size_t i = 0; i < s->nstreams; i++) {
        pb_redis_stream_stats_t st;
        pb_status_t rc = pb_redis_stream_stats(s->c, s->srv.where, s->streams[i].name, s->group,
                                               &st, err);
        if (rc == PB_TRANSIENT) {
            drop_connection(s);
            return rc;
        }
        if (rc != PB_OK) {
            log_warn(FAC, "sampling stream \"%s\": %s", s->streams[i].name, err->msg);
            continue;
        }
        pb_metrics_set_redis_stream(s->streams[i].name, st.length);
        const pb_redis_group_stats_t *g = st.ngroups ? &st.groups[0] : NULL;
        pb_metrics_set_redis_group(s->streams[i].name, s->group, g ? g->pending : 0,
                                   g ? g->lag : -1, g ? g->oldest_idle_s : 0.0);
    }
    return PB_OK;
}

static pb_status_t src_receive(pb_source_t *src, pb_message_t *msgs, size_t max, int64_t wait_ms,
                               int64_t batch_wait_ms, size_t *n, pb_error_t *err)
{
    redis_source_t *s = (redis_source_t *)src;
    *n = 0;
    release_batch(s);
    if (!s->c)
        return pb_fail(err, PB_TRANSIENT, "not connected to redis at %s", s->srv.where);
    s->budget_left = s->base.cfg->consume_batch_bytes;
    pb_status_t st;
    if ((st = sample(s, err)) != PB_OK || (st = touch_held(s, err)) != PB_OK ||
        (st = take_again(s, msgs, max, n, err)) != PB_OK)
        return st;
    /* An entry handed out again after its consumer died (or its connection) goes in a batch of
     * its own: if it is what kills the consumer, only its delivery count grows, and the inbox
     * dead-letters it past consume.max_attempts without taking innocent entries along. */
    if (*n == 0 && max > 0) {
        if ((st = take_history(s, msgs, 1, n, err)) != PB_OK ||
            (*n == 0 && (st = take_claimed(s, msgs, 1, n, err)) != PB_OK))
            return st;
        if (*n > 0)
            return PB_OK;
    }
    /* new entries only once the deferred ones before them are handed out */
    for (size_t i = 0; i < s->nagain; i++)
        if (s->again[i].ours)
            return PB_OK;
    if (!batch_full(s, *n, max) &&
        (st = take_new(s, *n || wait_ms <= 0 ? -1 : wait_ms, msgs, max, n, err)) != PB_OK)
        return st;
    /* the rest of the batch: whatever comes within batch_wait_ms of the first */
    int64_t until = pb_monotonic_ms() + batch_wait_ms;
    while (*n > 0 && !batch_full(s, *n, max) && batch_wait_ms > 0) {
        int64_t left = until - pb_monotonic_ms();
        if (left <= 0)
            break;
        size_t before = *n;
        if ((st = take_new(s, left, msgs, max, n, err)) != PB_OK)
            return st;
        if (*n == before)
            break;
    }
    return PB_OK;
}

/* ---- settle ----------------------------------------------------------------------------------- */

static pb_status_t stale(redis_source_t *s, uint64_t tag, const char *what, pb_error_t *err)
{
    return pb_fail(err, PB_TRANSIENT, "cannot %s entry %llu: not outstanding on the current "
                                      "connection to redis at %s (reconnected since?)", what,
                   (unsigned long long)tag, s->srv.where);
}

/* XACK of the entries of list[0..n) settled done or dead, per stream, pipelined. */
static pb_status_t xack_settled(redis_source_t *s, const pb_settle_t *list, size_t n,
                                pb_error_t *err)
{
    size_t commands = 0;
    for (size_t si = 0; si < s->nstreams; si++) {
        size_t i = 0;
        while (i < n) {
            id_command_t cmd;
            id_command_init(&cmd, IDS_PER_COMMAND);
            const char *head[] = {"XACK", s->streams[si].name, s->group};
            for (int k = 0; k < 3; k++)
                cmd.argv[cmd.argc++] = head[k];
            size_t k = 0;
            for (; i < n && k < IDS_PER_COMMAND; i++) {
                pb_tag_entry_t *e = list[i].how == PB_SETTLE_RETRY
                                        ? NULL
                                        : pb_tags_find(&s->out, list[i].tag);
                const outstanding_t *o = e ? e->item : NULL;
                if (!o || o->stream != si)
                    continue;
                format_id(o->id, cmd.idbuf[k], sizeof cmd.idbuf[k]);
                cmd.argv[cmd.argc++] = cmd.idbuf[k++];
                close_entry(s, e);
            }
            int rc = k ? redisAppendCommandArgv(s->c, cmd.argc, cmd.argv, NULL) : REDIS_OK;
            id_command_free(&cmd);
            if (rc != REDIS_OK)
                return lost(s, "XACK", err);
            commands += k > 0;
        }
    }
    pb_status_t worst = PB_OK;
    for (size_t k = 0; k < commands; k++) {
        redisReply *r = NULL;
        if (redisGetReply(s->c, (void **)&r) != REDIS_OK || !r)
            return lost(s, "XACK", err);
        if (r->type == REDIS_REPLY_ERROR && worst == PB_OK)
            worst = pb_fail(err, pb_redis_error_transient(r->str) ? PB_TRANSIENT : PB_FATAL,
                            "redis at %s: XACK: %s", s->srv.where, r->str);
        freeReplyObject(r);
    }
    if (worst == PB_TRANSIENT)
        drop_connection(s);
    return worst;
}

/* Done and dead are acknowledged (XACK). Redis has no negative acknowledgement: an entry to
 * retry later stays pending on this consumer and is handed out again a second later (see 1.
 * above). */
static pb_status_t src_settle(pb_source_t *src, const pb_settle_t *list, size_t n,
                              pb_error_t *err)
{
    redis_source_t *s = (redis_source_t *)src;
    if (!s->c)
        return pb_fail(err, PB_TRANSIENT, "not connected to redis at %s", s->srv.where);
    for (size_t i = 0; i < n; i++)
        if (!pb_tags_find(&s->out, list[i].tag))
            return stale(s, list[i].tag, "settle", err);
    int64_t due = pb_monotonic_ms() + RETRY_DELAY_MS;
    for (size_t i = 0; i < n; i++) {
        if (list[i].how != PB_SETTLE_RETRY)
            continue;
        pb_tag_entry_t *e = pb_tags_find(&s->out, list[i].tag);
        const outstanding_t *o = e->item;
        push_again(s, (again_t){o->stream, o->id, o->deliveries, due, false, true, 0});
        close_entry(s, e);
    }
    return xack_settled(s, list, n, err);
}

/* For consume --drain: the entries of the group not acknowledged yet, on any consumer (a dead
 * one's are claimed after redis.claim_idle), plus those not delivered yet (lag) and the ones to retry
 * ones this source keeps. A lag Redis cannot tell (after XDEL in the middle of a stream) counts
 * as 0. */
static pb_status_t src_pending(pb_source_t *src, int64_t *pending, pb_error_t *err)
{
    redis_source_t *s = (redis_source_t *)src;
    *pending = (int64_t)s->nagain;
    if (!s->c)
        return pb_fail(err, PB_TRANSIENT, "not connected to redis at %s", s->srv.where);
    for (size_t i = 0; i < s->nstreams; i++) {
        pb_redis_stream_stats_t st;
        pb_status_t rc = pb_redis_stream_stats(s->c, s->srv.where, s->streams[i].name, s->group,
                                               &st, err);
        if (rc != PB_OK) {
            if (rc == PB_TRANSIENT)
                drop_connection(s);
            return rc;
        }
        if (st.ngroups)
            *pending += st.groups[0].pending + (st.groups[0].lag > 0 ? st.groups[0].lag : 0);
    }
    return PB_OK;
}

/* ---- free / new ----------------------------------------------------------------------------- */

static void src_free(pb_source_t *src)
{
    if (!src)
        return;
    redis_source_t *s = (redis_source_t *)src;
    drop_connection(s);
    release_batch(s);
    for (size_t i = 0; i < s->nstreams; i++)
        free(s->streams[i].name);
    free(s->streams);
    forget_outstanding(s);
    pb_tags_free(&s->out);
    while (s->spare) {
        outstanding_t *o = s->spare;
        s->spare = o->next_spare;
        free(o);
    }
    free(s->again);
    free(s->replies);
    free(s->texts);
    free(s);
}

/* One stream per aggregate type (redis.stream without {event_type}) carries every event of an
 * aggregate. */
static bool src_takes_every_event(const pb_source_t *src, char *why, size_t n)
{
    return pb_source_template_keeps_aggregate("redis.stream", src->cfg->redis_stream, why, n);
}

static const pb_source_ops_t redis_source_ops = {
    .name = "redis",
    .connect = src_connect,
    .receive = src_receive,
    .settle = src_settle,
    .pending = src_pending,
    .takes_every_event = src_takes_every_event,
    .free = src_free,
};

/* redis.streams split at commas, blanks trimmed. */
static pb_status_t parse_streams(redis_source_t *s, const char *list, pb_error_t *err)
{
    const char *item;
    size_t len;
    while (pb_list_next(&list, &item, &len)) {
        s->streams = pb_realloc(s->streams, (s->nstreams + 1) * sizeof *s->streams);
        stream_state_t *ss = &s->streams[s->nstreams++];
        memset(ss, 0, sizeof *ss);
        ss->name = pb_malloc(len + 1);
        memcpy(ss->name, item, len);
        ss->name[len] = '\0';
    }
    if (s->nstreams == 0)
        return pb_fail(err, PB_FATAL, "redis.streams is empty: name the streams to consume, "
                                      "e.g. postbox:order (redis.stream_prefix + aggregate type)");
    return PB_OK;
}

pb_status_t pb_source_redis_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    pb_status_t st = pb_redis_check_config(cfg, err);
    if (st != PB_OK)
        return st;
    if (cfg->consume_gap_timeout > 0 && cfg->consume_gap_timeout <= cfg->redis_claim_idle &&
        strcmp(cfg->consume_wait_for_gaps, "never") != 0)
        log_warn(FAC, "consume.gap_timeout %lld ms is not above redis.claim_idle %lld ms: after a "
                      "consumer crash, an aggregate's later entries may go on before the dead "
                      "consumer's entries are claimed, which are then handled out of order",
                 (long long)cfg->consume_gap_timeout, (long long)cfg->redis_claim_idle);
    redis_source_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &redis_source_ops;
    s->base.cfg = cfg;
    snprintf(s->srv.where, sizeof s->srv.where, "(not connected)");
    if ((st = parse_streams(s, cfg->redis_streams, err)) != PB_OK) {
        src_free(&s->base);
        return st;
    }
    if (*cfg->redis_group)
        snprintf(s->group, sizeof s->group, "%s", cfg->redis_group);
    else
        snprintf(s->group, sizeof s->group, "postbox_%s", cfg->consume_consumer);
    if (*cfg->redis_consumer_name) {
        snprintf(s->consumer, sizeof s->consumer, "%s", cfg->redis_consumer_name);
    } else {
        char host[128] = "postbox";
        if (gethostname(host, sizeof host) != 0)
            snprintf(host, sizeof host, "postbox");
        host[sizeof host - 1] = '\0';
        snprintf(s->consumer, sizeof s->consumer, "%s-%ld", host, (long)getpid());
    }
    forget_all(s);
    *out = &s->base;
    return PB_OK;
}
