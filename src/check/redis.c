/* Redis: reachable and the credentials accepted (pb_redis_connect, as the sink and the source
 * connect), the bound the sink trims to, and the consumer's streams: missing ones are made with
 * their group at start, a key of another type cannot be read. */
#include <stdio.h>
#include <string.h>

#include "broker/redis/conn.h"
#include "check/check_int.h"
#include "check/judge.h"
#include "common/str.h"

static void check_streams(pb_check_ctx_t *ctx, redisContext *c, const char *where)
{
    const char *p = ctx->cfg->redis_streams, *item;
    size_t len;
    while (pb_list_next(&p, &item, &len)) {
        char key[512];
        snprintf(key, sizeof key, "%.*s", (int)len, item);
        const char *argv[] = {"TYPE", key};
        redisReply *reply;
        pb_error_t err;
        if (pb_redis_run(c, where, "TYPE", 2, argv, &reply, &err) != PB_OK) {
            pb_check_add(ctx->r, PB_CHECK_FAIL, "redis.streams", "%s", err.msg);
            return;
        }
        const char *type = reply && reply->type == REDIS_REPLY_STATUS ? reply->str : "?";
        if (strcmp(type, "stream") == 0) {
            pb_check_add(ctx->r, PB_CHECK_OK, "redis.streams", "stream \"%s\" exists", key);
        } else if (strcmp(type, "none") == 0) {
            pb_check_add(ctx->r, PB_CHECK_OK, "redis.streams",
                         "stream \"%s\" does not exist yet: made with the consumer's group at "
                         "start",
                         key);
        } else {
            pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "redis.streams",
                                                 "key \"%s\" holds a %s, not a stream", key,
                                                 type);
            pb_check_hint(f, "name another stream in redis.streams, or remove the key");
        }
        freeReplyObject(reply);
    }
}

void pb_check_redis(pb_check_ctx_t *ctx, bool sink, bool source)
{
    redisContext *c = NULL;
    pb_redis_server_t srv;
    pb_error_t err;
    pb_status_t st = pb_redis_connect(ctx->cfg, &c, &srv, &err);
    if (st != PB_OK) {
        pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_FAIL, "redis.connect", "%s",
                                             err.msg);
        pb_check_hint(f, "%s", st == PB_TRANSIENT
                                   ? "is redis-server running and reachable at redis.url?"
                                   : "check the user and password of redis.url (or "
                                     "redis.password_file) and its database number");
        return;
    }
    pb_check_add(ctx->r, PB_CHECK_OK, "redis.connect", "connected to redis %s at %s",
                 *srv.version ? srv.version : "(version unknown)", srv.where);
    if (sink)
        pb_judge_redis_bound(ctx->r, "redis.bound", ctx->cfg);
    if (source)
        check_streams(ctx, c, srv.where);
    redisFree(c);
}
