/* kafka-tool: a plain librdkafka client for postbox's tests and benchmarks, written without any
 * of postbox's code, so that what it reads back is what any Kafka consumer would see.
 *
 *   kafka-tool drain BROKERS TOPIC [--expect N] [--idle-ms MS] [--timeout-s S]
 *       every message of TOPIC (all partitions, from the beginning) to stdout, one line each:
 *       event_id <TAB> event_type <TAB> topic:partition <TAB> aggregate_type <TAB>
 *       aggregate_id <TAB> payload (headers as postbox writes them; tabs and line breaks in a
 *       field become blanks). Stops once N messages arrived and none came for MS (default 2000),
 *       or after S seconds (default 300: then exit 1 when fewer than N arrived). Partition order
 *       is kept; partitions are interleaved.
 *   kafka-tool headers BROKERS TOPIC
 *       the headers of the first message of TOPIC, one "name=value" line each
 *   kafka-tool count BROKERS TOPIC
 *       the number of messages in TOPIC (sum of high - low watermarks over its partitions)
 *   kafka-tool leaders BROKERS TOPIC
 *       one line per partition: "PARTITION LEADER REPLICAS" (the broker ids of the cluster's
 *       metadata; REPLICAS comma-separated)
 *   kafka-tool lag BROKERS GROUP TOPIC
 *       messages of TOPIC past the offsets GROUP committed (sum over partitions; a partition
 *       without a committed offset counts from its low watermark)
 *   kafka-tool produce BROKERS TOPIC N [SIZE]
 *       N messages of SIZE bytes (default 300) with an idempotent producer (acks=all),
 *       100 keys, the five headers the relay sends, linger.ms 1 as the relay; prints the rate
 *   kafka-tool fill BROKERS TOPIC N SIZE [--sequence]
 *       the consume benchmarks' backlog: N messages as the relay's kafka sink writes them (key
 *       agg-(i mod 100), a JSON payload {"pad":"x..."} of SIZE bytes, headers event_id (a UUID of
 *       its own per message), event_type bench.event.v1, aggregate_type bench, aggregate_id, with
 *       --sequence also aggregate_sequence (1, 2, ... within each aggregate)), produced as
 *       produce does; prints "published N in S seconds: R msgs/s; last message_id ID"
 *   kafka-tool consume-raw BROKERS GROUP TOPIC N BATCH
 *       the consume benchmarks' baseline: a member of GROUP (new, from the earliest offset,
 *       enable.auto.commit off) reads N messages, no processing, and commits its positions
 *       (asynchronously) after every BATCH messages, synchronously at the end; prints "consumed
 *       N in S seconds: R msgs/s" (S from the first partition assignment to the last commit) */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define TOOL_NAME "kafka-tool"
#define TOOL_DIE_STATUS 2
#include "tool.h"

static void conf_set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, k, v, errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
        die("%s=%s: %s", k, v, errstr);
}

static rd_kafka_t *client_in(rd_kafka_type_t type, const char *brokers, const char *group);

static rd_kafka_t *client(rd_kafka_type_t type, const char *brokers)
{
    return client_in(type, brokers, NULL);
}

static rd_kafka_t *client_in(rd_kafka_type_t type, const char *brokers, const char *group_id)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", brokers);
    conf_set(conf, "log_level", "3");
    if (type == RD_KAFKA_CONSUMER) {
        char group[64];
        snprintf(group, sizeof group, "kafka-tool-%ld", (long)getpid());
        /* never joined: partitions are assigned (or only committed offsets read) */
        conf_set(conf, "group.id", group_id ? group_id : group);
        conf_set(conf, "enable.auto.commit", "false");
        conf_set(conf, "allow.auto.create.topics", "false");
    } else {
        conf_set(conf, "enable.idempotence", "true");
        conf_set(conf, "acks", "all");
        conf_set(conf, "linger.ms", "5");
    }
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(type, conf, errstr, sizeof errstr);
    if (!rk)
        die("cannot create the client: %s", errstr);
    return rk;
}

/* The partition count of topic, waiting (up to timeout_s) for it to exist. */
static int partitions_of(rd_kafka_t *rk, const char *topic, double timeout_s)
{
    double until = now_s() + timeout_s;
    for (;;) {
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
        rd_kafka_topic_destroy(rkt);
        int n = -1;
        if (!e && md->topic_cnt == 1 && !md->topics[0].err)
            n = md->topics[0].partition_cnt;
        if (md)
            rd_kafka_metadata_destroy(md);
        if (n > 0)
            return n;
        if (now_s() > until)
            die("topic %s: not found within %.0f s (%s)", topic, timeout_s,
                e ? rd_kafka_err2str(e) : "unknown topic");
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
}

static void assign_all(rd_kafka_t *rk, const char *topic, double timeout_s)
{
    int n = partitions_of(rk, topic, timeout_s);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_resp_err_t e = rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);
    if (e)
        die("assign %s: %s", topic, rd_kafka_err2str(e));
}

static void put_field(const void *p, size_t len)
{
    const char *s = p;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        putchar(c == '\t' || c == '\n' || c == '\r' ? ' ' : c);
    }
}

static void put_header(rd_kafka_headers_t *h, const char *name)
{
    const void *v;
    size_t len;
    if (h && rd_kafka_header_get_last(h, name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR && v)
        put_field(v, len);
}

static int cmd_drain(int argc, char **argv)
{
    if (argc < 2)
        die("usage: drain BROKERS TOPIC [--expect N] [--idle-ms MS] [--timeout-s S]");
    long expect = 0, idle_ms = 2000, timeout_s = 300;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            die("%s needs a value", argv[i]);
        if (!strcmp(argv[i], "--expect"))
            expect = parse_long(argv[++i], "--expect", 0, 1000000000);
        else if (!strcmp(argv[i], "--idle-ms"))
            idle_ms = parse_long(argv[++i], "--idle-ms", 1, 3600000);
        else if (!strcmp(argv[i], "--timeout-s"))
            timeout_s = parse_long(argv[++i], "--timeout-s", 1, 86400);
        else
            die("unknown option %s", argv[i]);
    }
    rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, argv[0]);
    double deadline = now_s() + (double)timeout_s;
    assign_all(rk, argv[1], (double)timeout_s);
    long got = 0;
    double last = now_s();
    while (now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m) {
            if (got >= expect && (now_s() - last) * 1000 >= (double)idle_ms)
                break;
            continue;
        }
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                fprintf(stderr, "%s: %s\n", TOOL_NAME, rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_headers_t *h = NULL;
        rd_kafka_message_headers(m, &h);
        put_header(h, "event_id");
        putchar('\t');
        put_header(h, "event_type");
        printf("\t%s:%d\t", rd_kafka_topic_name(m->rkt), (int)m->partition);
        put_header(h, "aggregate_type");
        putchar('\t');
        put_header(h, "aggregate_id");
        putchar('\t');
        put_field(m->payload, m->len);
        putchar('\n');
        rd_kafka_message_destroy(m);
        got++;
        last = now_s();
    }
    fflush(stdout);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (got < expect) {
        fprintf(stderr, "%s: only %ld of %ld messages within %ld s\n", TOOL_NAME, got, expect,
                timeout_s);
        return 1;
    }
    return 0;
}

static int cmd_headers(int argc, char **argv)
{
    if (argc != 2)
        die("usage: headers BROKERS TOPIC");
    rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, argv[0]);
    assign_all(rk, argv[1], 30);
    double deadline = now_s() + 30;
    int rc = 1;
    while (now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_headers_t *h = NULL;
        rd_kafka_message_headers(m, &h);
        const char *name;
        const void *v;
        size_t len;
        for (size_t i = 0; h && rd_kafka_header_get_all(h, i, &name, &v, &len) == 0; i++) {
            printf("%s=", name);
            put_field(v, v ? len : 0);
            putchar('\n');
        }
        printf("key=");
        put_field(m->key, m->key_len);
        putchar('\n');
        rd_kafka_message_destroy(m);
        rc = 0;
        break;
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    if (rc)
        fprintf(stderr, "%s: no message in %s within 30 s\n", TOOL_NAME, argv[1]);
    return rc;
}

static int cmd_count(int argc, char **argv)
{
    if (argc != 2)
        die("usage: count BROKERS TOPIC");
    rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, argv[0]);
    int n = partitions_of(rk, argv[1], 30);
    int64_t total = 0;
    for (int p = 0; p < n; p++) {
        int64_t lo, hi;
        rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk, argv[1], p, &lo, &hi, 10000);
        if (e)
            die("watermarks of %s [%d]: %s", argv[1], p, rd_kafka_err2str(e));
        total += hi - lo;
    }
    printf("%" PRId64 "\n", total);
    rd_kafka_destroy(rk);
    return 0;
}

static int cmd_leaders(int argc, char **argv)
{
    if (argc != 2)
        die("usage: leaders BROKERS TOPIC");
    rd_kafka_t *rk = client(RD_KAFKA_CONSUMER, argv[0]);
    partitions_of(rk, argv[1], 30); /* waits for the topic */
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, argv[1], NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
    rd_kafka_topic_destroy(rkt);
    if (e || md->topic_cnt != 1 || md->topics[0].err)
        die("metadata of %s: %s", argv[1], rd_kafka_err2str(e ? e : md->topics[0].err));
    const struct rd_kafka_metadata_topic *t = &md->topics[0];
    for (int p = 0; p < t->partition_cnt; p++) {
        printf("%d %d ", (int)t->partitions[p].id, (int)t->partitions[p].leader);
        for (int r = 0; r < t->partitions[p].replica_cnt; r++)
            printf("%s%d", r ? "," : "", (int)t->partitions[p].replicas[r]);
        putchar('\n');
    }
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
    return 0;
}

static int cmd_lag(int argc, char **argv)
{
    if (argc != 3)
        die("usage: lag BROKERS GROUP TOPIC");
    rd_kafka_t *rk = client_in(RD_KAFKA_CONSUMER, argv[0], argv[1]);
    int n = partitions_of(rk, argv[2], 30);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(n);
    for (int p = 0; p < n; p++)
        rd_kafka_topic_partition_list_add(l, argv[2], p);
    rd_kafka_resp_err_t e = rd_kafka_committed(rk, l, 10000);
    if (e)
        die("committed offsets of group %s: %s", argv[1], rd_kafka_err2str(e));
    int64_t total = 0;
    for (int p = 0; p < n; p++) {
        int64_t lo, hi;
        e = rd_kafka_query_watermark_offsets(rk, argv[2], p, &lo, &hi, 10000);
        if (e)
            die("watermarks of %s [%d]: %s", argv[2], p, rd_kafka_err2str(e));
        int64_t at = l->elems[p].offset >= 0 ? l->elems[p].offset : lo;
        total += hi > at ? hi - at : 0;
    }
    rd_kafka_topic_partition_list_destroy(l);
    printf("%" PRId64 "\n", total);
    rd_kafka_destroy(rk);
    return 0;
}

static long delivered, failed;

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    (void)opaque;
    if (m->err) {
        if (!failed++)
            fprintf(stderr, "%s: delivery failed: %s\n", TOOL_NAME, rd_kafka_err2str(m->err));
    } else {
        delivered++;
    }
}

static int cmd_produce(int argc, char **argv)
{
    if (argc < 3 || argc > 4)
        die("usage: produce BROKERS TOPIC N [SIZE]");
    long n = parse_long(argv[2], "N", 1, 100000000);
    long size = argc == 4 ? parse_long(argv[3], "SIZE", 1, 1000000) : 300;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", argv[0]);
    conf_set(conf, "enable.idempotence", "true");
    conf_set(conf, "acks", "all");
    conf_set(conf, "linger.ms", "1"); /* what the relay's producer uses */
    conf_set(conf, "log_level", "3");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk)
        die("cannot create the producer: %s", errstr);
    char *payload = malloc((size_t)size);
    if (!payload)
        die("out of memory");
    memset(payload, 'x', (size_t)size);
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        char key[32];
        int klen = snprintf(key, sizeof key, "agg-%ld", i % 100);
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(argv[1]), RD_KAFKA_V_KEY(key, (size_t)klen),
                RD_KAFKA_V_VALUE(payload, (size_t)size), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                /* the headers the relay sends, of about their size */
                RD_KAFKA_V_HEADER("event_id", "00000000-0000-0000-0000-000000000000", 36),
                RD_KAFKA_V_HEADER("event_type", "bench.event.v1", 14),
                RD_KAFKA_V_HEADER("aggregate_type", "bench", 5),
                RD_KAFKA_V_HEADER("aggregate_id", key, (ssize_t)klen),
                RD_KAFKA_V_HEADER("aggregate_sequence", "1", 1), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(rk, 10);
                continue;
            }
            if (e)
                die("produce: %s", rd_kafka_err2str(e));
            break;
        }
        rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 60000);
    double t1 = now_s();
    printf("published %ld in %.3f seconds: %.0f msgs/s (%ld failed)\n", delivered, t1 - t0,
           (double)delivered / (t1 - t0), failed);
    free(payload);
    rd_kafka_destroy(rk);
    return failed || delivered != n;
}

/* fill: the relay's messages, each with an event_id of its own */
static int cmd_fill(int argc, char **argv)
{
    if (argc != 4 && argc != 5)
        die("usage: fill BROKERS TOPIC N SIZE [--sequence]");
    long n = parse_long(argv[2], "N", 1, 100000000);
    long size = parse_long(argv[3], "SIZE", 12, 1000000);
    int with_seq = 0;
    if (argc == 5) {
        if (strcmp(argv[4], "--sequence"))
            die("unknown option %s", argv[4]);
        with_seq = 1;
    }
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", argv[0]);
    conf_set(conf, "enable.idempotence", "true");
    conf_set(conf, "acks", "all");
    conf_set(conf, "linger.ms", "1");
    conf_set(conf, "log_level", "3");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk)
        die("cannot create the producer: %s", errstr);
    char *payload = malloc((size_t)size);
    if (!payload)
        die("out of memory");
    memset(payload, 'x', (size_t)size);
    memcpy(payload, "{\"pad\":\"", 8);
    memcpy(payload + size - 2, "\"}", 2);
    unsigned long seed = ((unsigned long)time(NULL) ^ ((unsigned long)getpid() << 16)) &
                         0xffffffffUL;
    char id[64] = "";
    double t0 = now_s();
    for (long i = 1; i <= n; i++) {
        char key[32], seq[24];
        int klen = snprintf(key, sizeof key, "agg-%ld", i % 100);
        int slen = snprintf(seq, sizeof seq, "%ld", (i - 1) / 100 + 1);
        snprintf(id, sizeof id, "%08lx-0000-4000-8000-%012lx", seed, (unsigned long)i);
        rd_kafka_headers_t *h = rd_kafka_headers_new(5);
        rd_kafka_header_add(h, "event_id", -1, id, -1);
        rd_kafka_header_add(h, "event_type", -1, "bench.event.v1", -1);
        rd_kafka_header_add(h, "aggregate_type", -1, "bench", -1);
        rd_kafka_header_add(h, "aggregate_id", -1, key, (ssize_t)klen);
        if (with_seq)
            rd_kafka_header_add(h, "aggregate_sequence", -1, seq, (ssize_t)slen);
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(argv[1]), RD_KAFKA_V_KEY(key, (size_t)klen),
                RD_KAFKA_V_VALUE(payload, (size_t)size), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(rk, 10);
                continue;
            }
            if (e)
                die("produce: %s", rd_kafka_err2str(e));
            break; /* the headers are librdkafka's now */
        }
        rd_kafka_poll(rk, 0);
    }
    rd_kafka_flush(rk, 60000);
    double t1 = now_s();
    printf("published %ld in %.3f seconds: %.0f msgs/s (%ld failed); last message_id %s\n",
           delivered, t1 - t0, (double)delivered / (t1 - t0), failed, id);
    free(payload);
    rd_kafka_destroy(rk);
    return failed || delivered != n;
}

/* consume-raw: the clock starts at the first assignment (joining a group is the broker's and
 * the same for any member), so it measures reading and committing */
static double raw_assigned_at;

static void raw_rebalance(rd_kafka_t *rk, rd_kafka_resp_err_t e,
                          rd_kafka_topic_partition_list_t *l, void *opaque)
{
    (void)opaque;
    if (e == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        if (raw_assigned_at == 0 && l->cnt > 0)
            raw_assigned_at = now_s();
        rd_kafka_assign(rk, l);
    } else {
        rd_kafka_assign(rk, NULL);
    }
}

static int cmd_consume_raw(int argc, char **argv)
{
    if (argc != 5)
        die("usage: consume-raw BROKERS GROUP TOPIC N BATCH");
    long n = parse_long(argv[3], "N", 1, 1000000000);
    long batch = parse_long(argv[4], "BATCH", 1, 1000000);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", argv[0]);
    conf_set(conf, "log_level", "3");
    conf_set(conf, "group.id", argv[1]);
    conf_set(conf, "enable.auto.commit", "false");
    conf_set(conf, "auto.offset.reset", "earliest");
    rd_kafka_conf_set_rebalance_cb(conf, raw_rebalance);
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    if (!rk)
        die("cannot create the consumer: %s", errstr);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *sub = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(sub, argv[2], RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, sub);
    rd_kafka_topic_partition_list_destroy(sub);
    if (e)
        die("subscribe %s: %s", argv[2], rd_kafka_err2str(e));
    long got = 0, since_commit = 0;
    double last = now_s();
    while (got < n) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 100);
        if (!m) {
            if (now_s() - last > 60.0)
                die("consume-raw %s: nothing for 60 s after %ld of %ld message(s)", argv[2], got,
                    n);
            continue;
        }
        if (m->err) {
            if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
                fprintf(stderr, "%s: %s\n", TOOL_NAME, rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        rd_kafka_message_destroy(m); /* its offset is stored (enable.auto.offset.store) */
        got++;
        last = now_s();
        if (++since_commit >= batch && got < n) {
            e = rd_kafka_commit(rk, NULL, 1);
            if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
                die("commit: %s", rd_kafka_err2str(e));
            since_commit = 0;
        }
    }
    e = rd_kafka_commit(rk, NULL, 0);
    if (e && e != RD_KAFKA_RESP_ERR__NO_OFFSET)
        die("commit: %s", rd_kafka_err2str(e));
    double secs = now_s() - raw_assigned_at;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    printf("consumed %ld in %.3f seconds: %.0f msgs/s (commit every %ld)\n", got, secs,
           (double)got / secs, batch);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s drain|headers|count|leaders|lag|produce ...\n", TOOL_NAME);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "drain"))
        return cmd_drain(argc - 2, argv + 2);
    if (!strcmp(cmd, "headers"))
        return cmd_headers(argc - 2, argv + 2);
    if (!strcmp(cmd, "count"))
        return cmd_count(argc - 2, argv + 2);
    if (!strcmp(cmd, "leaders"))
        return cmd_leaders(argc - 2, argv + 2);
    if (!strcmp(cmd, "lag"))
        return cmd_lag(argc - 2, argv + 2);
    if (!strcmp(cmd, "produce"))
        return cmd_produce(argc - 2, argv + 2);
    if (!strcmp(cmd, "fill"))
        return cmd_fill(argc - 2, argv + 2);
    if (!strcmp(cmd, "consume-raw"))
        return cmd_consume_raw(argc - 2, argv + 2);
    die("unknown command %s (drain, headers, count, lag, produce, fill, consume-raw)", cmd);
}
