/* redis:STREAM, read with XRANGE in pages (shadow/read.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "broker/redis/conn.h"
#include "shadow/read.h"

#define PAGE "1000"

/* The id just after id "MS-SEQ" (XRANGE's exclusive "(" needs Redis 6.2; this works on all). */
static bool next_id(const char *id, char *out, size_t n)
{
    unsigned long long ms, seq;
    if (sscanf(id, "%llu-%llu", &ms, &seq) != 2)
        return false;
    if (seq == UINT64_MAX)
        snprintf(out, n, "%llu-0", ms + 1);
    else
        snprintf(out, n, "%llu-%llu", ms, seq + 1);
    return true;
}

/* Adds one XRANGE entry [id, [field, value, ...]]. */
static void add_entry(const redisReply *e, const char *body_field, pb_shadow_msgs_t *out)
{
    const redisReply *fields = e->element[1];
    const redisReply *body = NULL;
    for (size_t k = 0; k + 1 < fields->elements; k += 2)
        if (fields->element[k]->type == REDIS_REPLY_STRING &&
            strcmp(fields->element[k]->str, body_field) == 0)
            body = fields->element[k + 1];
    pb_shadow_msg_t *m = pb_shadow_msgs_add(out, body ? body->str : "", body ? body->len : 0);
    for (size_t k = 0; k + 1 < fields->elements; k += 2) {
        const redisReply *f = fields->element[k], *v = fields->element[k + 1];
        if (f->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING)
            pb_shadow_msg_set_attr(m, f->str, v->str, v->len);
    }
}

static bool entry_ok(const redisReply *e)
{
    return e->type == REDIS_REPLY_ARRAY && e->elements == 2 &&
           e->element[0]->type == REDIS_REPLY_STRING && e->element[1]->type == REDIS_REPLY_ARRAY;
}

static pb_status_t read_all(redisContext *c, const char *where, const char *stream,
                            const char *body_field, size_t limit, pb_shadow_msgs_t *out,
                            pb_error_t *err)
{
    redisReply *reply = NULL;
    const char *type_argv[] = {"TYPE", stream};
    pb_status_t st = pb_redis_run(c, where, "TYPE", 2, type_argv, &reply, err);
    if (st != PB_OK)
        return st;
    bool is_stream = reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "stream") == 0;
    bool none = reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "none") == 0;
    freeReplyObject(reply);
    if (!is_stream)
        return pb_fail(err, PB_FATAL, "redis at %s: %s \"%s\"", where,
                       none ? "no stream" : "not a stream:", stream);
    char start[48] = "-";
    for (;;) {
        const char *argv[] = {"XRANGE", stream, start, "+", "COUNT", PAGE};
        if ((st = pb_redis_run(c, where, "XRANGE", 6, argv, &reply, err)) != PB_OK)
            return st;
        if (!reply || reply->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(reply);
            return pb_fail(err, PB_FATAL, "redis at %s: XRANGE %s: unexpected reply", where,
                           stream);
        }
        size_t n = reply->elements;
        for (size_t i = 0; i < n && st == PB_OK; i++) {
            const redisReply *e = reply->element[i];
            if (!entry_ok(e))
                st = pb_fail(err, PB_FATAL, "redis at %s: XRANGE %s: malformed entry", where,
                             stream);
            else if (out->n >= limit)
                st = pb_fail(err, PB_FATAL, "stream \"%s\" holds more than %zu entries (--limit)",
                             stream, limit);
            else
                add_entry(e, body_field, out);
        }
        bool more = st == PB_OK && n > 0 &&
                    next_id(reply->element[n - 1]->element[0]->str, start, sizeof start);
        freeReplyObject(reply);
        if (!more)
            return st;
    }
}

pb_status_t pb_shadow_read_redis(const pb_config_t *cfg, const char *stream,
                                 const char *body_field, size_t limit, pb_shadow_msgs_t *out,
                                 pb_error_t *err)
{
    redisContext *c = NULL;
    pb_redis_server_t srv;
    pb_status_t st = pb_redis_connect(cfg, &c, &srv, err);
    if (st != PB_OK)
        return st;
    st = read_all(c, srv.where, stream, body_field, limit, out, err);
    redisFree(c);
    return st;
}
