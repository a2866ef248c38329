/* Kafka source (librdkafka 2.0.2): a member of consumer group kafka.group subscribed to
 * kafka.topics, with enable.auto.commit and enable.auto.offset.store off (forced). Offsets are
 * committed only for what the consumer acknowledged, which it does after the PostgreSQL
 * transaction holding the inbox rows committed.
 *
 * Kafka keeps one position per partition, not one acknowledgement per message: what may be
 * committed is kept by kafka_offsets.h (per partition, up to the lowest offset not acknowledged
 * yet), so a message the consumer still holds (a failed handler waiting for its retry, or what
 * waits behind it) is never skipped, whatever was acknowledged after it. Each record keeps the
 * message's decoded copy until it is acknowledged, since Kafka cannot put one message back:
 * retry later queues the tag, and the next receive hands its copy out again (redelivered); the
 * partition's commit stays below it.
 *
 * Rebalance (the callback runs inside rd_kafka_consumer_poll, on this thread): before a
 * partition is revoked the acknowledged prefixes are committed synchronously, then everything
 * recorded for it is dropped: the new owner gets those messages from the committed offset, and
 * an acknowledgement that arrives later for one of them finds no record and is ignored. An
 * assignment starts a partition's record afresh. A lost assignment commits nothing.
 *
 * Read-ahead (prefetch, while the consumer waits for PostgreSQL): the messages librdkafka holds
 * already are taken and decoded, up to a batch, and kept as tags for the next receive, which
 * hands them out after the retries; a tag whose partition was revoked meanwhile is passed over,
 * as a retry's is. librdkafka writes a byte to a pipe when its consumer queue becomes non-empty,
 * so the consumer can wait for the database and the broker at once.
 *
 * Commits are asynchronous and gathered: acknowledgements move the committable offsets, the
 * next receive (and close) commits them. A commit that fails is only logged: its messages come
 * again after a restart and the inbox absorbs them (--drain commits it again, see pending).
 *
 * --drain (source_pending): drained means what the cluster says, whichever member holds the
 * partitions: the group's committed offsets at the end of every partition of the subscribed
 * topics. A member that was killed keeps its partitions until its session times out, so the
 * drain may wait for its assignment, and for other members, but only while something moves;
 * see DRAIN_SLACK_MS for the bound.
 *
 * @thread loop (everything; librdkafka's callbacks are served by rd_kafka_consumer_poll). */
#include "source/source.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "broker/kafka/conf.h"
#include "common/clock.h"
#include "common/event.h"
#include "common/log.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "source/kafka_offsets.h"

#define FAC "source.kafka"
#define CONNECT_TIMEOUT_MS 5000
#define LAG_INTERVAL_MS 5000
#define JOIN_WAIT_MS 15000 /* longest wait for the assignment and for reading to the end (catch_up_by) */
#define ASK_TIMEOUT_MS 5000 /* one question to the cluster: metadata, committed offsets, an end */
/* --drain gives up once nothing moved (no assignment, no message, the group's lag did not
 * shrink) for 2 x session.timeout.ms + this: a dead member's partitions are free one session
 * timeout after its death; a member that died just before the rebalance can hold it up for
 * another one; this for the join itself (Kafka's group.initial.rebalance.delay.ms is 3 s) and
 * the first fetches. librdkafka's default session (45 s) gives 100 s. */
#define DRAIN_SLACK_MS 10000
#define DRAIN_SAY_MS 5000

/* A message handed out: its fields point into block. The record's data in offsets. */
typedef struct kmsg {
    pb_message_t msg;
    char *block;
} kmsg_t;

/* Tags waiting to be handed out, oldest first. */
typedef struct tag_queue {
    uint64_t *tags;
    size_t n, cap;
} tag_queue_t;

typedef struct kafka_source {
    pb_source_t base; /* first: the consumer holds a pb_source_t * */
    rd_kafka_t *rk;   /* NULL until connect */
    rd_kafka_queue_t *queue; /* the consumer queue, for its wake-up pipe; NULL until connect */
    int wake[2];             /* the pipe librdkafka writes to when the queue fills: read, write */
    rd_kafka_t *ask;  /* --drain's questions to the cluster (group_lag); NULL until then */
    char group[256];
    pb_kafka_offsets_t *offsets;
    tag_queue_t again;      /* settled "retry later": handed out first */
    tag_queue_t ahead;      /* read ahead (prefetch): handed out next */
    uint64_t ahead_bytes;   /* the bodies of those */
    /* messages settled (acknowledged, revoked): freed at the next receive, since the consumer
     * may still read the batch handed out last */
    kmsg_t **garbage;
    size_t ngarbage, cap_garbage;
    int64_t lag_at;
    /* Until every assigned partition has been read to its end once, "nothing arrived" does not
     * mean "nothing there" (joining the group and the first fetch take seconds): receive keeps
     * waiting for that, up to catch_up_by, so that `consume --drain` does not stop early. */
    bool assigned;       /* an assignment arrived since connect */
    int64_t catch_up_by; /* pb_monotonic_ms */
    /* --drain (source_pending) */
    bool got_partitions;  /* a partition was assigned since connect */
    bool reset_to_end;    /* auto.offset.reset latest: a partition never committed starts there */
    int64_t session_ms;   /* session.timeout.ms */
    int64_t moved_at;     /* last (re)connect, assignment, message handed out or shrinking lag */
    int64_t last_pending; /* the group's lag at the last ask; -1 before */
    int64_t said_at;
    char gave_up[1280];    /* why the drain gave up; connect refuses from then on */
} kafka_source_t;

/* kafka_offsets' release callback: the message goes at the next receive. */
static void release_kmsg(void *data, void *arg)
{
    kafka_source_t *s = arg;
    if (s->ngarbage == s->cap_garbage) {
        s->cap_garbage = s->cap_garbage ? 2 * s->cap_garbage : 256;
        s->garbage = pb_realloc(s->garbage, s->cap_garbage * sizeof *s->garbage);
    }
    s->garbage[s->ngarbage++] = data;
}

static void free_garbage(kafka_source_t *s)
{
    for (size_t i = 0; i < s->ngarbage; i++) {
        free(s->garbage[i]->block);
        free(s->garbage[i]);
    }
    s->ngarbage = 0;
}

static void add_commit(const char *topic, int32_t partition, int64_t next_offset, void *arg)
{
    rd_kafka_topic_partition_list_add(arg, topic, partition)->offset = next_offset;
}

/* Commits every partition whose committable offset moved; async unless sync. */
static void commit_acked(kafka_source_t *s, bool sync)
{
    if (!s->rk)
        return;
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(16);
    if (pb_kafka_offsets_take_commits(s->offsets, add_commit, l)) {
        rd_kafka_resp_err_t e = rd_kafka_commit(s->rk, l, sync ? 0 : 1);
        if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET) {
            char kind[64];
            pb_metrics_broker_error("kafka", pb_kafka_error_kind(e, kind, sizeof kind));
            log_warn(FAC, "committing the offsets of group \"%s\": %s (the messages come again "
                          "after a restart; the inbox absorbs them)", s->group, rd_kafka_err2str(e));
        }
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
        for (int i = 0; i < l->cnt; i++)
            pb_kafka_offsets_assign(s->offsets, l->elems[i].topic, l->elems[i].partition);
        s->assigned = true;
        s->catch_up_by = pb_monotonic_ms() + JOIN_WAIT_MS;
        if (l->cnt > 0) {
            s->got_partitions = true;
            s->moved_at = pb_monotonic_ms();
        }
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
    if (!lost)
        commit_acked(s, true);
    size_t dropped = 0;
    for (int i = 0; i < l->cnt; i++)
        dropped += pb_kafka_offsets_revoke(s->offsets, l->elems[i].topic, l->elems[i].partition);
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
    commit_acked(s, true);
    if (s->queue) {
        rd_kafka_queue_io_event_enable(s->queue, -1, NULL, 0);
        rd_kafka_queue_destroy(s->queue);
        s->queue = NULL;
    }
    rd_kafka_consumer_close(s->rk); /* leaves the group; the revoke callback runs */
    rd_kafka_destroy(s->rk);
    s->rk = NULL;
    if (s->ask)
        rd_kafka_destroy(s->ask);
    s->ask = NULL;
    pb_kafka_offsets_clear(s->offsets);
    s->again.n = s->ahead.n = 0;
    s->ahead_bytes = 0;
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

/* What --drain needs from the client's configuration (librdkafka's defaults included). */
static void read_drain_conf(kafka_source_t *s)
{
    char v[64];
    size_t n = sizeof v;
    s->session_ms = 45000;
    if (rd_kafka_conf_get(rd_kafka_conf(s->rk), "session.timeout.ms", v, &n) == RD_KAFKA_CONF_OK)
        s->session_ms = strtoll(v, NULL, 10);
    rd_kafka_topic_conf_t *tc = rd_kafka_default_topic_conf_dup(s->rk);
    n = sizeof v;
    s->reset_to_end = tc &&
                      rd_kafka_topic_conf_get(tc, "auto.offset.reset", v, &n) == RD_KAFKA_CONF_OK &&
                      (!strcmp(v, "largest") || !strcmp(v, "latest") || !strcmp(v, "end"));
    if (tc)
        rd_kafka_topic_conf_destroy(tc);
}

static pb_status_t source_connect(pb_source_t *src, pb_error_t *err)
{
    kafka_source_t *s = (kafka_source_t *)src;
    close_consumer(s);
    if (*s->gave_up) /* the consumer takes only PB_FATAL from a connect as the end */
        return pb_fail(err, PB_FATAL, "%s", s->gave_up);
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
    s->queue = rd_kafka_queue_get_consumer(s->rk);
    if (s->queue)
        rd_kafka_queue_io_event_enable(s->queue, s->wake[1], "1", 1);
    s->assigned = s->got_partitions = false;
    int64_t now = pb_monotonic_ms();
    s->catch_up_by = now + JOIN_WAIT_MS;
    s->moved_at = now; /* a (re)connect joins the group afresh */
    read_drain_conf(s);
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

/* Consumer lag per assigned partition, from librdkafka's cached high watermarks. */
static void sample_lag(kafka_source_t *s)
{
    int64_t now = pb_monotonic_ms();
    if (now - s->lag_at < LAG_INTERVAL_MS)
        return;
    s->lag_at = now;
    size_t n = pb_kafka_offsets_count(s->offsets);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new((int)n + 1);
    for (size_t i = 0; i < n; i++) {
        int32_t partition;
        const char *topic = pb_kafka_offsets_partition(s->offsets, i, &partition);
        rd_kafka_topic_partition_list_add(l, topic, partition);
    }
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
    return s->assigned && pb_kafka_offsets_all_at_end(s->offsets);
}

/* Takes one fresh message: records it (its decoded copy kept until acknowledged) and puts it
 * into *out; false when its partition was revoked after the fetch (the next owner has it). */
static bool take(kafka_source_t *s, const rd_kafka_message_t *m, pb_message_t *out)
{
    kmsg_t *k = pb_malloc(sizeof *k);
    uint64_t tag = pb_kafka_offsets_record(s->offsets, rd_kafka_topic_name(m->rkt), m->partition,
                                           m->offset, k);
    if (!tag) {
        free(k);
        return false;
    }
    decode(s, m, tag, &k->msg, &k->block);
    *out = k->msg;
    return true;
}

static void tag_push(tag_queue_t *q, uint64_t tag)
{
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 256;
        q->tags = pb_realloc(q->tags, q->cap * sizeof *q->tags);
    }
    q->tags[q->n++] = tag;
}

/* Hands out the queued tags' messages into msgs[*n..max), within the byte budget (one message
 * may exceed it alone); drops what it handed out or found revoked from the queue. Returns the
 * bodies' bytes handed out. */
static uint64_t hand_out(kafka_source_t *s, tag_queue_t *q, bool redelivered, pb_message_t *msgs,
                         size_t max, size_t *n, uint64_t bytes, uint64_t budget)
{
    uint64_t given = 0;
    size_t k = 0;
    for (; k < q->n && *n < max && !(*n && bytes + given >= budget); k++) {
        kmsg_t *km = pb_kafka_offsets_lookup(s->offsets, q->tags[k]);
        if (!km)
            continue; /* its partition was revoked meanwhile */
        msgs[*n] = km->msg;
        msgs[(*n)++].redelivered = redelivered;
        given += km->msg.body_len;
    }
    if (k > 0) {
        memmove(q->tags, q->tags + k, (q->n - k) * sizeof *q->tags);
        q->n -= k;
    }
    return given;
}

/* One poll of the consumer, waiting up to timeout_ms: a message to take into *out, else NULL
 * (*idle when nothing came; an end of partition or an error is dealt with here). */
static pb_status_t poll_fresh(kafka_source_t *s, int timeout_ms, rd_kafka_message_t **out,
                              bool *idle, pb_error_t *err)
{
    *out = NULL;
    rd_kafka_message_t *m = rd_kafka_consumer_poll(s->rk, timeout_ms);
    *idle = m == NULL;
    if (!m)
        return PB_OK;
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (m->rkt)
            pb_kafka_offsets_set_at_end(s->offsets, rd_kafka_topic_name(m->rkt), m->partition);
        rd_kafka_message_destroy(m);
        return PB_OK;
    }
    if (m->err) {
        rd_kafka_resp_err_t e = m->err;
        char kind[64];
        pb_metrics_broker_error("kafka", pb_kafka_error_kind(e, kind, sizeof kind));
        log_warn(FAC, "kafka consumer: %s", rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
        if (e == RD_KAFKA_RESP_ERR__FATAL)
            return pb_fail(err, PB_TRANSIENT, "kafka consumer: fatal error %s",
                           rd_kafka_err2str(e));
        return PB_OK;
    }
    *out = m;
    return PB_OK;
}

static pb_status_t source_receive(pb_source_t *src, pb_message_t *msgs, size_t max,
                                  int64_t wait_ms, int64_t batch_wait_ms, size_t *n,
                                  pb_error_t *err)
{
    kafka_source_t *s = (kafka_source_t *)src;
    *n = 0;
    free_garbage(s);
    if (!s->rk)
        return pb_fail(err, PB_TRANSIENT, "kafka: not connected");
    commit_acked(s, false);
    sample_lag(s);
    /* the bodies of a batch stay within consume.batch_bytes (one message may exceed it alone) */
    uint64_t budget = (uint64_t)s->base.cfg->consume_batch_bytes;
    uint64_t bytes = hand_out(s, &s->again, true, msgs, max, n, 0, budget);
    size_t retried = *n;
    uint64_t ahead = hand_out(s, &s->ahead, false, msgs, max, n, bytes, budget);
    bytes += ahead;
    s->ahead_bytes = s->ahead.n ? s->ahead_bytes - ahead : 0;
    bool fresh = *n > retried;
    if (max == 0) {
        rd_kafka_poll(s->rk, 0); /* error callbacks; a consumer's messages wait */
        return PB_OK;
    }
    int64_t until = pb_monotonic_ms() + (*n ? batch_wait_ms : wait_ms);
    bool first = *n == 0;
    while (*n < max && !(*n && bytes >= budget)) {
        int64_t left = until - pb_monotonic_ms();
        rd_kafka_message_t *m;
        bool idle;
        pb_status_t st = poll_fresh(s, left > 0 ? (int)left : 0, &m, &idle, err);
        if (st != PB_OK)
            return st;
        if (idle) {
            if (!caught_up(s) && pb_monotonic_ms() < s->catch_up_by)
                until = pb_monotonic_ms() + 100;
            if (left <= 0 && until <= pb_monotonic_ms())
                break;
            continue;
        }
        if (!m)
            continue;
        if (take(s, m, &msgs[*n])) {
            bytes += msgs[(*n)++].body_len;
            fresh = true;
        }
        rd_kafka_message_destroy(m);
        if (first && *n) {
            first = false;
            until = pb_monotonic_ms() + batch_wait_ms;
        }
    }
    if (fresh)
        s->moved_at = pb_monotonic_ms(); /* progress, for --drain's bound */
    return PB_OK;
}

/* Whether a read-ahead of max messages (or of a batch's bytes) is kept already. */
static bool ahead_full(const kafka_source_t *s, size_t max)
{
    return s->ahead.n >= max || s->ahead_bytes >= (uint64_t)s->base.cfg->consume_batch_bytes;
}

static int source_prefetch_fd(pb_source_t *src, size_t max)
{
    kafka_source_t *s = (kafka_source_t *)src;
    if (!s->rk || !s->queue || ahead_full(s, max))
        return -1;
    /* librdkafka writes only when its queue turns non-empty: what a previous read-ahead left
     * there would not wake the consumer */
    if (rd_kafka_queue_length(s->queue) > 0 && write(s->wake[1], "1", 1) < 0 && errno != EAGAIN)
        return -1;
    return s->wake[0];
}

static pb_status_t source_prefetch(pb_source_t *src, size_t max, pb_error_t *err)
{
    kafka_source_t *s = (kafka_source_t *)src;
    char sink[64];
    while (read(s->wake[0], sink, sizeof sink) > 0)
        ; /* emptied: the next wake-up is a new one */
    if (!s->rk)
        return PB_OK;
    while (!ahead_full(s, max)) {
        rd_kafka_message_t *m;
        bool idle;
        pb_status_t st = poll_fresh(s, 0, &m, &idle, err);
        if (st != PB_OK)
            return st;
        if (idle)
            break;
        if (!m)
            continue;
        pb_message_t msg;
        if (take(s, m, &msg)) {
            tag_push(&s->ahead, msg.tag);
            s->ahead_bytes += msg.body_len;
        }
        rd_kafka_message_destroy(m);
    }
    return PB_OK;
}

/* Done and dead mark the offset acknowledged (committed once everything below it is); retry
 * later queues the tag, and a later receive hands its copy out again. A tag whose partition
 * went to another member meanwhile is passed over: the next owner reads it again. */
static pb_status_t source_settle(pb_source_t *src, const pb_settle_t *list, size_t n,
                                 pb_error_t *err)
{
    (void)err;
    kafka_source_t *s = (kafka_source_t *)src;
    for (size_t i = 0; i < n; i++) {
        uint64_t tag = list[i].tag;
        if (list[i].how != PB_SETTLE_RETRY) {
            (void)pb_kafka_offsets_ack(s->offsets, tag);
            continue;
        }
        if (pb_kafka_offsets_lookup(s->offsets, tag))
            tag_push(&s->again, tag); /* stays unacknowledged: the commit stays below it */
    }
    return PB_OK;
}

/* ---- --drain ------------------------------------------------------------------------------- */

/* Whether topic is one kafka.topics subscribes to: a name, or "^..." a regular expression. */
static bool subscribed(const rd_kafka_topic_partition_list_t *subs, const char *topic)
{
    for (int i = 0; i < subs->cnt; i++) {
        const char *want = subs->elems[i].topic;
        if (want[0] != '^') {
            if (strcmp(want, topic) == 0)
                return true;
            continue;
        }
        regex_t re;
        if (regcomp(&re, want, REG_EXTENDED | REG_NOSUB) != 0)
            continue; /* librdkafka refused it at subscribe */
        bool match = regexec(&re, topic, 0, NULL, 0) == 0;
        regfree(&re);
        if (match)
            return true;
    }
    return false;
}

/* Adds every partition of the subscribed topics to l, from the cluster's metadata. */
static rd_kafka_resp_err_t subscribed_partitions(kafka_source_t *s,
                                                 rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_topic_partition_list_t *subs = pb_kafka_topics(s->base.cfg);
    if (!subs)
        return RD_KAFKA_RESP_ERR_NO_ERROR;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(s->ask, 1, NULL, &md, ASK_TIMEOUT_MS);
    for (int t = 0; !e && t < md->topic_cnt; t++) {
        const struct rd_kafka_metadata_topic *mt = &md->topics[t];
        if (mt->err || !subscribed(subs, mt->topic))
            continue; /* an unknown topic has nothing to consume */
        for (int p = 0; p < mt->partition_cnt; p++)
            rd_kafka_topic_partition_list_add(l, mt->topic, mt->partitions[p].id);
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_partition_list_destroy(subs);
    return e;
}

/* Commits again, synchronously, what this consumer acknowledged in a partition of l (committed
 * offsets, from the cluster) where the cluster has less: an asynchronous commit that failed says
 * nothing. Updates l where that worked. */
static void commit_again(kafka_source_t *s, rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_topic_partition_list_t *again = rd_kafka_topic_partition_list_new(4);
    for (int i = 0; i < l->cnt; i++) {
        int64_t next;
        if (pb_kafka_offsets_find(s->offsets, l->elems[i].topic, l->elems[i].partition, &next) &&
            next > l->elems[i].offset)
            rd_kafka_topic_partition_list_add(again, l->elems[i].topic, l->elems[i].partition)
                ->offset = next;
    }
    rd_kafka_resp_err_t e = again->cnt ? rd_kafka_commit(s->rk, again, 0)
                                       : RD_KAFKA_RESP_ERR_NO_ERROR;
    if (e)
        log_warn(FAC, "committing the offsets of group \"%s\" again: %s", s->group,
                 rd_kafka_err2str(e));
    for (int i = 0; !e && i < again->cnt; i++)
        rd_kafka_topic_partition_list_find(l, again->elems[i].topic, again->elems[i].partition)
            ->offset = again->elems[i].offset;
    rd_kafka_topic_partition_list_destroy(again);
}

/* The messages past the group's committed offsets over every partition of the subscribed
 * topics, asked of the cluster (a partition never committed counts from where the group would
 * start it, auto.offset.reset); -1 when the cluster cannot be asked. what gets the reason or a
 * few of the partitions that lag. */
static int64_t group_lag(kafka_source_t *s, char *what, size_t n)
{
    *what = '\0';
    if (!s->ask) {
        /* A client of its own: while this one's JoinGroup waits at the coordinator, a broker
         * answers nothing else on that connection. It joins no group, it only asks. */
        const pb_kafka_forced_t forced[] = {{"group.id", s->group},
                                            {"enable.auto.commit", "false"},
                                            {NULL, NULL}};
        pb_error_t err;
        if (pb_kafka_new(s->base.cfg, PB_KAFKA_CONSUMER, forced, NULL, &s->ask, &err) != PB_OK) {
            snprintf(what, n, "%s", err.msg);
            return -1;
        }
    }
    rd_kafka_poll(s->ask, 0);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(16);
    rd_kafka_resp_err_t e = subscribed_partitions(s, l);
    if (!e && l->cnt)
        e = rd_kafka_committed(s->ask, l, ASK_TIMEOUT_MS);
    if (!e)
        commit_again(s, l);
    int64_t total = 0;
    size_t len = 0;
    int shown = 0;
    for (int i = 0; !e && i < l->cnt; i++) {
        const rd_kafka_topic_partition_t *tp = &l->elems[i];
        int64_t lo, hi, next;
        e = rd_kafka_query_watermark_offsets(s->ask, tp->topic, tp->partition, &lo, &hi,
                                             ASK_TIMEOUT_MS);
        if (e)
            break;
        int64_t from = tp->offset >= 0 ? tp->offset : s->reset_to_end ? hi : lo;
        if (hi <= from)
            continue;
        total += hi - from;
        if (shown++ < 3 && len < n)
            len += (size_t)snprintf(what + len, n - len, "%s%s [%" PRId32 "] at %" PRId64
                                    " of %" PRId64 ", %s", len ? "; " : "", tp->topic,
                                    tp->partition, from, hi,
                                    pb_kafka_offsets_find(s->offsets, tp->topic, tp->partition,
                                                          &next)
                                        ? "assigned here"
                                        : "not assigned here");
        else if (shown == 4 && len < n)
            len += (size_t)snprintf(what + len, n - len, "; ...");
    }
    rd_kafka_topic_partition_list_destroy(l);
    if (e) {
        snprintf(what, n, "the cluster could not be asked: %s", rd_kafka_err2str(e));
        return -1;
    }
    return total;
}

/* Drained: the cluster says the group's committed offsets are at the end of every partition of
 * the subscribed topics, whoever holds them. Until then *pending is that lag, while something
 * moves; PB_FATAL (and every connect after it) once nothing moved for the bound (DRAIN_SLACK_MS):
 * no assignment came, or the partitions of other members stay where they are. */
static pb_status_t source_pending(pb_source_t *src, int64_t *pending, pb_error_t *err)
{
    kafka_source_t *s = (kafka_source_t *)src;
    if (!s->rk)
        return pb_fail(err, PB_TRANSIENT, "kafka: not connected");
    commit_acked(s, true);
    char what[512];
    int64_t lag = group_lag(s, what, sizeof what);
    int64_t now = pb_monotonic_ms();
    if (lag == 0) {
        *pending = 0;
        return PB_OK;
    }
    if (lag > 0) {
        if (s->last_pending >= 0 && lag < s->last_pending)
            s->moved_at = now;
        s->last_pending = lag;
    }
    *pending = s->last_pending > 0 ? s->last_pending : 1; /* not known: not drained */
    int64_t bound = 2 * s->session_ms + DRAIN_SLACK_MS;
    if (now - s->moved_at < bound) {
        if (now - s->said_at >= DRAIN_SAY_MS) {
            s->said_at = now;
            log_info(FAC, "--drain: group \"%s\" %s (%s); giving up in %lld s unless something "
                          "moves", s->group,
                     s->got_partitions ? "has messages past its committed offsets"
                                       : "assigned no partition to this consumer yet",
                     what, (long long)((bound - (now - s->moved_at) + 999) / 1000));
        }
        return PB_OK;
    }
    char count[32] = "an unknown number of";
    if (lag > 0)
        snprintf(count, sizeof count, "%lld", (long long)lag);
    if (!s->got_partitions)
        snprintf(s->gave_up, sizeof s->gave_up,
                 "--drain gave up: group \"%s\" assigned no partition to this consumer within "
                 "%lld s (2 x session.timeout.ms + %d s) and the group has %s message(s) past "
                 "its committed offsets (%.300s); a member that died holds its partitions until "
                 "its session times out", s->group, (long long)(bound / 1000), DRAIN_SLACK_MS / 1000,
                 count, what);
    else
        snprintf(s->gave_up, sizeof s->gave_up,
                 "--drain gave up: nothing moved for %lld s (2 x session.timeout.ms + %d s) and "
                 "group \"%s\" still has %s message(s) past its committed offsets (%.300s)",
                 (long long)(bound / 1000), DRAIN_SLACK_MS / 1000, s->group, count, what);
    return pb_fail(err, PB_FATAL, "%s", s->gave_up);
}

static void source_free(pb_source_t *src)
{
    if (!src)
        return;
    kafka_source_t *s = (kafka_source_t *)src;
    close_consumer(s);
    pb_kafka_offsets_free(s->offsets);
    free_garbage(s);
    free(s->garbage);
    free(s->again.tags);
    free(s->ahead.tags);
    close(s->wake[0]);
    close(s->wake[1]);
    free(s);
}

/* One topic per aggregate type (kafka.topic without {event_type}) carries every event of an
 * aggregate, and the key keeps them in one partition. */
static bool source_takes_every_event(const pb_source_t *src, char *why, size_t n)
{
    return pb_source_template_keeps_aggregate("kafka.topic", src->cfg->kafka_topic, why, n);
}

static const pb_source_ops_t kafka_source_ops = {
    .name = "kafka",
    .connect = source_connect,
    .receive = source_receive,
    .settle = source_settle,
    .prefetch = source_prefetch,
    .prefetch_fd = source_prefetch_fd,
    .pending = source_pending,
    .takes_every_event = source_takes_every_event,
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
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        free(s);
        return pb_fail(err, PB_FATAL, "kafka: cannot create a pipe: %s", strerror(errno));
    }
    s->offsets = pb_kafka_offsets_new(release_kmsg, s);
    s->last_pending = -1;
    pb_kafka_group(cfg, s->group, sizeof s->group);
    *out = &s->base;
    return PB_OK;
}
