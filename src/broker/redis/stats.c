#include "broker/redis/stats.h"

#include <stdio.h>
#include <string.h>

#include "broker/redis/conn.h"

/* The value after key in a flat [key, value, ...] reply (XINFO's maps in RESP2), or NULL. */
static const redisReply *map_get(const redisReply *map, const char *key)
{
    for (size_t k = 0; k + 1 < map->elements; k += 2)
        if (map->element[k]->type == REDIS_REPLY_STRING && strcmp(map->element[k]->str, key) == 0)
            return map->element[k + 1];
    return NULL;
}

static int64_t map_int(const redisReply *map, const char *key, int64_t missing)
{
    const redisReply *v = map_get(map, key);
    return v && v->type == REDIS_REPLY_INTEGER ? (int64_t)v->integer : missing;
}

/* XPENDING stream group - + 1: the oldest pending entry's idle time and consumer. */
static pb_status_t oldest_pending(redisContext *c, const char *where, const char *stream,
                                  pb_redis_group_stats_t *g, pb_error_t *err)
{
    const char *argv[] = {"XPENDING", stream, g->name, "-", "+", "1"};
    redisReply *r = NULL;
    pb_status_t st = pb_redis_run(c, where, "XPENDING", 6, argv, &r, err);
    if (st != PB_OK)
        return st;
    if (r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
        r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements >= 3) {
        const redisReply *e = r->element[0];
        if (e->element[1]->type == REDIS_REPLY_STRING)
            snprintf(g->oldest_consumer, sizeof g->oldest_consumer, "%s", e->element[1]->str);
        if (e->element[2]->type == REDIS_REPLY_INTEGER)
            g->oldest_idle_s = (double)e->element[2]->integer / 1000.0;
    }
    freeReplyObject(r);
    return PB_OK;
}

pb_status_t pb_redis_stream_stats(redisContext *c, const char *where, const char *stream,
                                  const char *group, pb_redis_stream_stats_t *out,
                                  pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    const char *type_argv[] = {"TYPE", stream};
    redisReply *r = NULL;
    pb_status_t st = pb_redis_run(c, where, "TYPE", 2, type_argv, &r, err);
    if (st != PB_OK)
        return st;
    bool none = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "none") == 0;
    bool is_stream = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "stream") == 0;
    if (!none && !is_stream)
        st = pb_fail(err, PB_FATAL, "redis at %s: key \"%s\" is a %s, not a stream", where,
                     stream, r->type == REDIS_REPLY_STATUS ? r->str : "?");
    freeReplyObject(r);
    if (st != PB_OK || none)
        return st;
    out->exists = true;

    const char *len_argv[] = {"XLEN", stream};
    if ((st = pb_redis_run(c, where, "XLEN", 2, len_argv, &r, err)) != PB_OK)
        return st;
    out->length = r->type == REDIS_REPLY_INTEGER ? (int64_t)r->integer : 0;
    freeReplyObject(r);

    const char *groups_argv[] = {"XINFO", "GROUPS", stream};
    if ((st = pb_redis_run(c, where, "XINFO GROUPS", 3, groups_argv, &r, err)) != PB_OK)
        return st;
    if (r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return pb_fail(err, PB_FATAL, "redis at %s: unexpected XINFO GROUPS reply", where);
    }
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *m = r->element[k];
        const redisReply *name = m->type == REDIS_REPLY_ARRAY ? map_get(m, "name") : NULL;
        if (!name || name->type != REDIS_REPLY_STRING)
            continue;
        if (group && strcmp(group, name->str) != 0)
            continue;
        out->groups_total++;
        if (out->ngroups == PB_REDIS_STATS_GROUPS)
            continue;
        pb_redis_group_stats_t *g = &out->groups[out->ngroups++];
        snprintf(g->name, sizeof g->name, "%s", name->str);
        g->pending = map_int(m, "pending", 0);
        g->lag = map_int(m, "lag", -1);
        g->consumers = map_int(m, "consumers", 0);
    }
    freeReplyObject(r);
    for (size_t k = 0; k < out->ngroups; k++)
        if (out->groups[k].pending > 0 &&
            (st = oldest_pending(c, where, stream, &out->groups[k], err)) != PB_OK)
            return st;
    return PB_OK;
}
