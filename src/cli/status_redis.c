#include "cli/status_redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "broker/redis/conn.h"
#include "broker/redis/stats.h"
#include "common/str.h"

#define MAX_STREAMS 100

bool pb_status_redis_wanted(const pb_config_t *cfg)
{
    return strcmp(cfg->relay_sink, "redis") == 0 || strcmp(cfg->consume_source, "redis") == 0;
}

/* The stream names to report: redis.streams split at commas, else a SCAN of the prefix. */
static size_t stream_names(redisContext *c, const pb_config_t *cfg, char **names, size_t max)
{
    size_t n = 0, len;
    const char *p = cfg->redis_streams, *item;
    while (n < max && pb_list_next(&p, &item, &len)) {
        names[n] = pb_malloc(len + 1);
        memcpy(names[n], item, len);
        names[n++][len] = '\0';
    }
    if (n || *cfg->redis_streams)
        return n;
    char cursor[32] = "0";
    char match[1100];
    snprintf(match, sizeof match, "%s*", cfg->redis_stream_prefix);
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "1000", "TYPE", "stream"};
        redisReply *r = redisCommandArgv(c, 8, argv, NULL);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r)
                freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        const redisReply *keys = r->element[1];
        for (size_t k = 0; k < keys->elements && n < max; k++)
            names[n++] = pb_strdup(keys->element[k]->str);
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0 && n < max);
    return n;
}

json_t *pb_status_redis(const pb_config_t *cfg)
{
    json_t *o = json_object();
    redisContext *c = NULL;
    pb_redis_server_t srv;
    pb_error_t err;
    if (pb_redis_connect(cfg, &c, &srv, &err) != PB_OK) {
        json_object_set_new(o, "server", json_string(srv.where));
        json_object_set_new(o, "error", json_string(err.msg));
        return o;
    }
    json_object_set_new(o, "server", json_string(srv.where));
    json_object_set_new(o, "version", json_string(srv.version));
    char *names[MAX_STREAMS];
    size_t n = stream_names(c, cfg, names, MAX_STREAMS);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        pb_redis_stream_stats_t st;
        json_t *js = json_object();
        json_object_set_new(js, "stream", json_string(names[i]));
        if (pb_redis_stream_stats(c, srv.where, names[i], NULL, &st, &err) != PB_OK) {
            json_object_set_new(js, "error", json_string(err.msg));
        } else {
            json_object_set_new(js, "exists", json_boolean(st.exists));
            json_object_set_new(js, "length", json_integer(st.length));
            json_t *groups = json_array();
            for (size_t k = 0; k < st.ngroups; k++) {
                const pb_redis_group_stats_t *g = &st.groups[k];
                json_array_append_new(
                    groups, json_pack("{s:s, s:I, s:I, s:I, s:f, s:s}", "group", g->name,
                                      "pending", (json_int_t)g->pending, "lag",
                                      (json_int_t)g->lag, "consumers", (json_int_t)g->consumers,
                                      "oldest_pending_idle_seconds", g->oldest_idle_s,
                                      "oldest_pending_consumer", g->oldest_consumer));
            }
            json_object_set_new(js, "groups", groups);
        }
        json_array_append_new(arr, js);
        free(names[i]);
    }
    json_object_set_new(o, "streams", arr);
    redisFree(c);
    return o;
}

void pb_status_redis_print(const json_t *redis)
{
    printf("\nredis streams (%s", json_string_value(json_object_get(redis, "server")));
    if (json_object_get(redis, "version"))
        printf(", redis %s", json_string_value(json_object_get(redis, "version")));
    printf(")\n");
    if (json_object_get(redis, "error")) {
        printf("  cannot ask redis: %s\n", json_string_value(json_object_get(redis, "error")));
        return;
    }
    json_t *streams = json_object_get(redis, "streams");
    if (json_array_size(streams) == 0) {
        printf("  no stream\n");
        return;
    }
    printf("  %-32s %10s  %-24s %9s %9s %14s\n", "stream", "length", "group", "pending", "lag",
           "oldest idle");
    size_t i;
    json_t *s;
    json_array_foreach(streams, i, s) {
        const char *name = json_string_value(json_object_get(s, "stream"));
        if (json_object_get(s, "error")) {
            printf("  %-32s %s\n", name, json_string_value(json_object_get(s, "error")));
            continue;
        }
        if (!json_is_true(json_object_get(s, "exists"))) {
            printf("  %-32s %10s\n", name, "missing");
            continue;
        }
        long long len = (long long)json_integer_value(json_object_get(s, "length"));
        json_t *groups = json_object_get(s, "groups");
        if (json_array_size(groups) == 0)
            printf("  %-32s %10lld  %-24s\n", name, len, "(no group)");
        size_t k;
        json_t *g;
        json_array_foreach(groups, k, g) {
            long long lag = (long long)json_integer_value(json_object_get(g, "lag"));
            char lagtxt[24] = "?";
            if (lag >= 0)
                snprintf(lagtxt, sizeof lagtxt, "%lld", lag);
            printf("  %-32s %10lld  %-24s %9lld %9s %12.1f s\n", k ? "" : name, len,
                   json_string_value(json_object_get(g, "group")),
                   (long long)json_integer_value(json_object_get(g, "pending")), lagtxt,
                   json_number_value(json_object_get(g, "oldest_pending_idle_seconds")));
        }
    }
}
