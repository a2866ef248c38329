/* RabbitMQ sink (rabbitmq-c 0.11): one connection, channel 1 in confirm mode, the batch published
 * pipelined and then every confirm awaited with our own frame loop (0.11 has no
 * amqp_publisher_confirm_wait).
 *
 * Delivery tags are counted here: confirm.select resets the channel's counter, and every
 * basic.publish takes the next tag. A batch's events occupy consecutive tags, so the tag of a
 * confirm maps to its event in O(1) through slot_event[tag - first_tag].
 *
 * @thread loop: the relay's thread only (a rabbitmq-c connection is not thread-safe). */
#include "sink/sink.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <amqp.h>
#include <amqp_framing.h>
#include <jansson.h>

#include "broker/amqp/conn.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/route.h"
#include "common/str.h"
#include "broker/amqp/url.h"
#include "sink/cloudevents.h"

#define FAC "sink.amqp"
#define CHANNEL PB_AMQP_LINK_CHANNEL
#define SHORTSTR_MAX 255
#define CONTENT_TYPE "application/json"
#define POOL_PAGE 16384
#define IDLE_MAX_FRAMES 64

/* Book-keeping of the batch in flight, between send and await. */
typedef struct batch {
    const pb_event_t *events;
    pb_result_t *results;
    uint64_t first_tag;
    size_t nslots;  /* events handed to the broker */
    size_t pending; /* slots still without ack or nack */
    size_t low;     /* every slot below low is done */
} batch_t;

typedef struct amqp_sink {
    pb_sink_t base; /* first: the relay holds a pb_sink_t * */
    pb_amqp_url_t url;
    char where[300]; /* host:port for messages; never the password */
    int heartbeat_s;
    pb_amqp_link_t link; /* link.conn NULL while disconnected */
    uint64_t last_tag; /* delivery tag of the latest publish on CHANNEL (0 after confirm.select) */
    amqp_pool_t pool;  /* header tables of one batch; recycled (pages kept) after it */
    size_t *slot_event;        /* slot (tag - first tag of the batch) -> index into events */
    unsigned char *slot_done;  /* the slot got its ack or nack */
    size_t slot_cap;
    batch_t inflight; /* between sink_send and sink_await */
    bool awaiting;    /* sink_send returned PB_OK: sink_await reads the confirms */
} amqp_sink_t;

static const pb_sink_ops_t amqp_ops;

/* Opens CHANNEL, prepares the exchange and turns on publisher confirms. On failure the channel
 * is closed; the connection may be too (s->link.conn NULL). */
static pb_status_t setup_channel(void *arg, pb_error_t *err)
{
    amqp_sink_t *s = arg;
    pb_status_t st = pb_amqp_link_channel_open(&s->link, err);
    if (st == PB_OK)
        st = pb_amqp_link_setup_exchange(&s->link, s->base.cfg, s->url.vhost, s->url.user,
                                         err);
    if (st != PB_OK)
        return st;
    char buf[320];
    if (!amqp_confirm_select(s->link.conn, CHANNEL)) {
        pb_amqp_link_rpc_failed(&s->link, "enable publisher confirms", buf, sizeof buf);
        return pb_fail(err, PB_TRANSIENT, "%s", buf);
    }
    s->last_tag = 0; /* confirm.select restarts delivery tags at 1 */
    return PB_OK;
}

static pb_status_t sink_connect(pb_sink_t *snk, pb_error_t *err)
{
    amqp_sink_t *s = (amqp_sink_t *)snk;
    const pb_config_t *cfg = snk->cfg;
    s->awaiting = false;
    pb_status_t st = pb_amqp_link_connect(&s->link, &s->url, cfg, s->heartbeat_s, setup_channel,
                                          s, err);
    if (st != PB_OK)
        return st;
    log_info(FAC, "connected to rabbitmq at %s vhost=\"%s\" user=\"%s\" exchange=\"%s\" "
                  "heartbeat=%ds frame_max=%d", s->where, s->url.vhost, s->url.user,
             cfg->amqp_exchange, amqp_get_heartbeat(s->link.conn),
             amqp_get_frame_max(s->link.conn));
    return PB_OK;
}

/* ---- confirms ------------------------------------------------------------------------------- */

static void advance_low(batch_t *b, const unsigned char *done)
{
    while (b->low < b->nslots && done[b->low])
        b->low++;
}

static void resolve(amqp_sink_t *s, batch_t *b, size_t k, bool ack)
{
    s->slot_done[k] = 1;
    b->pending--;
    pb_result_t *r = &b->results[s->slot_event[k]];
    if (r->outcome != PB_OUT_UNTRIED)
        return; /* already failed by a basic.return: its ack must not make it PUBLISHED */
    if (ack)
        pb_result_set(r, PB_OUT_PUBLISHED, NULL);
    else
        pb_result_set(r, PB_OUT_RETRY, "broker nacked the message");
}

static void on_confirm(amqp_sink_t *s, batch_t *b, uint64_t tag, bool multiple, bool ack)
{
    if (!b || b->nslots == 0) {
        log_debug(FAC, "ignoring %s for delivery tag %llu outside a batch", ack ? "ack" : "nack",
                  (unsigned long long)tag);
        return;
    }
    uint64_t last = b->first_tag + b->nslots - 1;
    size_t hi;
    if (multiple && tag == 0) { /* "everything outstanding" */
        hi = b->nslots - 1;
    } else if (tag < b->first_tag || tag > last) {
        log_warn(FAC, "ignoring %s for unexpected delivery tag %llu (batch has %llu..%llu)",
                 ack ? "ack" : "nack", (unsigned long long)tag,
                 (unsigned long long)b->first_tag, (unsigned long long)last);
        return;
    } else {
        hi = (size_t)(tag - b->first_tag);
    }
    size_t lo = multiple ? b->low : hi;
    for (size_t k = lo; k <= hi; k++) {
        if (!s->slot_done[k])
            resolve(s, b, k, ack);
    }
    advance_low(b, s->slot_done);
    if (!ack)
        log_warn(FAC, "rabbitmq nacked delivery tag %llu%s: the events will be retried",
                 (unsigned long long)tag, multiple ? " and those before it" : "");
}

/* Every slot still without a confirm: done, and RETRY with reason unless already decided. */
static void fail_pending(amqp_sink_t *s, batch_t *b, const char *reason)
{
    if (!b)
        return;
    for (size_t k = b->low; k < b->nslots; k++) {
        if (s->slot_done[k])
            continue;
        s->slot_done[k] = 1;
        pb_result_t *r = &b->results[s->slot_event[k]];
        if (r->outcome == PB_OUT_UNTRIED)
            pb_result_set(r, PB_OUT_RETRY, reason);
    }
    b->pending = 0;
    b->low = b->nslots;
}

/* The connection is unusable: fails the batch's unconfirmed events and drops the connection. */
static pb_status_t lost(amqp_sink_t *s, batch_t *b, pb_error_t *err, const char *fmt, ...)
    PB_PRINTF(4, 5);
static pb_status_t lost(amqp_sink_t *s, batch_t *b, pb_error_t *err, const char *fmt, ...)
{
    char reason[240];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    size_t n = b ? b->pending : 0;
    fail_pending(s, b, reason);
    pb_amqp_link_drop(&s->link);
    log_warn(FAC, "rabbitmq at %s: %s (%zu unconfirmed events will be retried)", s->where, reason,
             n);
    return pb_fail(err, PB_TRANSIENT, "rabbitmq at %s: %s", s->where, reason);
}

/* basic.return: the message's content header and body follow and must be consumed. The event is
 * found by its message_id; it becomes RETRY now so that the ack which follows leaves it alone. */
static pb_status_t on_return(amqp_sink_t *s, batch_t *b, const amqp_basic_return_t *ret,
                             int64_t deadline_ms, pb_error_t *err)
{
    char text[64], exchange[SHORTSTR_MAX + 1], rkey[SHORTSTR_MAX + 1], reason[240];
    /* precisions keep the whole text within pb_result_t.error */
    snprintf(reason, sizeof reason, "unroutable: %.32s (%u) exchange=%.72s routing_key=%.72s",
             pb_amqp_bytes_text(ret->reply_text, text, sizeof text), (unsigned)ret->reply_code,
             pb_amqp_bytes_text(ret->exchange, exchange, sizeof exchange),
             pb_amqp_bytes_text(ret->routing_key, rkey, sizeof rkey));

    amqp_frame_t f;
    int rc = pb_amqp_link_wait_frame(&s->link, &f, deadline_ms);
    if (rc != AMQP_STATUS_OK)
        return lost(s, b, err, "reading a returned message: %s", amqp_error_string2(rc));
    if (f.frame_type != AMQP_FRAME_HEADER || f.channel != CHANNEL)
        return lost(s, b, err, "protocol error: no content header after basic.return");
    const amqp_basic_properties_t *p = f.payload.properties.decoded;
    char msgid[SHORTSTR_MAX + 1] = "";
    if (p && (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG))
        pb_amqp_bytes_text(p->message_id, msgid, sizeof msgid);
    uint64_t body = f.payload.properties.body_size;
    for (uint64_t got = 0; got < body; got += f.payload.body_fragment.len) {
        rc = pb_amqp_link_wait_frame(&s->link, &f, deadline_ms);
        if (rc != AMQP_STATUS_OK)
            return lost(s, b, err, "reading a returned message: %s", amqp_error_string2(rc));
        if (f.frame_type != AMQP_FRAME_BODY || f.channel != CHANNEL)
            return lost(s, b, err, "protocol error: incomplete body of a returned message");
    }

    if (b) {
        for (size_t k = b->low; k < b->nslots; k++) {
            const pb_event_t *ev = &b->events[s->slot_event[k]];
            pb_result_t *r = &b->results[s->slot_event[k]];
            if (s->slot_done[k] || r->outcome != PB_OUT_UNTRIED || !ev->event_id ||
                strcmp(ev->event_id, msgid) != 0)
                continue;
            pb_result_set(r, PB_OUT_RETRY, reason);
            log_debug(FAC, "event %s returned by rabbitmq: %s", msgid, reason);
            return PB_OK;
        }
    }
    /* Cannot tell which event came back: every unconfirmed one is retried rather than risk
     * marking an unrouted event published. */
    log_warn(FAC, "returned message with unknown message_id \"%s\" (%s): retrying every "
                  "unconfirmed event of the batch", msgid, reason);
    if (b) {
        for (size_t k = b->low; k < b->nslots; k++) {
            pb_result_t *r = &b->results[s->slot_event[k]];
            if (!s->slot_done[k] && r->outcome == PB_OUT_UNTRIED)
                pb_result_set(r, PB_OUT_RETRY, reason);
        }
    }
    return PB_OK;
}

/* Slot of the message a "406 message size N is larger than configured max size M" channel
 * close refers to: the unconfirmed event whose body is N bytes, else the first larger than M,
 * else the first unconfirmed one. SIZE_MAX when none is left. */
static size_t oversize_culprit(amqp_sink_t *s, const batch_t *b, const char *text)
{
    unsigned long long size = 0, max = 0;
    const char *p = strstr(text, "message size ");
    bool have_size = p && sscanf(p, "message size %llu", &size) == 1;
    const char *q = strstr(text, "max size ");
    bool have_max = q && sscanf(q, "max size %llu", &max) == 1;
    size_t first = SIZE_MAX, larger = SIZE_MAX;
    for (size_t k = b->low; k < b->nslots; k++) {
        if (s->slot_done[k] || b->results[s->slot_event[k]].outcome != PB_OUT_UNTRIED)
            continue;
        size_t len = b->events[s->slot_event[k]].payload_len;
        if (have_size && len == size)
            return k;
        if (first == SIZE_MAX)
            first = k;
        if (have_max && larger == SIZE_MAX && len > max)
            larger = k;
    }
    return larger != SIZE_MAX ? larger : first;
}

static pb_status_t on_channel_close(amqp_sink_t *s, batch_t *b, const amqp_channel_close_t *c,
                                    pb_error_t *err)
{
    char text[200], reason[240];
    unsigned code = c->reply_code;
    pb_amqp_bytes_text(c->reply_text, text, sizeof text);
    if (pb_amqp_link_channel_close_ok(&s->link) != AMQP_STATUS_OK)
        return lost(s, b, err, "channel closed by rabbitmq (%u %s) and the connection failed",
                    code, text);

    size_t n = b ? b->pending : 0; /* to be retried */
    if (b && code == AMQP_PRECONDITION_FAILED && strstr(text, "size")) {
        size_t k = oversize_culprit(s, b, text);
        if (k != SIZE_MAX) {
            n--;
            const pb_event_t *ev = &b->events[s->slot_event[k]];
            pb_result_setf(&b->results[s->slot_event[k]], PB_OUT_REJECT,
                        "rabbitmq refused the message: %u %s", code, text);
            log_debug(FAC, "event %s (%zu bytes) refused by rabbitmq: %u %s",
                      ev->event_id ? ev->event_id : "?", ev->payload_len, code, text);
        }
    }
    snprintf(reason, sizeof reason, "channel closed: %u %s", code, text);
    fail_pending(s, b, reason);
    log_warn(FAC, "rabbitmq closed the channel: %u %s (%zu unconfirmed events will be retried); "
                  "reopening it", code, text, n);

    pb_error_t why;
    if (setup_channel(s, &why) != PB_OK) {
        pb_amqp_link_drop(&s->link);
        return pb_fail(err, PB_TRANSIENT, "rabbitmq closed the channel (%u %s) and reopening it "
                                          "failed: %s", code, text, why.msg);
    }
    return PB_OK;
}

static pb_status_t on_connection_close(amqp_sink_t *s, batch_t *b,
                                       const amqp_connection_close_t *c, pb_error_t *err)
{
    char text[200];
    unsigned code = c->reply_code;
    pb_amqp_bytes_text(c->reply_text, text, sizeof text);
    pb_amqp_link_connection_close_ok(&s->link); /* courtesy */
    return lost(s, b, err, "connection closed by broker: %u %s", code, text);
}

/* Dispatches one frame read outside an RPC. b is NULL when no batch is in flight (idle). */
static pb_status_t handle_frame(amqp_sink_t *s, batch_t *b, const amqp_frame_t *f,
                                int64_t deadline_ms, pb_error_t *err)
{
    if (f->frame_type != AMQP_FRAME_METHOD) {
        log_debug(FAC, "ignoring frame of type %d on channel %d", f->frame_type, f->channel);
        return PB_OK;
    }
    const amqp_method_t *m = &f->payload.method;
    if (f->channel == 0) {
        if (m->id == AMQP_CONNECTION_CLOSE_METHOD)
            return on_connection_close(s, b, m->decoded, err);
        log_debug(FAC, "ignoring method 0x%08x on channel 0", (unsigned)m->id);
        return PB_OK;
    }
    if (f->channel != CHANNEL) {
        log_debug(FAC, "ignoring method 0x%08x on channel %d", (unsigned)m->id, f->channel);
        return PB_OK;
    }
    switch (m->id) {
    case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *a = m->decoded;
        on_confirm(s, b, a->delivery_tag, a->multiple, true);
        return PB_OK;
    }
    case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *a = m->decoded;
        on_confirm(s, b, a->delivery_tag, a->multiple, false);
        return PB_OK;
    }
    case AMQP_BASIC_RETURN_METHOD:
        return on_return(s, b, m->decoded, deadline_ms, err);
    case AMQP_CHANNEL_CLOSE_METHOD:
        return on_channel_close(s, b, m->decoded, err);
    default:
        log_debug(FAC, "ignoring method 0x%08x on channel %d", (unsigned)m->id, CHANNEL);
        return PB_OK;
    }
}

/* Reads frames until every slot of b is confirmed. drain: only what is already readable, for a
 * connection that failed while publishing (returns PB_OK with slots left pending). */
static pb_status_t await_confirms(amqp_sink_t *s, batch_t *b, int64_t deadline_ms, bool drain,
                                  pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    while (b->pending > 0) {
        amqp_frame_t f;
        int rc = pb_amqp_link_wait_frame(&s->link, &f, deadline_ms);
        if (rc == AMQP_STATUS_TIMEOUT) {
            if (drain)
                return PB_OK;
            return lost(s, b, err, "no confirm for %zu of %zu messages within %lld ms", b->pending,
                        b->nslots, (long long)cfg->amqp_confirm_timeout);
        }
        if (rc != AMQP_STATUS_OK)
            return lost(s, b, err, "connection lost while waiting for confirms: %s",
                        amqp_error_string2(rc));
        pb_status_t st = handle_frame(s, b, &f, deadline_ms, err);
        if (st != PB_OK)
            return st;
    }
    return PB_OK;
}

/* ---- publishing ----------------------------------------------------------------------------- */

static amqp_bytes_t cbytes(const char *s, size_t len)
{
    amqp_bytes_t b = {.len = len, .bytes = (void *)(uintptr_t)s}; /* rabbitmq-c only reads it */
    return b;
}

/* Fills the properties of ev. Header table entries live in the batch pool and may point into
 * *root, which the caller releases after the publish. Returns false with *res REJECT when the
 * event cannot be sent as an AMQP message. */
static bool build_props(amqp_sink_t *s, const pb_event_t *ev, size_t frame_max,
                        amqp_basic_properties_t *props, pb_result_t *res)
{
    const pb_config_t *cfg = s->base.cfg;
    size_t idlen = ev->event_id ? strlen(ev->event_id) : 0;
    size_t typelen = ev->event_type ? strlen(ev->event_type) : 0;
    size_t applen = strlen(cfg->amqp_app_id);
    if (idlen > SHORTSTR_MAX || typelen > SHORTSTR_MAX) {
        pb_result_set(res, PB_OUT_REJECT, idlen > SHORTSTR_MAX ? "event_id longer than 255 bytes"
                                                           : "event_type longer than 255 bytes");
        return false;
    }

    memset(props, 0, sizeof *props);
    props->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                    AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_HEADERS_FLAG;
    props->content_type = cbytes(CONTENT_TYPE, sizeof CONTENT_TYPE - 1);
    props->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props->timestamp = ev->created_at_us > 0 ? (uint64_t)(ev->created_at_us / 1000000) : 0;
    if (ev->event_id) {
        props->_flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        props->message_id = cbytes(ev->event_id, idlen);
    }
    if (ev->event_type) {
        props->_flags |= AMQP_BASIC_TYPE_FLAG;
        props->type = cbytes(ev->event_type, typelen);
    }
    if (applen) {
        props->_flags |= AMQP_BASIC_APP_ID_FLAG;
        props->app_id = cbytes(cfg->amqp_app_id, applen);
    }
    /* an event with an expiry: the broker drops it once its lifetime left is over (omitted above
     * RabbitMQ's limit, which would close the channel: the event lives longer than that) */
    int64_t ttl_ms = ev->expires_at_us > 0 ? pb_event_ttl_ms(ev, pb_wall_us()) : -1;
    size_t explen = 0;
    if (ttl_ms >= 0 && ttl_ms <= PB_AMQP_MAX_TTL_MS) {
        char *exp = amqp_pool_alloc(&s->pool, 24);
        if (!exp) {
            pb_result_set(res, PB_OUT_RETRY, "out of memory building message properties");
            return false;
        }
        explen = (size_t)snprintf(exp, 24, "%lld", (long long)ttl_ms);
        props->_flags |= AMQP_BASIC_EXPIRATION_FLAG;
        props->expiration = cbytes(exp, explen);
    }
    /* encoded size of the content header frame: frame header+end 8, class/weight/size/flags 14,
     * the short strings with their length byte, delivery mode 1, timestamp 8, table length 4 */
    size_t est = 8 + 14 + 1 + sizeof CONTENT_TYPE - 1 + 1 + 8 + 4;
    est += (idlen ? 1 + idlen : 0) + (typelen ? 1 + typelen : 0) + (applen ? 1 + applen : 0) +
           (explen ? 1 + explen : 0);

    size_t nuser = pb_header_count(ev); /* kept or parsed by pb_sink_prepare */
    pb_ce_t *ce = s->base.ce;

    amqp_table_entry_t *e = amqp_pool_alloc(&s->pool, sizeof *e * (nuser + 3 + PB_CE_NATTRS));
    if (!e) {
        pb_result_set(res, PB_OUT_RETRY, "out of memory building message headers");
        return false;
    }
    size_t k = 0;
    pb_header_iter_t it;
    pb_header_t h;
    for (pb_header_iter_init(&it, ev); pb_header_next(&it, &h);) {
        if (pb_header_is(&h, "aggregate_type") || pb_header_is(&h, "aggregate_id") ||
            pb_header_is(&h, PB_SEQUENCE_HEADER) || pb_ce_owns(ce, h.key, h.klen))
            continue; /* ours, from the row, win */
        if (h.klen > SHORTSTR_MAX) {
            pb_result_setf(res, PB_OUT_REJECT, "header name \"%.40s...\" longer than 255 bytes",
                           h.key);
            goto reject;
        }
        e[k].key = cbytes(h.key, h.klen);
        est += 1 + h.klen + 1;
        if (h.val) { /* a string */
            e[k].value.kind = AMQP_FIELD_KIND_UTF8;
            e[k].value.value.bytes = cbytes(h.val, h.vlen);
            est += 4 + h.vlen;
            k++;
            continue;
        }
        const json_t *v = h.json;
        switch (json_typeof(v)) {
        case JSON_INTEGER:
            e[k].value.kind = AMQP_FIELD_KIND_I64;
            e[k].value.value.i64 = (int64_t)json_integer_value(v);
            est += 8;
            break;
        case JSON_TRUE:
        case JSON_FALSE:
            e[k].value.kind = AMQP_FIELD_KIND_BOOLEAN;
            e[k].value.value.boolean = json_is_true(v);
            est += 1;
            break;
        default: { /* objects, arrays, reals, null: their compact JSON text */
            char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!txt) {
                pb_result_set(res, PB_OUT_RETRY, "out of memory building message headers");
                goto reject;
            }
            size_t tl = strlen(txt);
            char *copy = amqp_pool_alloc(&s->pool, tl + 1);
            if (copy)
                memcpy(copy, txt, tl + 1);
            free(txt);
            if (!copy) {
                pb_result_set(res, PB_OUT_RETRY, "out of memory building message headers");
                goto reject;
            }
            e[k].value.kind = AMQP_FIELD_KIND_UTF8;
            e[k].value.value.bytes = cbytes(copy, tl);
            est += 4 + tl;
            break;
        }
        }
        k++;
    }
    static const char *const own[2] = {"aggregate_type", "aggregate_id"};
    const char *vals[2] = {ev->aggregate_type, ev->aggregate_id};
    for (int i = 0; i < 2; i++) {
        if (!vals[i])
            continue;
        size_t vlen = strlen(vals[i]);
        e[k].key = cbytes(own[i], strlen(own[i]));
        e[k].value.kind = AMQP_FIELD_KIND_UTF8;
        e[k].value.value.bytes = cbytes(vals[i], vlen);
        est += 1 + e[k].key.len + 1 + 4 + vlen;
        k++;
    }
    if (ev->sequence > 0) {
        e[k].key = cbytes(PB_SEQUENCE_HEADER, strlen(PB_SEQUENCE_HEADER));
        e[k].value.kind = AMQP_FIELD_KIND_I64;
        e[k].value.value.i64 = ev->sequence;
        est += 1 + e[k].key.len + 1 + 8;
        k++;
    }
    if (ce) { /* CloudEvents: strings in ce's buffers, valid until the next event's */
        pb_ce_attr_t attrs[PB_CE_NATTRS];
        size_t na = pb_ce_attrs(ce, ev, attrs);
        for (size_t a = 0; a < na; a++) {
            e[k].key = cbytes(attrs[a].name, attrs[a].name_len);
            e[k].value.kind = AMQP_FIELD_KIND_UTF8;
            e[k].value.value.bytes = cbytes(attrs[a].value, attrs[a].len);
            est += 1 + attrs[a].name_len + 1 + 4 + attrs[a].len;
            k++;
        }
    }
    if (est > frame_max) {
        /* rabbitmq-c would fail half-way through the frames and break the connection */
        pb_result_setf(res, PB_OUT_REJECT,
                    "message properties of about %zu bytes exceed the AMQP frame size of %zu bytes "
                    "(headers too large)", est, frame_max);
        goto reject;
    }
    props->headers.num_entries = (int)k;
    props->headers.entries = e;
    return true;

reject:
    return false;
}

static void ensure_slots(amqp_sink_t *s, size_t n)
{
    if (n <= s->slot_cap)
        return;
    s->slot_event = pb_realloc(s->slot_event, n * sizeof *s->slot_event);
    s->slot_done = pb_realloc(s->slot_done, n);
    s->slot_cap = n;
}

/* The checks that need no connection: size and routing key. Fills rkey (SHORTSTR_MAX + 1). */
static bool check_event(const pb_config_t *cfg, const pb_event_t *ev, char *rkey, pb_result_t *res)
{
    if ((int64_t)ev->payload_len > cfg->amqp_max_message_size) {
        pb_result_setf(res, PB_OUT_REJECT, "payload of %zu bytes exceeds amqp.max_message_size %lld",
                    ev->payload_len, (long long)cfg->amqp_max_message_size);
        return false;
    }
    if (!pb_route_render(cfg->amqp_routing_key, ev, rkey, SHORTSTR_MAX + 1)) {
        pb_result_set(res, PB_OUT_REJECT, "routing key longer than 255 bytes");
        return false;
    }
    return true;
}

static bool sink_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *res)
{
    char rkey[SHORTSTR_MAX + 1];
    return check_event(snk->cfg, ev, rkey, res);
}

/* Publishes the batch pipelined; sink_await reads the confirms. */
static pb_status_t sink_send(pb_sink_t *snk, pb_sink_batch_t *sb, pb_error_t *err)
{
    amqp_sink_t *s = (amqp_sink_t *)snk;
    const pb_config_t *cfg = snk->cfg;
    const pb_event_t *events = sb->events;
    pb_result_t *results = sb->results;
    size_t n = sb->n;
    if (!s->link.conn || !s->link.channel_open) {
        for (size_t i = 0; i < n; i++) {
            if (results[i].outcome == PB_OUT_UNTRIED)
                pb_result_set(&results[i], PB_OUT_RETRY, "not connected to rabbitmq");
        }
        return pb_fail(err, PB_TRANSIENT, "not connected to rabbitmq at %s", s->where);
    }
    ensure_slots(s, n);

    s->inflight = (batch_t){.events = events, .results = results, .first_tag = s->last_tag + 1};
    batch_t *b = &s->inflight;
    amqp_bytes_t exchange = amqp_cstring_bytes(cfg->amqp_exchange);
    size_t frame_max = (size_t)amqp_get_frame_max(s->link.conn);
    amqp_boolean_t mandatory = cfg->amqp_mandatory;
    int pub_rc = AMQP_STATUS_OK;
    size_t rejected = 0;

    for (size_t i = 0; i < n; i++) {
        if (results[i].outcome != PB_OUT_UNTRIED)
            continue; /* held back or rejected by the relay */
        const pb_event_t *ev = &events[i];
        pb_result_t *res = &results[i];
        if (pub_rc != AMQP_STATUS_OK) {
            pb_result_setf(res, PB_OUT_RETRY, "not published: connection lost: %s",
                        amqp_error_string2(pub_rc));
            continue;
        }
        char rkey[SHORTSTR_MAX + 1];
        if (!pb_route_render(cfg->amqp_routing_key, ev, rkey, sizeof rkey)) {
            pb_result_set(res, PB_OUT_REJECT, "routing key longer than 255 bytes");
            rejected++;
            continue;
        }
        amqp_basic_properties_t props;
        if (!build_props(s, ev, frame_max, &props, res)) {
            rejected += res->outcome == PB_OUT_REJECT;
            continue;
        }
        int rc = amqp_basic_publish(s->link.conn, CHANNEL, exchange, amqp_cstring_bytes(rkey),
                                    mandatory, 0, &props, cbytes(ev->payload, ev->payload_len));
        if (rc != AMQP_STATUS_OK) {
            /* frames of this message may be half written: the connection is unusable */
            pub_rc = rc;
            pb_result_setf(res, PB_OUT_RETRY, "connection lost while publishing: %s",
                        amqp_error_string2(rc));
            continue;
        }
        s->slot_event[b->nslots] = i;
        s->slot_done[b->nslots] = 0;
        b->nslots++;
        s->last_tag++;
    }
    b->pending = b->nslots;
    if (rejected)
        log_debug(FAC, "%zu events of the batch cannot be published to rabbitmq (see their "
                       "last_error)", rejected);
    log_debug(FAC, "batch of %zu: %zu sent (tags %llu..%llu), %zu rejected before sending", n,
              b->nslots, (unsigned long long)b->first_tag,
              (unsigned long long)(b->first_tag + b->nslots - 1), rejected);
    if (pub_rc == AMQP_STATUS_OK) {
        s->awaiting = true;
        return PB_OK;
    }
    /* take the confirms (or the broker's close) already received, then give up */
    pb_status_t st = await_confirms(s, b, pb_monotonic_ms(), true, err);
    if (s->link.conn)
        st = lost(s, b, err, "connection lost while publishing: %s", amqp_error_string2(pub_rc));
    recycle_amqp_pool(&s->pool);
    return st == PB_OK ? pb_fail(err, PB_TRANSIENT, "connection lost while publishing") : st;
}

/* Reads the confirms of the batch sent. */
static pb_status_t sink_await(pb_sink_t *snk, pb_sink_batch_t *sb, pb_error_t *err)
{
    amqp_sink_t *s = (amqp_sink_t *)snk;
    (void)sb; /* one batch in flight: s->inflight points at its events and results */
    if (!s->awaiting)
        return PB_OK;
    s->awaiting = false;
    batch_t *b = &s->inflight;
    pb_status_t st = PB_OK;
    if (b->nslots > 0)
        st = await_confirms(s, b, pb_monotonic_ms() + snk->cfg->amqp_confirm_timeout, false, err);
    recycle_amqp_pool(&s->pool);
    if (s->link.conn)
        amqp_maybe_release_buffers(s->link.conn);
    return st;
}

/* ---- idle / free / new ---------------------------------------------------------------------- */

static pb_status_t sink_idle(pb_sink_t *snk, pb_error_t *err)
{
    amqp_sink_t *s = (amqp_sink_t *)snk;
    if (!s->link.conn)
        return pb_fail(err, PB_TRANSIENT, "not connected to rabbitmq at %s", s->where);
    /* a zero timeout still sends a due heartbeat and notices a missed one (rabbitmq-c checks
     * both before polling the socket) */
    for (int i = 0; i < IDLE_MAX_FRAMES; i++) {
        amqp_frame_t f;
        struct timeval tv = {0, 0};
        int rc = amqp_simple_wait_frame_noblock(s->link.conn, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            break;
        if (rc != AMQP_STATUS_OK)
            return lost(s, NULL, err, "connection lost: %s", amqp_error_string2(rc));
        int64_t deadline = pb_monotonic_ms() + snk->cfg->amqp_confirm_timeout;
        pb_status_t st = handle_frame(s, NULL, &f, deadline, err);
        if (st != PB_OK)
            return st;
    }
    amqp_maybe_release_buffers(s->link.conn);
    return PB_OK;
}

static void sink_free(pb_sink_t *snk)
{
    if (!snk)
        return;
    amqp_sink_t *s = (amqp_sink_t *)snk;
    pb_amqp_link_close(&s->link);
    pb_amqp_url_free(&s->url);
    empty_amqp_pool(&s->pool);
    pb_ce_free(s->base.ce);
    free(s->slot_event);
    free(s->slot_done);
    free(s);
}

static const pb_sink_ops_t amqp_ops = {
    .name = "amqp",
    .max_in_flight = 1,
    .connect = sink_connect,
    .send = sink_send,
    .await = sink_await,
    .check = sink_check,
    .idle = sink_idle,
    .free = sink_free,
};

pb_status_t pb_sink_amqp_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    if (strlen(cfg->amqp_exchange) > SHORTSTR_MAX)
        return pb_fail(err, PB_FATAL, "amqp.exchange is longer than 255 bytes");
    if (strlen(cfg->amqp_app_id) > SHORTSTR_MAX)
        return pb_fail(err, PB_FATAL, "amqp.app_id is longer than 255 bytes");
    pb_error_t why;
    if (pb_route_check_template(cfg->amqp_routing_key, &why) != PB_OK)
        return pb_fail(err, PB_FATAL, "amqp.routing_key: %s", why.msg);

    pb_ce_t *ce = NULL;
    if (pb_ce_wanted(cfg->amqp_cloudevents) &&
        pb_ce_new(cfg, PB_CE_AMQP, cfg->amqp_cloudevents_prefix, &ce, err) != PB_OK)
        return PB_FATAL;

    amqp_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    pb_status_t st = pb_amqp_url_parse(cfg->amqp_url, &s->url, err);
    if (st != PB_OK) {
        pb_ce_free(ce);
        free(s);
        return st;
    }
    s->base.ce = ce;
    s->base.ops = &amqp_ops;
    s->base.cfg = cfg;
    pb_amqp_url_where(&s->url, s->where, sizeof s->where);
    s->heartbeat_s = pb_amqp_heartbeat_s(cfg->amqp_heartbeat);
    init_amqp_pool(&s->pool, POOL_PAGE);
    *out = &s->base;
    return PB_OK;
}
