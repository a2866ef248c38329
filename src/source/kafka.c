/* Kafka source (librdkafka 2.0.2): a member of consumer group kafka.group subscribed to
 * kafka.topics, with enable.auto.commit and enable.auto.offset.store off (forced). Offsets are
 * committed only for what the consumer acknowledged, which it does after the PostgreSQL
 * transaction holding the inbox rows committed.
 *
 * Kafka keeps one position per partition, not one acknowledgement per message: the source
 * records every message it hands out (per partition, in offset order) and commits a partition
 * only up to its lowest offset not acknowledged yet, so a message the consumer still holds (a
 * failed handler waiting for its retry, or what waits behind it) is never skipped, whatever
 * was acknowledged after it. Each record keeps the message's decoded copy until it is
 * acknowledged, since Kafka cannot put one message back: requeue queues the tag, and the next
 * receive hands its copy out again (redelivered); the partition's commit stays below it.
 *
 * Rebalance (the callback runs inside rd_kafka_consumer_poll, on this thread): for a revoked
 * partition the acknowledged prefix is committed synchronously, then everything recorded for
 * it is dropped (also requeued tags waiting to be handed out again): the new owner gets those
 * messages from the committed offset, and an acknowledgement that arrives later for one of
 * them finds no record and is ignored. An assignment starts a partition's record afresh.
 *
 * Commits are asynchronous and gathered: acknowledgements mark partitions, the next receive
 * (and close) commits them. A commit that fails is only logged: its messages come again after
 * a restart and the inbox absorbs them.
 *
 * @thread loop (everything; librdkafka's callbacks are served by rd_kafka_consumer_poll). */
#include "source/source.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "broker/kafka/conf.h"
#include "common/clock.h"
#include "common/event.h"
#include "common/log.h"
#include "common/str.h"
#include "metrics/metrics.h"

#define FAC "source.kafka"
#define CONNECT_TIMEOUT_MS 5000
#define CLOSE_COMMIT_TIMEOUT_MS 5000
#define LAG_INTERVAL_MS 5000
#define JOIN_WAIT_MS 15000 /* longest wait for the assignment and for reading to the end (catch_up_by) */

/* One message handed out and not yet settled in its partition's committed offset. */
typedef struct entry {
    int64_t offset;
    uint64_t tag;
    bool acked;
    pb_message_t msg; /* its strings in block, until it is acknowledged */
    char *block;
} entry_t;

/* What the source records of an assigned partition: the entries in offset (= tag) order,
 * entries[head..n) live; everything before head is acknowledged and committable. */
typedef struct part {
    char *topic;
    int32_t partition;
    entry_t *entries;
    size_t head, n, cap;
    int64_t commit_next; /* offset to commit next (-1: nothing new) */
    bool dirty;          /* commit_next not committed yet */
    bool at_end;         /* read up to the end of the partition (partition EOF) */
} part_t;

typedef struct kafka_source {
    pb_source_t base; /* first: the consumer holds a pb_source_t * */
    rd_kafka_t *rk;   /* NULL until connect */
    char group[256];
    uint64_t next_tag;
    part_t *parts;
    size_t nparts, cap_parts;
    uint64_t *again; /* requeued tags, handed out first (FIFO) */
    size_t nagain, cap_again;
    /* blocks of acknowledged messages, freed at the next receive */
    char **blocks;
    size_t nblocks, cap_blocks;
    int64_t lag_at;
    /* Until every assigned partition has been read to its end once, "nothing arrived" does not
     * mean "nothing there" (joining the group and the first fetch take seconds): receive keeps
     * waiting for that, up to catch_up_by, so that `consume --drain` does not stop early. */
    bool assigned;       /* an assignment arrived since connect */
    int64_t catch_up_by; /* pb_monotonic_ms */
} kafka_source_t;

/* ---- partitions ------------------------------------------------------------------------------ */

static part_t *find_part(kafka_source_t *s, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < s->nparts; i++)
        if (s->parts[i].partition == partition && strcmp(s->parts[i].topic, topic) == 0)
            return &s->parts[i];
    return NULL;
}

static part_t *add_part(kafka_source_t *s, const char *topic, int32_t partition)
{
    part_t *p = find_part(s, topic, partition);
    if (p)
        return p;
    if (s->nparts == s->cap_parts) {
        s->cap_parts = s->cap_parts ? 2 * s->cap_parts : 16;
        s->parts = pb_realloc(s->parts, s->cap_parts * sizeof *s->parts);
    }
    p = &s->parts[s->nparts++];
    *p = (part_t){.topic = pb_strdup(topic), .partition = partition, .commit_next = -1};
    return p;
}

static void keep_block(kafka_source_t *s, char *block)
{
    if (!block)
        return;
    if (s->nblocks == s->cap_blocks) {
        s->cap_blocks = s->cap_blocks ? 2 * s->cap_blocks : 256;
        s->blocks = pb_realloc(s->blocks, s->cap_blocks * sizeof *s->blocks);
    }
    s->blocks[s->nblocks++] = block;
}

static void free_blocks(kafka_source_t *s)
{
    for (size_t i = 0; i < s->nblocks; i++)
        free(s->blocks[i]);
    s->nblocks = 0;
}

/* Forgets partition p: its records go (their strings at the next receive, as the consumer may
 * still read the batch handed out last), requeued tags of it are skipped by receive. */
static void remove_part(kafka_source_t *s, part_t *p)
{
    for (size_t j = p->head; j < p->n; j++)
        keep_block(s, p->entries[j].block);
    free(p->topic);
    free(p->entries);
    *p = s->parts[--s->nparts];
}

/* Pops the acknowledged prefix of p; the offset after it becomes committable. */
static void advance(kafka_source_t *s, part_t *p)
{
    size_t h = p->head;
    while (h < p->n && p->entries[h].acked)
        h++;
    if (h == p->head)
        return;
    for (size_t j = p->head; j < h; j++)
        keep_block(s, p->entries[j].block);
    p->commit_next = p->entries[h - 1].offset + 1;
    p->dirty = true;
    /* keep the array short: move the live entries down once half of it is dead */
    if (h == p->n) {
        p->head = p->n = 0;
    } else if (h > p->n / 2) {
        memmove(p->entries, p->entries + h, (p->n - h) * sizeof *p->entries);
        p->n -= h;
        p->head = 0;
    } else {
        p->head = h;
    }
}

/* The entry of tag, or NULL (acknowledged already, or its partition was revoked). */
static entry_t *find_entry(kafka_source_t *s, uint64_t tag, part_t **pp)
{
    for (size_t i = 0; i < s->nparts; i++) {
        part_t *p = &s->parts[i];
        if (p->head == p->n || tag < p->entries[p->head].tag || tag > p->entries[p->n - 1].tag)
            continue;
        size_t lo = p->head, hi = p->n; /* entries are in tag order */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (p->entries[mid].tag < tag)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < p->n && p->entries[lo].tag == tag) {
            *pp = p;
            return &p->entries[lo];
        }
    }
    return NULL;
}

/* Commits every partition with a new committable offset; async unless sync. */
static void commit_dirty(kafka_source_t *s, bool sync)
{
    if (!s->rk)
        return;
    rd_kafka_topic_partition_list_t *l = NULL;
    for (size_t i = 0; i < s->nparts; i++) {
        part_t *p = &s->parts[i];
        if (!p->dirty)
            continue;
        if (!l)
            l = rd_kafka_topic_partition_list_new((int)s->nparts);
        rd_kafka_topic_partition_list_add(l, p->topic, p->partition)->offset = p->commit_next;
        p->dirty = false;
    }
    if (!l)
        return;
    rd_kafka_resp_err_t e = rd_kafka_commit(s->rk, l, sync ? 0 : 1);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
        char kind[64];
        pb_metrics_broker_error("kafka", pb_kafka_error_kind(e, kind, sizeof kind));
        log_warn(FAC, "committing the offsets of group \"%s\": %s (the messages come again "
                      "after a restart; the inbox absorbs them)", s->group, rd_kafka_err2str(e));
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* ---- callbacks ------------------------------------------------------------------------------- */

static void on_error(rd_kafka_t *rk, int code, const char *reason, void *opaque)
{
    (void)rk;
    kafka_source_t *s = opaque;
    char kind[64];
    pb_metrics_broker_error("kafka", pb_kafka_error_kind((rd_kafka_resp_err_t)code, kind,
                                                         sizeof kind));
    log_warn(FAC, "kafka at %s: %s", s->base.cfg->kafka_brokers, reason);
}

static void on_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                         rd_kafka_topic_partition_list_t *l, void *opaque)
{
    kafka_source_t *s = opaque;
    bool cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
    if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        s->assigned = true;
        for (int i = 0; i < l->cnt; i++) {
            part_t *p = add_part(s, l->elems[i].topic, l->elems[i].partition);
            p->head = p->n = 0; /* afresh: what was recorded belongs to the old assignment */
            p->commit_next = -1;
            p->dirty = false;
            p->at_end = false;
        }
        s->catch_up_by = pb_monotonic_ms() + JOIN_WAIT_MS;
        log_info(FAC, "group \"%s\": %d partition%s assigned", s->group, l->cnt,
                 l->cnt == 1 ? "" : "s");
        if (cooperative) {
            rd_kafka_error_t *ke = rd_kafka_incremental_assign(rk, l);
            if (ke) {
                log_warn(FAC, "incremental assign: %s", rd_kafka_error_string(ke));
                rd_kafka_error_destroy(ke);
            }
        } else {
            rd_kafka_assign(rk, l);
        }
        return;
    }
    /* revoked (or lost): commit what is acknowledged, forget the rest */
    bool lost = e != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS || rd_kafka_assignment_lost(rk);
    size_t dropped = 0;
    for (int i = 0; i < l->cnt; i++) {
        part_t *p = find_part(s, l->elems[i].topic, l->elems[i].partition);
        if (p && !lost)
            advance(s, p);
    }
    if (!lost)
        commit_dirty(s, true);
    for (int i = 0; i < l->cnt; i++) {
        part_t *p = find_part(s, l->elems[i].topic, l->elems[i].partition);
        if (!p)
            continue;
        dropped += p->n - p->head;
        remove_part(s, p);
    }
    log_info(FAC, "group \"%s\": %d partition%s %s; %zu message%s not acknowledged are left to "
                  "the next owner", s->group, l->cnt, l->cnt == 1 ? "" : "s",
             lost ? "lost" : "revoked", dropped, dropped == 1 ? "" : "s");
    if (cooperative) {
        rd_kafka_error_t *ke = rd_kafka_incremental_unassign(rk, l);
        if (ke)
            rd_kafka_error_destroy(ke);
    } else {
        rd_kafka_assign(rk, NULL);
    }
}

/* ---- connection ------------------------------------------------------------------------------ */

static void close_consumer(kafka_source_t *s)
{
    if (!s->rk)
        return;
    commit_dirty(s, true);
    rd_kafka_consumer_close(s->rk); /* leaves the group; the revoke callback runs */
    rd_kafka_destroy(s->rk);
    s->rk = NULL;
    while (s->nparts)
        remove_part(s, &s->parts[s->nparts - 1]);
    s->nagain = 0;
}

/* Subscribes to kafka.topics (comma-separated; "^..." is a regular expression). */
static pb_status_t subscribe(kafka_source_t *s, pb_error_t *err)
{
    rd_kafka_topic_partition_list_t *l = pb_kafka_topics(s->base.cfg);
    rd_kafka_resp_err_t e = l ? rd_kafka_subscribe(s->rk, l) : RD_KAFKA_RESP_ERR__INVALID_ARG;
    if (l)
        rd_kafka_topic_partition_list_destroy(l);
    if (e)
        return pb_fail(err, PB_FATAL, "kafka.topics \"%s\": cannot subscribe: %s",
                       s->base.cfg->kafka_topics, rd_kafka_err2str(e));
    return PB_OK;
}

static pb_status_t source_connect(pb_source_t *src, pb_error_t *err)
{
    kafka_source_t *s = (kafka_source_t *)src;
    close_consumer(s);
    const pb_kafka_forced_t forced[] = {
        {"group.id", s->group},
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {"enable.partition.eof", "true"}, /* see catch_up_by */
        {NULL, NULL},
    };
    const pb_kafka_callbacks_t cb = {.opaque = s, .rebalance = on_rebalance, .error = on_error};
    pb_status_t st = pb_kafka_new(src->cfg, PB_KAFKA_CONSUMER, forced, &cb, &s->rk, err);
    if (st != PB_OK)
        return st;
    if ((st = pb_kafka_check_reachable(s->rk, src->cfg, CONNECT_TIMEOUT_MS, err)) != PB_OK ||
        (st = subscribe(s, err)) != PB_OK) {
        rd_kafka_destroy(s->rk);
        s->rk = NULL;
        return st;
    }
    s->assigned = false;
    s->catch_up_by = pb_monotonic_ms() + JOIN_WAIT_MS;
    log_info(FAC, "consuming %s from kafka at %s as group \"%s\"", src->cfg->kafka_topics,
             src->cfg->kafka_brokers, s->group);
    return PB_OK;
}

/* ---- messages -------------------------------------------------------------------------------- */

/* The message's headers as a JSON object text (values as strings; a header without a value is
 * null), and the values postbox reads from them. */
static char *headers_json(const rd_kafka_message_t *m)
{
    rd_kafka_headers_t *h = NULL;
    json_t *obj = json_object();
    if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *v;
        size_t len;
        for (size_t i = 0; rd_kafka_header_get_all(h, i, &name, &v, &len) == 0; i++)
            json_object_set_new(obj, name, v ? json_stringn_nocheck(v, len) : json_null());
    }
    char *txt = json_dumps(obj, JSON_COMPACT);
    json_decref(obj);
    return txt;
}

/* A header's value as text (NULL when absent), copied into buf; returns its offset or -1. */
static long put_header(pb_buf_t *buf, const rd_kafka_message_t *m, const char *name)
{
    rd_kafka_headers_t *h = NULL;
    const void *v;
    size_t len;
    if (!name || !*name || rd_kafka_message_headers(m, &h) != RD_KAFKA_RESP_ERR_NO_ERROR ||
        rd_kafka_header_get_last(h, name, &v, &len) != RD_KAFKA_RESP_ERR_NO_ERROR || !v)
        return -1;
    long off = (long)buf->len;
    pb_buf_append(buf, v, len);
    pb_buf_putc(buf, '\0');
    return off;
}

static long put_text(pb_buf_t *buf, const char *s, size_t len)
{
    long off = (long)buf->len;
    pb_buf_append(buf, s, len);
    pb_buf_putc(buf, '\0');
    return off;
}

/* Fills out from m; the strings live in one block, which the caller frees (*block). */
static void decode(kafka_source_t *s, const rd_kafka_message_t *m, uint64_t tag,
                   pb_message_t *out, char **block)
{
    pb_buf_t b = {0};
    const char *id_header = *s->base.cfg->consume_message_id_header
                                ? s->base.cfg->consume_message_id_header
                                : "event_id";
    long o_id = put_header(&b, m, id_header);
    long o_type = put_header(&b, m, "event_type");
    long o_atype = put_header(&b, m, "aggregate_type");
    long o_aid = put_header(&b, m, "aggregate_id");
    long o_seq = put_header(&b, m, PB_SEQUENCE_HEADER);
    const char *topic = rd_kafka_topic_name(m->rkt);
    long o_topic = put_text(&b, topic, strlen(topic));
    long o_body = put_text(&b, m->payload ? m->payload : "", m->payload ? m->len : 0);
    char *hj = headers_json(m);
    long o_headers = put_text(&b, hj ? hj : "{}", strlen(hj ? hj : "{}"));
    free(hj);
    char *base = b.data; /* no more appends: the offsets become pointers */
#define AT(o) ((o) < 0 ? NULL : base + (o))
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    *out = (pb_message_t){
        .tag = tag,
        .message_id = AT(o_id),
        .type = AT(o_type),
        .aggregate_type = AT(o_atype),
        .aggregate_id = AT(o_aid),
        .sequence = o_seq < 0 ? 0 : pb_source_sequence(base + o_seq, strlen(base + o_seq)),
        .routing_key = AT(o_topic),
        .exchange = AT(o_topic),
        .body = AT(o_body),
        .body_len = m->payload ? m->len : 0,
        .headers = AT(o_headers),
        .timestamp = ts > 0 ? ts / 1000 : 0,
    };
#undef AT
    *block = base;
}

/* Records fresh message m of p (decoded, its copy kept until acknowledged); returns it. */
static const pb_message_t *record(kafka_source_t *s, part_t *p, const rd_kafka_message_t *m)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->entries = pb_realloc(p->entries, p->cap * sizeof *p->entries);
    }
    entry_t *e = &p->entries[p->n++];
    *e = (entry_t){.offset = m->offset, .tag = ++s->next_tag};
    decode(s, m, e->tag, &e->msg, &e->block);
    return &e->msg;
}

/* Consumer lag per assigned partition, from librdkafka's cached high watermarks. */
static void sample_lag(kafka_source_t *s)
{
    int64_t now = pb_monotonic_ms();
    if (now - s->lag_at < LAG_INTERVAL_MS)
        return;
    s->lag_at = now;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)s->nparts + 1);
    for (size_t i = 0; i < s->nparts; i++)
        rd_kafka_topic_partition_list_add(l, s->parts[i].topic, s->parts[i].partition);
    if (l->cnt && rd_kafka_position(s->rk, l) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        for (int i = 0; i < l->cnt; i++) {
            int64_t lo, hi;
            if (l->elems[i].offset < 0 ||
                rd_kafka_get_watermark_offsets(s->rk, l->elems[i].topic, l->elems[i].partition,
                                               &lo, &hi) != RD_KAFKA_RESP_ERR_NO_ERROR ||
                hi < 0)
                continue;
            pb_metrics_set_consumer_lag(l->elems[i].topic, l->elems[i].partition,
                                        hi > l->elems[i].offset ? hi - l->elems[i].offset : 0);
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
}

/* Whether each assigned partition was read to its end once since its assignment. */
static bool caught_up(const kafka_source_t *s)
{
    if (!s->assigned)
        return false;
    for (size_t i = 0; i < s->nparts; i++)
        if (!s->parts[i].at_end)
            return false;
    return true;
}

static pb_status_t source_receive(pb_source_t *src, pb_message_t *msgs, size_t max,
                                  int64_t wait_ms, int64_t batch_wait_ms, size_t *n,
                                  pb_error_t *err)
{
    kafka_source_t *s = (kafka_source_t *)src;
    *n = 0;
    free_blocks(s);
    if (!s->rk)
        return pb_fail(err, PB_TRANSIENT, "kafka: not connected");
    commit_dirty(s, false);
    sample_lag(s);
    size_t k = 0;
    for (; k < s->nagain && *n < max; k++) { /* requeued first */
        part_t *p;
        entry_t *e = find_entry(s, s->again[k], &p);
        if (!e || e->acked)
            continue; /* its partition was revoked meanwhile */
        msgs[*n] = e->msg;
        msgs[(*n)++].redelivered = true;
    }
    if (k > 0) { /* again is NULL until something was requeued */
        memmove(s->again, s->again + k, (s->nagain - k) * sizeof *s->again);
        s->nagain -= k;
    }
    if (max == 0) {
        rd_kafka_poll(s->rk, 0); /* error callbacks; a consumer's messages wait */
        return PB_OK;
    }
    int64_t until = pb_monotonic_ms() + (*n ? batch_wait_ms : wait_ms);
    bool first = *n == 0;
    while (*n < max) {
        int64_t left = until - pb_monotonic_ms();
        rd_kafka_message_t *m = rd_kafka_consumer_poll(s->rk, left > 0 ? (int)left : 0);
        if (!m) {
            if (!caught_up(s) && pb_monotonic_ms() < s->catch_up_by)
                until = pb_monotonic_ms() + 100;
            if (left <= 0 && until <= pb_monotonic_ms())
                break;
            continue;
        }
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            part_t *p = m->rkt ? find_part(s, rd_kafka_topic_name(m->rkt), m->partition) : NULL;
            if (p)
                p->at_end = true;
            rd_kafka_message_destroy(m);
            continue;
        }
        if (m->err) {
            rd_kafka_resp_err_t e = m->err;
            bool fatal = e == RD_KAFKA_RESP_ERR__FATAL;
            if (e != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                char kind[64];
                pb_metrics_broker_error("kafka", pb_kafka_error_kind(e, kind, sizeof kind));
                log_warn(FAC, "kafka consumer: %s", rd_kafka_message_errstr(m));
            }
            rd_kafka_message_destroy(m);
            if (fatal)
                return pb_fail(err, PB_TRANSIENT, "kafka consumer: fatal error %s",
                               rd_kafka_err2str(e));
            if (left <= 0)
                break;
            continue;
        }
        part_t *p = find_part(s, rd_kafka_topic_name(m->rkt), m->partition);
        if (p) /* else fetched before its partition was revoked: the next owner has it */
            msgs[(*n)++] = *record(s, p, m);
        rd_kafka_message_destroy(m);
        if (first && *n) {
            first = false;
            until = pb_monotonic_ms() + batch_wait_ms;
        }
    }
    return PB_OK;
}

static pb_status_t source_ack(pb_source_t *src, uint64_t tag, bool multiple, pb_error_t *err)
{
    (void)err;
    kafka_source_t *s = (kafka_source_t *)src;
    if (multiple) {
        for (size_t i = 0; i < s->nparts; i++) {
            part_t *p = &s->parts[i];
            for (size_t j = p->head; j < p->n && p->entries[j].tag <= tag; j++)
                p->entries[j].acked = true;
            advance(s, p);
        }
        return PB_OK;
    }
    part_t *p;
    entry_t *e = find_entry(s, tag, &p);
    if (!e)
        return PB_OK; /* its partition went to another member, which reads it again */
    e->acked = true;
    advance(s, p);
    return PB_OK;
}

static pb_status_t source_requeue(pb_source_t *src, uint64_t tag, pb_error_t *err)
{
    (void)err;
    kafka_source_t *s = (kafka_source_t *)src;
    part_t *p;
    entry_t *e = find_entry(s, tag, &p);
    if (!e || e->acked)
        return PB_OK; /* revoked meanwhile: the next owner reads it */
    if (s->nagain == s->cap_again) {
        s->cap_again = s->cap_again ? 2 * s->cap_again : 256;
        s->again = pb_realloc(s->again, s->cap_again * sizeof *s->again);
    }
    s->again[s->nagain++] = tag; /* stays unacknowledged: the commit stays below it */
    return PB_OK;
}

static void source_free(pb_source_t *src)
{
    if (!src)
        return;
    kafka_source_t *s = (kafka_source_t *)src;
    close_consumer(s);
    free_blocks(s);
    free(s->blocks);
    free(s->parts);
    free(s->again);
    free(s);
}

static const pb_source_ops_t kafka_source_ops = {
    .name = "kafka",
    .connect = source_connect,
    .receive = source_receive,
    .ack = source_ack,
    .requeue = source_requeue,
    .free = source_free,
};

pb_status_t pb_source_kafka_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    if (!*cfg->kafka_topics)
        return pb_fail(err, PB_FATAL, "kafka.topics is empty: name the topics to consume "
                                      "(comma-separated; ^regex for a pattern)");
    kafka_source_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &kafka_source_ops;
    s->base.cfg = cfg;
    pb_kafka_group(cfg, s->group, sizeof s->group);
    *out = &s->base;
    return PB_OK;
}
