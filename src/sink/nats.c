/* NATS JetStream sink (nats.c 3.4.1): the batch is published asynchronously and pipelined
 * (js_PublishMsgAsync, at most nats.max_pending unacknowledged), every message with
 * Nats-Msg-Id = event_id, then every PubAck is awaited. The stream drops a message whose id it
 * stored within its duplicate window and still acknowledges it (Duplicate = true): that counts
 * as published, so a relay that dies between the broker's ack and its commit republishes
 * without storing twice.
 *
 * Core NATS (no JetStream) is refused at connect, and so is a subject template the stream does
 * not store: a plain NATS publish would be at-most-once.
 *
 * Acks arrive on nats.c's own threads (the jsOptions PublishAsync.AckHandler). The handler maps
 * a message to its event through its Nats-Msg-Id (a per-batch hash of the event ids) and writes
 * the event's result under `mu`; the relay's thread waits on `cv` until every sent event has
 * its outcome or the deadline passes. A message nats.c gives up on (jsPubOptions.MaxWait =
 * nats.ack_timeout) reaches the handler as a NATS_TIMEOUT error: that event alone is RETRY.
 * Before publish returns, messages still unacknowledged are taken back from nats.c and the
 * batch is closed, so a late ack never touches the next batch.
 *
 * @thread loop (connect, publish, check, idle, free); ack_handler on nats.c threads, @locks mu. */
#include "sink/sink.h"

#include <pthread.h>
#include <stdarg.h>
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
#include "common/nats_conn.h"
#include "common/route.h"
#include "common/str.h"

#define FAC "sink.nats"
#define SUBJECT_MAX 512
#define DEFAULT_MAX_PAYLOAD (1024 * 1024)
#define DRAIN_MS 1000  /* after the deadline: how long in-flight ack handlers may take */
#define WAIT_SLACK_MS 2000 /* beyond ack_timeout: nats.c's own timeouts come first */
#define MSGID_HDR "Nats-Msg-Id"

typedef struct nats_sink {
    pb_sink_t base; /* first: the relay holds a pb_sink_t * */
    char where[300];
    natsConnection *nc; /* NULL while disconnected */
    jsCtx *js;
    int64_t max_payload;
    pb_nats_stream_desc_t stream;
    pb_buf_t scratch; /* header values */

    /* the open batch, shared with ack_handler; @locks mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool active;
    const pb_event_t *events;
    pb_result_t *results;
    uint32_t *slots; /* open addressing: event index + 1, 0 = empty */
    size_t nslots;   /* power of two */
    size_t pending;  /* sent, no outcome yet */
    size_t dups;     /* acknowledged as duplicates */
    size_t failed;   /* negative acks and timeouts */
    bool conn_err;   /* an ack failed because the connection is gone */
    char first_error[sizeof ((pb_result_t *)0)->error];

    /* between sink_send and sink_await (the loop's thread only) */
    bool sent_open;
    unsigned char *sent; /* per event: handed to nats.c */
    size_t n, nsent, rejected;
    int64_t t_start;
    char stop_reason[200];
} nats_sink_t;

static const pb_sink_ops_t nats_ops;

/* ---- event id -> index hash (built by the loop, read by ack_handler under mu) -------------- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static void hash_reset(nats_sink_t *s, size_t n)
{
    size_t want = 16;
    while (want < 2 * n)
        want *= 2;
    if (want > s->nslots) {
        free(s->slots);
        s->slots = pb_malloc(want * sizeof *s->slots);
        s->nslots = want;
    }
    memset(s->slots, 0, s->nslots * sizeof *s->slots);
}

static void hash_put(nats_sink_t *s, const char *id, size_t idx)
{
    size_t mask = s->nslots - 1;
    for (size_t k = (size_t)hash_str(id) & mask;; k = (k + 1) & mask) {
        if (!s->slots[k]) {
            s->slots[k] = (uint32_t)(idx + 1);
            return;
        }
    }
}

/* @locks mu */
static long hash_get(const nats_sink_t *s, const char *id)
{
    if (!id || !s->nslots)
        return -1;
    size_t mask = s->nslots - 1;
    for (size_t k = (size_t)hash_str(id) & mask; s->slots[k]; k = (k + 1) & mask) {
        size_t idx = s->slots[k] - 1;
        if (strcmp(s->events[idx].event_id, id) == 0)
            return (long)idx;
    }
    return -1;
}

/* ---- acks (nats.c threads) ------------------------------------------------------------------ */

static void describe_failure(const nats_sink_t *s, natsMsg *msg, const jsPubAckErr *pae,
                             char *buf, size_t n)
{
    const char *subj = natsMsg_GetSubject(msg);
    if (pae->Err == NATS_NO_RESPONDERS)
        snprintf(buf, n, "no jetstream stream stores subject \"%.120s\"", subj ? subj : "");
    else if (pae->Err == NATS_TIMEOUT)
        snprintf(buf, n, "no acknowledgement from jetstream within %lld ms",
                 (long long)s->base.cfg->nats_ack_timeout);
    else if (pae->ErrCode)
        snprintf(buf, n, "jetstream refused the message: %.150s (error %d)",
                 pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err), (int)pae->ErrCode);
    else
        snprintf(buf, n, "publish failed: %.150s",
                 pae->ErrText ? pae->ErrText : natsStatus_GetText(pae->Err));
}

static void ack_handler(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
    (void)js;
    nats_sink_t *s = closure;
    const char *id = NULL;
    if (natsMsgHeader_Get(msg, MSGID_HDR, &id) != NATS_OK)
        id = NULL;
    pthread_mutex_lock(&s->mu);
    long i = s->active ? hash_get(s, id) : -1;
    if (i >= 0 && s->results[i].outcome == PB_OUT_UNTRIED) {
        pb_result_t *r = &s->results[i];
        if (pa) {
            pb_result_set(r, PB_OUT_PUBLISHED, NULL);
            if (pa->Duplicate)
                s->dups++;
        } else {
            char reason[sizeof r->error];
            describe_failure(s, msg, pae, reason, sizeof reason);
            pb_result_set(r, PB_OUT_RETRY, reason);
            if (!s->failed++)
                snprintf(s->first_error, sizeof s->first_error, "%s", reason);
            if (pae->Err != NATS_TIMEOUT && pae->Err != NATS_NO_RESPONDERS &&
                pb_nats_status_transient(pae->Err))
                s->conn_err = true;
        }
        if (--s->pending == 0)
            pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    natsMsg_Destroy(msg);
}

/* ---- connection ----------------------------------------------------------------------------- */

static void drop_connection(nats_sink_t *s)
{
    if (s->js) {
        jsCtx_Destroy(s->js);
        s->js = NULL;
    }
    if (s->nc) {
        natsConnection_Destroy(s->nc);
        s->nc = NULL;
    }
}

/* The subject of ev: prefix + template (or the row's destination). False when it does not fit. */
static bool render_subject(const pb_config_t *cfg, const pb_event_t *ev, char *out, size_t n)
{
    size_t plen = strlen(cfg->nats_subject_prefix);
    if (plen >= n)
        return false;
    memcpy(out, cfg->nats_subject_prefix, plen);
    return pb_route_render(cfg->nats_subject, ev, out + plen, n - plen);
}

/* The configured subject template must land in the stream, else every publish would fail. */
static pb_status_t check_coverage(nats_sink_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    pb_event_t sample = {.event_id = "00000000-0000-0000-0000-000000000000",
                         .aggregate_type = "aggregate",
                         .aggregate_id = "1",
                         .event_type = "event.v1"};
    char subj[SUBJECT_MAX];
    if (!render_subject(cfg, &sample, subj, sizeof subj) || !pb_nats_subject_valid(subj))
        return pb_fail(err, PB_FATAL, "nats.subject_prefix + nats.subject give the invalid "
                                      "subject \"%s\" for a sample event", subj);
    for (size_t i = 0; i < s->stream.nsubjects; i++)
        if (pb_nats_subject_matches(s->stream.subjects[i], subj))
            return PB_OK;
    return pb_fail(err, PB_FATAL,
                   "subject \"%s\" (nats.subject_prefix + nats.subject for a sample event) is "
                   "not stored by %s: publishing would fail (set nats.stream_subjects or "
                   "nats.subject_prefix)", subj, s->stream.text);
}

static pb_status_t sink_connect(pb_sink_t *snk, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
    const pb_config_t *cfg = snk->cfg;
    drop_connection(s);
    pb_status_t st = pb_nats_connect(cfg, FAC, &s->nc, s->where, sizeof s->where, err);
    if (st != PB_OK)
        return st;

    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 5000;
    jo.PublishAsync.MaxPending = cfg->nats_max_pending;
    jo.PublishAsync.AckHandler = ack_handler;
    jo.PublishAsync.AckHandlerClosure = s;
    jo.PublishAsync.StallWait = cfg->nats_ack_timeout;
    natsStatus ns = natsConnection_JetStream(&s->js, s->nc, &jo);
    if (ns != NATS_OK) {
        char buf[300];
        st = pb_fail(err, PB_FATAL, "nats at %s: jetstream context: %s", s->where,
                     pb_nats_error_text(ns, buf, sizeof buf));
        goto fail;
    }
    if ((st = pb_nats_check_jetstream(s->js, s->where, err)) != PB_OK)
        goto fail;
    pb_nats_stream_desc_free(&s->stream);
    if ((st = pb_nats_ensure_stream(s->js, cfg, FAC, &s->stream, err)) != PB_OK)
        goto fail;
    if ((st = check_coverage(s, err)) != PB_OK)
        goto fail;
    s->max_payload = natsConnection_GetMaxPayload(s->nc);
    if (s->max_payload <= 0)
        s->max_payload = DEFAULT_MAX_PAYLOAD;
    log_info(FAC, "connected to nats at %s (jetstream, max_payload %lld); %s %s", s->where,
             (long long)s->max_payload,
             s->stream.created ? "created" : s->stream.updated ? "updated" : "using",
             s->stream.text);
    return PB_OK;
fail:
    drop_connection(s);
    return st;
}

/* ---- publishing ----------------------------------------------------------------------------- */

static bool headers_present(const char *json)
{
    if (!json)
        return false;
    const char *p = json + strspn(json, " \t\r\n");
    if (*p != '{')
        return *p != '\0' && strncmp(p, "null", 4) != 0;
    p++;
    p += strspn(p, " \t\r\n");
    return *p != '}';
}

static bool header_key_valid(const char *k)
{
    if (!*k)
        return false;
    for (const unsigned char *p = (const unsigned char *)k; *p; p++)
        if (*p <= ' ' || *p >= 0x7f || *p == ':')
            return false;
    return true;
}

static bool own_key(const char *k)
{
    return strcmp(k, "event_type") == 0 || strcmp(k, "aggregate_type") == 0 ||
           strcmp(k, "aggregate_id") == 0 || strncasecmp(k, "Nats-", 5) == 0;
}

/* The event's JSON headers as NATS headers: strings as they are (JSON-encoded when they hold a
 * line break, which a NATS header cannot), anything else as its compact JSON text. */
static bool add_user_headers(nats_sink_t *s, natsMsg *m, const pb_event_t *ev, pb_result_t *res)
{
    if (!headers_present(ev->headers))
        return true;
    json_error_t jerr;
    json_t *root = json_loads(ev->headers, JSON_DECODE_ANY, &jerr);
    if (!root) {
        pb_result_setf(res, PB_OUT_REJECT, "headers are not valid JSON: %s", jerr.text);
        return false;
    }
    if (json_is_null(root)) {
        json_decref(root);
        return true;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        pb_result_set(res, PB_OUT_REJECT, "headers must be a JSON object");
        return false;
    }
    const char *key;
    json_t *v;
    bool ok = true;
    json_object_foreach(root, key, v) {
        if (own_key(key))
            continue; /* ours, from the row, win; Nats-* would change JetStream's handling */
        if (!header_key_valid(key)) {
            pb_result_setf(res, PB_OUT_REJECT, "header name \"%.60s\" is not a valid NATS header "
                                            "name (printable ASCII without ':' or blanks)", key);
            ok = false;
            break;
        }
        pb_buf_reset(&s->scratch);
        const char *val;
        if (json_is_string(v) && !strpbrk(json_string_value(v), "\r\n") &&
            strlen(json_string_value(v)) == json_string_length(v)) {
            val = json_string_value(v);
        } else {
            char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
            if (!txt) {
                pb_result_set(res, PB_OUT_RETRY, "out of memory building message headers");
                ok = false;
                break;
            }
            pb_buf_puts(&s->scratch, txt);
            free(txt);
            val = s->scratch.data;
        }
        natsStatus ns = natsMsgHeader_Set(m, key, val);
        if (ns != NATS_OK) {
            pb_result_setf(res, PB_OUT_REJECT, "header \"%.60s\": %s", key, natsStatus_GetText(ns));
            ok = false;
            break;
        }
    }
    json_decref(root);
    return ok;
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
    if (!render_subject(cfg, ev, subj, SUBJECT_MAX)) {
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

/* A message for ev with its headers; NULL with *res set when it cannot be built. */
static natsMsg *build_msg(nats_sink_t *s, const pb_event_t *ev, const char *subj, pb_result_t *res)
{
    natsMsg *m = NULL;
    natsStatus ns = natsMsg_Create(&m, subj, NULL, ev->payload, (int)ev->payload_len);
    if (ns != NATS_OK) {
        pb_result_setf(res, ns == NATS_NO_MEMORY ? PB_OUT_RETRY : PB_OUT_REJECT,
                    "cannot build the message: %s", natsStatus_GetText(ns));
        return NULL;
    }
    static const char *const keys[3] = {"event_type", "aggregate_type", "aggregate_id"};
    const char *vals[3] = {ev->event_type, ev->aggregate_type, ev->aggregate_id};
    for (int k = 0; k < 3; k++) {
        if (!vals[k] || !*vals[k])
            continue;
        if (strpbrk(vals[k], "\r\n")) {
            pb_result_setf(res, PB_OUT_REJECT, "%s contains a line break", keys[k]);
            natsMsg_Destroy(m);
            return NULL;
        }
        if ((ns = natsMsgHeader_Set(m, keys[k], vals[k])) != NATS_OK) {
            pb_result_setf(res, PB_OUT_REJECT, "header %s: %s", keys[k], natsStatus_GetText(ns));
            natsMsg_Destroy(m);
            return NULL;
        }
    }
    if (!add_user_headers(s, m, ev, res)) {
        natsMsg_Destroy(m);
        return NULL;
    }
    return m;
}

static void deadline_ts(struct timespec *ts, int64_t ms_from_now)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += (time_t)(ms_from_now / 1000);
    ts->tv_nsec += (long)(ms_from_now % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits until every sent event has its outcome or the deadline passed. @locks mu (held) */
static void wait_acks(nats_sink_t *s, int64_t ms)
{
    struct timespec ts;
    deadline_ts(&ts, ms);
    while (s->pending > 0) {
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) != 0 && s->pending > 0) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec > ts.tv_sec || (now.tv_sec == ts.tv_sec && now.tv_nsec >= ts.tv_nsec))
                break;
        }
    }
}

/* Closes the batch: messages nats.c still tracks are taken back (no handler will see them),
 * handlers already running are waited for, and every sent event without an outcome is RETRY. */
static size_t close_batch(nats_sink_t *s, size_t n, const unsigned char *sent)
{
    pthread_mutex_lock(&s->mu);
    bool left = s->pending > 0;
    pthread_mutex_unlock(&s->mu);
    if (left && s->js) {
        natsMsgList list = {0};
        if (js_PublishAsyncGetPendingList(&list, s->js) == NATS_OK)
            natsMsgList_Destroy(&list);
        jsPubOptions po;
        jsPubOptions_Init(&po);
        po.MaxWait = DRAIN_MS;
        (void)js_PublishAsyncComplete(s->js, &po); /* handlers in progress finish */
    }
    pthread_mutex_lock(&s->mu);
    size_t unacked = 0;
    for (size_t i = 0; i < n; i++) {
        if (sent[i] && s->results[i].outcome == PB_OUT_UNTRIED) {
            pb_result_setf(&s->results[i], PB_OUT_RETRY, "no acknowledgement from jetstream within "
                                                      "%lld ms",
                        (long long)s->base.cfg->nats_ack_timeout);
            unacked++;
        }
    }
    s->active = false;
    s->pending = 0;
    pthread_mutex_unlock(&s->mu);
    return unacked;
}

/* Publishes the batch without waiting for the acks (sink_await collects them). */
static pb_status_t sink_send(pb_sink_t *snk, const pb_event_t *events, size_t n,
                             pb_result_t *results, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
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

    unsigned char *sent = calloc(n ? n : 1, 1);
    if (!sent) {
        fputs("postbox: out of memory\n", stderr);
        abort();
    }
    pthread_mutex_lock(&s->mu);
    hash_reset(s, n);
    s->events = events;
    s->results = results;
    s->pending = 0;
    s->dups = 0;
    s->failed = 0;
    s->conn_err = false;
    s->first_error[0] = '\0';
    s->active = true;
    pthread_mutex_unlock(&s->mu);

    jsPubOptions po;
    jsPubOptions_Init(&po);
    po.MaxWait = cfg->nats_ack_timeout;
    size_t nsent = 0, rejected = 0;
    int64_t t_start = pb_monotonic_ms();
    char *stop_reason = s->stop_reason;
    stop_reason[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        pb_result_t *res = &results[i];
        if (res->outcome != PB_OUT_UNTRIED)
            continue; /* held back by the relay */
        if (stop_reason[0]) {
            pb_result_setf(res, PB_OUT_RETRY, "not published: %s", stop_reason);
            continue;
        }
        const pb_event_t *ev = &events[i];
        char subj[SUBJECT_MAX];
        natsMsg *m;
        if (!check_event(s, ev, subj, res) || !(m = build_msg(s, ev, subj, res))) {
            rejected += res->outcome == PB_OUT_REJECT;
            continue;
        }
        po.MsgId = ev->event_id;
        pthread_mutex_lock(&s->mu);
        hash_put(s, ev->event_id, i);
        s->pending++;
        sent[i] = 1;
        pthread_mutex_unlock(&s->mu);
        natsStatus ns = js_PublishMsgAsync(s->js, &m, &po);
        if (ns == NATS_OK) {
            nsent++;
            continue;
        }
        natsMsg_Destroy(m); /* still ours when the publish failed */
        char buf[200];
        pb_nats_error_text(ns, buf, sizeof buf);
        pthread_mutex_lock(&s->mu);
        sent[i] = 0;
        s->pending--;
        if (ns == NATS_MAX_PAYLOAD)
            pb_result_setf(res, PB_OUT_REJECT, "message too large for the server: %s", buf);
        else
            pb_result_setf(res, PB_OUT_RETRY, "publish failed: %s", buf);
        pthread_mutex_unlock(&s->mu);
        if (ns == NATS_MAX_PAYLOAD) {
            rejected++;
        } else if (ns == NATS_TIMEOUT) {
            snprintf(stop_reason, sizeof s->stop_reason, "stalled: %.150s", buf);
        } else if (pb_nats_status_transient(ns)) {
            snprintf(stop_reason, sizeof s->stop_reason, "connection lost: %.150s", buf);
        }
    }
    s->sent_open = true;
    s->sent = sent;
    s->n = n;
    s->nsent = nsent;
    s->rejected = rejected;
    s->t_start = t_start;
    return PB_OK;
}

/* Waits for the acks of what sink_send published and settles every outcome. */
static pb_status_t sink_await(pb_sink_t *snk, pb_error_t *err)
{
    nats_sink_t *s = (nats_sink_t *)snk;
    const pb_config_t *cfg = snk->cfg;
    if (!s->sent_open)
        return PB_OK;
    s->sent_open = false;
    unsigned char *sent = s->sent;
    size_t n = s->n, nsent = s->nsent, rejected = s->rejected;
    int64_t t_start = s->t_start;
    const char *stop_reason = s->stop_reason;
    if (rejected)
        log_warn(FAC, "%zu events of the batch cannot be published to nats (see their "
                      "last_error)", rejected);

    int64_t t_sent = pb_monotonic_ms();
    pthread_mutex_lock(&s->mu);
    wait_acks(s, cfg->nats_ack_timeout + WAIT_SLACK_MS);
    size_t dups = s->dups, failed = s->failed;
    bool conn_err = s->conn_err;
    char first_error[sizeof s->first_error];
    memcpy(first_error, s->first_error, sizeof first_error);
    pthread_mutex_unlock(&s->mu);
    size_t unacked = close_batch(s, n, sent);
    free(sent);
    s->sent = NULL;

    if (dups)
        log_info(FAC, "%zu of %zu events were already in stream \"%s\": acknowledged as "
                      "duplicates (Nats-Msg-Id), not stored again", dups, nsent, cfg->nats_stream);
    if (failed || unacked)
        log_warn(FAC, "%zu of %zu events not acknowledged by jetstream and will be retried: %s",
                 failed + unacked, nsent, failed ? first_error : "acknowledgement timed out");
    log_debug(FAC, "batch of %zu: %zu sent in %lld ms, acks after %lld ms more; %zu duplicates, "
                   "%zu failed, %zu rejected", n, nsent, (long long)(t_sent - t_start),
              (long long)(pb_monotonic_ms() - t_sent), dups, failed + unacked, rejected);

    natsConnStatus cs = natsConnection_Status(s->nc);
    if (cs != NATS_CONN_STATUS_CONNECTED || conn_err || stop_reason[0]) {
        const char *why = stop_reason[0] ? stop_reason : pb_nats_conn_status_name(cs);
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
    free(s->sent);
    pb_nats_stream_desc_free(&s->stream);
    pb_buf_free(&s->scratch);
    free(s->slots);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    pb_nats_lib_release();
}

static pb_status_t sink_publish(pb_sink_t *snk, const pb_event_t *events, size_t n,
                                pb_result_t *results, pb_error_t *err)
{
    pb_status_t st = sink_send(snk, events, n, results, err);
    return st == PB_OK ? sink_await(snk, err) : st;
}

static const pb_sink_ops_t nats_ops = {
    .name = "nats",
    .connect = sink_connect,
    .publish = sink_publish,
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
    if (!*cfg->nats_url)
        return pb_fail(err, PB_FATAL, "nats.url is empty");
    if (cfg->nats_max_pending < cfg->relay_batch_size)
        log_info(FAC, "nats.max_pending %lld is below relay.batch_size %lld: publishing stalls "
                      "until acknowledgements come back", (long long)cfg->nats_max_pending,
                 (long long)cfg->relay_batch_size);
    nats_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &nats_ops;
    s->base.cfg = cfg;
    s->max_payload = DEFAULT_MAX_PAYLOAD;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    pb_redact_secret(cfg->nats_url, s->where, sizeof s->where);
    pb_nats_lib_retain();
    *out = &s->base;
    return PB_OK;
}
