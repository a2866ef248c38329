#include "broker/amqp/conn.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <amqp_framing.h>

#include "common/clock.h"
#include "broker/amqp/url.h"
#include "config/config.h"

void pb_amqp_link_drop(pb_amqp_link_t *lk)
{
    if (lk->conn)
        amqp_destroy_connection(lk->conn);
    lk->conn = NULL;
    lk->channel_open = false;
}

void pb_amqp_link_close(pb_amqp_link_t *lk)
{
    if (!lk->conn)
        return;
    if (lk->channel_open)
        (void)amqp_channel_close(lk->conn, PB_AMQP_LINK_CHANNEL, AMQP_REPLY_SUCCESS);
    (void)amqp_connection_close(lk->conn, AMQP_REPLY_SUCCESS);
    pb_amqp_link_drop(lk);
}

pb_status_t pb_amqp_link_channel_open(pb_amqp_link_t *lk, pb_error_t *err)
{
    if (!amqp_channel_open(lk->conn, PB_AMQP_LINK_CHANNEL)) {
        char buf[320];
        pb_amqp_link_rpc_failed(lk, "open channel", buf, sizeof buf);
        return pb_fail(err, PB_TRANSIENT, "%s", buf);
    }
    lk->channel_open = true;
    return PB_OK;
}

int pb_amqp_link_channel_close_ok(pb_amqp_link_t *lk)
{
    amqp_channel_close_ok_t ok = {0};
    lk->channel_open = false;
    return amqp_send_method(lk->conn, PB_AMQP_LINK_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
}

void pb_amqp_link_connection_close_ok(pb_amqp_link_t *lk)
{
    amqp_connection_close_ok_t ok = {0};
    (void)amqp_send_method(lk->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
}

unsigned pb_amqp_link_rpc_failed(pb_amqp_link_t *lk, const char *what, char *buf, size_t n)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(lk->conn);
    pb_amqp_reply_error(r, what, buf, n);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION && r.reply.decoded) {
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            unsigned code = ((const amqp_channel_close_t *)r.reply.decoded)->reply_code;
            if (pb_amqp_link_channel_close_ok(lk) == AMQP_STATUS_OK)
                return code;
        } else if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            pb_amqp_link_connection_close_ok(lk);
        }
    }
    pb_amqp_link_drop(lk);
    return 0;
}

pb_status_t pb_amqp_link_connect(pb_amqp_link_t *lk, const struct pb_amqp_url *url,
                                 const struct pb_config *cfg, int heartbeat_s,
                                 pb_status_t (*setup)(void *arg, pb_error_t *err), void *arg,
                                 pb_error_t *err)
{
    pb_amqp_link_close(lk);
    pb_status_t st = pb_amqp_open(url, cfg, heartbeat_s, &lk->conn, err);
    if (st == PB_OK && (st = setup(arg, err)) != PB_OK)
        pb_amqp_link_close(lk);
    return st;
}

pb_status_t pb_amqp_link_declare_failed(pb_amqp_link_t *lk, const char *kind, const char *name,
                                        const char *vhost, const char *user, bool declare,
                                        const char *option, const char *mismatch,
                                        pb_error_t *err)
{
    char what[32], buf[320];
    snprintf(what, sizeof what, "%s %s", declare ? "declare" : "check", kind);
    unsigned code = pb_amqp_link_rpc_failed(lk, what, buf, sizeof buf);
    if (code == AMQP_NOT_FOUND && !declare)
        return pb_fail(err, PB_FATAL, "%s \"%s\" does not exist on vhost \"%s\" (create it, or set "
                                      "%s = true)", kind, name, vhost, option);
    if (code == AMQP_PRECONDITION_FAILED)
        return pb_fail(err, PB_FATAL, "%s \"%s\" on vhost \"%s\" exists %s: %s", kind, name, vhost,
                       mismatch, buf);
    if (code == AMQP_ACCESS_REFUSED)
        return pb_fail(err, PB_FATAL, "user \"%s\" may not use %s \"%s\" on vhost \"%s\": %s", user,
                       kind, name, vhost, buf);
    /* 405 RESOURCE_LOCKED (a queue exclusive to another connection, which may go away), or
     * the connection was lost */
    return pb_fail(err, PB_TRANSIENT, "%s", buf);
}

pb_status_t pb_amqp_link_setup_exchange(pb_amqp_link_t *lk, const pb_config_t *cfg,
                                        const char *vhost, const char *user, pb_error_t *err)
{
    const char *ex = cfg->amqp_exchange, *alt = cfg->amqp_alternate_exchange;
    bool declare = cfg->amqp_declare_exchange;
    if (!*ex)
        return PB_OK; /* the default exchange always exists and cannot be declared */
    if (declare && *alt &&
        !amqp_exchange_declare(lk->conn, PB_AMQP_LINK_CHANNEL, amqp_cstring_bytes(alt),
                               amqp_cstring_bytes("fanout"), 0, 1, 0, 0, amqp_empty_table))
        return pb_amqp_link_declare_failed(lk, "exchange", alt, vhost, user, true,
                                           "amqp.declare_exchange",
                                           "but is not a durable fanout exchange "
                                           "(amqp.alternate_exchange)", err);
    amqp_table_entry_t arg = {.key = amqp_cstring_bytes("alternate-exchange")};
    arg.value.kind = AMQP_FIELD_KIND_UTF8;
    arg.value.value.bytes = amqp_cstring_bytes(alt);
    amqp_table_t args = *alt && declare ? (amqp_table_t){1, &arg} : amqp_empty_table;
    if (amqp_exchange_declare(lk->conn, PB_AMQP_LINK_CHANNEL, amqp_cstring_bytes(ex),
                              amqp_cstring_bytes(cfg->amqp_exchange_type), !declare, declare, 0,
                              0, args))
        return PB_OK;
    char mismatch[160];
    if (*alt)
        snprintf(mismatch, sizeof mismatch, "but not as a durable %s exchange with alternate "
                 "exchange \"%s\"", cfg->amqp_exchange_type, alt);
    else
        snprintf(mismatch, sizeof mismatch, "but is not a durable %s exchange",
                 cfg->amqp_exchange_type);
    return pb_amqp_link_declare_failed(lk, "exchange", ex, vhost, user, declare,
                                       "amqp.declare_exchange", mismatch, err);
}

static amqp_table_entry_t str_arg(const char *key, const char *value)
{
    amqp_table_entry_t e = {.key = amqp_cstring_bytes(key)};
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = amqp_cstring_bytes(value);
    return e;
}

static amqp_table_entry_t long_arg(const char *key, int64_t value)
{
    amqp_table_entry_t e = {.key = amqp_cstring_bytes(key)};
    e.value.kind = AMQP_FIELD_KIND_I64;
    e.value.value.i64 = value;
    return e;
}

static amqp_table_entry_t bool_arg(const char *key, bool value)
{
    amqp_table_entry_t e = {.key = amqp_cstring_bytes(key)};
    e.value.kind = AMQP_FIELD_KIND_BOOLEAN;
    e.value.value.boolean = value;
    return e;
}

pb_status_t pb_amqp_link_setup_queue(pb_amqp_link_t *lk, const pb_config_t *cfg,
                                     const char *vhost, const char *user, pb_error_t *err)
{
    const char *q = cfg->amqp_queue;
    bool declare = cfg->amqp_queue_declare;
    amqp_table_entry_t args[5];
    int nargs = 0;
    if (declare) {
        args[nargs++] = str_arg("x-queue-type", cfg->amqp_queue_type);
        if (cfg->amqp_queue_max_length > 0)
            args[nargs++] = long_arg("x-max-length", cfg->amqp_queue_max_length);
        if (cfg->amqp_queue_message_ttl > 0)
            args[nargs++] = long_arg("x-message-ttl", cfg->amqp_queue_message_ttl);
        if (*cfg->amqp_queue_dead_letter_exchange)
            args[nargs++] = str_arg("x-dead-letter-exchange", cfg->amqp_queue_dead_letter_exchange);
        if (cfg->amqp_single_active_consumer)
            args[nargs++] = bool_arg("x-single-active-consumer", true);
    }
    amqp_table_t table = {.num_entries = nargs, .entries = args};
    if (amqp_queue_declare(lk->conn, PB_AMQP_LINK_CHANNEL, amqp_cstring_bytes(q), !declare,
                           declare, 0, 0, table))
        return PB_OK;
    return pb_amqp_link_declare_failed(lk, "queue", q, vhost, user, declare, "amqp.queue_declare",
                                       "with different arguments (see amqp.queue_type, "
                                       "queue_max_length, queue_message_ttl, "
                                       "queue_dead_letter_exchange, single_active_consumer; "
                                       "a queue declared before postbox bounded its queues "
                                       "by default has no x-message-ttl: keep it with "
                                       "amqp.queue_message_ttl = 0 and allow_unlimited = true)",
                                       err);
}

int pb_amqp_link_passive(pb_amqp_link_t *lk, const char *kind, const char *name, char *buf,
                         size_t n)
{
    bool exchange = strcmp(kind, "exchange") == 0;
    amqp_bytes_t b = amqp_cstring_bytes(name);
    if (exchange ? amqp_exchange_declare(lk->conn, PB_AMQP_LINK_CHANNEL, b,
                                         amqp_cstring_bytes("topic"), 1, 0, 0, 0, amqp_empty_table) != NULL
                 : amqp_queue_declare(lk->conn, PB_AMQP_LINK_CHANNEL, b, 1, 0, 0, 0,
                                      amqp_empty_table) != NULL)
        return 0;
    char what[32];
    snprintf(what, sizeof what, "check %s", kind);
    unsigned code = pb_amqp_link_rpc_failed(lk, what, buf, n);
    return code ? (int)code : -1;
}

int pb_amqp_link_wait_frame(pb_amqp_link_t *lk, amqp_frame_t *f, int64_t deadline_ms)
{
    struct timeval tv = pb_ms_timeval(deadline_ms - pb_monotonic_ms());
    return amqp_simple_wait_frame_noblock(lk->conn, f, &tv);
}

const char *pb_amqp_bytes_text(amqp_bytes_t b, char *buf, size_t n)
{
    size_t len = b.len < n - 1 ? b.len : n - 1;
    if (len)
        memcpy(buf, b.bytes, len);
    buf[len] = '\0';
    return buf;
}
