/* NATS JetStream sink (nats.c 3.4.1): the batch is published pipelined as NATS messages with a
 * reply subject (natsConnection_PublishMsg, at most nats.max_pending unacknowledged), every
 * message with Nats-Msg-Id = event_id, then every PubAck is awaited. The stream drops a message
 * whose id it stored within its duplicate window and still acknowledges it (duplicate: true):
 * that counts as published, so a relay that dies between the broker's ack and its commit
 * republishes without storing twice.
 *
 * Core NATS (no JetStream) is refused at connect, and so is a subject template the stream does
 * not store: a plain NATS publish would be at-most-once.
 *
 * Acks: at connect the sink makes one reply prefix (a fresh inbox "_INBOX.<nuid>") and one
 * subscription on "<inbox>.*.*". Event i of batch g goes out with the reply subject
 * "<inbox>.<g>.<i>", so a PubAck names its event: no table of pending messages, no lookup by
 * id. The subscription's callback (on_ack, on the subscription's nats.c delivery thread) parses
 * the PubAck in place (nats_ack.c), outside the lock, then writes the event's outcome under `mu`;
 * the relay's thread waits on `cv` when nats.max_pending messages are unacknowledged (send) and
 * for the rest of the batch (await). A no-responders status (no stream stores the subject) and
 * an unparseable reply fail that event with their reason. A reply whose g is not the open
 * batch's is dropped: a late ack never touches the next batch. (A synchronous subscription would
 * spare the delivery thread, but nats.c's NextMsg swallows a no-responders reply and with it the
 * subject that names the event.)
 *
 * Deadlines (nats.ack_timeout): await waits until ack_timeout after the batch's last publish,
 * then every event still unacknowledged is RETRY. In send, when the window is full and no ack
 * frees a slot within ack_timeout, the rest of the batch is RETRY ("stalled") and the connection
 * is dropped.
 *
 * Headers: an event's headers are written into one block of the sink's own (nats_headers.c) and,
 * once the probe at connect showed that nats.c sends such a block unchanged, set as one header:
 * with the envelope on (18 headers) that spares 70 allocations per message and the hash walks.
 *
 * Every natsMsg (published or received) is destroyed in piles (msg_pile_t): nats.c hands each
 * destroyed message to its garbage-collector thread, and one by one that thread woke twice per
 * event.
 *
 * Why not js_PublishMsgAsync: per message it makes a reply inbox and a pending-map entry, parses
 * the PubAck into a JSON tree, hands it to a callback thread, and the event then had to be found
 * again by its Nats-Msg-Id header. Measured with bench/relay-nats 20000 300: 18.5 ms of relay
 * CPU per 1,000 events that way, 12.5 ms this way.
 *
 * @thread loop (connect, send, await, check, idle, free); on_ack on nats.c's delivery thread,
 * @locks mu. */
#include "sink/sink.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>
#include <nats/nats.h>

#include "common/clock.h"
#include "common/log.h"
#include "broker/nats/conn.h"
#include "common/route.h"
#include "common/str.h"
#include "sink/cloudevents.h"
#include "sink/nats_ack.h"
#include "sink/nats_headers.h"

#define FAC "sink.nats"
#define SUBJECT_MAX PB_NATS_SUBJECT_MAX
#define REPLY_MAX 96 /* "_INBOX.<22-char nuid>.<generation>.<index>" */
#define DEFAULT_MAX_PAYLOAD (1024 * 1024)
#define ACK_QUEUE_MIN 65536 /* nats.c's default pending limit of a subscription */
#define MSGID_HDR "Nats-Msg-Id"
#define PROBE_WAIT_MS 2000 /* sink_connect: the header probe's round trip, at most */
#define CLOSE_WAIT_MS 5000 /* drop_connection: how long an ack callback in progress may take */
#define PILE_MAX 256                 /* messages destroyed together, at most ... */
#define PILE_BYTES (4 * 1024 * 1024) /* ... and at most this much payload held back */

/* nats.c frees a destroyed message on its garbage-collector thread and wakes that thread for
 * each message that arrives while it sleeps: destroyed one at a time, every published message
 * and every ack cost two context switches (measured: most of the sink's kernel time). Messages
 * are therefore piled up and destroyed in bursts, one wake-up per pile. */
typedef struct msg_pile {
    natsMsg *msgs[PILE_MAX];
    size_t n, bytes;
} msg_pile_t;

static void pile_flush(msg_pile_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        natsMsg_Destroy(p->msgs[i]);
    p->n = p->bytes = 0;
}

/* Takes m (to be destroyed with the pile). */
static void pile_add(msg_pile_t *p, natsMsg *m)
{
    p->msgs[p->n++] = m;
    p->bytes += (size_t)natsMsg_GetDataLength(m);
    if (p->n == PILE_MAX || p->bytes >= PILE_BYTES)
        pile_flush(p);
}

typedef struct nats_sink {
    pb_sink_t base; /* first: the relay holds a pb_sink_t * */
    char where[300];
    natsConnection *nc;     /* NULL while disconnected */
    natsSubscription *acks; /* "<inbox>.*.*", callback on_ack; set with nc */
    char inbox[64];         /* the reply prefix of this connection */
    int64_t max_payload;
    pb_nats_stream_desc_t stream;
    pb_nats_headers_t hdrs;      /* the header block of the message being built */
    pb_nats_hdr_mode_t hdr_mode; /* how hdrs goes into a message: PACKED once the probe passed */

    /* the open batch, shared with on_ack; @locks mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* on_ack: acked reached wake_at; the subscription ended */
    bool open;
    uint32_t gen;          /* batch number: the middle token of its reply subjects */
    char reply[REPLY_MAX]; /* "<inbox>.<gen>.": reply subjects of this batch start with it */
    size_t reply_len;
    const pb_event_t *events;
    pb_result_t *results;
    size_t n;
    size_t acked;        /* replies that settled an event of this batch */
    size_t wake_at;      /* the loop waits for acked >= wake_at (when waiting) */
    bool waiting;
    size_t dups;         /* acknowledged as duplicates */
    size_t failed;       /* negative acks and unusable replies */
    bool leaderless;     /* a no-responders reply for a subject the stream stores: the stream
                          * has no leader now (a cluster electing one) */
    bool acks_done;      /* the subscription's delivery thread has ended */
    msg_pile_t ack_pile; /* replies to destroy: on_ack's thread only (no lock), then
                          * drop_connection's once acks_done */
    char first_error[sizeof ((pb_result_t *)0)->error];

    /* between sink_send and sink_await (the loop's thread only) */
    size_t nsent, rejected;
    msg_pile_t sent_pile; /* published messages */
    int64_t t_start, t_sent; /* first and last publish (pb_monotonic_ms) */
    char stop_reason[200];
} nats_sink_t;

static const pb_sink_ops_t nats_ops;

/* ---- connection ----------------------------------------------------------------------------- */

/* Waits on cv until it is signalled or the deadline (pb_monotonic_ms) passes; false then.
 * @locks mu (held) */
static bool cv_wait(nats_sink_t *s, int64_t deadline)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000),
                          .tv_nsec = (long)(deadline % 1000) * 1000000L};
    return pthread_cond_timedwait(&s->cv, &s->mu, &ts) != ETIMEDOUT;
}

/* Closes the connection; once it returns, no ack callback runs (the sink may be freed next). */
static void drop_connection(nats_sink_t *s)
{
    if (s->nc)
        natsConnection_Close(s->nc); /* joins the read loop: no more acks are queued */
    if (s->acks) {
        /* The subscription's delivery thread ends after the callback it may be in. The
         * subscription is destroyed only now: destroyed while the read loop may still deliver
         * to it, nats.c 3.4.1 can use it after freeing it. */
        pthread_mutex_lock(&s->mu);
        int64_t until = pb_monotonic_ms() + CLOSE_WAIT_MS;
        while (!s->acks_done && cv_wait(s, until))
            ;
        bool done = s->acks_done;
        pthread_mutex_unlock(&s->mu);
        if (done)
            pile_flush(&s->ack_pile);
        else /* its pile stays, leaked rather than raced for */
            log_warn(FAC, "the acknowledgement callback did not end within %d ms", CLOSE_WAIT_MS);
        natsSubscription_Destroy(s->acks);
        s->acks = NULL;
    }
    if (s->nc) {
        natsConnection_Destroy(s->nc);
        s->nc = NULL;
    }
}

/* The checks that need JetStream's API: it is there, the stream is, and it stores the subjects.
 * The context serves only these requests; publishing does not use it. */
static pb_status_t check_stream(nats_sink_t *s, pb_error_t *err)
{
    jsCtx *js = NULL;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 5000;
    natsStatus ns = natsConnection_JetStream(&js, s->nc, &jo);
    if (ns != NATS_OK) {
        char buf[300];
        return pb_fail(err, PB_FATAL, "nats at %s: jetstream context: %s", s->where,
                       pb_nats_error_text(ns, buf, sizeof buf));
    }
    pb_status_t st = pb_nats_check_jetstream(js, s->where, err);
    if (st == PB_OK) {
        pb_nats_stream_desc_free(&s->stream);
        st = pb_nats_ensure_stream(js, s->base.cfg, FAC, &s->stream, err);
    }
    jsCtx_Destroy(js);
    if (st == PB_OK && s->stream.leaderless)
        st = pb_fail(err, PB_TRANSIENT, "nats at %s: stream \"%s\" has no leader now (its "
                                        "cluster elects one)", s->where, s->base.cfg->nats_stream);
    return st == PB_OK ? pb_nats_check_coverage(s->base.cfg, &s->stream, err) : st;
}

static void on_ack(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure);

/* The subscription's delivery thread ended: no on_ack call follows. */
static void on_acks_done(void *closure)
{
    nats_sink_t *s = closure;
    pthread_mutex_lock(&s->mu);
    s->acks_done = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

/* The reply prefix and the one subscription every PubAck of this connection arrives on. Its
 * queue must hold a full window of acks (they can arrive faster than on_ack takes them) plus
 * late ones of the batch before: beyond its limits nats.c drops acks (logged as a slow
 * consumer), and their events would be retried. The count bounds the bytes. */
static pb_status_t subscribe_acks(nats_sink_t *s, pb_error_t *err)
{
    natsInbox *inbox = NULL;
    natsStatus ns = natsInbox_Create(&inbox);
    if (ns == NATS_OK) {
        snprintf(s->inbox, sizeof s->inbox, "%s", inbox);
        natsInbox_Destroy(inbox);
        char subj[sizeof s->inbox + 8];
        snprintf(subj, sizeof subj, "%s.*.*", s->inbox);
        s->acks_done = false;
        ns = natsConnection_Subscribe(&s->acks, s->nc, subj, on_ack, s);
    }
    if (ns == NATS_OK)
        ns = natsSubscription_SetOnCompleteCB(s->acks, on_acks_done, s);
    if (ns == NATS_OK) {
        int64_t limit = 2 * s->base.cfg->nats_max_pending + 1024; /* max_pending <= 1e6 */
        if (limit < ACK_QUEUE_MIN)
            limit = ACK_QUEUE_MIN;
        ns = natsSubscription_SetPendingLimits(s->acks, (int)limit, -1);
    }
    if (ns == NATS_OK)
        return PB_OK;
    char buf[300];
    return pb_fail(err, pb_nats_status_transient(ns) ? PB_TRANSIENT : PB_FATAL,
                   "nats at %s: subscribing to acknowledgements: %s", s->where,
                   pb_nats_error_text(ns, buf, sizeof buf));
}

static pb_status_t sink_connect(pb_sink_t *snk, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
    drop_connection(s);
    pb_status_t st = pb_nats_connect(snk->cfg, FAC, &s->nc, s->where, sizeof s->where, err);
    if (st != PB_OK)
        return st;
    if ((st = check_stream(s, err)) != PB_OK || (st = subscribe_acks(s, err)) != PB_OK) {
        drop_connection(s);
        return st;
    }
    s->max_payload = natsConnection_GetMaxPayload(s->nc);
    if (s->max_payload <= 0)
        s->max_payload = DEFAULT_MAX_PAYLOAD;
    char headers[200] = "as one block";
    if (s->hdr_mode != PB_NATS_HDR_PACKED) { /* a library property: once it passed, it holds */
        char probe[sizeof s->inbox + 8], why[160];
        snprintf(probe, sizeof probe, "%s.probe", s->inbox); /* not "<inbox>.*.*": no ack */
        if (pb_nats_headers_probe(s->nc, probe, PROBE_WAIT_MS, why, sizeof why))
            s->hdr_mode = PB_NATS_HDR_PACKED;
        else
            snprintf(headers, sizeof headers, "set one by one (block check: %s)", why);
    }
    log_info(FAC, "connected to nats at %s (jetstream, max_payload %lld); %s %s; headers %s",
             s->where, (long long)s->max_payload,
             s->stream.created ? "created" : s->stream.updated ? "updated" : "using",
             s->stream.text, headers);
    return PB_OK;
}

/* ---- publishing ----------------------------------------------------------------------------- */

static bool header_key_valid(const char *k, size_t len)
{
    if (!len)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c <= ' ' || c >= 0x7f || c == ':')
            return false;
    }
    return true;
}

static bool own_key(const pb_header_t *h)
{
    return pb_header_is(h, "event_type") || pb_header_is(h, "aggregate_type") ||
           pb_header_is(h, "aggregate_id") || pb_header_is(h, PB_SEQUENCE_HEADER) ||
           (h->klen >= 5 && strncasecmp(h->key, "Nats-", 5) == 0);
}

/* The event's JSON headers into the block: strings as they are (JSON-encoded when they hold a
 * line break, which a NATS header cannot), anything else as its compact JSON text. */
static bool add_user_headers(nats_sink_t *s, const pb_event_t *ev, pb_result_t *res)
{
    pb_header_iter_t it;
    pb_header_t h;
    for (pb_header_iter_init(&it, ev); pb_header_next(&it, &h);) {
        if (own_key(&h) || pb_ce_owns(s->base.ce, h.key, h.klen))
            continue; /* ours, from the row, win; Nats-* would change JetStream's handling */
        if (!header_key_valid(h.key, h.klen)) {
            pb_result_setf(res, PB_OUT_REJECT, "header name \"%.*s\" is not a valid NATS header "
                                               "name (printable ASCII without ':' or blanks)",
                           (int)(h.klen < 60 ? h.klen : 60), h.key);
            return false;
        }
        if (h.val && !memchr(h.val, '\r', h.vlen) && !memchr(h.val, '\n', h.vlen) &&
            !memchr(h.val, '\0', h.vlen)) {
            pb_nats_headers_add(&s->hdrs, h.key, h.klen, h.val, h.vlen);
        } else { /* only parsed headers get here: a flat one is a plain string */
            char *txt = json_dumps(h.json, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!txt) {
                pb_result_set(res, PB_OUT_RETRY, "out of memory building message headers");
                return false;
            }
            pb_nats_headers_add(&s->hdrs, h.key, h.klen, txt, strlen(txt));
            free(txt);
        }
    }
    return true;
}

/* The checks that need no connection: subject and size. Fills subj (SUBJECT_MAX). */
static bool check_event(const nats_sink_t *s, const pb_event_t *ev, char *subj, pb_result_t *res)
{
    const pb_config_t *cfg = s->base.cfg;
    int64_t limit = cfg->nats_max_message_size > 0 ? cfg->nats_max_message_size : s->max_payload;
    if ((int64_t)ev->payload_len > limit) {
        pb_result_setf(res, PB_OUT_REJECT, "payload of %zu bytes exceeds %s %lld", ev->payload_len,
                    cfg->nats_max_message_size > 0 ? "nats.max_message_size"
                                                   : "the server's max_payload",
                    (long long)limit);
        return false;
    }
    if (!pb_nats_render_subject(cfg, ev, subj, SUBJECT_MAX)) {
        pb_result_setf(res, PB_OUT_REJECT, "subject longer than %d bytes", SUBJECT_MAX - 1);
        return false;
    }
    if (!pb_nats_subject_valid(subj)) {
        pb_result_setf(res, PB_OUT_REJECT, "invalid NATS subject \"%.150s\" (empty token, blank or "
                                        "wildcard)", subj);
        return false;
    }
    if (!ev->event_id || !*ev->event_id) {
        pb_result_set(res, PB_OUT_REJECT, "event without event_id");
        return false;
    }
    return true;
}

static bool sink_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *res)
{
    char subj[SUBJECT_MAX];
    return check_event((nats_sink_t *)snk, ev, subj, res);
}

/* The headers of ev, ours, CloudEvents' and the event's own, into s->hdrs; false with *res set
 * when one cannot be sent. */
static bool build_headers(nats_sink_t *s, const pb_event_t *ev, pb_result_t *res)
{
    pb_nats_headers_reset(&s->hdrs);
    char seq[24] = "";
    if (ev->sequence > 0)
        snprintf(seq, sizeof seq, "%lld", (long long)ev->sequence);
    char created[PB_UTC_TEXT_LEN] = "";
    if (ev->created_at_us > 0)
        pb_format_utc_us(ev->created_at_us, created, sizeof created);
    static const char *const keys[6] = {MSGID_HDR,      "event_type",       "aggregate_type",
                                        "aggregate_id", PB_SEQUENCE_HEADER, "created_at"};
    const char *vals[6] = {ev->event_id,     ev->event_type, ev->aggregate_type,
                           ev->aggregate_id, seq,            created};
    for (int k = 0; k < 6; k++) {
        if (!vals[k] || !*vals[k])
            continue;
        if (strpbrk(vals[k], "\r\n")) {
            pb_result_setf(res, PB_OUT_REJECT, "%s contains a line break", keys[k]);
            return false;
        }
        pb_nats_headers_add(&s->hdrs, keys[k], strlen(keys[k]), vals[k], strlen(vals[k]));
    }
    if (s->base.ce) { /* CloudEvents (NATS binding): values percent-encoded, so one line each */
        pb_ce_attr_t attrs[PB_CE_NATTRS];
        size_t na = pb_ce_attrs(s->base.ce, ev, attrs);
        for (size_t a = 0; a < na; a++)
            pb_nats_headers_add(&s->hdrs, attrs[a].name, attrs[a].name_len, attrs[a].value,
                                attrs[a].len);
    }
    return add_user_headers(s, ev, res);
}

/* A message for ev with its reply subject and headers; NULL with *res set when it cannot be
 * built. */
static natsMsg *build_msg(nats_sink_t *s, const pb_event_t *ev, const char *subj,
                          const char *reply, pb_result_t *res)
{
    if (!build_headers(s, ev, res))
        return NULL;
    natsMsg *m = NULL;
    natsStatus ns = natsMsg_Create(&m, subj, reply, ev->payload, (int)ev->payload_len);
    if (ns == NATS_OK && (ns = pb_nats_headers_apply(&s->hdrs, m, s->hdr_mode)) != NATS_OK) {
        natsMsg_Destroy(m);
        m = NULL;
    }
    if (ns != NATS_OK)
        pb_result_setf(res, ns == NATS_NO_MEMORY ? PB_OUT_RETRY : PB_OUT_REJECT,
                       "cannot build the message: %s", natsStatus_GetText(ns));
    return m;
}

/* ---- acks ---------------------------------------------------------------------------------- */

/* The event index in a reply subject of the open batch ("<inbox>.<gen>.<i>"), or -1 when the
 * subject belongs to another batch or is not one of ours. @locks mu (held) */
static long ack_index(const nats_sink_t *s, const char *subj)
{
    if (!subj || strncmp(subj, s->reply, s->reply_len) != 0)
        return -1;
    const char *p = subj + s->reply_len;
    size_t i = 0;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        i = i * 10 + (size_t)(*p - '0');
        if (i >= s->n)
            return -1;
    }
    return *p ? -1 : (long)i;
}

/* Event i failed: RETRY with reason; the first reason of the batch goes into its warning.
 * @locks mu (held) */
static void fail_event(nats_sink_t *s, size_t i, const char *reason)
{
    pb_result_set(&s->results[i], PB_OUT_RETRY, reason);
    if (!s->failed++)
        snprintf(s->first_error, sizeof s->first_error, "%s", reason);
}

/* Printable bytes of a reply for an error message: at most 80, others as '?'. */
static void quote_reply(const char *data, size_t len, char *out, size_t n)
{
    size_t k = 0;
    for (size_t j = 0; j < len && j < 80 && k + 1 < n; j++)
        out[k++] = data[j] >= ' ' && data[j] < 0x7f ? data[j] : '?';
    out[k] = '\0';
}

/* Whether subject is one of the stream's (as found at connect). */
static bool stored_by_stream(const nats_sink_t *s, const char *subject)
{
    for (size_t k = 0; k < s->stream.nsubjects; k++)
        if (pb_nats_subject_matches(s->stream.subjects[k], subject))
            return true;
    return false;
}

/* Settles event i with its reply; ack is the parsed PubAck (NULL for a no-responders status).
 * @locks mu (held) */
static void settle(nats_sink_t *s, size_t i, const pb_puback_t *ack, natsMsg *msg)
{
    char reason[sizeof s->results[i].error];
    if (!ack) {
        char subj[SUBJECT_MAX];
        if (!pb_nats_render_subject(s->base.cfg, &s->events[i], subj, sizeof subj))
            subj[0] = '\0';
        if (stored_by_stream(s, subj)) {
            /* the stream stores the subject yet nobody answered: a clustered stream whose
             * leader died and that elects another; sink_await reconnects, and the connect
             * waits for the new leader instead of failing event after event */
            s->leaderless = true;
            snprintf(reason, sizeof reason, "no responders for subject \"%.120s\": stream "
                                            "\"%.60s\" has no leader now", subj,
                     s->base.cfg->nats_stream);
        } else {
            snprintf(reason, sizeof reason, "no responders for subject \"%.120s\": no jetstream "
                                            "stream stores it", subj);
        }
        fail_event(s, i, reason);
        return;
    }
    switch (ack->kind) {
    case PB_PUBACK_DUPLICATE:
        s->dups++;
        pb_result_set(&s->results[i], PB_OUT_PUBLISHED, NULL);
        s->results[i].duplicate = true;
        break;
    case PB_PUBACK_STORED:
        pb_result_set(&s->results[i], PB_OUT_PUBLISHED, NULL);
        break;
    case PB_PUBACK_ERROR:
        snprintf(reason, sizeof reason, "jetstream refused the message: %.150s (error %d)",
                 ack->text, ack->err_code ? ack->err_code : ack->code);
        fail_event(s, i, reason);
        break;
    case PB_PUBACK_INVALID: {
        char text[81];
        quote_reply(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), text, sizeof text);
        snprintf(reason, sizeof reason, "unusable reply from jetstream (%.60s): \"%s\"", ack->text,
                 text);
        fail_event(s, i, reason);
        break;
    }
    }
}

/* The ack subscription's callback (nats.c's delivery thread): settles the event the reply names.
 * Replies of another batch, and a second reply for an event, are dropped. */
static void on_ack(natsConnection *nc, natsSubscription *sub, natsMsg *msg, void *closure)
{
    (void)nc;
    (void)sub;
    nats_sink_t *s = closure;
    pb_puback_t ack;
    bool no_responders = natsMsg_IsNoResponders(msg);
    if (!no_responders) /* outside the lock: the loop's thread may be publishing */
        pb_nats_puback_parse(natsMsg_GetData(msg), (size_t)natsMsg_GetDataLength(msg), &ack);
    pthread_mutex_lock(&s->mu);
    long i = s->open ? ack_index(s, natsMsg_GetSubject(msg)) : -1;
    if (i >= 0 && s->results[i].outcome == PB_OUT_UNTRIED) {
        settle(s, (size_t)i, no_responders ? NULL : &ack, msg);
        if (++s->acked >= s->wake_at && s->waiting)
            pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    pile_add(&s->ack_pile, msg);
}

/* Waits until `acked` reaches n; false when the deadline (pb_monotonic_ms) passed first.
 * @locks mu (held) */
static bool wait_acks(nats_sink_t *s, size_t n, int64_t deadline)
{
    s->wake_at = n;
    s->waiting = true;
    while (s->acked < n && cv_wait(s, deadline))
        ;
    s->waiting = false;
    return s->acked >= n;
}

/* Closes the batch: every event still without an outcome (published, no reply) is RETRY;
 * replies still to come are dropped by on_ack. Returns how many were RETRY. @locks mu (held) */
static size_t close_batch(nats_sink_t *s)
{
    size_t unacked = 0;
    for (size_t i = 0; i < s->n; i++) {
        if (s->results[i].outcome == PB_OUT_UNTRIED) {
            pb_result_setf(&s->results[i], PB_OUT_RETRY, "no acknowledgement from jetstream within "
                                                         "%lld ms",
                           (long long)s->base.cfg->nats_ack_timeout);
            unacked++;
        }
    }
    s->open = false;
    return unacked;
}

/* Opens batch number ++gen for n events: the reply prefix and the counters. */
static void open_batch(nats_sink_t *s, const pb_event_t *events, size_t n, pb_result_t *results)
{
    pthread_mutex_lock(&s->mu);
    s->gen++;
    s->reply_len = (size_t)snprintf(s->reply, sizeof s->reply, "%s.%u.", s->inbox,
                                    (unsigned)s->gen);
    s->events = events;
    s->results = results;
    s->n = n;
    s->acked = s->dups = s->failed = 0;
    s->leaderless = false;
    s->first_error[0] = '\0';
    s->open = true;
    pthread_mutex_unlock(&s->mu);
    s->nsent = s->rejected = 0;
    s->stop_reason[0] = '\0';
}

/* A slot in the window of nats.max_pending unacknowledged messages: true at once while the
 * last count of acks seen (*acked_seen) shows one, else after refreshing it, waiting up to
 * nats.ack_timeout for an ack. So the lock is taken only when the window may be full. */
static bool window_slot(nats_sink_t *s, size_t *acked_seen)
{
    size_t window = (size_t)s->base.cfg->nats_max_pending;
    if (s->nsent - *acked_seen < window)
        return true;
    pthread_mutex_lock(&s->mu);
    int64_t deadline = pb_monotonic_ms() + s->base.cfg->nats_ack_timeout;
    bool ok = wait_acks(s, s->nsent - window + 1, deadline);
    *acked_seen = s->acked;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Publishes the batch without waiting for the acks (sink_await collects them). */
static pb_status_t sink_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
    const pb_event_t *events = b->events;
    pb_result_t *results = b->results;
    size_t n = b->n;
    const pb_config_t *cfg = snk->cfg;
    natsConnStatus cs = s->nc ? natsConnection_Status(s->nc) : NATS_CONN_STATUS_CLOSED;
    if (cs != NATS_CONN_STATUS_CONNECTED) {
        for (size_t i = 0; i < n; i++)
            if (results[i].outcome == PB_OUT_UNTRIED)
                pb_result_setf(&results[i], PB_OUT_RETRY, "nats connection %s",
                            pb_nats_conn_status_name(cs));
        return pb_fail(err, PB_TRANSIENT, "nats at %s: connection %s", s->where,
                       pb_nats_conn_status_name(cs));
    }

    open_batch(s, events, n, results);
    char *stop_reason = s->stop_reason;
    char reply[REPLY_MAX];
    memcpy(reply, s->reply, s->reply_len);
    size_t acked_seen = 0;
    s->t_start = pb_monotonic_ms();
    /* From its publish on, results[i] belongs to on_ack (under mu) until the batch closes: an
     * event reaches close_batch without an outcome only if it was published. */
    for (size_t i = 0; i < n; i++) {
        pb_result_t *res = &results[i];
        if (res->outcome != PB_OUT_UNTRIED)
            continue; /* held back by the relay */
        if (!stop_reason[0] && !window_slot(s, &acked_seen))
            snprintf(stop_reason, sizeof s->stop_reason, "stalled: no acknowledgement from "
                     "jetstream within %lld ms with %zu messages unacknowledged",
                     (long long)cfg->nats_ack_timeout, s->nsent - acked_seen);
        if (stop_reason[0]) {
            pb_result_setf(res, PB_OUT_RETRY, "not published: %s", stop_reason);
            continue;
        }
        const pb_event_t *ev = &events[i];
        char subj[SUBJECT_MAX];
        natsMsg *m;
        snprintf(reply + s->reply_len, sizeof reply - s->reply_len, "%zu", i);
        if (!pb_nats_render_subject(cfg, ev, subj, SUBJECT_MAX)) { /* checked by the relay (sink_check) */
            pb_result_setf(res, PB_OUT_REJECT, "subject longer than %d bytes", SUBJECT_MAX - 1);
            s->rejected++;
            continue;
        }
        if (!(m = build_msg(s, ev, subj, reply, res))) {
            s->rejected += res->outcome == PB_OUT_REJECT;
            continue;
        }
        natsStatus ns = natsConnection_PublishMsg(s->nc, m);
        pile_add(&s->sent_pile, m);
        if (ns == NATS_OK) {
            s->nsent++;
            continue;
        }
        /* not sent, so no reply names it; under mu all the same, as on_ack reads results[] */
        char buf[200];
        pb_nats_error_text(ns, buf, sizeof buf);
        pthread_mutex_lock(&s->mu);
        if (ns == NATS_MAX_PAYLOAD) {
            pb_result_setf(res, PB_OUT_REJECT, "message too large for the server: %s", buf);
            s->rejected++;
        } else {
            pb_result_setf(res, PB_OUT_RETRY, "publish failed: %s", buf);
            if (pb_nats_status_transient(ns))
                snprintf(stop_reason, sizeof s->stop_reason, "connection lost: %.150s", buf);
        }
        pthread_mutex_unlock(&s->mu);
    }
    pile_flush(&s->sent_pile);
    s->t_sent = pb_monotonic_ms();
    return PB_OK;
}

/* Waits for the acks of what sink_send published and settles every outcome. */
static pb_status_t sink_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
    (void)b; /* one batch in flight: the sink holds its events and results */
    const pb_config_t *cfg = snk->cfg;
    if (!s->open) /* written by this thread only */
        return PB_OK;
    if (s->rejected)
        log_debug(FAC, "%zu events of the batch cannot be published to nats (see their "
                       "last_error)", s->rejected);

    int64_t t_wait = pb_monotonic_ms();
    pthread_mutex_lock(&s->mu);
    (void)wait_acks(s, s->nsent, s->t_sent + cfg->nats_ack_timeout);
    size_t unacked = close_batch(s);
    size_t dups = s->dups, failed = s->failed;
    bool leaderless = s->leaderless;
    char first_error[sizeof s->first_error];
    memcpy(first_error, s->first_error, sizeof first_error);
    pthread_mutex_unlock(&s->mu);

    size_t nsent = s->nsent;
    if (dups)
        log_info(FAC, "%zu of %zu events were already in stream \"%s\": acknowledged as "
                      "duplicates (Nats-Msg-Id), not stored again", dups, nsent, cfg->nats_stream);
    if (failed || unacked)
        log_debug(FAC, "%zu of %zu events not acknowledged by jetstream and will be retried: %s",
                  failed + unacked, nsent, failed ? first_error : "acknowledgement timed out");
    log_debug(FAC, "batch of %zu: %zu sent in %lld ms, acks after %lld ms more; %zu duplicates, "
                   "%zu failed, %zu rejected", s->n, nsent, (long long)(s->t_sent - s->t_start),
              (long long)(pb_monotonic_ms() - t_wait), dups, failed + unacked, s->rejected);

    if (leaderless && !s->stop_reason[0])
        snprintf(s->stop_reason, sizeof s->stop_reason, "stream \"%.60s\" answers no publish: "
                 "it has no leader now (its cluster elects one)", cfg->nats_stream);
    natsConnStatus cs = natsConnection_Status(s->nc);
    if (cs != NATS_CONN_STATUS_CONNECTED || s->stop_reason[0]) {
        const char *why = s->stop_reason[0] ? s->stop_reason : pb_nats_conn_status_name(cs);
        drop_connection(s);
        return pb_fail(err, PB_TRANSIENT, "nats at %s: %s", s->where, why);
    }
    return PB_OK;
}

/* ---- idle / free / new ---------------------------------------------------------------------- */

static pb_status_t sink_idle(pb_sink_t *snk, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
    natsConnStatus cs = s->nc ? natsConnection_Status(s->nc) : NATS_CONN_STATUS_CLOSED;
    if (cs == NATS_CONN_STATUS_CONNECTED)
        return PB_OK; /* nats.c sends pings and reconnects on its own threads */
    return pb_fail(err, PB_TRANSIENT, "nats at %s: connection %s", s->where,
                   pb_nats_conn_status_name(cs));
}

static void sink_free(pb_sink_t *snk)
{
    if (!snk)
        return;
    nats_sink_t *s = (nats_sink_t *)snk;
    drop_connection(s);
    pb_nats_stream_desc_free(&s->stream);
    pb_nats_headers_free(&s->hdrs);
    pb_ce_free(s->base.ce);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    pb_nats_lib_release();
}

static const pb_sink_ops_t nats_ops = {
    .name = "nats",
    .caps = PB_SINK_DEDUPS_BY_ID,
    .max_in_flight = 1,
    .connect = sink_connect,
    .send = sink_send,
    .await = sink_await,
    .check = sink_check,
    .idle = sink_idle,
    .free = sink_free,
};

pb_status_t pb_sink_nats_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    pb_error_t why;
    if (pb_route_check_template(cfg->nats_subject, &why) != PB_OK)
        return pb_fail(err, PB_FATAL, "nats.subject: %s", why.msg);
    if (pb_nats_check_url(cfg, err) != PB_OK)
        return PB_FATAL; /* a configuration error, found before connecting */
    if (cfg->nats_max_pending < cfg->relay_batch_size)
        log_info(FAC, "nats.max_pending %lld is below relay.batch_size %lld: publishing stalls "
                      "until acknowledgements come back", (long long)cfg->nats_max_pending,
                 (long long)cfg->relay_batch_size);
    pb_ce_t *ce = NULL;
    if (pb_ce_wanted(cfg->nats_cloudevents) &&
        pb_ce_new(cfg, PB_CE_NATS, NULL, &ce, err) != PB_OK)
        return PB_FATAL;
    nats_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &nats_ops;
    s->base.cfg = cfg;
    s->base.ce = ce;
    s->max_payload = DEFAULT_MAX_PAYLOAD;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* cv_wait's deadlines are pb_monotonic_ms */
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pb_redact_nats_servers(cfg->nats_url, s->where, sizeof s->where);
    pb_nats_lib_retain();
    *out = &s->base;
    return PB_OK;
}
