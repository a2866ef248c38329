/* amqp:QUEUE, read with basic.get and given back with one basic.nack (shadow/read.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <jansson.h>

#include "broker/amqp/conn.h"
#include "broker/amqp/url.h"
#include "shadow/read.h"
#include "source/amqp_headers.h"

#define CHANNEL 1

static void set_bytes(pb_shadow_msg_t *m, const char *name, amqp_bytes_t b)
{
    pb_shadow_msg_set_attr(m, name, b.bytes ? b.bytes : "", b.len);
}

/* The properties by their AMQP names, then the header table's entries (a header of the same
 * name comes first, so it wins the lookup). */
static void set_attributes(pb_shadow_msg_t *m, const amqp_basic_properties_t *p,
                           const char *routing_key, const char *exchange)
{
    if (p->_flags & AMQP_BASIC_HEADERS_FLAG) {
        for (int i = 0; i < p->headers.num_entries; i++) {
            const amqp_table_entry_t *e = &p->headers.entries[i];
            char name[256];
            pb_amqp_bytes_text(e->key, name, sizeof name);
            json_t *v = pb_amqp_value_to_json(&e->value);
            if (json_is_string(v)) {
                pb_shadow_msg_set_attr(m, name, json_string_value(v), json_string_length(v));
            } else {
                char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
                pb_shadow_msg_set_attr(m, name, t ? t : "", t ? strlen(t) : 0);
                free(t);
            }
            json_decref(v);
        }
    }
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        set_bytes(m, "message_id", p->message_id);
    if (p->_flags & AMQP_BASIC_TYPE_FLAG)
        set_bytes(m, "type", p->type);
    if (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)
        set_bytes(m, "correlation_id", p->correlation_id);
    if (p->_flags & AMQP_BASIC_CONTENT_TYPE_FLAG)
        set_bytes(m, "content_type", p->content_type);
    if (p->_flags & AMQP_BASIC_APP_ID_FLAG)
        set_bytes(m, "app_id", p->app_id);
    if (p->_flags & AMQP_BASIC_USER_ID_FLAG)
        set_bytes(m, "user_id", p->user_id);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG) {
        char ts[24];
        int n = snprintf(ts, sizeof ts, "%" PRIu64, p->timestamp);
        pb_shadow_msg_set_attr(m, "timestamp", ts, (size_t)n);
    }
    pb_shadow_msg_set_attr(m, "routing_key", routing_key, strlen(routing_key));
    pb_shadow_msg_set_attr(m, "exchange", exchange, strlen(exchange));
}

/* The failed RPC's reply as the error (PB_FATAL for the broker's refusals: a missing queue). */
static pb_status_t reply_failed(amqp_rpc_reply_t r, const char *what, const char *queue,
                                pb_error_t *err)
{
    char buf[400];
    pb_amqp_reply_error(r, what, buf, sizeof buf);
    pb_status_t st = r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION ? PB_FATAL : PB_TRANSIENT;
    return pb_fail(err, st, "queue \"%s\": %s", queue, buf);
}

/* Gets every message; *last_tag is the delivery tag of the last one (0: none). */
static pb_status_t get_all(amqp_connection_state_t conn, const char *queue, size_t limit,
                           pb_shadow_msgs_t *out, uint64_t *last_tag, pb_error_t *err)
{
    amqp_bytes_t q = amqp_cstring_bytes(queue);
    amqp_queue_declare(conn, CHANNEL, q, 1, 0, 0, 0, amqp_empty_table); /* passive: it exists */
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        return reply_failed(r, "declare (passive)", queue, err);
    for (;;) {
        r = amqp_basic_get(conn, CHANNEL, q, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            return reply_failed(r, "basic.get", queue, err);
        if (r.reply.id == AMQP_BASIC_GET_EMPTY_METHOD)
            return PB_OK;
        const amqp_basic_get_ok_t *ok = r.reply.decoded;
        *last_tag = ok->delivery_tag;
        char routing_key[256], exchange[256];
        pb_amqp_bytes_text(ok->routing_key, routing_key, sizeof routing_key);
        pb_amqp_bytes_text(ok->exchange, exchange, sizeof exchange);
        if (out->n >= limit)
            return pb_fail(err, PB_FATAL, "queue \"%s\" holds more than %zu messages (--limit)",
                           queue, limit);
        amqp_message_t msg;
        r = amqp_read_message(conn, CHANNEL, &msg, 0);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            return reply_failed(r, "read message", queue, err);
        pb_shadow_msg_t *m = pb_shadow_msgs_add(out, msg.body.bytes, msg.body.len);
        set_attributes(m, &msg.properties, routing_key, exchange);
        amqp_destroy_message(&msg);
        amqp_maybe_release_buffers(conn);
    }
}

pb_status_t pb_shadow_read_amqp(const pb_config_t *cfg, const char *queue, size_t limit,
                                pb_shadow_msgs_t *out, pb_error_t *err)
{
    pb_amqp_url_t url;
    pb_status_t st = pb_amqp_url_parse(cfg->amqp_url, &url, err);
    if (st != PB_OK)
        return st;
    amqp_connection_state_t conn = NULL;
    st = pb_amqp_open(&url, cfg, 0, &conn, err);
    pb_amqp_url_free(&url);
    if (st != PB_OK)
        return st;
    amqp_channel_open(conn, CHANNEL);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        st = reply_failed(r, "open channel", queue, err);
        amqp_destroy_connection(conn);
        return st;
    }
    uint64_t last_tag = 0;
    st = get_all(conn, queue, limit, out, &last_tag, err);
    /* every message back, in its place: nothing is taken away by a comparison */
    if (last_tag && amqp_basic_nack(conn, CHANNEL, last_tag, 1, 1) != AMQP_STATUS_OK && st == PB_OK)
        st = pb_fail(err, PB_TRANSIENT, "queue \"%s\": basic.nack failed (the broker requeues the "
                                        "messages when the connection closes)", queue);
    amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    return st;
}
