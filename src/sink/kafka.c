/* Kafka sink (librdkafka 2.0.2): an idempotent producer (enable.idempotence, acks=all, forced)
 * publishes the batch with rd_kafka_producev, key = aggregate_id, so an aggregate's events stay
 * in one partition, in order; then await serves librdkafka's delivery reports (one per message,
 * from rd_kafka_poll on this thread) until every message of the batch has one.
 *
 * Each message's opaque is its index in the batch + 1; a report that arrives while no batch is
 * open (after the producer was dropped) is ignored. A report's error decides the outcome: none
 * is PUBLISHED, one that no retry can cure (too large, unknown or invalid topic, refused record;
 * pb_kafka_error_permanent) is REJECT with the reason, anything else (librdkafka gave up within
 * message.timeout.ms after its own retries) is RETRY. librdkafka retries a failed produce
 * request by itself, in order, without duplicates (the idempotent producer); those retries are
 * counted from its statistics (statistics.interval.ms) and logged.
 *
 * A fatal error of the idempotent producer (error_cb with RD_KAFKA_RESP_ERR__FATAL) cannot be
 * recovered in place: the batch's open events are RETRY, the producer is destroyed and connect
 * makes a new one.
 *
 * @thread loop (everything: librdkafka calls dr_cb and error_cb from rd_kafka_poll). */
#include "sink/sink.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <librdkafka/rdkafka.h>

#include "broker/kafka/conf.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/route.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "sink/cloudevents.h"

#define FAC "sink.kafka"
#define TOPIC_MAX 250       /* Kafka's limit is 249 bytes */
#define CONNECT_TIMEOUT_MS 5000
#define POLL_EVERY 1000     /* produced messages between two rd_kafka_poll(0) in send */
#define AWAIT_SLACK_MS 10000 /* past message.timeout.ms, a report that has not come is lost */
#define TOPICS_KEPT 64       /* topic handles kept (with their metadata fetched up front) */

static const pb_kafka_forced_t producer_forced[] = {
    {"enable.idempotence", "true"},
    {"acks", "all"},
    {NULL, NULL},
};

typedef struct kafka_sink {
    pb_sink_t base; /* first: the relay holds a pb_sink_t * */
    rd_kafka_t *rk; /* NULL until connect, and after a fatal error */
    bool fatal;
    char fatal_reason[300];
    int64_t message_timeout_ms;
    uint64_t reports;     /* delivery reports served for this producer */
    int64_t resent_seen;  /* messages librdkafka sent again, as last logged (on_stats) */
    pb_buf_t scratch; /* header values */
    /* Topics produced to, each fetched once through a metadata request of its own: librdkafka
     * 2.0.2 looks a new topic up only on its one-second timer, which delayed every relay's first
     * batch (and the first event of a new aggregate type) by up to a second. */
    rd_kafka_topic_t *topics[TOPICS_KEPT];
    size_t ntopics;

    /* the batch in flight */
    bool open;
    const pb_event_t *events;
    pb_result_t *results;
    size_t n, nsent, nreported, failed, rejected;
    char first_error[sizeof ((pb_result_t *)0)->error];
} kafka_sink_t;

static const pb_sink_ops_t kafka_ops;

/* ---- callbacks (served by rd_kafka_poll on the loop's thread) ------------------------------- */

static void on_error(rd_kafka_t *rk, int code, const char *reason, void *opaque)
{
    kafka_sink_t *s = opaque;
    rd_kafka_resp_err_t e = (rd_kafka_resp_err_t)code;
    if (e == RD_KAFKA_RESP_ERR__FATAL) {
        char why[256];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof why);
        snprintf(s->fatal_reason, sizeof s->fatal_reason, "fatal producer error %s: %s",
                 rd_kafka_err2name(orig), why);
        s->fatal = true;
        log_error(FAC, "%s", s->fatal_reason);
        return;
    }
    log_warn(FAC, "kafka at %s: %s", s->base.cfg->kafka_brokers, reason);
}

/* Sets event i's outcome from its delivery error. */
static void settle(kafka_sink_t *s, size_t i, rd_kafka_resp_err_t e)
{
    pb_result_t *r = &s->results[i];
    if (!e) {
        pb_result_set(r, PB_OUT_PUBLISHED, NULL);
        return;
    }
    char kind[64];
    pb_kafka_error_kind(e, kind, sizeof kind);
    pb_metrics_broker_error("kafka", kind);
    bool permanent = pb_kafka_error_permanent(e);
    pb_result_setf(r, permanent ? PB_OUT_REJECT : PB_OUT_RETRY, "kafka %s: %s (%s)",
                   permanent ? "refused the message" : "delivery failed", rd_kafka_err2str(e),
                   rd_kafka_err2name(e));
    if (permanent)
        s->rejected++;
    else if (!s->failed++)
        snprintf(s->first_error, sizeof s->first_error, "%s", r->error);
}

/* librdkafka's statistics (every statistics.interval.ms): how many messages the idempotent
 * producer sent again by itself after a retriable broker error such as NOT_ENOUGH_REPLICAS,
 * before any delivery report. It exposes no such counter, but every transmission counts in a
 * partition's txmsgs: sent again = transmitted - still in flight - reported. The statistics op
 * is queued behind the reports of what completed before it, so the figures agree. */
static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    kafka_sink_t *s = opaque;
    json_t *root = json_loadb(json, len, 0, NULL);
    const char *tname, *pname;
    json_t *t, *p;
    int64_t tx = 0, inflight = 0;
    json_object_foreach(json_object_get(root, "topics"), tname, t) {
        json_object_foreach(json_object_get(t, "partitions"), pname, p) {
            tx += json_integer_value(json_object_get(p, "txmsgs"));
            inflight += json_integer_value(json_object_get(p, "msgs_inflight"));
        }
    }
    json_decref(root);
    int64_t resent = tx - inflight - (int64_t)s->reports;
    if (resent > s->resent_seen) {
        pb_metrics_broker_retries("kafka", (uint64_t)(resent - s->resent_seen));
        log_info(FAC, "librdkafka retried %lld messages the brokers refused for a while (%lld "
                      "retried by this producer in all)", (long long)(resent - s->resent_seen),
                 (long long)resent);
        s->resent_seen = resent;
    }
    return 0; /* json is librdkafka's to free */
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    kafka_sink_t *s = opaque;
    uintptr_t idx = (uintptr_t)m->_private;
    s->reports++;
    if (!s->open || idx == 0 || idx > s->n || s->results[idx - 1].outcome != PB_OUT_UNTRIED)
        return; /* a report of a batch given up */
    settle(s, idx - 1, m->err);
    s->nreported++;
}

/* ---- connection ----------------------------------------------------------------------------- */

static void drop_producer(kafka_sink_t *s)
{
    s->open = false; /* reports served while it is destroyed touch nothing */
    for (size_t i = 0; i < s->ntopics; i++)
        rd_kafka_topic_destroy(s->topics[i]);
    s->ntopics = 0;
    if (s->rk) {
        rd_kafka_purge(s->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_destroy(s->rk);
        s->rk = NULL;
    }
    s->fatal = false;
}

/* A new producer (the properties are checked here) and its message.timeout.ms. */
static pb_status_t make_producer(kafka_sink_t *s, pb_error_t *err)
{
    drop_producer(s);
    const pb_kafka_callbacks_t cb = {
        .opaque = s, .delivery = on_delivery, .error = on_error, .stats = on_stats};
    pb_status_t st = pb_kafka_new(s->base.cfg, PB_KAFKA_PRODUCER, producer_forced, &cb, &s->rk,
                                  err);
    if (st != PB_OK)
        return st;
    char buf[32];
    size_t len = sizeof buf;
    s->message_timeout_ms = 0;
    s->reports = 0;
    s->resent_seen = 0;
    if (rd_kafka_conf_get(rd_kafka_conf(s->rk), "message.timeout.ms", buf, &len) ==
        RD_KAFKA_CONF_OK)
        s->message_timeout_ms = strtoll(buf, NULL, 10);
    if (s->message_timeout_ms <= 0)
        s->message_timeout_ms = 300000; /* librdkafka's default */
    return PB_OK;
}

static pb_status_t sink_connect(pb_sink_t *snk, pb_error_t *err)
{
    kafka_sink_t *s = (kafka_sink_t *)snk;
    pb_status_t st;
    if ((!s->rk || s->fatal) && (st = make_producer(s, err)) != PB_OK)
        return st;
    /* on failure the producer stays: librdkafka keeps trying to reach the brokers */
    if ((st = pb_kafka_check_reachable(s->rk, snk->cfg, CONNECT_TIMEOUT_MS, err)) != PB_OK)
        return st;
    log_info(FAC, "connected to kafka at %s (idempotent producer, acks=all, message.timeout.ms "
                  "%lld)", snk->cfg->kafka_brokers, (long long)s->message_timeout_ms);
    return PB_OK;
}

/* ---- messages ------------------------------------------------------------------------------- */

/* The topic of ev: the row's destination, else the template. False when it does not fit. */
static bool render_topic(const pb_config_t *cfg, const pb_event_t *ev, char *out, size_t n)
{
    return pb_route_render(cfg->kafka_topic, ev, out, n);
}

/* Kafka's rule for topic names: 1-249 of [a-zA-Z0-9._-], not "." or "..". */
static bool topic_valid(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n >= TOPIC_MAX || strcmp(t, ".") == 0 || strcmp(t, "..") == 0)
        return false;
    return strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

static bool sink_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *res)
{
    char topic[TOPIC_MAX + 1];
    if (!render_topic(snk->cfg, ev, topic, sizeof topic)) {
        pb_result_setf(res, PB_OUT_REJECT, "topic longer than %d bytes", TOPIC_MAX - 1);
        return false;
    }
    if (!topic_valid(topic)) {
        pb_result_setf(res, PB_OUT_REJECT, "invalid Kafka topic \"%.150s\" (1-249 of a-z A-Z 0-9 "
                                           ". _ -)", topic);
        return false;
    }
    return true;
}

static bool own_key(const pb_header_t *h)
{
    return pb_header_is(h, "event_id") || pb_header_is(h, "event_type") ||
           pb_header_is(h, "aggregate_type") || pb_header_is(h, "aggregate_id") ||
           pb_header_is(h, PB_SEQUENCE_HEADER);
}

/* The message's headers: the event's JSON headers (strings as they are, anything else as its
 * compact JSON text), then postbox's own, which win over a header of the same name. */
static rd_kafka_headers_t *build_headers(kafka_sink_t *s, const pb_event_t *ev, pb_result_t *res)
{
    pb_ce_t *ce = s->base.ce;
    size_t cap = pb_header_count(ev) + 5 + (ce ? PB_CE_NATTRS : 0);
    rd_kafka_headers_t *h = rd_kafka_headers_new(cap);
    pb_header_iter_t it;
    pb_header_t u;
    for (pb_header_iter_init(&it, ev); pb_header_next(&it, &u);) {
        if (own_key(&u) || pb_ce_owns(ce, u.key, u.klen))
            continue;
        if (u.val) {
            rd_kafka_header_add(h, u.key, (ssize_t)u.klen, u.val, (ssize_t)u.vlen);
            continue;
        }
        char *txt = json_dumps(u.json, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!txt) {
            pb_result_set(res, PB_OUT_RETRY, "out of memory building message headers");
            rd_kafka_headers_destroy(h);
            return NULL;
        }
        rd_kafka_header_add(h, u.key, (ssize_t)u.klen, txt, -1);
        free(txt);
    }
    const char *keys[4] = {"event_id", "event_type", "aggregate_type", "aggregate_id"};
    const char *vals[4] = {ev->event_id, ev->event_type, ev->aggregate_type, ev->aggregate_id};
    for (int k = 0; k < 4; k++)
        if (vals[k])
            rd_kafka_header_add(h, keys[k], -1, vals[k], -1);
    if (ev->sequence > 0) {
        pb_buf_reset(&s->scratch);
        pb_buf_printf(&s->scratch, "%lld", (long long)ev->sequence);
        rd_kafka_header_add(h, PB_SEQUENCE_HEADER, -1, s->scratch.data, (ssize_t)s->scratch.len);
    }
    if (ce) { /* CloudEvents (Kafka binding): rd_kafka_header_add copies names and values */
        pb_ce_attr_t attrs[PB_CE_NATTRS];
        size_t na = pb_ce_attrs(ce, ev, attrs);
        for (size_t a = 0; a < na; a++)
            rd_kafka_header_add(h, attrs[a].name, (ssize_t)attrs[a].name_len, attrs[a].value,
                                (ssize_t)attrs[a].len);
    }
    return h;
}

/* The handle of topic, its metadata fetched when it is new (NULL once TOPICS_KEPT are kept:
 * then the topic goes by name). */
static rd_kafka_topic_t *topic_handle(kafka_sink_t *s, const char *topic)
{
    for (size_t i = 0; i < s->ntopics; i++)
        if (strcmp(rd_kafka_topic_name(s->topics[i]), topic) == 0)
            return s->topics[i];
    if (s->ntopics == TOPICS_KEPT)
        return NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(s->rk, topic, NULL);
    if (!rkt)
        return NULL;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(s->rk, 0, rkt, &md, CONNECT_TIMEOUT_MS);
    if (md)
        rd_kafka_metadata_destroy(md);
    if (e) /* not fatal: librdkafka keeps asking, and the delivery report tells */
        log_warn(FAC, "kafka at %s: metadata of topic \"%s\": %s", s->base.cfg->kafka_brokers,
                 topic, rd_kafka_err2str(e));
    s->topics[s->ntopics++] = rkt;
    return rkt;
}

/* Produces event i; librdkafka's queue being full is waited out (serving reports) up to
 * message.timeout.ms. Sets its result when it is not sent. */
static void produce(kafka_sink_t *s, size_t i)
{
    const pb_event_t *ev = &s->events[i];
    pb_result_t *res = &s->results[i];
    char topic[TOPIC_MAX + 1];
    if (!render_topic(s->base.cfg, ev, topic, sizeof topic)) { /* refused by sink_check */
        pb_result_setf(res, PB_OUT_REJECT, "topic longer than %d bytes", TOPIC_MAX - 1);
        s->rejected++;
        return;
    }
    rd_kafka_headers_t *h = build_headers(s, ev, res);
    if (!h)
        return;
    const char *key = ev->aggregate_id ? ev->aggregate_id : "";
    /* the record's timestamp is the event's (CreateTime); 0 lets librdkafka take the send time.
     * A topic with message.timestamp.type=LogAppendTime has the broker's instead */
    int64_t stamp_ms = ev->created_at_us > 0 ? ev->created_at_us / 1000 : 0;
    int64_t give_up = pb_monotonic_ms() + s->message_timeout_ms;
    rd_kafka_resp_err_t e;
    rd_kafka_topic_t *rkt = topic_handle(s, topic);
    for (;;) {
        e = rkt ? rd_kafka_producev(s->rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_KEY(key, strlen(key)),
                              RD_KAFKA_V_VALUE((void *)(uintptr_t)ev->payload, ev->payload_len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                              RD_KAFKA_V_TIMESTAMP(stamp_ms),
                              RD_KAFKA_V_OPAQUE((void *)(uintptr_t)(i + 1)), RD_KAFKA_V_END)
                : rd_kafka_producev(s->rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_KEY(key, strlen(key)),
                              RD_KAFKA_V_VALUE((void *)(uintptr_t)ev->payload, ev->payload_len),
                              RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h),
                              RD_KAFKA_V_TIMESTAMP(stamp_ms),
                              RD_KAFKA_V_OPAQUE((void *)(uintptr_t)(i + 1)), RD_KAFKA_V_END);
        if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || pb_monotonic_ms() > give_up || s->fatal)
            break;
        rd_kafka_poll(s->rk, 50); /* reports free room in the queue */
    }
    if (!e) {
        s->nsent++; /* the headers are librdkafka's now */
        return;
    }
    rd_kafka_headers_destroy(h);
    settle(s, i, e);
}

/* Publishes every untried event of the batch without waiting for the reports. */
static pb_status_t sink_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    kafka_sink_t *s = (kafka_sink_t *)snk;
    if (!s->rk || s->fatal) {
        const char *why = s->fatal ? s->fatal_reason : "no producer";
        for (size_t i = 0; i < b->n; i++)
            if (b->results[i].outcome == PB_OUT_UNTRIED)
                pb_result_setf(&b->results[i], PB_OUT_RETRY, "kafka: %s", why);
        pb_status_t st = pb_fail(err, PB_TRANSIENT, "kafka at %s: %s", snk->cfg->kafka_brokers, why);
        drop_producer(s);
        return st;
    }
    s->events = b->events;
    s->results = b->results;
    s->n = b->n;
    s->nsent = s->nreported = s->failed = s->rejected = 0;
    s->first_error[0] = '\0';
    s->open = true;
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i].outcome != PB_OUT_UNTRIED)
            continue; /* held back by the relay, or refused by check */
        produce(s, i);
        if (s->nsent % POLL_EVERY == 0)
            rd_kafka_poll(s->rk, 0);
    }
    return PB_OK;
}

/* Serves delivery reports until every message of the batch has one. */
static pb_status_t sink_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    kafka_sink_t *s = (kafka_sink_t *)snk;
    (void)b; /* one batch in flight: the sink holds its events and results */
    if (!s->open)
        return PB_OK;
    int64_t deadline = pb_monotonic_ms() + s->message_timeout_ms + AWAIT_SLACK_MS;
    while (s->nreported < s->nsent && !s->fatal && pb_monotonic_ms() < deadline)
        rd_kafka_poll(s->rk, 100);
    size_t lost = 0;
    if (s->nreported < s->nsent) {
        const char *why = s->fatal ? s->fatal_reason : "no delivery report in time";
        for (size_t i = 0; i < s->n; i++) {
            if (s->results[i].outcome == PB_OUT_UNTRIED) {
                pb_result_setf(&s->results[i], PB_OUT_RETRY, "kafka: %s", why);
                lost++;
            }
        }
    }
    s->open = false;
    if (s->rejected)
        log_debug(FAC, "%zu events of the batch refused by kafka (dead-lettered with the reason)",
                  s->rejected);
    if (s->failed)
        log_debug(FAC, "%zu of %zu events not delivered and will be retried: %s", s->failed,
                  s->nsent, s->first_error);
    if (lost) {
        pb_status_t st = pb_fail(err, PB_TRANSIENT, "kafka at %s: %zu of %zu messages without a "
                                                    "delivery report: %s", snk->cfg->kafka_brokers,
                                 lost, s->nsent, s->fatal ? s->fatal_reason : "timed out");
        drop_producer(s);
        return st;
    }
    return PB_OK;
}

static pb_status_t sink_idle(pb_sink_t *snk, pb_error_t *err)
{
    kafka_sink_t *s = (kafka_sink_t *)snk;
    if (s->rk)
        rd_kafka_poll(s->rk, 0); /* error callbacks */
    if (!s->rk || s->fatal)
        return pb_fail(err, PB_TRANSIENT, "kafka at %s: %s", snk->cfg->kafka_brokers,
                       s->fatal ? s->fatal_reason : "no producer");
    return PB_OK;
}

static void sink_free(pb_sink_t *snk)
{
    if (!snk)
        return;
    kafka_sink_t *s = (kafka_sink_t *)snk;
    drop_producer(s);
    pb_buf_free(&s->scratch);
    pb_ce_free(s->base.ce);
    free(s);
}

static const pb_sink_ops_t kafka_ops = {
    .name = "kafka",
    .caps = 0, /* idempotence covers one producer's retries, not a relay started again */
    .max_in_flight = 1,
    .connect = sink_connect,
    .send = sink_send,
    .await = sink_await,
    .check = sink_check,
    .idle = sink_idle,
    .free = sink_free,
};

pb_status_t pb_sink_kafka_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    pb_error_t why;
    if (pb_route_check_template(cfg->kafka_topic, &why) != PB_OK)
        return pb_fail(err, PB_FATAL, "kafka.topic: %s", why.msg);
    pb_ce_t *ce = NULL;
    if (pb_ce_wanted(cfg->kafka_cloudevents) &&
        pb_ce_new(cfg, PB_CE_KAFKA, NULL, &ce, err) != PB_OK)
        return PB_FATAL;
    kafka_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &kafka_ops;
    s->base.cfg = cfg;
    s->base.ce = ce;
    /* every property is checked now, so a mistake stops the relay at once */
    pb_status_t st = make_producer(s, err);
    if (st != PB_OK) {
        sink_free(&s->base);
        return st;
    }
    *out = &s->base;
    return PB_OK;
}
