/* postbox demo: a fresh start on the broker. An earlier run's queue or stream would still hold
 * its messages (and a JetStream durable its position), which this run's database never wrote. */
#include <amqp.h>
#include <nats/nats.h>
#include <string.h>

#include "broker/amqp/conn.h"
#include "broker/amqp/url.h"
#include "broker/nats/conn.h"
#include "broker/redis/conn.h"
#include "demo/demo_int.h"

static pb_status_t reset_amqp(const pb_config_t *cfg, pb_error_t *err)
{
    pb_amqp_url_t u;
    pb_status_t st = pb_amqp_url_parse(cfg->amqp_url, &u, err);
    if (st != PB_OK)
        return st;
    pb_amqp_link_t lk = {0};
    char where[300], buf[400];
    pb_amqp_url_where(&u, where, sizeof where);
    st = pb_amqp_open(&u, cfg, 0, &lk.conn, err);
    pb_amqp_url_free(&u);
    if (st != PB_OK) /* the message names the broker */
        return st;
    if ((st = pb_amqp_link_channel_open(&lk, err)) != PB_OK) {
        pb_amqp_link_close(&lk);
        return pb_fail(err, st, "rabbitmq at %s: %s", where, err->msg);
    }
    if (!amqp_queue_delete(lk.conn, PB_AMQP_LINK_CHANNEL, amqp_cstring_bytes(cfg->amqp_queue), 0, 0)) {
        pb_amqp_link_rpc_failed(&lk, "delete queue", buf, sizeof buf);
        st = pb_fail(err, PB_TRANSIENT, "rabbitmq at %s: %s", where, buf);
    } else if (!amqp_exchange_delete(lk.conn, PB_AMQP_LINK_CHANNEL,
                                     amqp_cstring_bytes(cfg->amqp_exchange), 0)) {
        pb_amqp_link_rpc_failed(&lk, "delete exchange", buf, sizeof buf);
        st = pb_fail(err, PB_TRANSIENT, "rabbitmq at %s: %s", where, buf);
    }
    pb_amqp_link_close(&lk);
    return st;
}

static pb_status_t reset_nats(const pb_config_t *cfg, pb_error_t *err)
{
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    char where[300], buf[300];
    pb_nats_lib_retain();
    pb_status_t st = pb_nats_connect(cfg, "demo", &nc, where, sizeof where, err);
    if (st == PB_OK) {
        natsStatus ns = natsConnection_JetStream(&js, nc, NULL);
        jsErrCode jerr = 0;
        if (ns == NATS_OK)
            ns = js_DeleteStream(js, cfg->nats_stream, NULL, &jerr);
        if (ns != NATS_OK && ns != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr)
            st = pb_fail(err, PB_TRANSIENT, "nats at %s: delete stream \"%s\": %s", where,
                         cfg->nats_stream, pb_nats_error_text(ns, buf, sizeof buf));
        jsCtx_Destroy(js);
        natsConnection_Destroy(nc);
    }
    pb_nats_lib_release();
    return st;
}

/* the stream takes its consumer group with it */
static pb_status_t reset_redis(const pb_config_t *cfg, pb_error_t *err)
{
    redisContext *c = NULL;
    pb_redis_server_t srv;
    pb_status_t st = pb_redis_connect(cfg, &c, &srv, err);
    if (st != PB_OK)
        return st;
    const char *argv[] = {"DEL", cfg->redis_streams};
    redisReply *reply = NULL;
    st = pb_redis_run(c, srv.where, "delete stream", 2, argv, &reply, err);
    if (reply)
        freeReplyObject(reply);
    redisFree(c);
    return st;
}

pb_status_t demo_broker_reset(const pb_config_t *cfg, pb_error_t *err)
{
    if (strcmp(cfg->relay_sink, "nats") == 0)
        return reset_nats(cfg, err);
    if (strcmp(cfg->relay_sink, "redis") == 0)
        return reset_redis(cfg, err);
    return reset_amqp(cfg, err);
}
