/* Redis Streams sink (hiredis 0.14.1): one XADD per event to the stream named by
 * redis.stream_prefix + redis.stream (or the row's destination), the whole batch pipelined —
 * every XADD is written, then every reply is read — on one blocking connection whose socket
 * timeouts are redis.timeout.
 *
 * Entry fields: event_id, event_type, aggregate_type, aggregate_id, payload, headers (JSON text),
 * created_at (ISO 8601, UTC, microseconds) and PB_SEQUENCE_HEADER when the event has a sequence.
 * The source (source/redis.c) reads the same names. With redis.cloudevents = binary the
 * CloudEvents attributes follow as fields ce_id, ce_type, ... (sink/cloudevents.h).
 *
 * The stream's bound, MAXLEN ~ redis.max_len or MINID ~ (now - redis.max_age), is applied by one
 * XTRIM per stream and batch, pipelined after the batch's XADDs (its reply read with theirs):
 * a bound on every XADD made redis-server trim, and rewrite the command for its AOF, once per
 * entry, about a fifth of its CPU per entry (bench/README.md, relay-redis). A batch writing to
 * more than BATCH_STREAMS streams puts the bound on the XADDs of the others, as before. A stream
 * without a bound is refused at start unless redis.allow_unlimited.
 *
 * Duplicates: Redis before 8.6 has no idempotent XADD, so an event whose batch is published
 * again after a relay crash (between the replies and the commit) is added twice; the startup log
 * says so. The event_id field is what the consumer's inbox deduplicates on.
 *
 * Outcomes: an entry id is PUBLISHED; an error reply is RETRY when pb_redis_error_transient (OOM,
 * LOADING, ...) and REJECT otherwise (WRONGTYPE: the key is not a stream), with the server's
 * text as reason; a lost connection or a timeout makes every event without a reply RETRY.
 *
 * @thread loop (every operation). */
#include "sink/sink.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "broker/redis/conn.h"
#include "broker/redis/stats.h"
#include "common/clock.h"
#include "common/json_span.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "common/route.h"
#include "common/str.h"
#include "metrics/metrics.h"
#include "sink/cloudevents.h"
#include "sink/redis_command.h"

#define FAC "sink.redis"
#define STREAM_MAX 1024
#define FLUSH_BYTES (1024 * 1024) /* written out while the batch is still being added */
#define IDLE_PING_MS 10000
#define IDMP_MAJOR 8 /* XADD ... IDMP (idempotent production) exists from Redis 8.6 */
#define IDMP_MINOR 6
#define XADD_ARGS_MAX (26 + 2 * PB_CE_NATTRS)
#define SAMPLED_STREAMS 64 /* streams whose length /metrics shows, at most */
#define BATCH_STREAMS 16   /* streams of a batch trimmed by an XTRIM of their own, at most */
#define TRIM_LOG_INTERVAL_MS 10000

typedef struct redis_sink {
    pb_sink_t base; /* first: the relay holds a pb_sink_t * */
    redisContext *c; /* NULL while disconnected */
    pb_redis_server_t srv;
    bool told_duplicates; /* the startup note about duplicates was logged */
    int64_t last_used_ms; /* pb_monotonic_ms of the last command */
    size_t nsent;         /* XADDs of the batch in flight */
    size_t rejected;
    char *written[SAMPLED_STREAMS]; /* streams written to, for /metrics (owned) */
    size_t nwritten;
    int64_t sample_due_ms;
    pb_buf_t cmd; /* the XADD being written (redis_command.h) */
    char *trimmed[BATCH_STREAMS]; /* streams of the batch in flight that get an XTRIM (owned) */
    size_t ntrimmed;
    pb_log_limit_t trim_log; /* a failed XTRIM */
} redis_sink_t;

/* Remembers a stream written to, for the length samples (the first SAMPLED_STREAMS). */
static void note_stream(redis_sink_t *s, const char *stream)
{
    if (!*s->base.cfg->metrics_listen || s->base.cfg->metrics_sample_interval <= 0)
        return;
    if (s->nwritten && strcmp(s->written[s->nwritten - 1], stream) == 0)
        return;
    for (size_t i = 0; i < s->nwritten; i++)
        if (strcmp(s->written[i], stream) == 0)
            return;
    if (s->nwritten < SAMPLED_STREAMS)
        s->written[s->nwritten++] = pb_strdup(stream);
}

/* Every metrics.sample_interval: the length of each stream written to, for /metrics. A failed
 * sample is left to the next batch (the connection's state is the batch's business). */
static void sample_lengths(redis_sink_t *s)
{
    int64_t now = pb_monotonic_ms();
    if (!s->nwritten || !s->c || now < s->sample_due_ms)
        return;
    s->sample_due_ms = now + s->base.cfg->metrics_sample_interval;
    for (size_t i = 0; i < s->nwritten; i++) {
        pb_redis_stream_stats_t st;
        pb_error_t err;
        if (pb_redis_stream_stats(s->c, s->srv.where, s->written[i], "", &st, &err) != PB_OK) {
            log_debug(FAC, "stream length sample: %s", err.msg);
            return;
        }
        pb_metrics_set_redis_stream(s->written[i], st.length);
    }
}

static void drop_connection(redis_sink_t *s)
{
    if (s->c) {
        redisFree(s->c);
        s->c = NULL;
    }
}

/* "MAXLEN ~ n" or "MINID ~ ms" of the configured bound, or nothing. */
static int bound_args(const pb_config_t *cfg, const char **argv, char *num, size_t numsz)
{
    if (cfg->redis_max_len > 0) {
        snprintf(num, numsz, "%lld", (long long)cfg->redis_max_len);
        argv[0] = "MAXLEN";
    } else if (cfg->redis_max_age > 0) {
        int64_t minid = pb_wall_us() / 1000 - cfg->redis_max_age;
        snprintf(num, numsz, "%lld", (long long)(minid > 0 ? minid : 0));
        argv[0] = "MINID";
    } else {
        return 0;
    }
    argv[1] = "~";
    argv[2] = num;
    return 3;
}

static const char *bound_text(const pb_config_t *cfg, char *buf, size_t n)
{
    if (cfg->redis_max_len > 0)
        snprintf(buf, n, "then XTRIM MAXLEN ~ %lld per stream and batch",
                 (long long)cfg->redis_max_len);
    else if (cfg->redis_max_age > 0)
        snprintf(buf, n, "then XTRIM MINID ~ (now - %lld ms) per stream and batch",
                 (long long)cfg->redis_max_age);
    else
        snprintf(buf, n, "with no bound (redis.allow_unlimited)");
    return buf;
}

static pb_status_t sink_connect(pb_sink_t *snk, pb_error_t *err)
{
    redis_sink_t *s = (redis_sink_t *)snk;
    drop_connection(s);
    pb_status_t st = pb_redis_connect(snk->cfg, &s->c, &s->srv, err);
    if (st != PB_OK)
        return st;
    s->last_used_ms = pb_monotonic_ms();
    char bound[80];
    log_info(FAC, "connected to redis at %s (redis %s); XADD %s", s->srv.where,
             s->srv.version[0] ? s->srv.version : "of unknown version",
             bound_text(snk->cfg, bound, sizeof bound));
    if (!s->told_duplicates) {
        bool idmp = s->srv.major > IDMP_MAJOR ||
                    (s->srv.major == IDMP_MAJOR && s->srv.minor >= IDMP_MINOR);
        log_info(FAC, "redis %s %s: an event published again after a relay crash is added to "
                      "its stream twice; consumers deduplicate on the entry's event_id field "
                      "(postbox consume's inbox does)",
                 s->srv.version[0] ? s->srv.version : "(unknown version)",
                 idmp ? "offers idempotent XADD (IDMP), which this version of postbox does not "
                        "use yet"
                      : "has no idempotent XADD (IDMP needs Redis 8.6)");
        s->told_duplicates = true;
    }
    return PB_OK;
}

/* The stream of ev: prefix + template (or the row's destination). False when it does not fit. */
static bool render_stream(const pb_config_t *cfg, const pb_event_t *ev, char *out, size_t n)
{
    size_t plen = strlen(cfg->redis_stream_prefix);
    if (plen >= n)
        return false;
    memcpy(out, cfg->redis_stream_prefix, plen);
    return pb_route_render(cfg->redis_stream, ev, out + plen, n - plen);
}

static bool sink_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *res)
{
    const pb_config_t *cfg = snk->cfg;
    char stream[STREAM_MAX];
    if ((int64_t)ev->payload_len > cfg->redis_max_message_size) {
        pb_result_setf(res, PB_OUT_REJECT, "payload of %zu bytes exceeds redis.max_message_size "
                                           "%lld", ev->payload_len,
                       (long long)cfg->redis_max_message_size);
        return false;
    }
    if (!render_stream(cfg, ev, stream, sizeof stream)) {
        pb_result_setf(res, PB_OUT_REJECT, "stream name longer than %d bytes", STREAM_MAX - 1);
        return false;
    }
    if (!*stream) {
        pb_result_set(res, PB_OUT_REJECT, "empty stream name");
        return false;
    }
    if (!ev->event_id || !*ev->event_id) {
        pb_result_set(res, PB_OUT_REJECT, "event without event_id");
        return false;
    }
    return true;
}

/* Forgets the streams of the last batch. */
static void forget_trimmed(redis_sink_t *s)
{
    for (size_t i = 0; i < s->ntrimmed; i++)
        free(s->trimmed[i]);
    s->ntrimmed = 0;
}

/* True when the XTRIM after the batch bounds stream (taking it in if there is room); false when
 * its XADDs are to carry the bound themselves. */
static bool trimmed_after(redis_sink_t *s, const char *stream)
{
    if (s->ntrimmed && strcmp(s->trimmed[s->ntrimmed - 1], stream) == 0)
        return true; /* the common case: one stream, or runs of one */
    for (size_t i = 0; i < s->ntrimmed; i++)
        if (strcmp(s->trimmed[i], stream) == 0)
            return true;
    if (s->ntrimmed == BATCH_STREAMS)
        return false;
    s->trimmed[s->ntrimmed++] = pb_strdup(stream);
    return true;
}

/* Appends "XTRIM stream <bound>" of every stream of the batch. False when hiredis cannot. */
static bool append_trims(redis_sink_t *s, const char **bound, int nbound)
{
    for (size_t i = 0; i < s->ntrimmed; i++) {
        const char *argv[5] = {"XTRIM", s->trimmed[i]};
        size_t len[5] = {5, strlen(s->trimmed[i])};
        for (int k = 0; k < nbound; k++) {
            argv[2 + k] = bound[k];
            len[2 + k] = strlen(bound[k]);
        }
        pb_redis_command(&s->cmd, 2 + nbound, argv, len);
        if (redisAppendFormattedCommand(s->c, s->cmd.data, s->cmd.len) != REDIS_OK)
            return false;
    }
    return true;
}

/* Appends the XADD of ev to the connection's output buffer. False when hiredis cannot. */
static bool append_xadd(redis_sink_t *s, const pb_event_t *ev, const char *stream,
                        const char **bound, int nbound)
{
    const char *argv[XADD_ARGS_MAX];
    size_t len[XADD_ARGS_MAX];
    int argc = 0;
    char created[40], seq[24];
#define ARG(v, l) (argv[argc] = (v), len[argc] = (l), argc++)
#define STR_ARG(v) ARG((v), strlen(v))
    STR_ARG("XADD");
    STR_ARG(stream);
    for (int k = 0; k < nbound; k++)
        STR_ARG(bound[k]);
    STR_ARG("*");
    STR_ARG("event_id");
    STR_ARG(ev->event_id);
    STR_ARG("event_type");
    STR_ARG(ev->event_type ? ev->event_type : "");
    STR_ARG("aggregate_type");
    STR_ARG(ev->aggregate_type ? ev->aggregate_type : "");
    STR_ARG("aggregate_id");
    STR_ARG(ev->aggregate_id ? ev->aggregate_id : "");
    STR_ARG("payload");
    ARG(ev->payload ? ev->payload : "", ev->payload ? ev->payload_len : 0);
    STR_ARG("headers");
    STR_ARG(ev->headers && *ev->headers ? ev->headers : "{}");
    pb_format_utc_us(ev->created_at_us, created, sizeof created);
    STR_ARG("created_at");
    STR_ARG(created);
    if (ev->sequence > 0) {
        snprintf(seq, sizeof seq, "%lld", (long long)ev->sequence);
        STR_ARG(PB_SEQUENCE_HEADER);
        STR_ARG(seq);
    }
    /* the W3C trace context as fields of their own, where a Redis client looks for it */
    static const char *const trace_keys[2] = {"traceparent", "tracestate"};
    const char *headers = ev->headers ? ev->headers : "";
    for (int k = 0; k < 2 && ev->flat_headers; k++) {
        const char *val; /* plain strings (pb_sink_prepare): their bytes are their values */
        size_t vlen;
        if (pb_header_string(ev, trace_keys[k], &val, &vlen)) {
            STR_ARG(trace_keys[k]);
            ARG(val, vlen);
        }
    }
    for (int k = 0; k < 2 && !ev->flat_headers && strstr(headers, "trace"); k++) {
        const char *val;
        size_t vlen;
        if (!pb_json_member(headers, strlen(headers), trace_keys[k], &val, &vlen) || vlen < 2 ||
            val[0] != '"' || memchr(val, '\\', vlen))
            continue; /* absent, not a string, or escaped: the headers field still has it */
        STR_ARG(trace_keys[k]);
        ARG(val + 1, vlen - 2);
    }
    if (s->base.ce) { /* CloudEvents, postbox's mapping: the command copies every argument */
        pb_ce_attr_t attrs[PB_CE_NATTRS];
        size_t na = pb_ce_attrs(s->base.ce, ev, attrs);
        for (size_t a = 0; a < na; a++) {
            ARG(attrs[a].name, attrs[a].name_len);
            ARG(attrs[a].value, attrs[a].len);
        }
    }
#undef STR_ARG
#undef ARG
    PB_ASSERT(argc <= XADD_ARGS_MAX);
    pb_redis_command(&s->cmd, argc, argv, len);
    return redisAppendFormattedCommand(s->c, s->cmd.data, s->cmd.len) == REDIS_OK;
}

/* Writes the output buffer out; false when the connection failed. */
static bool flush_out(redis_sink_t *s)
{
    int done = 0;
    while (!done)
        if (redisBufferWrite(s->c, &done) != REDIS_OK)
            return false;
    return true;
}

/* Every event of the batch still UNTRIED is RETRY with reason. */
static void retry_rest(pb_sink_batch_t *b, const char *reason)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->results[i].outcome == PB_OUT_UNTRIED)
            pb_result_setf(&b->results[i], PB_OUT_RETRY, "%s", reason);
}

static pb_status_t connection_lost(redis_sink_t *s, pb_sink_batch_t *b, const char *what,
                                   pb_error_t *err)
{
    pb_status_t st = pb_redis_context_fail(s->c, s->srv.where, what, err);
    (void)st; /* whatever the class, this connection is done: the driver connects again */
    retry_rest(b, err->msg);
    drop_connection(s);
    err->status = PB_TRANSIENT;
    return PB_TRANSIENT;
}

/* Writes an XADD per UNTRIED event without reading any reply (sink_await reads them). */
static pb_status_t sink_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    redis_sink_t *s = (redis_sink_t *)snk;
    s->nsent = s->rejected = 0;
    if (!s->c) {
        retry_rest(b, "not connected to redis");
        return pb_fail(err, PB_TRANSIENT, "not connected to redis at %s", s->srv.where);
    }
    const char *bound[3];
    char num[24];
    int nbound = bound_args(snk->cfg, bound, num, sizeof num);
    forget_trimmed(s);
    for (size_t i = 0; i < b->n; i++) {
        pb_result_t *res = &b->results[i];
        if (res->outcome != PB_OUT_UNTRIED)
            continue; /* held back by the relay or rejected by check */
        char stream[STREAM_MAX];
        if (!render_stream(snk->cfg, &b->events[i], stream, sizeof stream)) { /* checked */
            pb_result_setf(res, PB_OUT_REJECT, "stream name longer than %d bytes", STREAM_MAX - 1);
            s->rejected++;
            continue;
        }
        note_stream(s, stream);
        bool own_bound = nbound && !trimmed_after(s, stream);
        if (!append_xadd(s, &b->events[i], stream, bound, own_bound ? nbound : 0))
            return connection_lost(s, b, "XADD", err);
        s->nsent++;
        if (sdslen(s->c->obuf) >= FLUSH_BYTES && !flush_out(s))
            return connection_lost(s, b, "XADD", err);
    }
    if (!append_trims(s, bound, nbound) || !flush_out(s))
        return connection_lost(s, b, "XADD", err);
    s->last_used_ms = pb_monotonic_ms();
    return PB_OK;
}

/* Reads the replies of the XTRIMs after the batch. A refused XTRIM leaves the stream longer
 * than its bound until the next batch's (the events are published: their XADDs were). */
static pb_status_t read_trims(redis_sink_t *s, pb_sink_batch_t *b, pb_error_t *err)
{
    for (size_t i = 0; i < s->ntrimmed; i++) {
        redisReply *r = NULL;
        if (redisGetReply(s->c, (void **)&r) != REDIS_OK || !r)
            return connection_lost(s, b, "reading XTRIM replies", err);
        uint64_t skipped;
        if (r->type != REDIS_REPLY_INTEGER &&
            pb_log_limit_pass(&s->trim_log, pb_monotonic_ms(), &skipped))
            log_warn(FAC, "XTRIM of stream %s at %s failed: %s (%llu more since the last)",
                     s->trimmed[i], s->srv.where,
                     r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply type",
                     (unsigned long long)skipped);
        freeReplyObject(r);
    }
    return PB_OK;
}

/* Reads one reply per XADD written, in order, and settles each event. */
static pb_status_t sink_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    redis_sink_t *s = (redis_sink_t *)snk;
    size_t failed = 0, got = 0;
    char first_error[sizeof b->results[0].error] = "";
    for (size_t i = 0; i < b->n && got < s->nsent; i++) {
        pb_result_t *res = &b->results[i];
        if (res->outcome != PB_OUT_UNTRIED)
            continue;
        redisReply *r = NULL;
        if (redisGetReply(s->c, (void **)&r) != REDIS_OK || !r) {
            log_warn(FAC, "redis at %s: connection lost with %zu of %zu replies read", s->srv.where,
                     got, s->nsent);
            return connection_lost(s, b, "reading XADD replies", err);
        }
        got++;
        if (r->type == REDIS_REPLY_STRING) {
            pb_result_set(res, PB_OUT_PUBLISHED, NULL);
        } else if (r->type == REDIS_REPLY_ERROR) {
            bool again = pb_redis_error_transient(r->str);
            pb_result_setf(res, again ? PB_OUT_RETRY : PB_OUT_REJECT, "redis refused the entry: %s",
                           r->str);
            if (!failed++)
                snprintf(first_error, sizeof first_error, "%s", res->error);
        } else {
            pb_result_setf(res, PB_OUT_RETRY, "unexpected XADD reply of type %d", r->type);
            if (!failed++)
                snprintf(first_error, sizeof first_error, "%s", res->error);
        }
        freeReplyObject(r);
    }
    pb_status_t st = read_trims(s, b, err);
    if (st != PB_OK)
        return st;
    s->last_used_ms = pb_monotonic_ms();
    sample_lengths(s);
    if (failed)
        log_debug(FAC, "%zu of %zu entries refused by redis at %s: %s", failed, s->nsent,
                  s->srv.where, first_error);
    if (s->rejected)
        log_debug(FAC, "%zu events of the batch cannot be published to redis (see their "
                       "last_error)", s->rejected);
    return PB_OK;
}

/* A PING now and then while idle, so a dead connection is noticed before the next batch. */
static pb_status_t sink_idle(pb_sink_t *snk, pb_error_t *err)
{
    redis_sink_t *s = (redis_sink_t *)snk;
    if (!s->c)
        return pb_fail(err, PB_TRANSIENT, "not connected to redis at %s", s->srv.where);
    if (pb_monotonic_ms() - s->last_used_ms < IDLE_PING_MS)
        return PB_OK;
    const char *argv[1] = {"PING"};
    pb_status_t st = pb_redis_run(s->c, s->srv.where, "PING", 1, argv, NULL, err);
    s->last_used_ms = pb_monotonic_ms();
    if (st != PB_OK) {
        drop_connection(s);
        err->status = PB_TRANSIENT;
        return PB_TRANSIENT;
    }
    return PB_OK;
}

static void sink_free(pb_sink_t *snk)
{
    if (!snk)
        return;
    redis_sink_t *s = (redis_sink_t *)snk;
    drop_connection(s);
    forget_trimmed(s);
    for (size_t i = 0; i < s->nwritten; i++)
        free(s->written[i]);
    pb_buf_free(&s->cmd);
    pb_ce_free(s->base.ce);
    free(s);
}

static const pb_sink_ops_t redis_ops = {
    .name = "redis",
    .caps = 0,
    .max_in_flight = 1,
    .connect = sink_connect,
    .send = sink_send,
    .await = sink_await,
    .check = sink_check,
    .idle = sink_idle,
    .free = sink_free,
};

pb_status_t pb_sink_redis_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    pb_error_t why;
    if (pb_route_check_template(cfg->redis_stream, &why) != PB_OK)
        return pb_fail(err, PB_FATAL, "redis.stream: %s", why.msg);
    pb_status_t st = pb_redis_check_config(cfg, err);
    if (st != PB_OK)
        return st;
    if (cfg->redis_max_len > 0 && cfg->redis_max_age > 0)
        return pb_fail(err, PB_FATAL, "redis.max_len (%lld) and redis.max_age (%lld ms) are both "
                                      "set: a stream is trimmed by one bound only, set the other to 0",
                       (long long)cfg->redis_max_len, (long long)cfg->redis_max_age);
    if (cfg->redis_max_len == 0 && cfg->redis_max_age == 0) {
        if (!cfg->redis_allow_unlimited)
            return pb_fail(err, PB_FATAL, "redis streams without a length bound: redis.max_len "
                                          "and redis.max_age are both 0, so the streams would "
                                          "grow without bound; set one of them, or "
                                          "redis.allow_unlimited = true");
        log_warn(FAC, "redis.allow_unlimited: entries are added without MAXLEN or MINID, the "
                      "streams grow without bound");
    }
    pb_ce_t *ce = NULL;
    if (pb_ce_wanted(cfg->redis_cloudevents) &&
        pb_ce_new(cfg, PB_CE_REDIS, NULL, &ce, err) != PB_OK)
        return PB_FATAL;
    redis_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &redis_ops;
    s->base.cfg = cfg;
    s->base.ce = ce;
    snprintf(s->srv.where, sizeof s->srv.where, "(not connected)");
    pb_log_limit_init(&s->trim_log, TRIM_LOG_INTERVAL_MS);
    *out = &s->base;
    return PB_OK;
}
