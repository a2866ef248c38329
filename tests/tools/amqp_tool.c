/* amqp-tool: a small RabbitMQ client for postbox's integration tests and benchmark.
 * Independent of postbox's own code (only the C library, rabbitmq-c and jansson), so it checks
 * what the relay did from the outside.
 *
 *   amqp-tool setup URL EXCHANGE QUEUE BINDING_KEY...
 *       declare EXCHANGE (topic, durable; fanout:NAME a fanout one) and QUEUE (durable,
 *       classic), purge QUEUE, bind it with every BINDING_KEY
 *   amqp-tool delete URL QUEUE
 *   amqp-tool delete-exchange URL EXCHANGE
 *   amqp-tool drain URL QUEUE [--expect N] [--idle-ms MS] [--timeout-s S]
 *       consume with manual acks (prefetch 1000, multiple acks); one line per message:
 *       message_id TAB type TAB routing_key TAB aggregate_type TAB aggregate_id TAB body
 *       (aggregate_* from the message headers; tabs and newlines inside fields become spaces).
 *       Stops once at least N messages arrived and none arrived for MS milliseconds; exit 1 when
 *       S seconds pass first (N 0: drain until idle)
 *   amqp-tool count URL QUEUE
 *       the queue's message count (passive declare)
 *   amqp-tool publish-raw URL EXCHANGE ROUTING_KEY N SIZE WINDOW
 *                         [--batches | --two-batches[=K] | --rate R [--burst B]]
 *                         [--sequence] [--traceparent] [--envelope]
 *       the benchmark's baseline: N persistent messages of SIZE bytes with publisher confirms,
 *       at most WINDOW unconfirmed (a sliding window; multiple acks handled), with the
 *       properties and the two aggregate headers the relay sets; prints "published N in S
 *       seconds: R msgs/s" and the message_id of the last message (every message gets its own
 *       message_id). --batches: WINDOW messages at a time, the next ones only once all are
 *       confirmed (the relay's pattern with one batch in flight); --two-batches: WINDOW at a
 *       time with two windows in flight (batch b+2 starts once batch b is confirmed); with =K a
 *       message also waits for the confirm of the message K before it when that one is in an
 *       earlier batch (the aggregate of message i is i mod 100: K=100 sends no message before
 *       an earlier batch's message of its aggregate is confirmed); --sequence: also the header
 *       aggregate_sequence (an integer), as the relay sends it; --envelope: also the headers the
 *       relay adds with a trace context and amqp.cloudevents = binary (traceparent, tracestate
 *       and nine cloudEvents_ attributes), to measure what they cost the broker.
 *       --rate R: the broker's latency floor instead of its ceiling: the N messages paced at R/s,
 *       B at a time (default 10: the relay benchmark's producers commit 10 events per
 *       transaction, so the broker sees the same shape of load), each timed from its
 *       basic.publish to the confirm that covers it (a multiple ack: all up to its tag; monotonic
 *       clock), WINDOW still bounding the unconfirmed. Prints one line "paced published=N
 *       offered=R burst=B achieved=A p50_ms= p99_ms= p999_ms= max_ms= late_max_ms=
 *       confirmed_s= ack_frames= window= size=" (achieved: N over the time from the start to
 *       the last publish; late_max_ms: how far a tick started behind its schedule, a delay not in
 *       the latencies; ack_frames: basic.ack frames read, N / ack_frames messages per confirm)
 *   amqp-tool publish URL EXCHANGE ROUTING_KEY MESSAGE_ID TYPE BODY [COUNT] [--header KEY=VALUE...]
 *                     [--timestamp UNIX_SECONDS]
 *       COUNT (default 1) copies of one persistent message, mandatory, with publisher confirms
 *       and the timestamp property (default: now)
 *       (BODY @FILE: the bytes of FILE, NUL bytes included):
 *       the same message_id each time (an empty MESSAGE_ID: no message_id property; an empty
 *       TYPE: no type property), content_type application/json; exit 1 when one is returned
 *       (unroutable) or nacked
 *   amqp-tool consume-raw URL QUEUE N PREFETCH [BATCH]
 *       the consume benchmark's baseline: consumes N messages with manual acks, basic.qos
 *       PREFETCH, one multiple ack per BATCH messages (default 200, at most PREFETCH; also when
 *       the queue goes quiet for 20 ms); no processing. Prints "consumed N in S seconds: R msgs/s"
 *       (S from basic.consume to the last ack, confirmed by closing the channel)
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#define CHANNEL 1
#define FRAME_MAX 131072

#define TOOL_NAME "amqp-tool"
#define TOOL_DIE_STATUS 1
#include "tool.h"

static struct timeval tv_from_ms(long ms)
{
    struct timeval tv;
    if (ms < 0)
        ms = 0;
    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

/* Describes a reply that is not AMQP_RESPONSE_NORMAL and exits. */
static void check_reply(amqp_rpc_reply_t r, const char *what)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return;
    case AMQP_RESPONSE_NONE:
        die("%s: missing RPC reply type", what);
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        die("%s: %s", what, amqp_error_string2(r.library_error));
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
            const amqp_connection_close_t *m = r.reply.decoded;
            die("%s: connection closed by the broker: %u %.*s", what, m->reply_code,
                (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        }
        if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
            const amqp_channel_close_t *m = r.reply.decoded;
            die("%s: channel closed by the broker: %u %.*s", what, m->reply_code,
                (int)m->reply_text.len, (const char *)m->reply_text.bytes);
        }
        die("%s: unexpected server method 0x%08" PRIx32, what, r.reply.id);
    }
    die("%s: unknown reply type %d", what, (int)r.reply_type);
}

static void check_status(int status, const char *what)
{
    if (status != AMQP_STATUS_OK)
        die("%s: %s", what, amqp_error_string2(status));
}

/* Opens a connection and channel 1. The password never appears in messages. */
static amqp_connection_state_t open_url(const char *url)
{
    char *copy = strdup(url);
    struct amqp_connection_info ci;
    if (!copy)
        die("out of memory");
    amqp_default_connection_info(&ci);
    if (amqp_parse_url(copy, &ci) != AMQP_STATUS_OK)
        die("cannot parse the AMQP URL (expected amqp://user:password@host:port/vhost)");
    if (ci.ssl)
        die("amqps:// is not supported by amqp-tool");
    const char *vhost = (ci.vhost && *ci.vhost) ? ci.vhost : "/";

    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    if (!conn || !sock)
        die("out of memory");
    struct timeval tv = {10, 0};
    int st = amqp_socket_open_noblock(sock, ci.host, ci.port, &tv);
    if (st != AMQP_STATUS_OK)
        die("cannot connect to %s:%d: %s", ci.host, ci.port, amqp_error_string2(st));
    check_reply(amqp_login(conn, vhost, 0, FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password),
                "login");
    amqp_channel_open(conn, CHANNEL);
    check_reply(amqp_get_rpc_reply(conn), "channel.open");
    free(copy);
    return conn;
}

static void close_conn(amqp_connection_state_t conn)
{
    amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

/* ------------------------------------------------------------------------------------------ */

static int cmd_setup(int argc, char **argv)
{
    if (argc < 4)
        die("usage: setup URL EXCHANGE QUEUE BINDING_KEY...");
    amqp_connection_state_t conn = open_url(argv[0]);
    bool fanout = strncmp(argv[1], "fanout:", 7) == 0;
    amqp_bytes_t ex = amqp_cstring_bytes(argv[1] + (fanout ? 7 : 0));
    amqp_bytes_t q = amqp_cstring_bytes(argv[2]);

    amqp_exchange_declare(conn, CHANNEL, ex, amqp_cstring_bytes(fanout ? "fanout" : "topic"), 0, 1,
                          0, 0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "exchange.declare");
    amqp_queue_declare(conn, CHANNEL, q, 0, 1, 0, 0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "queue.declare");
    amqp_queue_purge(conn, CHANNEL, q);
    check_reply(amqp_get_rpc_reply(conn), "queue.purge");
    for (int i = 3; i < argc; i++) {
        amqp_queue_bind(conn, CHANNEL, q, ex, amqp_cstring_bytes(argv[i]), amqp_empty_table);
        check_reply(amqp_get_rpc_reply(conn), "queue.bind");
    }
    close_conn(conn);
    return 0;
}

static int cmd_delete(int argc, char **argv)
{
    if (argc != 2)
        die("usage: delete URL QUEUE");
    amqp_connection_state_t conn = open_url(argv[0]);
    amqp_queue_delete(conn, CHANNEL, amqp_cstring_bytes(argv[1]), 0, 0);
    check_reply(amqp_get_rpc_reply(conn), "queue.delete");
    close_conn(conn);
    return 0;
}

static int cmd_delete_exchange(int argc, char **argv)
{
    if (argc != 2)
        die("usage: delete-exchange URL EXCHANGE");
    amqp_connection_state_t conn = open_url(argv[0]);
    amqp_exchange_delete(conn, CHANNEL, amqp_cstring_bytes(argv[1]), 0);
    check_reply(amqp_get_rpc_reply(conn), "exchange.delete");
    close_conn(conn);
    return 0;
}

static int cmd_count(int argc, char **argv)
{
    if (argc != 2)
        die("usage: count URL QUEUE");
    amqp_connection_state_t conn = open_url(argv[0]);
    amqp_queue_declare_ok_t *ok =
        amqp_queue_declare(conn, CHANNEL, amqp_cstring_bytes(argv[1]), 1, 0, 0, 0, amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "queue.declare (passive)");
    printf("%" PRIu32 "\n", ok->message_count);
    close_conn(conn);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* drain */

static void put_field(FILE *out, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = p[i];
        if (c == '\t' || c == '\n' || c == '\r')
            c = ' ';
        putc(c, out);
    }
}

static void put_header(FILE *out, const amqp_basic_properties_t *props, const char *key)
{
    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG))
        return;
    size_t klen = strlen(key);
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len != klen || memcmp(e->key.bytes, key, klen) != 0)
            continue;
        switch (e->value.kind) {
        case AMQP_FIELD_KIND_UTF8:
        case AMQP_FIELD_KIND_BYTES:
            put_field(out, e->value.value.bytes.bytes, e->value.value.bytes.len);
            break;
        case AMQP_FIELD_KIND_I32:
            fprintf(out, "%" PRId32, e->value.value.i32);
            break;
        case AMQP_FIELD_KIND_I64:
            fprintf(out, "%" PRId64, e->value.value.i64);
            break;
        default:
            fputs("?", out);
            break;
        }
        return;
    }
}

static void print_message(FILE *out, const amqp_envelope_t *env)
{
    const amqp_basic_properties_t *p = &env->message.properties;
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        put_field(out, p->message_id.bytes, p->message_id.len);
    putc('\t', out);
    if (p->_flags & AMQP_BASIC_TYPE_FLAG)
        put_field(out, p->type.bytes, p->type.len);
    putc('\t', out);
    put_field(out, env->routing_key.bytes, env->routing_key.len);
    putc('\t', out);
    put_header(out, p, "aggregate_type");
    putc('\t', out);
    put_header(out, p, "aggregate_id");
    putc('\t', out);
    put_field(out, env->message.body.bytes, env->message.body.len);
    putc('\n', out);
}

/* A frame other than basic.deliver arrived while consuming: read it; a close is fatal. */
static void handle_unexpected_frame(amqp_connection_state_t conn)
{
    amqp_frame_t frame;
    int st = amqp_simple_wait_frame(conn, &frame);
    check_status(st, "reading a frame");
    if (frame.frame_type != AMQP_FRAME_METHOD)
        return;
    switch (frame.payload.method.id) {
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *m = frame.payload.method.decoded;
        die("channel closed by the broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
            (const char *)m->reply_text.bytes);
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *m = frame.payload.method.decoded;
        die("connection closed by the broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
            (const char *)m->reply_text.bytes);
    }
    case AMQP_BASIC_CANCEL_METHOD:
        die("the broker cancelled the consumer (queue deleted?)");
    default:
        return;
    }
}

static int cmd_drain(int argc, char **argv)
{
    if (argc < 2)
        die("usage: drain URL QUEUE [--expect N] [--idle-ms MS] [--timeout-s S]");
    const char *url = argv[0], *queue = argv[1];
    long expect = 0, idle_ms = 1000, timeout_s = 120;
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc)
            die("option %s needs a value", argv[i]);
        if (!strcmp(argv[i], "--expect"))
            expect = parse_long(argv[++i], "--expect", 0, 1000000000);
        else if (!strcmp(argv[i], "--idle-ms"))
            idle_ms = parse_long(argv[++i], "--idle-ms", 1, 86400000);
        else if (!strcmp(argv[i], "--timeout-s"))
            timeout_s = parse_long(argv[++i], "--timeout-s", 1, 86400);
        else
            die("unknown option %s", argv[i]);
    }

    amqp_connection_state_t conn = open_url(url);
    amqp_basic_qos(conn, CHANNEL, 0, 1000, 0);
    check_reply(amqp_get_rpc_reply(conn), "basic.qos");
    amqp_basic_consume(conn, CHANNEL, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "basic.consume");

    const double start = now_s(), deadline = start + (double)timeout_s;
    double last_msg = start;
    long received = 0;
    uint64_t last_tag = 0;
    int unacked = 0;

    for (;;) {
        double now = now_s();
        double wait_ms = (double)idle_ms - (now - last_msg) * 1000.0;
        if (received >= expect && wait_ms < 1)
            break;
        if (received < expect)
            wait_ms = (double)idle_ms;
        if (now + wait_ms / 1000.0 > deadline)
            wait_ms = (deadline - now) * 1000.0;
        struct timeval tv = tv_from_ms((long)wait_ms + 1);
        amqp_envelope_t env;
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            print_message(stdout, &env);
            received++;
            last_tag = env.delivery_tag;
            last_msg = now_s();
            amqp_destroy_envelope(&env);
            if (++unacked >= 250) {
                check_status(amqp_basic_ack(conn, CHANNEL, last_tag, 1), "basic.ack");
                unacked = 0;
            }
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            handle_unexpected_frame(conn);
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) {
            if (unacked) {
                check_status(amqp_basic_ack(conn, CHANNEL, last_tag, 1), "basic.ack");
                unacked = 0;
            }
            now = now_s();
            if (received >= expect && (now - last_msg) * 1000.0 >= (double)idle_ms)
                break;
            if (now >= deadline) {
                fflush(stdout);
                die("drain %s: timeout after %ld s: %ld message(s) arrived, expected at least %ld", queue,
                    timeout_s, received, expect);
            }
            continue;
        }
        check_reply(r, "consuming");
    }
    fflush(stdout);
    fprintf(stderr, "%s: drained %ld message(s) from %s in %.2f s\n", TOOL_NAME, received, queue,
            now_s() - start);
    close_conn(conn);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* publish-raw */

typedef struct {
    uint64_t n;
    uint64_t sent;      /* delivery tags 1..sent are published */
    uint64_t settled;   /* acked + nacked */
    uint64_t low;       /* lowest tag not yet settled */
    uint64_t nacked;
    uint64_t returned;
    unsigned char *done; /* done[tag]: settled */
    /* --rate only (NULL otherwise): sent_at[tag] the monotonic time of the publish, lat[] the
     * publish -> confirm time of each settled message, in settling order */
    double *sent_at;
    double *lat;
    uint64_t n_lat;
    uint64_t ack_frames; /* basic.ack frames read: n / ack_frames is how many one ack confirms */
} pub_state_t;

static void settle(pub_state_t *s, uint64_t tag, bool multiple, bool ack)
{
    if (tag > s->sent)
        die("the broker confirmed delivery tag %" PRIu64 " but only %" PRIu64 " were published", tag, s->sent);
    /* one clock reading per frame: a multiple ack confirms all its messages at the same moment */
    const double now = s->sent_at ? now_s() : 0;
    uint64_t from = multiple ? s->low : tag;
    for (uint64_t t = from; t <= tag; t++) {
        if (!s->done[t]) {
            s->done[t] = 1;
            s->settled++;
            if (!ack)
                s->nacked++;
            if (s->sent_at)
                s->lat[s->n_lat++] = now - s->sent_at[t];
        }
    }
    while (s->low <= s->sent && s->done[s->low])
        s->low++;
}

/* Reads one frame (blocking up to timeout_ms, or not at all with 0) and accounts for it.
 * Returns false on timeout. */
static bool read_confirm(amqp_connection_state_t conn, pub_state_t *s, long timeout_ms)
{
    amqp_frame_t frame;
    struct timeval tv = tv_from_ms(timeout_ms);
    int st = amqp_simple_wait_frame_noblock(conn, &frame, &tv);
    if (st == AMQP_STATUS_TIMEOUT)
        return false;
    check_status(st, "waiting for confirms");
    if (frame.frame_type != AMQP_FRAME_METHOD)
        return true; /* the content of a basic.return: already counted */
    switch (frame.payload.method.id) {
    case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *m = frame.payload.method.decoded;
        s->ack_frames++;
        settle(s, m->delivery_tag, m->multiple, true);
        break;
    }
    case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *m = frame.payload.method.decoded;
        settle(s, m->delivery_tag, m->multiple, false);
        break;
    }
    case AMQP_BASIC_RETURN_METHOD:
        s->returned++;
        break;
    case AMQP_CHANNEL_CLOSE_METHOD: {
        const amqp_channel_close_t *m = frame.payload.method.decoded;
        die("channel closed by the broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
            (const char *)m->reply_text.bytes);
    }
    case AMQP_CONNECTION_CLOSE_METHOD: {
        const amqp_connection_close_t *m = frame.payload.method.decoded;
        die("connection closed by the broker: %u %.*s", m->reply_code, (int)m->reply_text.len,
            (const char *)m->reply_text.bytes);
    }
    default:
        break;
    }
    return true;
}

/* Takes every frame rabbitmq-c already holds, without a system call. */
static void read_buffered_confirms(amqp_connection_state_t conn, pub_state_t *s)
{
    while (amqp_frames_enqueued(conn) || amqp_data_in_buffer(conn))
        read_confirm(conn, s, 0);
}

/* Hex digits of a fake but well-formed UUID derived from a counter: the same 36 bytes the relay
 * sends as message_id. */
static void make_uuid(char out[37], uint64_t seed, uint64_t i)
{
    uint64_t a = seed ^ (i * 0x9E3779B97F4A7C15ULL), b = i;
    snprintf(out, 37, "%08" PRIx32 "-%04" PRIx32 "-4%03" PRIx32 "-8%03" PRIx32 "-%012" PRIx64,
             (uint32_t)(a >> 32), (uint32_t)(a >> 16) & 0xffff, (uint32_t)a & 0xfff,
             (uint32_t)(b >> 48) & 0xfff, (uint64_t)(b & 0xffffffffffffULL));
}

/* --two-batches[=K]: whether message i (tag i) may be sent now with WINDOW w: batch b+2 waits
 * until every message of batch b is confirmed; with k > 0, message i also waits for message i-k
 * when that one is in an earlier batch. */
static bool two_batches_allow(const pub_state_t *s, uint64_t i, uint64_t w, uint64_t k)
{
    uint64_t b = (i - 1) / w;
    if (b >= 2 && s->low - 1 < (b - 1) * w)
        return false;
    if (k == 0 || i <= k || (i - k - 1) / w == b)
        return true;
    return s->done[i - k] != 0;
}

/* publish-raw's message: the properties and headers, the parts that change per message. Set up
 * once by raw_msg_init; must not move afterwards (props points into hdr). */
typedef struct {
    amqp_connection_state_t conn;
    amqp_bytes_t exchange, rkey, payload;
    amqp_basic_properties_t props;
    amqp_table_entry_t hdr[16];
    char uuid[37], agg_id[32], ce_time[32], ce_subject[48];
    int ce_id, ce_time_i, ce_subject_i; /* --envelope: the headers that change per message */
    bool with_env;
    uint64_t seed;
} raw_msg_t;

static void raw_msg_init(raw_msg_t *r, bool with_seq, bool with_trace, bool with_env)
{
    /* The properties the relay sets: persistent, message_id, type, timestamp, content_type,
     * app_id, headers aggregate_type/aggregate_id (and with --sequence aggregate_sequence, the
     * third header the relay sets since schema version 9). */
    amqp_table_entry_t *hdr = r->hdr;
    hdr[0].key = amqp_cstring_bytes("aggregate_type");
    hdr[0].value.kind = AMQP_FIELD_KIND_UTF8;
    hdr[0].value.value.bytes = amqp_cstring_bytes("bench");
    hdr[1].key = amqp_cstring_bytes("aggregate_id");
    hdr[1].value.kind = AMQP_FIELD_KIND_UTF8;
    amqp_basic_properties_t *props = &r->props;
    memset(props, 0, sizeof *props);
    props->_flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG | AMQP_BASIC_MESSAGE_ID_FLAG |
                    AMQP_BASIC_TYPE_FLAG | AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG |
                    AMQP_BASIC_HEADERS_FLAG;
    props->content_type = amqp_cstring_bytes("application/json");
    props->delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props->type = amqp_cstring_bytes("bench.raw.v1");
    props->app_id = amqp_cstring_bytes("amqp-tool");
    hdr[2].key = amqp_cstring_bytes("aggregate_sequence");
    hdr[2].value.kind = AMQP_FIELD_KIND_I64;
    int n_hdr = with_seq ? 3 : 2;
    if (with_trace) {
        hdr[n_hdr].key = amqp_cstring_bytes("traceparent");
        hdr[n_hdr].value.kind = AMQP_FIELD_KIND_UTF8;
        hdr[n_hdr++].value.value.bytes =
            amqp_cstring_bytes("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    }
    /* --envelope: the values the relay would send (the id, the time and the subject change per
     * message, like the relay's) */
    r->with_env = with_env;
    r->ce_id = r->ce_time_i = r->ce_subject_i = -1;
    if (with_env) {
        static const char *const names[][2] = {
            {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            {"tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
            {"cloudEvents_specversion", "1.0"},
            {"cloudEvents_id", ""},
            {"cloudEvents_source", "/postbox/pb_bench"},
            {"cloudEvents_type", "bench.raw.v1"},
            {"cloudEvents_subject", ""},
            {"cloudEvents_time", ""},
            {"cloudEvents_traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
            {"cloudEvents_tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"},
            {"cloudEvents_aggregatesequence", "1"},
        };
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            if (!strcmp(names[i][0], "traceparent") && with_trace)
                continue;
            hdr[n_hdr].key = amqp_cstring_bytes(names[i][0]);
            hdr[n_hdr].value.kind = AMQP_FIELD_KIND_UTF8;
            hdr[n_hdr].value.value.bytes = amqp_cstring_bytes(names[i][1]);
            if (!strcmp(names[i][0], "cloudEvents_id"))
                r->ce_id = n_hdr;
            else if (!strcmp(names[i][0], "cloudEvents_time"))
                r->ce_time_i = n_hdr;
            else if (!strcmp(names[i][0], "cloudEvents_subject"))
                r->ce_subject_i = n_hdr;
            n_hdr++;
        }
    }
    props->headers.num_entries = n_hdr;
    props->headers.entries = hdr;
    r->seed = (uint64_t)time(NULL) * 2654435761u;
}

/* Publishes message i (delivery tag i). */
static void raw_msg_publish(raw_msg_t *r, uint64_t i)
{
    make_uuid(r->uuid, r->seed, i);
    snprintf(r->agg_id, sizeof r->agg_id, "agg-%" PRIu64, (i - 1) % 100);
    r->props.message_id = amqp_cstring_bytes(r->uuid);
    r->props.timestamp = (uint64_t)time(NULL);
    r->hdr[1].value.value.bytes = amqp_cstring_bytes(r->agg_id);
    r->hdr[2].value.value.i64 = (int64_t)((i - 1) / 100 + 1);
    if (r->with_env) {
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(r->ce_time, sizeof r->ce_time, "%Y-%m-%dT%H:%M:%S.000000Z", &tm);
        snprintf(r->ce_subject, sizeof r->ce_subject, "bench/%s", r->agg_id);
        r->hdr[r->ce_id].value.value.bytes = amqp_cstring_bytes(r->uuid);
        r->hdr[r->ce_time_i].value.value.bytes = amqp_cstring_bytes(r->ce_time);
        r->hdr[r->ce_subject_i].value.value.bytes = amqp_cstring_bytes(r->ce_subject);
    }
    int st = amqp_basic_publish(r->conn, CHANNEL, r->exchange, r->rkey, 1, 0, &r->props, r->payload);
    check_status(st, "basic.publish");
}

/* Waits until the monotonic time `until`, reading confirms the moment they arrive (so that each
 * is timed when it comes, not at the next tick). poll with a timespec: rabbitmq-c's own
 * timeouts are whole milliseconds, coarser than a tick at high rates. */
static void confirms_until(amqp_connection_state_t conn, pub_state_t *s, double until)
{
    struct pollfd pfd = {.fd = amqp_get_sockfd(conn), .events = POLLIN};
    for (;;) {
        read_buffered_confirms(conn, s);
        double left = until - now_s();
        if (left <= 0)
            return;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        int rc = ppoll(&pfd, 1, &ts, NULL);
        if (rc < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        if (rc > 0)
            read_confirm(conn, s, 0);
    }
}

/* --rate: message i is due at start + (i / burst) / (rate / burst); each message is timed from
 * its own basic.publish to the confirm that covers it. Prints one line of key=value. */
static void publish_paced(raw_msg_t *r, pub_state_t *s, long rate, long burst, long window)
{
    s->sent_at = calloc(s->n + 2, sizeof *s->sent_at);
    s->lat = malloc((s->n + 1) * sizeof *s->lat);
    if (!s->sent_at || !s->lat)
        die("out of memory");
    const double tick = (double)burst / (double)rate;
    double late_max = 0;
    const double start = now_s();
    for (uint64_t k = 0; s->sent < s->n; k++) {
        const double due = start + (double)k * tick;
        confirms_until(r->conn, s, due);
        /* behind schedule (this process was not run in time, or the window was full): the
         * delay is not in the latencies, which start at the publish; it is reported apart */
        const double late = now_s() - due;
        if (late > late_max)
            late_max = late;
        for (long j = 0; j < burst && s->sent < s->n; j++) {
            while (s->sent - s->settled >= (uint64_t)window)
                if (!read_confirm(r->conn, s, 60000))
                    die("no confirm within 60 s (%" PRIu64 " of %" PRIu64 " confirmed)", s->settled, s->sent);
            uint64_t i = s->sent + 1;
            s->sent_at[i] = now_s();
            raw_msg_publish(r, i);
            s->sent = i;
        }
    }
    const double end_pub = now_s();
    while (s->settled < s->n) {
        if (!read_confirm(r->conn, s, 60000))
            die("no confirm within 60 s (%" PRIu64 " of %" PRIu64 " confirmed)", s->settled, s->n);
        read_buffered_confirms(r->conn, s);
    }
    const double end_conf = now_s();
    lat_summary_t l = lat_summarise(s->lat, (size_t)s->n_lat);
    /* achieved: as bench/relay-cdc's for its producers, the messages over the time from the
     * common start to the end of the last publish */
    printf("paced published=%" PRIu64 " offered=%ld burst=%ld achieved=%.0f p50_ms=%.3f p99_ms=%.3f "
           "p999_ms=%.3f max_ms=%.3f late_max_ms=%.3f confirmed_s=%.3f ack_frames=%" PRIu64
           " window=%ld size=%zu\n",
           s->n, rate, burst, (double)s->n / (end_pub - start), l.p50, l.p99, l.p999, l.max,
           late_max * 1000.0, end_conf - start, s->ack_frames, window, r->payload.len);
    free(s->sent_at);
    free(s->lat);
    s->sent_at = s->lat = NULL;
}

static int cmd_publish_raw(int argc, char **argv)
{
    if (argc < 6)
        die("usage: publish-raw URL EXCHANGE ROUTING_KEY N SIZE WINDOW "
            "[--batches | --two-batches[=K] | --rate R [--burst B]] [--sequence] [--traceparent] "
            "[--envelope]");
    bool batchwise = false, two = false, with_seq = false, with_trace = false, with_env = false;
    long wait_back = 0, rate = 0, burst = 10;
    for (int i = 6; i < argc; i++) {
        if (!strcmp(argv[i], "--batches"))
            batchwise = true;
        else if (!strcmp(argv[i], "--two-batches"))
            two = true;
        else if (!strncmp(argv[i], "--two-batches=", 14)) {
            two = true;
            wait_back = parse_long(argv[i] + 14, "--two-batches=K", 1, 100000000);
        } else if (!strcmp(argv[i], "--sequence"))
            with_seq = true;
        else if (!strcmp(argv[i], "--traceparent"))
            with_trace = true;
        else if (!strcmp(argv[i], "--envelope"))
            with_env = true;
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc)
            rate = parse_long(argv[++i], "--rate", 1, 10000000);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc)
            burst = parse_long(argv[++i], "--burst", 1, 1000000);
        else
            die("unknown option %s", argv[i]);
    }
    if (two && batchwise)
        die("--batches and --two-batches exclude each other");
    if (rate && (two || batchwise))
        die("--rate excludes --batches and --two-batches");
    const char *url = argv[0];
    raw_msg_t r;
    r.exchange = amqp_cstring_bytes(argv[1]);
    r.rkey = amqp_cstring_bytes(argv[2]);
    pub_state_t s = {0};
    s.n = (uint64_t)parse_long(argv[3], "N", 1, 100000000);
    long size = parse_long(argv[4], "SIZE", 0, 100000000);
    long window = parse_long(argv[5], "WINDOW", 1, 100000000);
    s.done = calloc(s.n + 2, 1);
    s.low = 1;
    char *body = malloc((size_t)size + 1);
    if (!s.done || !body)
        die("out of memory");
    /* a JSON body of exactly SIZE bytes where possible: {"pad":"xxxx"} */
    memset(body, 'x', (size_t)size);
    if (size >= 10) {
        memcpy(body, "{\"pad\":\"", 8);
        memcpy(body + size - 2, "\"}", 2);
    }
    r.payload = (amqp_bytes_t){(size_t)size, body};

    r.conn = open_url(url);
    amqp_connection_state_t conn = r.conn;
    amqp_confirm_select(conn, CHANNEL);
    check_reply(amqp_get_rpc_reply(conn), "confirm.select");
    raw_msg_init(&r, with_seq, with_trace, with_env);

    if (rate) {
        publish_paced(&r, &s, rate, burst, window);
    } else {
        const double start = now_s();
        while (s.settled < s.n) {
            /* fill the window (--batches: only once everything sent is confirmed) */
            while (s.sent < s.n && s.sent - s.settled < (uint64_t)window * (two ? 2 : 1) &&
                   (two ? two_batches_allow(&s, s.sent + 1, (uint64_t)window, (uint64_t)wait_back)
                        : !batchwise || s.sent % (uint64_t)window != 0 || s.settled == s.sent)) {
                uint64_t i = s.sent + 1;
                raw_msg_publish(&r, i);
                s.sent = i;
                /* take confirms that are already here without a system call */
                read_buffered_confirms(conn, &s);
            }
            /* window full or everything sent: block for the next confirm, then take what is
             * buffered */
            if (!read_confirm(conn, &s, 60000))
                die("no confirm within 60 s (%" PRIu64 " of %" PRIu64 " confirmed)", s.settled, s.n);
            read_buffered_confirms(conn, &s);
        }
        const double secs = now_s() - start;
        make_uuid(r.uuid, r.seed, s.n);
        printf("published %" PRIu64 " in %.3f seconds: %.0f msgs/s (size %ld, window %ld); last message_id %s\n",
               s.n, secs, (double)s.n / secs, size, window, r.uuid);
    }
    close_conn(conn);
    free(body);
    free(s.done);
    if (s.nacked || s.returned)
        die("%" PRIu64 " message(s) nacked and %" PRIu64 " returned (unroutable: is a queue bound?)", s.nacked,
            s.returned);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* publish: one message, COUNT times */

static int cmd_publish(int argc, char **argv)
{
    /* --header KEY=VALUE (text headers, any number) and --timestamp S, anywhere after the
     * command */
    amqp_table_entry_t headers[16];
    int n_headers = 0, kept = 0;
    uint64_t stamp = (uint64_t)time(NULL);
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--timestamp") == 0) {
            stamp = (uint64_t)parse_long(i + 1 < argc ? argv[++i] : "", "--timestamp", 1,
                                         4102444800L);
            continue;
        }
        if (strcmp(argv[i], "--header") != 0) {
            argv[kept++] = argv[i];
            continue;
        }
        const char *kv = i + 1 < argc ? argv[++i] : "";
        const char *eq = strchr(kv, '=');
        if (!eq || n_headers == 16)
            die("--header takes KEY=VALUE (at most 16)");
        headers[n_headers].key = (amqp_bytes_t){.len = (size_t)(eq - kv), .bytes = (void *)kv};
        headers[n_headers].value.kind = AMQP_FIELD_KIND_UTF8;
        headers[n_headers++].value.value.bytes = amqp_cstring_bytes(eq + 1);
    }
    argc = kept;
    if (argc != 6 && argc != 7)
        die("usage: publish URL EXCHANGE ROUTING_KEY MESSAGE_ID TYPE BODY [COUNT] "
            "[--header KEY=VALUE...] [--timestamp UNIX_SECONDS]");
    const char *url = argv[0];
    amqp_bytes_t exchange = amqp_cstring_bytes(argv[1]);
    amqp_bytes_t rkey = amqp_cstring_bytes(argv[2]);
    const char *id = argv[3], *type = argv[4];
    amqp_bytes_t body = amqp_cstring_bytes(argv[5]);
    char *file_body = NULL;
    if (argv[5][0] == '@') { /* @FILE: the body is the file's bytes (NUL bytes included) */
        FILE *f = fopen(argv[5] + 1, "rb");
        if (!f)
            die("cannot open %s", argv[5] + 1);
        size_t cap = 1 << 16, len = 0;
        file_body = malloc(cap);
        for (size_t got; file_body && (got = fread(file_body + len, 1, cap - len, f)) > 0;) {
            len += got;
            if (len == cap)
                file_body = realloc(file_body, cap *= 2);
        }
        fclose(f);
        if (!file_body)
            die("out of memory");
        body = (amqp_bytes_t){.len = len, .bytes = file_body};
    }
    pub_state_t s = {0};
    s.n = argc == 7 ? (uint64_t)parse_long(argv[6], "COUNT", 1, 1000000) : 1;
    s.done = calloc(s.n + 2, 1);
    s.low = 1;
    if (!s.done)
        die("out of memory");

    amqp_connection_state_t conn = open_url(url);
    amqp_confirm_select(conn, CHANNEL);
    check_reply(amqp_get_rpc_reply(conn), "confirm.select");
    amqp_basic_properties_t props;
    memset(&props, 0, sizeof props);
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG |
                   AMQP_BASIC_TIMESTAMP_FLAG | AMQP_BASIC_APP_ID_FLAG;
    props.content_type = amqp_cstring_bytes("application/json");
    props.delivery_mode = AMQP_DELIVERY_PERSISTENT;
    props.timestamp = stamp;
    props.app_id = amqp_cstring_bytes("amqp-tool");
    if (*id) {
        props._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        props.message_id = amqp_cstring_bytes(id);
    }
    if (*type) {
        props._flags |= AMQP_BASIC_TYPE_FLAG;
        props.type = amqp_cstring_bytes(type);
    }
    if (n_headers) {
        props._flags |= AMQP_BASIC_HEADERS_FLAG;
        props.headers = (amqp_table_t){.num_entries = n_headers, .entries = headers};
    }
    for (uint64_t i = 1; i <= s.n; i++) {
        check_status(amqp_basic_publish(conn, CHANNEL, exchange, rkey, 1, 0, &props, body),
                     "basic.publish");
        s.sent = i;
    }
    while (s.settled < s.n)
        if (!read_confirm(conn, &s, 30000))
            die("no confirm within 30 s (%" PRIu64 " of %" PRIu64 " confirmed)", s.settled, s.n);
    /* a basic.return precedes the ack of its message: everything returned has been read */
    close_conn(conn);
    free(file_body);
    free(s.done);
    if (s.nacked || s.returned)
        die("%" PRIu64 " message(s) nacked and %" PRIu64 " returned (unroutable: is a queue bound?)",
            s.nacked, s.returned);
    printf("published %" PRIu64 " message(s) with message_id '%.60s', type '%s'\n", s.n, id, type);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* consume-raw */

static int cmd_consume_raw(int argc, char **argv)
{
    if (argc != 4 && argc != 5)
        die("usage: consume-raw URL QUEUE N PREFETCH [BATCH]");
    const char *url = argv[0], *queue = argv[1];
    long n = parse_long(argv[2], "N", 1, 1000000000);
    long prefetch = parse_long(argv[3], "PREFETCH", 1, 65535);
    long batch = argc == 5 ? parse_long(argv[4], "BATCH", 1, 1000000) : 200;
    if (batch > prefetch)
        batch = prefetch;

    amqp_connection_state_t conn = open_url(url);
    amqp_basic_qos(conn, CHANNEL, 0, (uint16_t)prefetch, 0);
    check_reply(amqp_get_rpc_reply(conn), "basic.qos");
    const double start = now_s();
    amqp_basic_consume(conn, CHANNEL, amqp_cstring_bytes(queue), amqp_empty_bytes, 0, 0, 0,
                       amqp_empty_table);
    check_reply(amqp_get_rpc_reply(conn), "basic.consume");

    long received = 0, unacked = 0;
    uint64_t last_tag = 0;
    double last_msg = start;
    while (received < n) {
        struct timeval tv = tv_from_ms(20);
        amqp_envelope_t env;
        amqp_maybe_release_buffers(conn);
        amqp_rpc_reply_t r = amqp_consume_message(conn, &env, &tv, 0);
        if (r.reply_type == AMQP_RESPONSE_NORMAL) {
            received++;
            last_tag = env.delivery_tag;
            last_msg = now_s();
            amqp_destroy_envelope(&env);
            if (++unacked >= batch || received == n) {
                check_status(amqp_basic_ack(conn, CHANNEL, last_tag, 1), "basic.ack");
                unacked = 0;
            }
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
            handle_unexpected_frame(conn);
            continue;
        }
        if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT) {
            if (unacked) {
                check_status(amqp_basic_ack(conn, CHANNEL, last_tag, 1), "basic.ack");
                unacked = 0;
            }
            if (now_s() - last_msg > 60.0)
                die("consume-raw %s: nothing for 60 s after %ld of %ld message(s)", queue, received, n);
            continue;
        }
        check_reply(r, "consuming");
    }
    /* channel.close is an RPC: once it is answered the broker has processed the acks */
    amqp_rpc_reply_t r = amqp_channel_close(conn, CHANNEL, AMQP_REPLY_SUCCESS);
    check_reply(r, "channel.close");
    const double secs = now_s() - start;
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    printf("consumed %ld in %.3f seconds: %.0f msgs/s (prefetch %ld, ack every %ld)\n", received,
           secs, (double)received / secs, prefetch, batch);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr,
            "usage: amqp-tool setup URL EXCHANGE QUEUE BINDING_KEY...\n"
            "       amqp-tool delete URL QUEUE\n"
            "       amqp-tool delete-exchange URL EXCHANGE\n"
            "       amqp-tool drain URL QUEUE [--expect N] [--idle-ms MS] [--timeout-s S]\n"
            "       amqp-tool count URL QUEUE\n"
            "       amqp-tool publish-raw URL EXCHANGE ROUTING_KEY N SIZE WINDOW [--rate R [--burst B]]\n"
            "       amqp-tool publish URL EXCHANGE ROUTING_KEY MESSAGE_ID TYPE BODY [COUNT] [--header K=V...]\n"
            "       amqp-tool consume-raw URL QUEUE N PREFETCH [BATCH]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    const char *cmd = argv[1];
    argc -= 2;
    argv += 2;
    if (!strcmp(cmd, "setup"))
        return cmd_setup(argc, argv);
    if (!strcmp(cmd, "delete"))
        return cmd_delete(argc, argv);
    if (!strcmp(cmd, "delete-exchange"))
        return cmd_delete_exchange(argc, argv);
    if (!strcmp(cmd, "drain"))
        return cmd_drain(argc, argv);
    if (!strcmp(cmd, "count"))
        return cmd_count(argc, argv);
    if (!strcmp(cmd, "publish-raw"))
        return cmd_publish_raw(argc, argv);
    if (!strcmp(cmd, "publish"))
        return cmd_publish(argc, argv);
    if (!strcmp(cmd, "consume-raw"))
        return cmd_consume_raw(argc, argv);
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help"))
        usage();
    fprintf(stderr, "amqp-tool: unknown command '%s'\n", cmd);
    usage();
}
