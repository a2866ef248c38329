/* nats-tool: a small NATS JetStream client for postbox's integration tests and benchmark.
 * Independent of postbox's own code (only nats.c), so it checks what the relay did from the
 * outside.
 *
 * URL: one server, or several separated by commas (a cluster).
 *
 *   nats-tool count URL STREAM
 *       the stream's message count (exit 1 when the stream does not exist)
 *   nats-tool stream-info URL STREAM
 *       one line: messages=N bytes=B first_seq=F last_seq=L storage=file|memory replicas=R
 *       max_age_ms=A max_msgs=M max_bytes=B duplicates_ms=D subjects=S1,S2
 *   nats-tool stream-leader URL STREAM
 *       the server name of the stream's leader (a clustered stream), or "-" when it has none
 *       (a single server, or a cluster electing one)
 *   nats-tool delete-stream URL STREAM
 *       deletes the stream (no error when it does not exist)
 *   nats-tool delete-consumer URL STREAM DURABLE
 *       deletes the durable consumer (no error when it does not exist)
 *   nats-tool consumer-info URL STREAM DURABLE
 *       one line: pending=P ack_pending=A redelivered=R waiting=W
 *   nats-tool drain URL STREAM SUBJECT [--expect N] [--idle-ms MS] [--timeout-s S] [--header H]...
 *       reads the stream from its first message with an ordered consumer (the stream keeps its
 *       messages) filtered by SUBJECT (">" for all); one line per message:
 *       Nats-Msg-Id TAB event_type TAB subject TAB aggregate_type TAB aggregate_id TAB body
 *       [TAB the value of header H, for each --header in order (at most 16)]
 *       (headers; tabs and newlines inside fields become spaces). Stops once at least N
 *       messages arrived and none arrived for MS milliseconds; exit 1 when S seconds pass first
 *   nats-tool publish URL SUBJECT MSGID TYPE BODY [COUNT] [--header NAME=VALUE]...
 *       COUNT (default 1) copies of one message, synchronously acknowledged by JetStream, with
 *       Nats-Msg-Id MSGID (empty: none) and header event_type TYPE (empty: none), each
 *       --header as given (at most 16; a producer of another kind, e.g. CloudEvents), BODY @FILE
 *       the bytes of FILE (NUL bytes included); prints
 *       "stored S, duplicates D"; exit 1 when JetStream refuses one
 *   nats-tool publish-raw URL SUBJECT N SIZE MAXPENDING
 *       the benchmark's baseline: N messages of SIZE bytes published asynchronously
 *       (js_PublishMsgAsync, at most MAXPENDING unacknowledged), each with its own Nats-Msg-Id
 *       and the headers the relay sets (event_type, aggregate_type, aggregate_id); waits for
 *       every ack; prints "published N in S seconds: R msgs/s" (exit 1 on any failed ack)
 *   nats-tool publish-raw URL SUBJECT N SIZE MAXPENDING --rate R [--burst B]
 *       the broker's latency floor: the same N messages paced at R/s, B at a time (default 10:
 *       the relay benchmark's producers commit 10 events per transaction, so the broker sees the
 *       same shape of load), each timed from its js_PublishMsgAsync to its PubAck's arrival in
 *       the ack handler (monotonic clock); prints one line "paced published=N offered=R burst=B
 *       achieved=A p50_ms= p99_ms= p999_ms= max_ms= late_max_ms= confirmed_s= max_pending=
 *       size=" (achieved: N over the time from the start to the last publish; late_max_ms: how
 *       far a tick started behind its schedule, a delay not in the latencies)
 *   nats-tool fill URL SUBJECT N SIZE MAXPENDING [--sequence]
 *       the consume benchmarks' backlog: N messages as the relay's nats sink writes them, a JSON
 *       body {"pad":"x..."} of SIZE bytes, Nats-Msg-Id a UUID of its own per message, headers
 *       event_type bench.event.v1, aggregate_type bench, aggregate_id agg-(i mod 100), with
 *       --sequence also aggregate_sequence (1, 2, ... within each aggregate); published as
 *       publish-raw does; prints "published N in S seconds: R msgs/s; last message_id ID"
 *   nats-tool consume-raw URL STREAM DURABLE N BATCH [--ack-all]
 *       the consume benchmarks' baseline: a new durable pull consumer on STREAM (explicit acks,
 *       max_ack_pending 20000, as postbox's), fetches of BATCH and an ack of each message
 *       (--ack-all: an AckAll consumer, one ack of the last message per fetch), no processing,
 *       until N messages; prints "consumed N in S seconds: R msgs/s" (S from the first fetch to
 *       the last acks, flushed to the server); the durable is deleted afterwards
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <nats/nats.h>

#define TOOL_NAME "nats-tool"
#define TOOL_DIE_STATUS 1
#include "tool.h"

static void check(natsStatus s, const char *what)
{
    if (s != NATS_OK)
        die("%s: %s (%s)", what, natsStatus_GetText(s), nats_GetLastError(NULL));
}

static natsConnection *nc;
static jsCtx *js;

static void open_url(const char *url, jsOptions *jo)
{
    natsOptions *o;
    check(natsOptions_Create(&o), "options");
    /* a cluster's servers separated by commas, as postbox's nats.url (nats.c's SetURL takes one) */
    char *copy = strdup(url);
    const char *servers[16];
    int n = 0;
    if (!copy)
        die("out of memory");
    for (char *tok = strtok(copy, ", "); tok && n < 16; tok = strtok(NULL, ", "))
        servers[n++] = tok;
    if (n == 0)
        die("empty URL");
    check(natsOptions_SetServers(o, servers, n), "url");
    free(copy);
    if (strncmp(url, "tls://", 6) == 0)
        check(natsOptions_SetSecure(o, true), "tls");
    check(natsConnection_Connect(&nc, o), "connect");
    natsOptions_Destroy(o);
    jsOptions def;
    if (!jo) {
        jsOptions_Init(&def);
        jo = &def;
    }
    check(natsConnection_JetStream(&js, nc, jo), "jetstream context");
}

static void close_all(void)
{
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    nats_Close();
}

static jsStreamInfo *stream_info(const char *stream, bool must)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr) {
        if (must)
            die("stream \"%s\" does not exist", stream);
        return NULL;
    }
    check(s, "stream info");
    return si;
}

static int cmd_count(int argc, char **argv)
{
    if (argc != 2)
        die("usage: count URL STREAM");
    open_url(argv[0], NULL);
    jsStreamInfo *si = stream_info(argv[1], true);
    printf("%" PRIu64 "\n", si->State.Msgs);
    jsStreamInfo_Destroy(si);
    close_all();
    return 0;
}

static int cmd_stream_info(int argc, char **argv)
{
    if (argc != 2)
        die("usage: stream-info URL STREAM");
    open_url(argv[0], NULL);
    jsStreamInfo *si = stream_info(argv[1], true);
    const jsStreamConfig *c = si->Config;
    printf("messages=%" PRIu64 " bytes=%" PRIu64 " first_seq=%" PRIu64 " last_seq=%" PRIu64
           " storage=%s replicas=%" PRId64 " max_age_ms=%" PRId64 " max_msgs=%" PRId64
           " max_bytes=%" PRId64 " duplicates_ms=%" PRId64 " subjects=",
           si->State.Msgs, si->State.Bytes, si->State.FirstSeq, si->State.LastSeq,
           c->Storage == js_MemoryStorage ? "memory" : "file", c->Replicas,
           c->MaxAge / 1000000, c->MaxMsgs, c->MaxBytes, c->Duplicates / 1000000);
    for (int i = 0; i < c->SubjectsLen; i++)
        printf("%s%s", i ? "," : "", c->Subjects[i]);
    putchar('\n');
    jsStreamInfo_Destroy(si);
    close_all();
    return 0;
}

static int cmd_stream_leader(int argc, char **argv)
{
    if (argc != 2)
        die("usage: stream-leader URL STREAM");
    open_url(argv[0], NULL);
    jsStreamInfo *si = stream_info(argv[1], true);
    const char *leader = si->Cluster && si->Cluster->Leader && *si->Cluster->Leader ? si->Cluster->Leader : "-";
    printf("%s\n", leader);
    jsStreamInfo_Destroy(si);
    close_all();
    return 0;
}

static int cmd_delete_stream(int argc, char **argv)
{
    if (argc != 2)
        die("usage: delete-stream URL STREAM");
    open_url(argv[0], NULL);
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteStream(js, argv[1], NULL, &jerr);
    if (s != NATS_OK && s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr)
        check(s, "delete stream");
    close_all();
    return 0;
}

static int cmd_delete_consumer(int argc, char **argv)
{
    if (argc != 3)
        die("usage: delete-consumer URL STREAM DURABLE");
    open_url(argv[0], NULL);
    jsErrCode jerr = 0;
    natsStatus s = js_DeleteConsumer(js, argv[1], argv[2], NULL, &jerr);
    if (s != NATS_OK && s != NATS_NOT_FOUND && jerr != JSConsumerNotFoundErr &&
        jerr != JSStreamNotFoundErr)
        check(s, "delete consumer");
    close_all();
    return 0;
}

static int cmd_consumer_info(int argc, char **argv)
{
    if (argc != 3)
        die("usage: consumer-info URL STREAM DURABLE");
    open_url(argv[0], NULL);
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    check(js_GetConsumerInfo(&ci, js, argv[1], argv[2], NULL, &jerr), "consumer info");
    printf("pending=%" PRIu64 " ack_pending=%" PRId64 " redelivered=%" PRId64 " waiting=%" PRId64
           "\n", ci->NumPending, ci->NumAckPending, ci->NumRedelivered, ci->NumWaiting);
    jsConsumerInfo_Destroy(ci);
    close_all();
    return 0;
}

static void put_field(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        putchar(c == '\t' || c == '\n' || c == '\r' ? ' ' : c);
    }
}

static void put_header(natsMsg *m, const char *key)
{
    const char *v = NULL;
    if (natsMsgHeader_Get(m, key, &v) == NATS_OK && v)
        put_field(v, strlen(v));
}

static int cmd_drain(int argc, char **argv)
{
    if (argc < 3)
        die("usage: drain URL STREAM SUBJECT [--expect N] [--idle-ms MS] [--timeout-s S] "
            "[--header NAME]");
    long expect = 0, idle_ms = 2000, timeout_s = 300;
    const char *extra[16];
    int nextra = 0;
    for (int i = 3; i < argc; i++) {
        if (i + 1 >= argc)
            die("%s needs a value", argv[i]);
        if (!strcmp(argv[i], "--expect"))
            expect = parse_long(argv[++i], "--expect", 0, 1000000000);
        else if (!strcmp(argv[i], "--idle-ms"))
            idle_ms = parse_long(argv[++i], "--idle-ms", 1, 3600000);
        else if (!strcmp(argv[i], "--timeout-s"))
            timeout_s = parse_long(argv[++i], "--timeout-s", 1, 86400);
        else if (!strcmp(argv[i], "--header") && nextra < 16)
            extra[nextra++] = argv[++i];
        else
            die("unknown option %s", argv[i]);
    }
    open_url(argv[0], NULL);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = argv[1];
    so.Ordered = true;
    natsSubscription *sub = NULL;
    jsErrCode jerr = 0;
    check(js_SubscribeSync(&sub, js, argv[2], NULL, &so, &jerr), "subscribe");
    check(natsSubscription_SetPendingLimits(sub, -1, -1), "pending limits");
    long got = 0;
    double deadline = now_s() + (double)timeout_s;
    for (;;) {
        double left = deadline - now_s();
        if (left <= 0)
            break;
        long wait = got >= expect ? idle_ms : (long)(left * 1000) + 1;
        if (wait > (long)(left * 1000) + 1)
            wait = (long)(left * 1000) + 1;
        natsMsg *m = NULL;
        natsStatus s = natsSubscription_NextMsg(&m, sub, wait);
        if (s == NATS_TIMEOUT) {
            if (got >= expect)
                break;
            continue;
        }
        check(s, "next message");
        put_header(m, "Nats-Msg-Id");
        putchar('\t');
        put_header(m, "event_type");
        putchar('\t');
        put_field(natsMsg_GetSubject(m), strlen(natsMsg_GetSubject(m)));
        putchar('\t');
        put_header(m, "aggregate_type");
        putchar('\t');
        put_header(m, "aggregate_id");
        putchar('\t');
        put_field(natsMsg_GetData(m), (size_t)natsMsg_GetDataLength(m));
        for (int k = 0; k < nextra; k++) {
            putchar('\t');
            put_header(m, extra[k]);
        }
        putchar('\n');
        natsMsg_Destroy(m);
        got++;
    }
    natsSubscription_Destroy(sub);
    close_all();
    fflush(stdout);
    if (got < expect) {
        fprintf(stderr, "%s: only %ld of %ld messages within %ld s\n", TOOL_NAME, got, expect,
                timeout_s);
        return 1;
    }
    return 0;
}

static int cmd_publish(int argc, char **argv)
{
    /* the --header options at the end, NAME=VALUE each */
    const char *hdr_name[16], *hdr_value[16];
    char *hdr_copy[16];
    int n_hdr = 0;
    while (argc >= 2 && strcmp(argv[argc - 2], "--header") == 0) {
        if (n_hdr == 16)
            die("at most 16 --header options");
        char *eq = strchr(argv[argc - 1], '=');
        if (!eq || eq == argv[argc - 1])
            die("--header wants NAME=VALUE, not '%s'", argv[argc - 1]);
        hdr_copy[n_hdr] = strdup(argv[argc - 1]);
        if (!hdr_copy[n_hdr])
            die("out of memory");
        hdr_copy[n_hdr][eq - argv[argc - 1]] = '\0';
        hdr_name[n_hdr] = hdr_copy[n_hdr];
        hdr_value[n_hdr] = hdr_copy[n_hdr] + (eq - argv[argc - 1]) + 1;
        n_hdr++;
        argc -= 2;
    }
    if (argc < 5 || argc > 6)
        die("usage: publish URL SUBJECT MSGID TYPE BODY [COUNT] [--header NAME=VALUE]...");
    long count = argc == 6 ? parse_long(argv[5], "COUNT", 1, 1000000) : 1;
    const char *body = argv[4];
    size_t body_len = strlen(body);
    char *file_body = NULL;
    if (body[0] == '@') { /* @FILE: the body is the file's bytes (NUL bytes included) */
        FILE *f = fopen(body + 1, "rb");
        if (!f)
            die("cannot open %s", body + 1);
        size_t cap = 1 << 16;
        body_len = 0;
        file_body = malloc(cap);
        for (size_t got; file_body && (got = fread(file_body + body_len, 1, cap - body_len, f)) > 0;) {
            body_len += got;
            if (body_len == cap)
                file_body = realloc(file_body, cap *= 2);
        }
        fclose(f);
        if (!file_body)
            die("out of memory");
        body = file_body;
    }
    open_url(argv[0], NULL);
    long stored = 0, dups = 0;
    for (long i = 0; i < count; i++) {
        natsMsg *m = NULL;
        check(natsMsg_Create(&m, argv[1], NULL, body, (int)body_len), "message");
        if (*argv[3])
            check(natsMsgHeader_Set(m, "event_type", argv[3]), "header");
        for (int h = 0; h < n_hdr; h++)
            check(natsMsgHeader_Set(m, hdr_name[h], hdr_value[h]), "header");
        jsPubOptions po;
        jsPubOptions_Init(&po);
        if (*argv[2])
            po.MsgId = argv[2];
        jsPubAck *pa = NULL;
        jsErrCode jerr = 0;
        natsStatus s = js_PublishMsg(&pa, js, m, &po, &jerr);
        natsMsg_Destroy(m);
        if (s != NATS_OK)
            die("publish to %s: %s (%s, jetstream error %d)", argv[1], natsStatus_GetText(s),
                nats_GetLastError(NULL), (int)jerr);
        if (pa->Duplicate)
            dups++;
        else
            stored++;
        jsPubAck_Destroy(pa);
    }
    printf("stored %ld, duplicates %ld\n", stored, dups);
    free(file_body);
    for (int h = 0; h < n_hdr; h++)
        free(hdr_copy[h]);
    close_all();
    return 0;
}

/* publish-raw: acks counted on nats.c's thread */
static pthread_mutex_t raw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t raw_cv = PTHREAD_COND_INITIALIZER;
static long raw_acked, raw_failed;
static char raw_error[256];
/* publish-raw --rate (NULL otherwise): raw_sent_at[i] the monotonic time message i was handed
 * to nats.c, raw_lat[] each acknowledged message's publish -> PubAck time; @locks raw_mu */
static double *raw_sent_at, *raw_lat;
static long raw_n, raw_n_lat, raw_unmatched;

static void raw_ack(jsCtx *ctx, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)ctx;
    (void)closure;
    const double now = now_s(); /* before the lock: the ack's own arrival, not our turn */
    pthread_mutex_lock(&raw_mu);
    raw_acked++;
    if (!pa) {
        if (!raw_failed++)
            snprintf(raw_error, sizeof raw_error, "%s (%s)", natsStatus_GetText(pae->Err),
                     pae->ErrText ? pae->ErrText : "");
    } else if (raw_sent_at) {
        /* the message's index is the last group of its Nats-Msg-Id (hex), see cmd_publish_raw */
        const char *id = NULL, *dash = NULL;
        char *end = NULL;
        unsigned long long i = 0;
        if (natsMsgHeader_Get(msg, "Nats-Msg-Id", &id) == NATS_OK && id && (dash = strrchr(id, '-')))
            i = strtoull(dash + 1, &end, 16);
        if (end && end != dash + 1 && *end == '\0' && i < (unsigned long long)raw_n)
            raw_lat[raw_n_lat++] = now - raw_sent_at[i];
        else
            raw_unmatched++;
    }
    pthread_cond_broadcast(&raw_cv);
    pthread_mutex_unlock(&raw_mu);
    natsMsg_Destroy(msg);
}

static int cmd_publish_raw(int argc, char **argv)
{
    if (argc < 5)
        die("usage: publish-raw URL SUBJECT N SIZE MAXPENDING [--rate R [--burst B]]");
    long n = parse_long(argv[2], "N", 1, 100000000);
    long size = parse_long(argv[3], "SIZE", 1, 64 * 1024 * 1024);
    long maxp = parse_long(argv[4], "MAXPENDING", 1, 10000000);
    long rate = 0, burst = 10;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--rate") && i + 1 < argc)
            rate = parse_long(argv[++i], "--rate", 1, 10000000);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc)
            burst = parse_long(argv[++i], "--burst", 1, 1000000);
        else
            die("unknown option %s", argv[i]);
    }
    if (rate) {
        raw_sent_at = calloc((size_t)n, sizeof *raw_sent_at);
        raw_lat = malloc((size_t)n * sizeof *raw_lat);
        if (!raw_sent_at || !raw_lat)
            die("out of memory");
        raw_n = n;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = maxp;
    jo.PublishAsync.AckHandler = raw_ack;
    jo.PublishAsync.StallWait = 30000;
    open_url(argv[0], &jo);
    char *body = malloc((size_t)size);
    if (!body)
        die("out of memory");
    memset(body, 'x', (size_t)size);
    if (size >= 2) {
        body[0] = '{';
        body[size - 1] = '}';
    }
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 30000;
    /* --rate: message i is due at t0 + (i / burst) / (rate / burst) */
    const double tick = rate ? (double)burst / (double)rate : 0;
    double late_max = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        char id[64], agg[32];
        if (rate && i % burst == 0) {
            const double due = t0 + (double)(i / burst) * tick;
            sleep_until(due);
            /* behind schedule (not run in time, or stalled on MAXPENDING): not in the
             * latencies, which start at the publish; reported apart */
            const double late = now_s() - due;
            if (late > late_max)
                late_max = late;
        }
        snprintf(id, sizeof id, "%08" PRIx64 "-0000-4000-8000-%012lx", (uint64_t)(seed & 0xffffffffu),
                 (unsigned long)i);
        snprintf(agg, sizeof agg, "agg-%ld", i % 100);
        natsMsg *m = NULL;
        check(natsMsg_Create(&m, argv[1], NULL, body, (int)size), "message");
        check(natsMsgHeader_Set(m, "event_type", "bench.raw.v1"), "header");
        check(natsMsgHeader_Set(m, "aggregate_type", "bench"), "header");
        check(natsMsgHeader_Set(m, "aggregate_id", agg), "header");
        po.MsgId = id;
        if (rate) {
            /* under the lock: the ack handler reads it on nats.c's thread */
            pthread_mutex_lock(&raw_mu);
            raw_sent_at[i] = now_s();
            pthread_mutex_unlock(&raw_mu);
        }
        natsStatus s = js_PublishMsgAsync(js, &m, &po);
        natsMsg_Destroy(m);
        check(s, "publish");
    }
    const double t_pub = now_s();
    pthread_mutex_lock(&raw_mu);
    while (raw_acked < n)
        pthread_cond_wait(&raw_cv, &raw_mu);
    pthread_mutex_unlock(&raw_mu);
    double t1 = now_s();
    if (raw_failed)
        die("%ld of %ld acks failed, e.g. %s", raw_failed, n, raw_error);
    if (rate) {
        if (raw_unmatched || raw_n_lat != n)
            die("%ld of %ld acks could not be matched to their message (Nats-Msg-Id)", n - raw_n_lat, n);
        lat_summary_t l = lat_summarise(raw_lat, (size_t)raw_n_lat);
        /* achieved: as bench/relay-cdc's for its producers, the messages over the time from
         * the common start to the end of the last publish */
        printf("paced published=%ld offered=%ld burst=%ld achieved=%.0f p50_ms=%.3f p99_ms=%.3f "
               "p999_ms=%.3f max_ms=%.3f late_max_ms=%.3f confirmed_s=%.3f max_pending=%ld size=%ld\n",
               n, rate, burst, (double)n / (t_pub - t0), l.p50, l.p99, l.p999, l.max,
               late_max * 1000.0, t1 - t0, maxp, size);
        free(raw_sent_at);
        free(raw_lat);
        raw_sent_at = raw_lat = NULL;
    } else {
        printf("published %ld in %.3f seconds: %.0f msgs/s\n", n, t1 - t0, (double)n / (t1 - t0));
    }
    free(body);
    close_all();
    return 0;
}

/* fill: the relay's messages (nats sink: Nats-Msg-Id = event_id and four headers), each
 * with an id of its own, so the consumer's inbox takes every one */
static int cmd_fill(int argc, char **argv)
{
    if (argc != 5 && argc != 6)
        die("usage: fill URL SUBJECT N SIZE MAXPENDING [--sequence]");
    long n = parse_long(argv[2], "N", 1, 100000000);
    long size = parse_long(argv[3], "SIZE", 12, 64 * 1024 * 1024);
    long maxp = parse_long(argv[4], "MAXPENDING", 1, 10000000);
    bool with_seq = false;
    if (argc == 6) {
        if (strcmp(argv[5], "--sequence"))
            die("unknown option %s", argv[5]);
        with_seq = true;
    }
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.PublishAsync.MaxPending = maxp;
    jo.PublishAsync.AckHandler = raw_ack;
    jo.PublishAsync.StallWait = 30000;
    open_url(argv[0], &jo);
    char *body = malloc((size_t)size);
    if (!body)
        die("out of memory");
    memset(body, 'x', (size_t)size);
    memcpy(body, "{\"pad\":\"", 8);
    memcpy(body + size - 2, "\"}", 2);
    uint64_t seed = ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16)) & 0xffffffffu;
    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = 30000;
    char id[64] = "";
    double t0 = now_s();
    for (long i = 1; i <= n; i++) {
        char agg[32], seq[24];
        snprintf(id, sizeof id, "%08" PRIx64 "-0000-4000-8000-%012lx", seed, (unsigned long)i);
        snprintf(agg, sizeof agg, "agg-%ld", i % 100);
        snprintf(seq, sizeof seq, "%ld", (i - 1) / 100 + 1);
        natsMsg *m = NULL;
        check(natsMsg_Create(&m, argv[1], NULL, body, (int)size), "message");
        check(natsMsgHeader_Set(m, "event_type", "bench.event.v1"), "header");
        check(natsMsgHeader_Set(m, "aggregate_type", "bench"), "header");
        check(natsMsgHeader_Set(m, "aggregate_id", agg), "header");
        if (with_seq)
            check(natsMsgHeader_Set(m, "aggregate_sequence", seq), "header");
        po.MsgId = id;
        natsStatus s = js_PublishMsgAsync(js, &m, &po);
        natsMsg_Destroy(m);
        check(s, "publish");
    }
    pthread_mutex_lock(&raw_mu);
    while (raw_acked < n)
        pthread_cond_wait(&raw_cv, &raw_mu);
    pthread_mutex_unlock(&raw_mu);
    double t1 = now_s();
    if (raw_failed)
        die("%ld of %ld acks failed, e.g. %s", raw_failed, n, raw_error);
    printf("published %ld in %.3f seconds: %.0f msgs/s; last message_id %s\n", n, t1 - t0,
           (double)n / (t1 - t0), id);
    free(body);
    close_all();
    return 0;
}

/* consume-raw: what a consumer without a database costs, with the acks postbox's source sends */
static int cmd_consume_raw(int argc, char **argv)
{
    if (argc != 5 && argc != 6)
        die("usage: consume-raw URL STREAM DURABLE N BATCH [--ack-all]");
    const char *stream = argv[1], *durable = argv[2];
    long n = parse_long(argv[3], "N", 1, 1000000000);
    long batch = parse_long(argv[4], "BATCH", 1, 100000);
    bool ack_all = false;
    if (argc == 6) {
        if (strcmp(argv[5], "--ack-all"))
            die("unknown option %s", argv[5]);
        ack_all = true;
    }
    open_url(argv[0], NULL);
    jsConsumerConfig cc;
    jsConsumerConfig_Init(&cc);
    cc.Durable = durable;
    cc.DeliverPolicy = js_DeliverAll;
    cc.AckPolicy = ack_all ? js_AckAll : js_AckExplicit;
    cc.AckWait = INT64_C(30000000000);
    cc.MaxAckPending = 20000;
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    check(js_AddConsumer(&ci, js, stream, &cc, NULL, &jerr), "add consumer");
    jsConsumerInfo_Destroy(ci);
    jsSubOptions so;
    jsSubOptions_Init(&so);
    so.Stream = stream;
    so.Consumer = durable;
    natsSubscription *sub = NULL;
    check(js_PullSubscribe(&sub, js, NULL, durable, NULL, &so, &jerr), "pull subscribe");
    check(natsSubscription_SetPendingLimits(sub, -1, -1), "pending limits");
    long got = 0;
    double t0 = now_s(), last = t0;
    while (got < n) {
        /* never more than is left: in nats.c 3.4.1 a Fetch after one that timed out with
         * messages still to come can overrun its list (see src/source/nats.c) */
        long want = n - got < batch ? n - got : batch;
        natsMsgList list = {0};
        natsStatus s = natsSubscription_Fetch(&list, sub, (int)want, 5000, &jerr);
        if (s == NATS_TIMEOUT) {
            if (now_s() - last > 60.0)
                die("consume-raw %s: nothing for 60 s after %ld of %ld message(s)", stream, got, n);
            continue;
        }
        check(s, "fetch");
        for (int i = 0; i < list.Count; i++)
            if (!ack_all || i == list.Count - 1)
                check(natsMsg_Ack(list.Msgs[i], NULL), "ack");
        got += list.Count;
        if (list.Count)
            last = now_s();
        natsMsgList_Destroy(&list);
    }
    /* the server has every ack once it answers the flush's PING */
    check(natsConnection_FlushTimeout(nc, 30000), "flush");
    double secs = now_s() - t0;
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    js_DeleteConsumer(js, stream, durable, NULL, NULL);
    close_all();
    printf("consumed %ld in %.3f seconds: %.0f msgs/s (fetch %ld, %s)\n", got, secs,
           (double)got / secs, batch, ack_all ? "one AckAll per fetch" : "an ack per message");
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: %s count|stream-info|stream-leader|delete-stream|delete-consumer|consumer-info|drain|publish|"
                    "publish-raw|fill|consume-raw ARGS... (see tests/tools/nats_tool.c)\n",
            TOOL_NAME);
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *cmd = argv[1];
    argc -= 2;
    argv += 2;
    if (!strcmp(cmd, "count"))
        return cmd_count(argc, argv);
    if (!strcmp(cmd, "stream-info"))
        return cmd_stream_info(argc, argv);
    if (!strcmp(cmd, "stream-leader"))
        return cmd_stream_leader(argc, argv);
    if (!strcmp(cmd, "delete-stream"))
        return cmd_delete_stream(argc, argv);
    if (!strcmp(cmd, "delete-consumer"))
        return cmd_delete_consumer(argc, argv);
    if (!strcmp(cmd, "consumer-info"))
        return cmd_consumer_info(argc, argv);
    if (!strcmp(cmd, "drain"))
        return cmd_drain(argc, argv);
    if (!strcmp(cmd, "publish"))
        return cmd_publish(argc, argv);
    if (!strcmp(cmd, "publish-raw"))
        return cmd_publish_raw(argc, argv);
    if (!strcmp(cmd, "fill"))
        return cmd_fill(argc, argv);
    if (!strcmp(cmd, "consume-raw"))
        return cmd_consume_raw(argc, argv);
    usage();
}
