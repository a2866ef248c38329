/* redis-tool: a plain hiredis client for postbox's benchmarks, written without any of postbox's
 * code, so that it measures what any Redis Streams client would see.
 *
 *   redis-tool fill URL STREAM N SIZE [--sequence]
 *       the consume benchmarks' backlog: N entries as the relay's redis sink writes them (fields
 *       event_id, a UUID of its own per entry, event_type bench.event.v1, aggregate_type bench,
 *       aggregate_id agg-(i mod 100), payload {"pad":"x..."} of SIZE bytes, headers {},
 *       created_at, with --sequence also aggregate_sequence (1, 2, ... within each
 *       aggregate)), pipelined (1000 XADDs written before their replies are read); prints
 *       "published N in S seconds: R msgs/s; last message_id ID"
 *   redis-tool consume-raw URL STREAM GROUP N BATCH
 *       the consume benchmarks' baseline: creates GROUP on STREAM at its start, then, as one
 *       consumer of it, XREADGROUP ... COUNT BATCH ... > and an XACK of each batch's ids, sent
 *       together with the next XREADGROUP (one round trip per batch), no processing, until N
 *       entries; prints "consumed N in S seconds: R msgs/s" (S from the first XREADGROUP to the
 *       last XACK's reply); the group is destroyed afterwards
 *
 * URL: redis://[[user]:password@]host[:port][/db] */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define FILL_WINDOW 1000

#define TOOL_NAME "redis-tool"
#define TOOL_DIE_STATUS 1
#include "tool.h"

static redisReply *must(redisContext *c, redisReply *r, const char *what)
{
    if (!r)
        die("%s: %s", what, c->errstr[0] ? c->errstr : "connection lost");
    if (r->type == REDIS_REPLY_ERROR)
        die("%s: %s", what, r->str);
    return r;
}

static redisReply *next_reply(redisContext *c, const char *what)
{
    void *r = NULL;
    if (redisGetReply(c, &r) != REDIS_OK)
        r = NULL;
    return must(c, r, what);
}

static redisContext *open_url(const char *url)
{
    const char *p = url;
    if (strncmp(p, "redis://", 8) != 0)
        die("URL must start with redis://: %s", url);
    p += 8;
    char user[128] = "", pass[256] = "", host[256] = "127.0.0.1";
    int port = 6379;
    long db = 0;
    const char *at = strchr(p, '@');
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (colon) {
            snprintf(user, sizeof user, "%.*s", (int)(colon - p), p);
            snprintf(pass, sizeof pass, "%.*s", (int)(at - colon - 1), colon + 1);
        } else {
            snprintf(pass, sizeof pass, "%.*s", (int)(at - p), p);
        }
        p = at + 1;
    }
    size_t hl = strcspn(p, ":/");
    if (hl)
        snprintf(host, sizeof host, "%.*s", (int)hl, p);
    p += hl;
    if (*p == ':') {
        char buf[16];
        size_t pl = strcspn(p + 1, "/");
        snprintf(buf, sizeof buf, "%.*s", (int)pl, p + 1);
        port = (int)parse_long(buf, "port", 1, 65535);
        p += 1 + pl;
    }
    if (*p == '/' && p[1])
        db = parse_long(p + 1, "database", 0, 1000000);
    struct timeval tv = {30, 0};
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    if (!c || c->err)
        die("connect %s:%d: %s", host, port, c ? c->errstr : "out of memory");
    redisSetTimeout(c, tv);
    if (*pass) {
        redisReply *r = *user ? redisCommand(c, "AUTH %s %s", user, pass)
                              : redisCommand(c, "AUTH %s", pass);
        freeReplyObject(must(c, r, "AUTH"));
    }
    if (db)
        freeReplyObject(must(c, redisCommand(c, "SELECT %ld", db), "SELECT"));
    return c;
}

static void created_now(char *out, size_t n)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(out, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + k, n - k, ".%06ldZ", ts.tv_nsec / 1000);
}

static int cmd_fill(int argc, char **argv)
{
    if (argc != 4 && argc != 5)
        die("usage: fill URL STREAM N SIZE [--sequence]");
    long n = parse_long(argv[2], "N", 1, 100000000);
    long size = parse_long(argv[3], "SIZE", 12, 512L * 1024 * 1024);
    bool with_seq = false;
    if (argc == 5) {
        if (strcmp(argv[4], "--sequence"))
            die("unknown option %s", argv[4]);
        with_seq = true;
    }
    redisContext *c = open_url(argv[0]);
    char *payload = malloc((size_t)size);
    if (!payload)
        die("out of memory");
    memset(payload, 'x', (size_t)size);
    memcpy(payload, "{\"pad\":\"", 8);
    memcpy(payload + size - 2, "\"}", 2);
    unsigned long seed = ((unsigned long)time(NULL) ^ ((unsigned long)getpid() << 16)) &
                         0xffffffffUL;
    char id[64] = "", agg[32], seq[24], created[40];
    const char *av[19];
    size_t al[19];
    long written = 0, read = 0;
    double t0 = now_s();
    while (read < n) {
        while (written < n && written - read < FILL_WINDOW) {
            long i = ++written;
            snprintf(id, sizeof id, "%08lx-0000-4000-8000-%012lx", seed, (unsigned long)i);
            snprintf(agg, sizeof agg, "agg-%ld", i % 100);
            snprintf(seq, sizeof seq, "%ld", (i - 1) / 100 + 1);
            created_now(created, sizeof created);
            int k = 0;
#define ARG(v, l) (av[k] = (v), al[k] = (l), k++)
#define STR(v) ARG((v), strlen(v))
            STR("XADD");
            STR(argv[1]);
            STR("*");
            STR("event_id");
            STR(id);
            STR("event_type");
            STR("bench.event.v1");
            STR("aggregate_type");
            STR("bench");
            STR("aggregate_id");
            STR(agg);
            STR("payload");
            ARG(payload, (size_t)size);
            STR("headers");
            STR("{}");
            STR("created_at");
            STR(created);
            if (with_seq) {
                STR("aggregate_sequence");
                STR(seq);
            }
#undef STR
#undef ARG
            if (redisAppendCommandArgv(c, k, av, al) != REDIS_OK)
                die("XADD: %s", c->errstr);
        }
        freeReplyObject(next_reply(c, "XADD"));
        read++;
    }
    double t1 = now_s();
    printf("published %ld in %.3f seconds: %.0f msgs/s; last message_id %s\n", n, t1 - t0,
           (double)n / (t1 - t0), id);
    free(payload);
    redisFree(c);
    return 0;
}

/* The entry ids of an XREADGROUP reply (one stream) appended to ids; returns how many. */
static long take_ids(redisReply *r, char ***ids, size_t *cap)
{
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 1 ||
        r->element[0]->type != REDIS_REPLY_ARRAY || r->element[0]->elements != 2)
        die("XREADGROUP: unexpected reply (type %d)", r->type);
    redisReply *entries = r->element[0]->element[1];
    if (entries->elements > *cap) {
        *cap = entries->elements;
        *ids = realloc(*ids, *cap * sizeof **ids);
        if (!*ids)
            die("out of memory");
    }
    for (size_t i = 0; i < entries->elements; i++) {
        redisReply *e = entries->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
            e->element[0]->type != REDIS_REPLY_STRING)
            die("XREADGROUP: unexpected entry");
        (*ids)[i] = e->element[0]->str;
    }
    return (long)entries->elements;
}

static void append_xack(redisContext *c, const char *stream, const char *group, char **ids,
                        long nids)
{
    const char **av = malloc((size_t)(nids + 3) * sizeof *av);
    if (!av)
        die("out of memory");
    av[0] = "XACK";
    av[1] = stream;
    av[2] = group;
    for (long i = 0; i < nids; i++)
        av[3 + i] = ids[i];
    if (redisAppendCommandArgv(c, (int)(nids + 3), av, NULL) != REDIS_OK)
        die("XACK: %s", c->errstr);
    free(av);
}

static int cmd_consume_raw(int argc, char **argv)
{
    if (argc != 5)
        die("usage: consume-raw URL STREAM GROUP N BATCH");
    const char *stream = argv[1], *group = argv[2];
    long n = parse_long(argv[3], "N", 1, 1000000000);
    long batch = parse_long(argv[4], "BATCH", 1, 1000000);
    redisContext *c = open_url(argv[0]);
    redisReply *r = redisCommand(c, "XGROUP CREATE %s %s 0 MKSTREAM", stream, group);
    freeReplyObject(must(c, r, "XGROUP CREATE"));
    char countbuf[24];
    snprintf(countbuf, sizeof countbuf, "%ld", batch);
    const char *rd[] = {"XREADGROUP", "GROUP", group, "raw", "COUNT", countbuf, "BLOCK", "5000",
                        "STREAMS", stream, ">"};
    char **ids = NULL;
    size_t cap = 0;
    redisReply *held = NULL; /* the last batch: its ids go out with the next read */
    long nheld = 0, got = 0, acked = 0;
    double t0 = now_s(), last = t0;
    while (got < n) {
        if (nheld)
            append_xack(c, stream, group, ids, nheld);
        if (redisAppendCommandArgv(c, 11, rd, NULL) != REDIS_OK)
            die("XREADGROUP: %s", c->errstr);
        if (nheld) {
            r = next_reply(c, "XACK");
            acked += r->integer;
            freeReplyObject(r);
            freeReplyObject(held);
            held = NULL;
            nheld = 0;
        }
        r = next_reply(c, "XREADGROUP");
        long k = take_ids(r, &ids, &cap);
        if (!k) {
            freeReplyObject(r);
            if (now_s() - last > 60.0)
                die("consume-raw %s: nothing for 60 s after %ld of %ld entries", stream, got, n);
            continue;
        }
        held = r;
        nheld = k;
        got += k;
        last = now_s();
    }
    if (nheld) {
        append_xack(c, stream, group, ids, nheld);
        r = next_reply(c, "XACK");
        acked += r->integer;
        freeReplyObject(r);
        freeReplyObject(held);
    }
    double secs = now_s() - t0;
    if (acked != got)
        die("XACK acknowledged %ld of %ld entries", acked, got);
    r = redisCommand(c, "XGROUP DESTROY %s %s", stream, group);
    freeReplyObject(must(c, r, "XGROUP DESTROY"));
    free(ids);
    redisFree(c);
    printf("consumed %ld in %.3f seconds: %.0f msgs/s (COUNT %ld, XACK per batch)\n", got, secs,
           (double)got / secs, batch);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s fill|consume-raw ... (see tests/tools/redis_tool.c)\n",
                TOOL_NAME);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "fill"))
        return cmd_fill(argc - 2, argv + 2);
    if (!strcmp(cmd, "consume-raw"))
        return cmd_consume_raw(argc - 2, argv + 2);
    fprintf(stderr, "%s: unknown command %s (fill, consume-raw)\n", TOOL_NAME, cmd);
    return 2;
}
