/* RabbitMQ source (rabbitmq-c 0.11): one connection, channel 1, one consumer with manual acks.
 *
 * Deliveries are read frame by frame with amqp_simple_wait_frame_noblock (not
 * amqp_consume_message), so that channel.close, connection.close and protocol surprises are
 * handled in one place, as the sink does. A receive call never returns in the middle of a
 * message: once basic.deliver is read, its content header and body frames are read to the end
 * (bounded by amqp.confirm_timeout), so no half-assembled message is carried between calls.
 *
 * Memory: the strings handed out in pb_message_t live in an arena, an amqp_pool_t recycled at the
 * start of each receive (pages are kept, so a steady stream allocates nothing). There are two:
 * prefetch, called while the consumer waits for the database, decodes the next deliveries into
 * the other one, which the next receive then makes current. rabbitmq-c
 * decodes every frame into its per-channel pool; those pools are released with
 * amqp_maybe_release_buffers at the end of each receive, when everything needed has been copied
 * (the library skips the release while a frame is half read or frames are queued).
 *
 * @thread loop: the consumer's thread only (a rabbitmq-c connection is not thread-safe). */
#include "source/source.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp.h>
#include <amqp_framing.h>

#include "broker/amqp/conn.h"
#include "broker/amqp/queue_bound.h"
#include "common/clock.h"
#include "common/event.h"
#include "common/log.h"
#include "metrics/metrics.h"
#include "common/str.h"
#include "broker/amqp/url.h"
#include "source/amqp_headers.h"

#define FAC "source.amqp"
#define CHANNEL PB_AMQP_LINK_CHANNEL
#define SHORTSTR_MAX 255
#define ARENA_PAGE 65536
/* RabbitMQ refuses messages above 512 MiB (max_message_size); a larger body_size is garbage. */
#define BODY_MAX ((uint64_t)1 << 30)
#define EMPTY_HEADERS "{}"
/* pb_message_t.tag = connection epoch << TAG_EPOCH_SHIFT | AMQP delivery tag, so that a tag kept
 * across a reconnect is refused instead of acknowledging another message: delivery tags restart
 * at 1 on every channel and 2^48 deliveries on one channel will not happen. */
#define TAG_EPOCH_SHIFT 48
#define TAG_DELIVERY_MASK (((uint64_t)1 << TAG_EPOCH_SHIFT) - 1)
#define TAG_EPOCH_MASK 0xffffu

typedef struct amqp_source {
    pb_source_t base; /* first: the consumer holds a pb_source_t * */
    pb_amqp_url_t url;
    char where[300]; /* host:port for messages; never the password */
    int heartbeat_s;
    char **bindings; /* trimmed binding keys */
    size_t nbindings;
    pb_amqp_link_t link; /* link.conn NULL while disconnected */
    uint64_t last_tag; /* highest delivery tag received on this channel (0 after connect) */
    uint64_t epoch;    /* counts connects (mod 2^16), in the upper bits of pb_message_t.tag */
    size_t outstanding; /* deliveries handed out on this channel and not settled */
    int64_t sample_due_ms; /* next queue sample for /metrics */
    amqp_pool_t arenas[2]; /* strings of the batch handed out [cur] and of the prefetched [!cur] */
    int cur;
    amqp_pool_t *arena;      /* where decoding writes now: arenas[cur] or, in prefetch, [!cur] */
    pb_message_t *pending;   /* prefetched deliveries, for the next receive */
    size_t n_pending, cap_pending;
    pb_buf_t scratch;  /* headers JSON of the message being read */
    bool bound_probed; /* amqp.queue_declare = false: the queue's bound was asked once */
} amqp_source_t;

static const pb_source_ops_t amqp_source_ops;

static amqp_bytes_t cbytes(const char *s)
{
    amqp_bytes_t b = {.len = strlen(s), .bytes = (void *)(uintptr_t)s}; /* rabbitmq-c only reads */
    return b;
}

/* n bytes of the batch arena (aborts when memory runs out, as pb_malloc does). */
static char *arena_alloc(amqp_source_t *s, size_t n)
{
    char *d = amqp_pool_alloc(s->arena, n);
    if (!d)
        pb_out_of_memory();
    return d;
}

/* A NUL-terminated copy of p[0..len) in the batch arena. */
static char *arena_copy(amqp_source_t *s, const void *p, size_t len)
{
    char *d = arena_alloc(s, len + 1);
    if (len)
        memcpy(d, p, len);
    d[len] = '\0';
    return d;
}

/* A copy of an AMQP string for PostgreSQL text: as is when it is UTF-8 without NUL bytes, else
 * "\x" and the bytes in hex (the convention of amqp_headers.h), so that one odd message cannot
 * make the consumer's insert fail. */
static const char *text_copy(amqp_source_t *s, amqp_bytes_t b)
{
    if (b.len == 0 || (!memchr(b.bytes, '\0', b.len) && pb_utf8_valid(b.bytes, b.len)))
        return arena_copy(s, b.bytes, b.len);
    return pb_amqp_hex_text(b, arena_alloc(s, PB_AMQP_HEX_LEN(b.len) + 1));
}

/* An id or type from a header: a non-empty string (see text_copy), or with integers an integer
 * in decimal. NULL for anything else. */
static const char *field_copy(amqp_source_t *s, const amqp_field_value_t *v, bool integers)
{
    if (!v)
        return NULL;
    if (v->kind == AMQP_FIELD_KIND_UTF8)
        return v->value.bytes.len ? text_copy(s, v->value.bytes) : NULL;
    char num[24];
    const char *txt;
    size_t len;
    if (integers && pb_amqp_field_text(v, true, num, sizeof num, &txt, &len))
        return arena_copy(s, txt, len);
    return NULL;
}

/* ---- connection state ----------------------------------------------------------------------- */

/* The connection is unusable: drops it and returns PB_TRANSIENT. */
static pb_status_t lost(amqp_source_t *s, pb_error_t *err, const char *fmt, ...) PB_PRINTF(3, 4);
static pb_status_t lost(amqp_source_t *s, pb_error_t *err, const char *fmt, ...)
{
    char reason[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    pb_amqp_link_drop(&s->link);
    s->n_pending = 0; /* their delivery tags died with the channel */
    log_warn(FAC, "rabbitmq at %s: %s (unacknowledged messages will be redelivered)", s->where,
             reason);
    return pb_fail(err, PB_TRANSIENT, "rabbitmq at %s: %s", s->where, reason);
}

/* ---- connect -------------------------------------------------------------------------------- */

static pb_status_t declare_queue(amqp_source_t *s, pb_error_t *err)
{
    return pb_amqp_link_setup_queue(&s->link, s->base.cfg, s->url.vhost, s->url.user, err);
}

/* A queue someone else declared (amqp.queue_declare = false) is not refused for lacking a
 * bound, as a queue postbox declares would be: it may be bounded by a policy, which AMQP cannot
 * see. Without amqp.allow_unlimited its lack of a bound argument is said once, at start. */
static pb_status_t warn_unbounded(amqp_source_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    pb_amqp_queue_bound_t bound;
    char detail[400];
    pb_status_t st = pb_amqp_probe_queue_bound(&s->link, cfg->amqp_queue, &bound, detail,
                                               sizeof detail, err);
    if (st != PB_OK)
        return st;
    s->bound_probed = true;
    if (bound == PB_AMQP_QUEUE_BOUNDED)
        log_info(FAC, "queue \"%s\" is bounded: %s", cfg->amqp_queue, detail);
    else if (bound == PB_AMQP_QUEUE_BOUND_UNKNOWN)
        log_info(FAC, "could not tell whether queue \"%s\" is bounded: %s", cfg->amqp_queue,
                 detail);
    else if (!cfg->amqp_allow_unlimited)
        log_warn(FAC, "queue \"%s\" has %s: unless a policy bounds it, it grows without limit "
                      "while its consumers are down (bound it with x-message-ttl or "
                      "x-max-length, or by a policy and set amqp.allow_unlimited = true)",
                 cfg->amqp_queue, detail);
    return PB_OK;
}

static pb_status_t bind_queue(amqp_source_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    for (size_t i = 0; i < s->nbindings; i++) {
        const char *key = s->bindings[i];
        if (amqp_queue_bind(s->link.conn, CHANNEL, cbytes(cfg->amqp_queue),
                            cbytes(cfg->amqp_exchange), cbytes(key), amqp_empty_table))
            continue;
        char buf[320];
        unsigned code = pb_amqp_link_rpc_failed(&s->link, "bind queue", buf, sizeof buf);
        if (code == AMQP_NOT_FOUND)
            return pb_fail(err, PB_FATAL,
                           "cannot bind queue \"%s\" to exchange \"%s\" on vhost \"%s\": the "
                           "exchange does not exist (create it, or set amqp.declare_exchange = "
                           "true): %s", cfg->amqp_queue, cfg->amqp_exchange, s->url.vhost, buf);
        if (code == AMQP_ACCESS_REFUSED)
            return pb_fail(err, PB_FATAL,
                           "user \"%s\" may not bind queue \"%s\" to exchange \"%s\" on vhost "
                           "\"%s\": %s", s->url.user, cfg->amqp_queue, cfg->amqp_exchange,
                           s->url.vhost, buf);
        return pb_fail(err, PB_TRANSIENT, "%s", buf);
    }
    return PB_OK;
}

static pb_status_t start_consuming(amqp_source_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    char buf[320];
    if (!amqp_basic_qos(s->link.conn, CHANNEL, 0, (uint16_t)cfg->amqp_prefetch, 0)) {
        pb_amqp_link_rpc_failed(&s->link, "set prefetch", buf, sizeof buf);
        return pb_fail(err, PB_TRANSIENT, "%s", buf);
    }
    amqp_basic_consume_ok_t *ok = amqp_basic_consume(s->link.conn, CHANNEL, cbytes(cfg->amqp_queue),
                                                     amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
    if (ok) {
        log_debug(FAC, "consumer tag %.*s", (int)ok->consumer_tag.len,
                  (const char *)ok->consumer_tag.bytes);
        return PB_OK;
    }
    unsigned code = pb_amqp_link_rpc_failed(&s->link, "consume", buf, sizeof buf);
    if (code == AMQP_ACCESS_REFUSED)
        return pb_fail(err, PB_FATAL, "user \"%s\" may not consume from queue \"%s\": %s",
                       s->url.user, cfg->amqp_queue, buf);
    return pb_fail(err, PB_TRANSIENT, "%s", buf);
}

static pb_status_t setup_channel(void *arg, pb_error_t *err)
{
    amqp_source_t *s = arg;
    const pb_config_t *cfg = s->base.cfg;
    pb_status_t st = pb_amqp_link_channel_open(&s->link, err);
    if (st != PB_OK)
        return st;
    s->last_tag = 0;
    s->outstanding = 0;
    s->epoch = (s->epoch + 1) & TAG_EPOCH_MASK;
    bool bind = cfg->amqp_queue_declare && s->nbindings > 0;
    if (bind && cfg->amqp_declare_exchange &&
        (st = pb_amqp_link_setup_exchange(&s->link, cfg, s->url.vhost, s->url.user, err)) != PB_OK)
        return st;
    if ((st = declare_queue(s, err)) != PB_OK)
        return st;
    if (!cfg->amqp_queue_declare && !s->bound_probed && (st = warn_unbounded(s, err)) != PB_OK)
        return st;
    if (bind && (st = bind_queue(s, err)) != PB_OK)
        return st;
    return start_consuming(s, err);
}

static pb_status_t src_connect(pb_source_t *src, pb_error_t *err)
{
    amqp_source_t *s = (amqp_source_t *)src;
    const pb_config_t *cfg = src->cfg;
    pb_amqp_link_close(&s->link);
    /* the contract: strings die with a reconnect; prefetched deliveries die with the channel */
    recycle_amqp_pool(&s->arenas[0]);
    recycle_amqp_pool(&s->arenas[1]);
    s->n_pending = 0;
    pb_status_t st = pb_amqp_link_connect(&s->link, &s->url, cfg, s->heartbeat_s, setup_channel,
                                          s, err);
    if (st != PB_OK)
        return st;
    log_info(FAC, "consuming queue \"%s\" on rabbitmq at %s vhost=\"%s\" user=\"%s\" prefetch=%lld "
                  "heartbeat=%ds frame_max=%d", cfg->amqp_queue, s->where, s->url.vhost,
             s->url.user, (long long)cfg->amqp_prefetch, amqp_get_heartbeat(s->link.conn),
             amqp_get_frame_max(s->link.conn));
    return PB_OK;
}

/* ---- receive -------------------------------------------------------------------------------- */

static pb_status_t on_channel_close(amqp_source_t *s, const amqp_channel_close_t *c,
                                    pb_error_t *err)
{
    char text[200];
    unsigned code = c->reply_code;
    pb_amqp_bytes_text(c->reply_text, text, sizeof text);
    if (pb_amqp_link_channel_close_ok(&s->link) == AMQP_STATUS_OK)
        /* the connection is healthy: say goodbye; connect() starts afresh */
        pb_amqp_link_close(&s->link);
    return lost(s, err, "channel closed by rabbitmq: %u %s", code, text);
}

static pb_status_t on_connection_close(amqp_source_t *s, const amqp_connection_close_t *c,
                                       pb_error_t *err)
{
    char text[200];
    unsigned code = c->reply_code;
    pb_amqp_bytes_text(c->reply_text, text, sizeof text);
    pb_amqp_link_connection_close_ok(&s->link); /* courtesy */
    return lost(s, err, "connection closed by rabbitmq: %u %s", code, text);
}

/* A method frame that is not a delivery: closes are handled, anything else is logged. */
static pb_status_t on_other_method(amqp_source_t *s, const amqp_frame_t *f, pb_error_t *err)
{
    const amqp_method_t *m = &f->payload.method;
    if (f->channel == 0 && m->id == AMQP_CONNECTION_CLOSE_METHOD)
        return on_connection_close(s, m->decoded, err);
    if (f->channel == CHANNEL && m->id == AMQP_CHANNEL_CLOSE_METHOD)
        return on_channel_close(s, m->decoded, err);
    if (f->channel == CHANNEL && m->id == AMQP_BASIC_CANCEL_METHOD) {
        /* the queue was deleted (sent only to clients announcing consumer_cancel_notify) */
        pb_amqp_link_close(&s->link);
        return lost(s, err, "rabbitmq cancelled the consumer of queue \"%s\" (queue deleted?)",
                    s->base.cfg->amqp_queue);
    }
    log_debug(FAC, "ignoring method 0x%08x on channel %d", (unsigned)m->id, f->channel);
    return PB_OK;
}

/* Fills m from the content header properties. */
static void take_properties(amqp_source_t *s, const amqp_basic_properties_t *p, pb_message_t *m)
{
    const pb_config_t *cfg = s->base.cfg;
    const amqp_table_t *headers =
        p && (p->_flags & AMQP_BASIC_HEADERS_FLAG) && p->headers.num_entries > 0 ? &p->headers
                                                                                  : NULL;
    m->message_id = NULL;
    if (*cfg->consume_message_id_header)
        m->message_id = field_copy(s, pb_amqp_table_find(headers, cfg->consume_message_id_header),
                                   true);
    else if (p && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && p->message_id.len > 0)
        m->message_id = text_copy(s, p->message_id);

    if (p && (p->_flags & AMQP_BASIC_TYPE_FLAG) && p->type.len > 0)
        m->type = text_copy(s, p->type);
    else
        m->type = field_copy(s, pb_amqp_table_find(headers, "event_type"), false);
    m->aggregate_type = field_copy(s, pb_amqp_table_find(headers, "aggregate_type"), false);
    m->aggregate_id = field_copy(s, pb_amqp_table_find(headers, "aggregate_id"), true);
    char num[24];
    const char *seq_text;
    size_t seq_len;
    m->sequence = pb_amqp_field_text(pb_amqp_table_find(headers, PB_SEQUENCE_HEADER), true, num,
                                     sizeof num, &seq_text, &seq_len)
                      ? pb_source_sequence(seq_text, seq_len)
                      : 0;

    m->timestamp = 0;
    if (p && (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG))
        m->timestamp = p->timestamp > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)p->timestamp;

    if (headers) {
        pb_amqp_headers_json(headers, &s->scratch);
        m->headers = arena_copy(s, s->scratch.data, s->scratch.len);
    } else {
        m->headers = EMPTY_HEADERS;
    }
}

/* Reads the content header and body frames of the delivery d into m. They follow basic.deliver
 * on CHANNEL without gaps (frames of other channels may interleave); amqp.confirm_timeout bounds
 * the wait, as for any RPC. */
static pb_status_t read_delivery(amqp_source_t *s, const amqp_basic_deliver_t *d, pb_message_t *m,
                                 pb_error_t *err)
{
    memset(m, 0, sizeof *m);
    /* d lives in the channel's pool, which a dropped body releases: keep what is needed */
    const unsigned long long dtag = (unsigned long long)d->delivery_tag;
    m->tag = s->epoch << TAG_EPOCH_SHIFT | (d->delivery_tag & TAG_DELIVERY_MASK);
    m->redelivered = d->redelivered != 0;
    m->exchange = text_copy(s, d->exchange);
    m->routing_key = text_copy(s, d->routing_key);
    if (d->delivery_tag > s->last_tag)
        s->last_tag = d->delivery_tag;

    int64_t deadline = pb_monotonic_ms() + s->base.cfg->amqp_confirm_timeout;
    amqp_frame_t f;
    uint64_t body_size = 0;
    for (;;) { /* the content header */
        int rc = pb_amqp_link_wait_frame(&s->link, &f, deadline);
        if (rc != AMQP_STATUS_OK)
            return lost(s, err, "reading delivery %llu: %s", dtag,
                        amqp_error_string2(rc));
        if (f.channel == CHANNEL && f.frame_type == AMQP_FRAME_HEADER)
            break;
        if (f.frame_type == AMQP_FRAME_METHOD) {
            if (f.channel == CHANNEL && f.payload.method.id != AMQP_CHANNEL_CLOSE_METHOD)
                return lost(s, err, "protocol error: method 0x%08x instead of the content header "
                                    "of delivery %llu", (unsigned)f.payload.method.id,
                            dtag);
            pb_status_t st = on_other_method(s, &f, err);
            if (st != PB_OK)
                return st;
            continue;
        }
        if (f.channel == CHANNEL)
            return lost(s, err, "protocol error: frame type %d instead of the content header of "
                                "delivery %llu", f.frame_type, dtag);
    }
    body_size = f.payload.properties.body_size;
    if (body_size > BODY_MAX)
        return lost(s, err, "protocol error: delivery %llu announces a body of %llu bytes",
                    dtag, (unsigned long long)body_size);
    take_properties(s, f.payload.properties.decoded, m);

    /* a body above consume.max_message_size is read off the socket but not kept: the inbox
     * dead-letters the message with its size */
    bool keep = body_size <= (uint64_t)s->base.cfg->consume_max_message_size;
    char *body = arena_alloc(s, keep ? (size_t)body_size + 1 : 1);
    uint64_t got = 0;
    while (got < body_size) {
        int rc = pb_amqp_link_wait_frame(&s->link, &f, deadline);
        if (rc != AMQP_STATUS_OK)
            return lost(s, err, "reading the body of delivery %llu (%llu of %llu bytes): %s",
                        dtag, (unsigned long long)got,
                        (unsigned long long)body_size,
                        amqp_error_string2(rc));
        if (f.channel == CHANNEL && f.frame_type == AMQP_FRAME_BODY) {
            size_t len = f.payload.body_fragment.len;
            if (len > body_size - got)
                return lost(s, err, "protocol error: body of delivery %llu longer than the %llu "
                                    "bytes announced", dtag,
                            (unsigned long long)body_size);
            if (keep)
                memcpy(body + got, f.payload.body_fragment.bytes, len);
            got += len;
            if (!keep) /* the frames of the message are not kept either */
                amqp_maybe_release_buffers_on_channel(s->link.conn, CHANNEL);
            continue;
        }
        if (f.frame_type == AMQP_FRAME_METHOD && f.channel != CHANNEL) {
            pb_status_t st = on_other_method(s, &f, err);
            if (st != PB_OK)
                return st;
            continue;
        }
        if (f.frame_type == AMQP_FRAME_METHOD && f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD)
            return on_channel_close(s, f.payload.method.decoded, err);
        if (f.channel == CHANNEL)
            return lost(s, err, "protocol error: frame type %d inside the body of delivery %llu",
                        f.frame_type, dtag);
    }
    if (!keep)
        m->body_dropped = got, got = 0;
    body[got] = '\0';
    m->body = body;
    m->body_len = (size_t)got;
    return PB_OK;
}

/* Reads frames until a whole delivery is in m (*got) or the deadline passes; a passed deadline
 * still polls once: frames already buffered (or readable at once) are taken without sleeping. */
static pb_status_t read_next(amqp_source_t *s, pb_message_t *m, int64_t deadline, bool *got,
                             pb_error_t *err)
{
    *got = false;
    for (;;) {
        amqp_frame_t f;
        int rc = pb_amqp_link_wait_frame(&s->link, &f, deadline);
        if (rc == AMQP_STATUS_TIMEOUT)
            return PB_OK;
        if (rc != AMQP_STATUS_OK)
            return lost(s, err, "connection lost: %s", amqp_error_string2(rc));
        if (f.frame_type != AMQP_FRAME_METHOD) {
            if (f.channel == CHANNEL)
                return lost(s, err, "protocol error: content frame of type %d without "
                                    "basic.deliver", f.frame_type);
            continue;
        }
        if (f.channel != CHANNEL || f.payload.method.id != AMQP_BASIC_DELIVER_METHOD) {
            pb_status_t st = on_other_method(s, &f, err);
            if (st != PB_OK)
                return st;
            continue;
        }
        pb_status_t st = read_delivery(s, f.payload.method.decoded, m, err);
        *got = st == PB_OK;
        return st;
    }
}

static const char *keep_copy(amqp_source_t *s, const char *str)
{
    return str ? arena_copy(s, str, strlen(str)) : NULL;
}

/* Whether a batch holding bytes of bodies (n messages) takes no more: consume.batch_bytes. */
static bool bytes_full(const amqp_source_t *s, size_t n, uint64_t bytes)
{
    return n > 0 && bytes >= (uint64_t)s->base.cfg->consume_batch_bytes;
}

static uint64_t pending_bytes(const amqp_source_t *s)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->n_pending; i++)
        bytes += s->pending[i].body_len;
    return bytes;
}

/* Hands out up to max prefetched deliveries (their strings are in the arena that is current
 * now), fewer when their bodies fill consume.batch_bytes; *bytes gets their size. Ones left
 * over move to the other arena, which the next receive makes current. */
static size_t take_pending(amqp_source_t *s, pb_message_t *msgs, size_t max, uint64_t *bytes)
{
    size_t k = 0;
    *bytes = 0;
    while (k < s->n_pending && k < max && !bytes_full(s, k, *bytes))
        *bytes += s->pending[k++].body_len;
    if (k)
        memcpy(msgs, s->pending, k * sizeof *msgs);
    size_t left = s->n_pending - k;
    s->arena = &s->arenas[!s->cur];
    for (size_t i = 0; i < left; i++) {
        pb_message_t m = s->pending[k + i];
        m.message_id = keep_copy(s, m.message_id);
        m.type = keep_copy(s, m.type);
        m.aggregate_type = keep_copy(s, m.aggregate_type);
        m.aggregate_id = keep_copy(s, m.aggregate_id);
        m.routing_key = keep_copy(s, m.routing_key);
        m.exchange = keep_copy(s, m.exchange);
        m.headers = keep_copy(s, m.headers);
        m.body = arena_copy(s, m.body, m.body_len); /* may hold NUL bytes */
        s->pending[i] = m;
    }
    s->arena = &s->arenas[s->cur];
    s->n_pending = left;
    return k;
}

/* A passive queue.declare on the consuming channel: the queue's ready messages and consumers.
 * Deliveries that arrive meanwhile are kept for the next receive. */
static pb_status_t check_queue(amqp_source_t *s, int64_t *messages, int64_t *consumers,
                               pb_error_t *err)
{
    if (!s->link.conn || !s->link.channel_open)
        return pb_fail(err, PB_TRANSIENT, "not connected to rabbitmq at %s", s->where);
    amqp_queue_declare_ok_t *ok = amqp_queue_declare(s->link.conn, CHANNEL,
                                                     cbytes(s->base.cfg->amqp_queue), 1, 0, 0, 0,
                                                     amqp_empty_table);
    if (!ok) {
        char buf[320];
        pb_amqp_link_rpc_failed(&s->link, "check queue", buf, sizeof buf);
        return lost(s, err, "%s", buf);
    }
    *messages = (int64_t)ok->message_count;
    *consumers = (int64_t)ok->consumer_count;
    return PB_OK;
}

/* Every metrics.sample_interval (with metrics.listen): the queue's depth, for /metrics. */
static pb_status_t sample(amqp_source_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    int64_t now = pb_monotonic_ms();
    if (!*cfg->metrics_listen || cfg->metrics_sample_interval <= 0 || now < s->sample_due_ms)
        return PB_OK;
    s->sample_due_ms = now + cfg->metrics_sample_interval;
    int64_t messages, consumers;
    pb_status_t st = check_queue(s, &messages, &consumers, err);
    if (st == PB_OK)
        pb_metrics_set_amqp_queue(cfg->amqp_queue, messages, consumers);
    return st;
}

static pb_status_t src_receive(pb_source_t *src, pb_message_t *msgs, size_t max, int64_t wait_ms,
                               int64_t batch_wait_ms, size_t *n, pb_error_t *err)
{
    amqp_source_t *s = (amqp_source_t *)src;
    *n = 0;
    /* the previous batch's strings go; the prefetched ones' arena becomes the current one */
    recycle_amqp_pool(&s->arenas[s->cur]);
    s->cur = !s->cur;
    s->arena = &s->arenas[s->cur];
    if (!s->link.conn || !s->link.channel_open) {
        s->n_pending = 0;
        return pb_fail(err, PB_TRANSIENT, "not connected to rabbitmq at %s", s->where);
    }
    pb_status_t st = sample(s, err);
    if (st != PB_OK)
        return st;

    uint64_t bytes;
    size_t got = take_pending(s, msgs, max, &bytes);
    /* batch_wait counts from the first message, or from now for prefetched ones (as for ones
     * that waited in the socket buffer) */
    int64_t wait = got ? batch_wait_ms : wait_ms;
    int64_t deadline = pb_monotonic_ms() + (wait > 0 ? wait : 0);
    while (got < max && !bytes_full(s, got, bytes)) {
        bool one = false;
        st = read_next(s, &msgs[got], deadline, &one, err);
        if (st != PB_OK || !one)
            break;
        bytes += msgs[got].body_len;
        if (got++ == 0)
            deadline = pb_monotonic_ms() + (batch_wait_ms > 0 ? batch_wait_ms : 0);
    }
    if (st != PB_OK) {
        /* the channel is gone, and with it the delivery tags: nothing of this batch can be
         * acknowledged, the broker redelivers all of it */
        recycle_amqp_pool(&s->arenas[0]);
        recycle_amqp_pool(&s->arenas[1]);
        return st;
    }
    *n = got;
    s->outstanding += got;
    amqp_maybe_release_buffers(s->link.conn); /* everything handed out was copied into the arena */
    return PB_OK;
}

/* Decodes the deliveries that are readable without waiting, up to max pending, into the other
 * arena: the consumer calls this while PostgreSQL works on the current batch. */
static pb_status_t src_prefetch(pb_source_t *src, size_t max, pb_error_t *err)
{
    amqp_source_t *s = (amqp_source_t *)src;
    if (!s->link.conn || !s->link.channel_open || s->n_pending >= max)
        return PB_OK;
    if (max > s->cap_pending) {
        s->pending = pb_realloc(s->pending, max * sizeof *s->pending);
        s->cap_pending = max;
    }
    s->arena = &s->arenas[!s->cur];
    pb_status_t st = PB_OK;
    uint64_t bytes = pending_bytes(s);
    while (s->n_pending < max && !bytes_full(s, s->n_pending, bytes)) {
        bool one = false;
        st = read_next(s, &s->pending[s->n_pending], pb_monotonic_ms(), &one, err);
        if (st != PB_OK || !one)
            break;
        bytes += s->pending[s->n_pending++].body_len;
    }
    s->arena = &s->arenas[s->cur];
    if (st == PB_OK)
        amqp_maybe_release_buffers(s->link.conn); /* what was decoded is copied */
    return st;
}

static int src_prefetch_fd(pb_source_t *src, size_t max)
{
    amqp_source_t *s = (amqp_source_t *)src;
    if (!s->link.conn || !s->link.channel_open || s->n_pending >= max ||
        bytes_full(s, s->n_pending, pending_bytes(s)))
        return -1;
    return amqp_get_sockfd(s->link.conn);
}

/* ---- settle ---------------------------------------------------------------------------------- */

/* Turns a pb_message_t tag into the delivery tag of the current channel. A tag from before a
 * reconnect is refused: the broker would close the channel (406 unknown delivery tag) or, worse,
 * acknowledge a different message; its message is redelivered anyway. */
static pb_status_t check_tag(amqp_source_t *s, uint64_t tag, const char *what, uint64_t *delivery,
                             pb_error_t *err)
{
    *delivery = tag & TAG_DELIVERY_MASK;
    if (!s->link.conn || !s->link.channel_open)
        return pb_fail(err, PB_TRANSIENT,
                       "cannot %s delivery %llu: not connected to rabbitmq at %s", what,
                       (unsigned long long)*delivery, s->where);
    if (tag >> TAG_EPOCH_SHIFT != s->epoch || *delivery == 0 || *delivery > s->last_tag)
        return pb_fail(err, PB_TRANSIENT, "cannot %s delivery %llu: not delivered on the current "
                                          "connection (reconnected since?)", what,
                       (unsigned long long)*delivery);
    return PB_OK;
}

/* Done and dead are acknowledged: a dead message is kept in postbox.inbox_dead, and a reject
 * would put a second copy into a dead-letter exchange configured on the queue. Retry is a nack
 * with requeue. When the list settles every delivery handed out and not settled yet, all done or
 * dead, one multiple ack covers it: deliveries not handed out yet (prefetched) came later and
 * have higher tags. */
static pb_status_t src_settle(pb_source_t *src, const pb_settle_t *list, size_t n, pb_error_t *err)
{
    amqp_source_t *s = (amqp_source_t *)src;
    uint64_t last = 0;
    bool all_acks = true;
    for (size_t i = 0; i < n; i++) {
        uint64_t delivery;
        pb_status_t st = check_tag(s, list[i].tag, "settle", &delivery, err);
        if (st != PB_OK)
            return st;
        if (delivery > last)
            last = delivery;
        all_acks &= list[i].how != PB_SETTLE_RETRY;
    }
    if (all_acks && n == s->outstanding) {
        s->outstanding = 0;
        int rc = amqp_basic_ack(s->link.conn, CHANNEL, last, 1);
        if (rc != AMQP_STATUS_OK)
            return lost(s, err, "acknowledging deliveries up to %llu: %s",
                        (unsigned long long)last, amqp_error_string2(rc));
        return PB_OK;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t delivery = list[i].tag & TAG_DELIVERY_MASK;
        bool retry = list[i].how == PB_SETTLE_RETRY;
        int rc = retry ? amqp_basic_nack(s->link.conn, CHANNEL, delivery, 0, 1)
                       : amqp_basic_ack(s->link.conn, CHANNEL, delivery, 0);
        if (rc != AMQP_STATUS_OK)
            return lost(s, err, "%s delivery %llu: %s", retry ? "requeueing" : "acknowledging",
                        (unsigned long long)delivery, amqp_error_string2(rc));
        if (s->outstanding > 0)
            s->outstanding--;
    }
    return PB_OK;
}

/* Ready messages in the queue plus what is received and not handed out. Messages
 * unacknowledged by other consumers of the queue are not seen (AMQP does not tell). */
static pb_status_t src_pending(pb_source_t *src, int64_t *pending, pb_error_t *err)
{
    amqp_source_t *s = (amqp_source_t *)src;
    int64_t messages, consumers;
    pb_status_t st = check_queue(s, &messages, &consumers, err);
    if (st != PB_OK)
        return st;
    *pending = messages + (int64_t)s->n_pending +
               (amqp_frames_enqueued(s->link.conn) || amqp_data_in_buffer(s->link.conn) ? 1 : 0);
    return PB_OK;
}

/* ---- free / new ----------------------------------------------------------------------------- */

static void free_bindings(amqp_source_t *s)
{
    for (size_t i = 0; i < s->nbindings; i++)
        free(s->bindings[i]);
    free(s->bindings);
    s->bindings = NULL;
    s->nbindings = 0;
}

static void src_free(pb_source_t *src)
{
    if (!src)
        return;
    amqp_source_t *s = (amqp_source_t *)src;
    pb_amqp_link_close(&s->link);
    pb_amqp_url_free(&s->url);
    free_bindings(s);
    empty_amqp_pool(&s->arenas[0]);
    empty_amqp_pool(&s->arenas[1]);
    free(s->pending);
    pb_buf_free(&s->scratch);
    free(s);
}

/* Every event reaches the queue when postbox declares it bound with '#' on a topic exchange,
 * or bound at all to a fanout exchange; a binding per event type takes only those. */
static bool src_takes_every_event(const pb_source_t *src, char *why, size_t n)
{
    const amqp_source_t *s = (const amqp_source_t *)src;
    const pb_config_t *cfg = src->cfg;
    if (!cfg->amqp_queue_declare) {
        snprintf(why, n, "amqp.queue_declare is false, so the queue's bindings are not known");
        return false;
    }
    if (strcmp(cfg->amqp_exchange_type, "fanout") == 0) {
        snprintf(why, n, "the queue is %sbound to fanout exchange %s", s->nbindings ? "" : "not ",
                 cfg->amqp_exchange);
        return s->nbindings > 0;
    }
    for (size_t i = 0; strcmp(cfg->amqp_exchange_type, "topic") == 0 && i < s->nbindings; i++)
        if (strcmp(s->bindings[i], "#") == 0) {
            snprintf(why, n, "amqp.bindings has '#'");
            return true;
        }
    snprintf(why, n, "amqp.bindings '%s' on a %s exchange may take only some event types",
             cfg->amqp_bindings, cfg->amqp_exchange_type);
    return false;
}

static const pb_source_ops_t amqp_source_ops = {
    .name = "amqp",
    .connect = src_connect,
    .receive = src_receive,
    .settle = src_settle,
    .prefetch = src_prefetch,
    .prefetch_fd = src_prefetch_fd,
    .pending = src_pending,
    .takes_every_event = src_takes_every_event,
    .free = src_free,
};

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* Splits amqp.bindings at commas into trimmed keys. "" (or only blanks) means no binding; an
 * empty key between commas is an error (a lone "," is almost certainly a typo). */
static pb_status_t parse_bindings(amqp_source_t *s, const char *list, pb_error_t *err)
{
    const char *p = list;
    while (is_space(*p))
        p++;
    if (!*p)
        return PB_OK;
    size_t cap = 1;
    for (const char *q = list; *q; q++)
        cap += *q == ',';
    s->bindings = pb_malloc(cap * sizeof *s->bindings);
    for (;;) {
        const char *end = p + strcspn(p, ",");
        const char *a = p, *b = end;
        while (a < b && is_space(*a))
            a++;
        while (b > a && is_space(b[-1]))
            b--;
        if (a == b)
            return pb_fail(err, PB_FATAL, "amqp.bindings \"%s\": empty binding key between "
                                          "commas", list);
        if ((size_t)(b - a) > SHORTSTR_MAX)
            return pb_fail(err, PB_FATAL, "amqp.bindings: binding key \"%.40s...\" is longer "
                                          "than 255 bytes", a);
        char *key = pb_malloc((size_t)(b - a) + 1);
        memcpy(key, a, (size_t)(b - a));
        key[b - a] = '\0';
        s->bindings[s->nbindings++] = key;
        if (!*end)
            break;
        p = end + 1;
    }
    return PB_OK;
}

pb_status_t pb_source_amqp_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    if (!*cfg->amqp_queue)
        return pb_fail(err, PB_FATAL, "amqp.queue is empty: name the queue to consume");
    if (strlen(cfg->amqp_queue) > SHORTSTR_MAX)
        return pb_fail(err, PB_FATAL, "amqp.queue is longer than 255 bytes");
    if (strlen(cfg->amqp_exchange) > SHORTSTR_MAX)
        return pb_fail(err, PB_FATAL, "amqp.exchange is longer than 255 bytes");
    if (strlen(cfg->amqp_queue_dead_letter_exchange) > SHORTSTR_MAX)
        return pb_fail(err, PB_FATAL, "amqp.queue_dead_letter_exchange is longer than 255 bytes");
    if (strlen(cfg->consume_message_id_header) > SHORTSTR_MAX)
        return pb_fail(err, PB_FATAL, "consume.message_id_header is longer than 255 bytes");
    if (cfg->amqp_prefetch < 1 || cfg->amqp_prefetch > 65535)
        return pb_fail(err, PB_FATAL, "amqp.prefetch must be from 1 to 65535");
    if (cfg->amqp_queue_declare && cfg->amqp_queue_max_length == 0 &&
        cfg->amqp_queue_message_ttl == 0 && !cfg->amqp_allow_unlimited)
        return pb_fail(err, PB_FATAL,
                       "amqp.queue \"%s\" would be declared without a bound and grow without "
                       "limit while its consumers are down: set amqp.queue_message_ttl (default "
                       "7d) or amqp.queue_max_length, or amqp.allow_unlimited = true",
                       cfg->amqp_queue);

    if (cfg->consume_batch_size > cfg->amqp_prefetch)
        log_warn(FAC, "consume.batch_size %lld is above amqp.prefetch %lld: rabbitmq never sends "
                      "that many unacknowledged messages, so every batch waits "
                      "consume.batch_wait", (long long)cfg->consume_batch_size,
                 (long long)cfg->amqp_prefetch);
    else if (cfg->amqp_prefetch < 3 * cfg->consume_batch_size)
        /* one batch in the database, the next read ahead, and the one after on its way: with
         * 500 for batches of 200 the benchmark ran 25-30 % slower than with 1000 */
        log_warn(FAC, "amqp.prefetch %lld is below 3 x consume.batch_size %lld: the next batch "
                      "cannot fill while the database handles this one",
                 (long long)cfg->amqp_prefetch, (long long)cfg->consume_batch_size);

    if (cfg->consume_max_held < cfg->amqp_prefetch)
        log_warn(FAC, "consume.max_held %lld is below amqp.prefetch %lld: at the bound RabbitMQ "
                      "redelivers what is given back at once, again and again",
                 (long long)cfg->consume_max_held, (long long)cfg->amqp_prefetch);

    amqp_source_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &amqp_source_ops;
    s->base.cfg = cfg;
    pb_status_t st = parse_bindings(s, cfg->amqp_bindings, err);
    if (st == PB_OK && s->nbindings > 0 && cfg->amqp_queue_declare && !*cfg->amqp_exchange)
        st = pb_fail(err, PB_FATAL, "amqp.bindings needs amqp.exchange: the default exchange "
                                    "cannot be bound (set amqp.bindings = \"\" to consume without "
                                    "binding)");
    if (st == PB_OK)
        st = pb_amqp_url_parse(cfg->amqp_url, &s->url, err);
    if (st != PB_OK) {
        free_bindings(s);
        free(s);
        return st;
    }
    pb_amqp_url_where(&s->url, s->where, sizeof s->where);
    s->heartbeat_s = pb_amqp_heartbeat_s(cfg->amqp_heartbeat);
    init_amqp_pool(&s->arenas[0], ARENA_PAGE);
    init_amqp_pool(&s->arenas[1], ARENA_PAGE);
    s->arena = &s->arenas[0];
    *out = &s->base;
    return PB_OK;
}
