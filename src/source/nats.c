/* NATS JetStream source (nats.c 3.4.1): one durable pull consumer on the stream, explicit acks.
 *
 * receive pulls in two steps so that a trickle is not delayed and a flood comes in whole
 * batches: first what is available at once (no_wait), else a wait of up to wait_ms for one
 * message; then, once the first is there, up to batch_wait_ms for the rest of the batch.
 * The pull requests are our own ($JS.API.CONSUMER.MSG.NEXT with a reply subject per request
 * on a plain subscription), not natsSubscription_Fetch: in nats.c 3.4.1 a Fetch that finds
 * messages left over from an earlier, timed-out request can write past its array (the loop
 * compares the total count with the reduced batch of the new request). Here a late message of
 * an earlier request is simply taken with the next batch, and the status (404/408) that ends
 * a request is recognized by its reply subject, so a stale one never cuts a wait short.
 *
 * pb_message_t.tag is a sequence number of this source (never reused, also not across
 * reconnects); the natsMsg stays alive in a tag-ordered table until it is settled (the
 * consumer may hold a failed message unsettled across later receives and retry it when its
 * backoff is over). While a message is held, receive sends "in progress" for it every
 * ack_wait/4 (and waits no longer than until the next one is due), so the server does not
 * redeliver it behind the consumer's back. Settling: done is +ACK, retry later a nak with a
 * delay of a second (the consumer gives back what it cannot hold now), dead +TERM (the server
 * never redelivers it and publishes a MSG_TERMINATED advisory). Settled messages are destroyed
 * at the next receive, so the strings of the last batch stay valid as promised in source.h.
 *
 * The message id is the Nats-Msg-Id header (or consume.message_id_header), the type the
 * header "event_type"; the headers JSON is an object of every header (a string, or an array of
 * strings for a repeated header), except Nats-Msg-Id.
 *
 * @thread loop: the consumer's thread only. */
#include "source/source.h"
#include "source/tags.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "common/clock.h"
#include "common/event.h"
#include "common/log.h"
#include "broker/nats/conn.h"
#include "common/str.h"
#include "source/amqp_headers.h"

#define FAC "source.nats"
/* room for a message's subject, headers and reply beyond the server's max_payload */
#define MAX_BYTES_SLACK 65536
#define MSGID_HDR "Nats-Msg-Id"
#define TYPE_HDR "event_type"
#define AGGREGATE_TYPE_HDR "aggregate_type"
#define AGGREGATE_ID_HDR "aggregate_id"
#define NS_PER_MS INT64_C(1000000)
#define API_WAIT_MS 5000
#define RETRY_DELAY_MS 1000

typedef struct nats_source {
    pb_source_t base; /* first: the consumer holds a pb_source_t * */
    char where[300];
    char durable[128];
    natsConnection *nc; /* NULL while disconnected */
    jsCtx *js;
    natsSubscription *sub; /* on "<inbox>.*": pulled messages and request statuses */
    natsInbox *inbox;
    char next_subj[300];   /* $JS.API.CONSUMER.MSG.NEXT.<stream>.<durable> */
    uint64_t req_seq;
    pb_nats_stream_desc_t stream;
    pb_tags_t tags; /* outstanding messages (item: the natsMsg; at_ms: delivery or last
                     * "in progress") */
    natsMsg **done; /* settled, destroyed at the next receive */
    size_t ndone, capdone;
    pb_buf_t text;  /* headers JSON and re-encoded ids of the current batch */
} nats_source_t;

static const pb_source_ops_t nats_source_ops;

/* ---- the outstanding table ------------------------------------------------------------------ */

static void free_done(nats_source_t *s)
{
    for (size_t i = 0; i < s->ndone; i++)
        natsMsg_Destroy(s->done[i]);
    s->ndone = 0;
}

/* Acknowledgement protocol of JetStream: a publish to the message's reply subject
 * ($JS.ACK...): "+ACK", "-NAK" (redeliver now), "+WPI" (in progress: restart ack_wait). */
static natsStatus reply_ack(nats_source_t *s, natsMsg *m, const char *what)
{
    const char *reply = natsMsg_GetReply(m);
    if (!reply || strncmp(reply, "$JS.ACK.", 8) != 0)
        return NATS_OK; /* not a JetStream message: nothing to acknowledge */
    return natsConnection_PublishString(s->nc, reply, what);
}

/* e is settled: its message is destroyed at the next receive. */
static void retire(nats_source_t *s, pb_tag_entry_t *e)
{
    if (s->ndone == s->capdone) {
        s->capdone = s->capdone ? s->capdone * 2 : 256;
        s->done = pb_realloc(s->done, s->capdone * sizeof *s->done);
    }
    s->done[s->ndone++] = e->item;
    pb_tags_settle(&s->tags, e);
}

/* Forgets every outstanding message: naked when the connection still works (redelivered at
 * once), else left to the server's ack_wait. */
static void abandon_all(nats_source_t *s, bool nak)
{
    size_t naked = 0;
    for (pb_tag_entry_t *e = pb_tags_first(&s->tags); e; e = pb_tags_next(&s->tags, e)) {
        if (nak && reply_ack(s, e->item, "-NAK") == NATS_OK)
            naked++;
        retire(s, e);
    }
    pb_tags_clear(&s->tags);
    if (naked)
        log_info(FAC, "gave %zu unacknowledged messages back to the stream", naked);
    free_done(s);
}

/* ---- connection ----------------------------------------------------------------------------- */

static void drop_connection(nats_source_t *s)
{
    bool up = s->nc && natsConnection_Status(s->nc) == NATS_CONN_STATUS_CONNECTED;
    abandon_all(s, up);
    if (up)
        (void)natsConnection_FlushTimeout(s->nc, 1000); /* the naks */
    if (s->sub) {
        natsSubscription_Destroy(s->sub);
        s->sub = NULL;
    }
    natsInbox_Destroy(s->inbox);
    s->inbox = NULL;
    if (s->js) {
        jsCtx_Destroy(s->js);
        s->js = NULL;
    }
    if (s->nc) {
        natsConnection_Destroy(s->nc);
        s->nc = NULL;
    }
}

static pb_status_t lost(nats_source_t *s, pb_error_t *err, const char *fmt, natsStatus ns)
{
    char buf[300];
    pb_nats_error_text(ns, buf, sizeof buf);
    natsConnStatus cs = s->nc ? natsConnection_Status(s->nc) : NATS_CONN_STATUS_CLOSED;
    pb_fail(err, PB_TRANSIENT, "nats at %s: %s: %s (connection %s)", s->where, fmt, buf,
            pb_nats_conn_status_name(cs));
    drop_connection(s);
    return PB_TRANSIENT;
}

static void consumer_config(const nats_source_t *s, jsConsumerConfig *cc)
{
    const pb_config_t *cfg = s->base.cfg;
    jsConsumerConfig_Init(cc);
    cc->Durable = s->durable;
    cc->Description = "postbox consume";
    cc->DeliverPolicy = js_DeliverAll;
    cc->AckPolicy = js_AckExplicit;
    cc->AckWait = cfg->nats_ack_wait * NS_PER_MS;
    cc->MaxDeliver = cfg->nats_max_deliver > 0 ? cfg->nats_max_deliver : -1;
    cc->MaxAckPending = cfg->nats_max_ack_pending;
    cc->FilterSubject = *cfg->nats_filter_subject ? cfg->nats_filter_subject : NULL;
    cc->ReplayPolicy = js_ReplayInstant;
}

static bool same_str(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

/* Creates the durable pull consumer, or brings an existing one to the configured settings. */
static pb_status_t ensure_consumer(nats_source_t *s, pb_error_t *err)
{
    const pb_config_t *cfg = s->base.cfg;
    jsConsumerConfig want;
    consumer_config(s, &want);
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    char buf[300];
    natsStatus ns = js_GetConsumerInfo(&ci, s->js, cfg->nats_stream, s->durable, NULL, &jerr);
    if (ns == NATS_NOT_FOUND || jerr == JSConsumerNotFoundErr) {
        ns = js_AddConsumer(&ci, s->js, cfg->nats_stream, &want, NULL, &jerr);
        if (ns != NATS_OK)
            return pb_fail(err, pb_nats_js_transient(ns, jerr) ? PB_TRANSIENT : PB_FATAL,
                           "creating durable consumer \"%s\" on stream \"%s\": %s",
                           s->durable, cfg->nats_stream, pb_nats_error_text(ns, buf, sizeof buf));
        log_info(FAC, "created durable pull consumer \"%s\" on stream \"%s\"", s->durable,
                 cfg->nats_stream);
        jsConsumerInfo_Destroy(ci);
        return PB_OK;
    }
    if (ns != NATS_OK)
        return pb_fail(err, pb_nats_js_transient(ns, jerr) ? PB_TRANSIENT : PB_FATAL,
                       "looking up durable consumer \"%s\" on stream \"%s\": %s", s->durable,
                       cfg->nats_stream, pb_nats_error_text(ns, buf, sizeof buf));
    const jsConsumerConfig *have = ci->Config;
    pb_status_t st = PB_OK;
    if (have->DeliverSubject && *have->DeliverSubject) {
        st = pb_fail(err, PB_FATAL, "durable consumer \"%s\" on stream \"%s\" is a push consumer: "
                                    "postbox needs a pull consumer (delete it or set "
                                    "nats.durable)", s->durable, cfg->nats_stream);
    } else if (have->AckPolicy != js_AckExplicit) {
        st = pb_fail(err, PB_FATAL, "durable consumer \"%s\" on stream \"%s\" does not use "
                                    "explicit acks (delete it or set nats.durable)", s->durable,
                     cfg->nats_stream);
    } else if (have->AckWait != want.AckWait || have->MaxDeliver != want.MaxDeliver ||
               have->MaxAckPending != want.MaxAckPending ||
               !same_str(have->FilterSubject, want.FilterSubject)) {
        want.DeliverPolicy = have->DeliverPolicy; /* cannot change */
        want.OptStartSeq = have->OptStartSeq;
        want.OptStartTime = have->OptStartTime;
        jsConsumerInfo *upd = NULL;
        ns = js_UpdateConsumer(&upd, s->js, cfg->nats_stream, &want, NULL, &jerr);
        if (ns != NATS_OK)
            st = pb_fail(err, pb_nats_js_transient(ns, jerr) ? PB_TRANSIENT : PB_FATAL,
                         "durable consumer \"%s\" on stream \"%s\" has other settings and cannot "
                         "be updated: %s (delete it, or set nats.durable)", s->durable,
                         cfg->nats_stream, pb_nats_error_text(ns, buf, sizeof buf));
        else
            log_info(FAC, "updated durable consumer \"%s\" on stream \"%s\" to ack_wait %lld ms, "
                          "max_deliver %lld, max_ack_pending %lld", s->durable, cfg->nats_stream,
                     (long long)cfg->nats_ack_wait, (long long)cfg->nats_max_deliver,
                     (long long)cfg->nats_max_ack_pending);
        jsConsumerInfo_Destroy(upd);
    }
    jsConsumerInfo_Destroy(ci);
    return st;
}

static pb_status_t src_connect(pb_source_t *src, pb_error_t *err)
{
    nats_source_t *s = (nats_source_t *)src;
    const pb_config_t *cfg = src->cfg;
    drop_connection(s);
    pb_status_t st = pb_nats_connect(cfg, FAC, &s->nc, s->where, sizeof s->where, err);
    if (st != PB_OK)
        return st;
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = API_WAIT_MS;
    char buf[300];
    natsStatus ns = natsConnection_JetStream(&s->js, s->nc, &jo);
    if (ns != NATS_OK) {
        st = pb_fail(err, PB_FATAL, "nats at %s: jetstream context: %s", s->where,
                     pb_nats_error_text(ns, buf, sizeof buf));
        goto fail;
    }
    if ((st = pb_nats_check_jetstream(s->js, s->where, err)) != PB_OK)
        goto fail;
    pb_nats_stream_desc_free(&s->stream);
    if ((st = pb_nats_ensure_stream(s->js, cfg, FAC, &s->stream, err)) != PB_OK)
        goto fail;
    if ((st = ensure_consumer(s, err)) != PB_OK)
        goto fail;

    char wild[128];
    if ((ns = natsInbox_Create(&s->inbox)) == NATS_OK) {
        snprintf(wild, sizeof wild, "%s.*", s->inbox);
        ns = natsConnection_SubscribeSync(&s->sub, s->nc, wild);
    }
    if (ns != NATS_OK) {
        st = pb_fail(err, pb_nats_status_transient(ns) ? PB_TRANSIENT : PB_FATAL,
                     "nats at %s: subscribing to the pull replies: %s", s->where,
                     pb_nats_error_text(ns, buf, sizeof buf));
        goto fail;
    }
    snprintf(s->next_subj, sizeof s->next_subj, "$JS.API.CONSUMER.MSG.NEXT.%s.%s",
             cfg->nats_stream, s->durable);
    (void)natsSubscription_SetPendingLimits(s->sub, -1, -1);
    log_info(FAC, "connected to nats at %s; durable pull consumer \"%s\" on %s (ack_wait %lld ms, "
                  "max_deliver %s%lld)", s->where, s->durable, s->stream.text,
             (long long)cfg->nats_ack_wait, cfg->nats_max_deliver > 0 ? "" : "unlimited/",
             (long long)cfg->nats_max_deliver);
    return PB_OK;
fail:
    drop_connection(s);
    return st;
}

/* ---- receiving ------------------------------------------------------------------------------ */

/* How often a held message gets "in progress": well within ack_wait, as a receive may come
 * late by a batch's handling time. */
static int64_t keep_alive_every(const nats_source_t *s)
{
    return s->base.cfg->nats_ack_wait / 4;
}

/* Keeps held messages from being redelivered: "in progress" every keep_alive_every. */
static pb_status_t keep_alive(nats_source_t *s, int64_t now, pb_error_t *err)
{
    int64_t every = keep_alive_every(s);
    for (pb_tag_entry_t *e = pb_tags_first(&s->tags); e; e = pb_tags_next(&s->tags, e)) {
        if (now - e->at_ms < every)
            continue;
        natsStatus ns = reply_ack(s, e->item, "+WPI");
        if (ns != NATS_OK)
            return lost(s, err, "sending in-progress for a held message", ns);
        e->at_ms = now;
    }
    return PB_OK;
}

/* Sends a pull request for up to batch messages: no_wait when wait_ms is 0, else the server
 * holds it for wait_ms. *reply gets its reply subject (statuses come back on it). */
static natsStatus pull(nats_source_t *s, size_t batch, int64_t wait_ms, char *reply, size_t n)
{
    char body[160];
    snprintf(reply, n, "%s.%llu", s->inbox, (unsigned long long)++s->req_seq);
    /* the server sends at most max_bytes (consume.batch_bytes), but never less than one
     * message can take: a request that cannot hold the next message would never get it */
    int64_t max_bytes = s->base.cfg->consume_batch_bytes;
    int64_t one = natsConnection_GetMaxPayload(s->nc) + MAX_BYTES_SLACK;
    if (max_bytes < one)
        max_bytes = one;
    if (wait_ms > 0)
        snprintf(body, sizeof body, "{\"batch\":%zu,\"max_bytes\":%lld,\"expires\":%lld}",
                 batch, (long long)max_bytes, (long long)(wait_ms * NS_PER_MS));
    else
        snprintf(body, sizeof body, "{\"batch\":%zu,\"max_bytes\":%lld,\"no_wait\":true}",
                 batch, (long long)max_bytes);
    return natsConnection_PublishRequestString(s->nc, s->next_subj, reply, body);
}

/* Status of a message without payload ("404", "408", "409", "100"), else NULL. */
static const char *status_of(natsMsg *m)
{
    const char *v = NULL;
    if (natsMsg_GetDataLength(m) > 0)
        return NULL;
    if (natsMsgHeader_Get(m, "Status", &v) != NATS_OK || !v)
        return NULL;
    return v;
}

/* Takes messages into got (up to max) until the request `reply` ends (its status arrives) or
 * deadline_ms passes. Messages of earlier requests are taken too. */
static natsStatus collect(nats_source_t *s, natsMsg **got, size_t *ngot, size_t max,
                          const char *reply, int64_t deadline_ms)
{
    while (*ngot < max) {
        int64_t left = deadline_ms - pb_monotonic_ms();
        natsMsg *m = NULL;
        natsStatus ns = natsSubscription_NextMsg(&m, s->sub, left > 0 ? left : 0);
        if (ns == NATS_TIMEOUT)
            return NATS_OK;
        if (ns != NATS_OK)
            return ns;
        const char *sv = status_of(m);
        if (!sv) {
            got[(*ngot)++] = m;
            continue;
        }
        char st[4];
        snprintf(st, sizeof st, "%s", sv);
        bool mine = strcmp(natsMsg_GetSubject(m), reply) == 0;
        /* 409 "Message Size Exceeds MaxBytes" ends a request that is full (see pull) */
        const char *desc = NULL;
        if (natsMsgHeader_Get(m, "Description", &desc) != NATS_OK)
            desc = NULL;
        bool full = !strcmp(st, "409") && desc && strstr(desc, "MaxBytes");
        bool normal = !strcmp(st, "100") || !strcmp(st, "404") || !strcmp(st, "408") || full;
        if (!normal) {
            log_warn(FAC, "pull request for consumer \"%s\" ended with status %s %s", s->durable,
                     st, desc ? desc : "");
        }
        natsMsg_Destroy(m);
        if (!mine || !strcmp(st, "100"))
            continue;
        /* 409 (e.g. consumer deleted): reconnect, which recreates the consumer */
        return !normal && !strcmp(st, "409") ? NATS_ERR : NATS_OK;
    }
    return NATS_OK;
}

static size_t text_offset(nats_source_t *s)
{
    return s->text.len;
}

/* Appends str (NUL-terminated) as a string that PostgreSQL text and jsonb accept: as is when it
 * is UTF-8, else "\x" and its bytes in hex. With json, as a JSON string literal. */
static void put_text(nats_source_t *s, const char *str, bool json)
{
    size_t len = strlen(str);
    if (pb_utf8_valid(str, len)) {
        if (json)
            pb_buf_append_json_string(&s->text, str);
        else
            pb_buf_append(&s->text, str, len);
        return;
    }
    static const char digits[] = "0123456789abcdef";
    if (json)
        pb_buf_putc(&s->text, '"');
    pb_buf_puts(&s->text, json ? "\\\\x" : "\\x");
    for (size_t i = 0; i < len; i++) {
        pb_buf_putc(&s->text, digits[(unsigned char)str[i] >> 4]);
        pb_buf_putc(&s->text, digits[(unsigned char)str[i] & 0x0f]);
    }
    if (json)
        pb_buf_putc(&s->text, '"');
}

/* Where a message's strings start in s->text (pointers are set once the batch is complete,
 * because the buffer may move while it grows). SIZE_MAX: none / points into the message. */
typedef struct offsets {
    size_t headers, message_id, type, aggregate_type, aggregate_id, subject;
} offsets_t;

static void take_message(nats_source_t *s, natsMsg *m, pb_message_t *out, offsets_t *off)
{
    const pb_config_t *cfg = s->base.cfg;
    memset(out, 0, sizeof *out);
    out->routing_key = natsMsg_GetSubject(m);
    out->exchange = cfg->nats_stream;
    /* the subject is written to inbox_dead as text: hex when it is not UTF-8 (see put_text) */
    off->subject = SIZE_MAX;
    if (out->routing_key && !pb_utf8_valid(out->routing_key, strlen(out->routing_key))) {
        off->subject = text_offset(s);
        put_text(s, out->routing_key, false);
        pb_buf_putc(&s->text, '\0');
    }
    out->body = natsMsg_GetData(m);
    out->body_len = (size_t)natsMsg_GetDataLength(m);
    if (!out->body)
        out->body = "";
    if (out->body_len > (uint64_t)cfg->consume_max_message_size) { /* the inbox dead-letters it */
        out->body_dropped = out->body_len;
        out->body = "";
        out->body_len = 0;
    }

    jsMsgMetaData *meta = NULL;
    if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
        out->redelivered = meta->NumDelivered > 1;
        out->timestamp = meta->Timestamp / 1000000000;
        jsMsgMetaData_Destroy(meta);
    }

    off->message_id = off->type = SIZE_MAX;
    const char *idkey = *cfg->consume_message_id_header ? cfg->consume_message_id_header : MSGID_HDR;
    const char *v = NULL;
    if (natsMsgHeader_Get(m, idkey, &v) == NATS_OK && v && *v) {
        off->message_id = text_offset(s);
        put_text(s, v, false);
        pb_buf_putc(&s->text, '\0');
    }
    v = NULL;
    if (natsMsgHeader_Get(m, TYPE_HDR, &v) == NATS_OK && v && *v) {
        off->type = text_offset(s);
        put_text(s, v, false);
        pb_buf_putc(&s->text, '\0');
    }
    v = NULL;
    off->aggregate_type = SIZE_MAX;
    if (natsMsgHeader_Get(m, AGGREGATE_TYPE_HDR, &v) == NATS_OK && v && *v) {
        off->aggregate_type = text_offset(s);
        put_text(s, v, false);
        pb_buf_putc(&s->text, '\0');
    }
    v = NULL;
    if (natsMsgHeader_Get(m, PB_SEQUENCE_HEADER, &v) == NATS_OK && v)
        out->sequence = pb_source_sequence(v, strlen(v));
    v = NULL;
    off->aggregate_id = SIZE_MAX;
    if (natsMsgHeader_Get(m, AGGREGATE_ID_HDR, &v) == NATS_OK && v && *v) {
        off->aggregate_id = text_offset(s);
        put_text(s, v, false);
        pb_buf_putc(&s->text, '\0');
    }

    off->headers = text_offset(s);
    const char **keys = NULL;
    int nkeys = 0;
    pb_buf_putc(&s->text, '{');
    if (natsMsgHeader_Keys(m, &keys, &nkeys) == NATS_OK) {
        bool first = true;
        for (int k = 0; k < nkeys; k++) {
            if (strcmp(keys[k], MSGID_HDR) == 0)
                continue;
            const char **vals = NULL;
            int nvals = 0;
            if (natsMsgHeader_Values(m, keys[k], &vals, &nvals) != NATS_OK || nvals <= 0) {
                free((void *)vals);
                continue;
            }
            if (!first)
                pb_buf_putc(&s->text, ',');
            first = false;
            put_text(s, keys[k], true);
            pb_buf_putc(&s->text, ':');
            if (nvals == 1) {
                put_text(s, vals[0], true);
            } else {
                pb_buf_putc(&s->text, '[');
                for (int j = 0; j < nvals; j++) {
                    if (j)
                        pb_buf_putc(&s->text, ',');
                    put_text(s, vals[j], true);
                }
                pb_buf_putc(&s->text, ']');
            }
            free((void *)vals);
        }
        free((void *)keys);
    }
    pb_buf_puts(&s->text, "}");
    pb_buf_putc(&s->text, '\0');
}

static pb_status_t src_receive(pb_source_t *src, pb_message_t *msgs, size_t max, int64_t wait_ms,
                               int64_t batch_wait_ms, size_t *n, pb_error_t *err)
{
    nats_source_t *s = (nats_source_t *)src;
    *n = 0;
    free_done(s); /* the previous batch's strings go now */
    pb_buf_reset(&s->text);
    if (!s->nc || !s->sub)
        return pb_fail(err, PB_TRANSIENT, "not connected to nats at %s", s->where);
    natsConnStatus cs = natsConnection_Status(s->nc);
    if (cs != NATS_CONN_STATUS_CONNECTED) {
        pb_fail(err, PB_TRANSIENT, "nats at %s: connection %s", s->where,
                pb_nats_conn_status_name(cs));
        drop_connection(s);
        return PB_TRANSIENT;
    }
    int64_t now = pb_monotonic_ms();
    pb_status_t st = keep_alive(s, now, err);
    if (st != PB_OK)
        return st;
    if (max == 0)
        return PB_OK;
    /* back in time for the next "in progress" of a held message */
    for (pb_tag_entry_t *e = pb_tags_first(&s->tags); e; e = pb_tags_next(&s->tags, e))
        if (e->at_ms + keep_alive_every(s) - now < wait_ms)
            wait_ms = e->at_ms + keep_alive_every(s) - now;
    if (wait_ms < 0)
        wait_ms = 0;

    natsMsg **got = pb_malloc(max * sizeof *got);
    size_t ngot = 0;
    char reply[160];
    /* what is there now (and what earlier requests left behind); else wait for one */
    natsStatus ns = pull(s, max, 0, reply, sizeof reply);
    if (ns == NATS_OK)
        ns = collect(s, got, &ngot, max, reply, pb_monotonic_ms() + API_WAIT_MS);
    if (ns == NATS_OK && ngot == 0 && wait_ms > 0) {
        if ((ns = pull(s, 1, wait_ms, reply, sizeof reply)) == NATS_OK)
            ns = collect(s, got, &ngot, max, reply, pb_monotonic_ms() + wait_ms + 100);
    }
    /* the first is there: the rest of the batch within batch_wait */
    if (ns == NATS_OK && ngot > 0 && ngot < max && batch_wait_ms > 0) {
        if ((ns = pull(s, max - ngot, batch_wait_ms, reply, sizeof reply)) == NATS_OK)
            ns = collect(s, got, &ngot, max, reply, pb_monotonic_ms() + batch_wait_ms + 20);
    }
    if (ns != NATS_OK && ngot == 0) {
        free(got);
        return lost(s, err, "pulling messages", ns);
    }
    if (ns != NATS_OK)
        log_warn(FAC, "pulling more messages failed after %zu: %s", ngot, natsStatus_GetText(ns));

    offsets_t *off = pb_malloc((ngot ? ngot : 1) * sizeof *off);
    now = pb_monotonic_ms();
    for (size_t i = 0; i < ngot; i++) {
        take_message(s, got[i], &msgs[i], &off[i]);
        msgs[i].tag = pb_tags_add(&s->tags, got[i], 0, now);
    }
    for (size_t i = 0; i < ngot; i++) {
        msgs[i].headers = s->text.data + off[i].headers;
        msgs[i].message_id = off[i].message_id == SIZE_MAX ? NULL : s->text.data + off[i].message_id;
        msgs[i].type = off[i].type == SIZE_MAX ? NULL : s->text.data + off[i].type;
        msgs[i].aggregate_type =
            off[i].aggregate_type == SIZE_MAX ? NULL : s->text.data + off[i].aggregate_type;
        msgs[i].aggregate_id =
            off[i].aggregate_id == SIZE_MAX ? NULL : s->text.data + off[i].aggregate_id;
        if (off[i].subject != SIZE_MAX)
            msgs[i].routing_key = s->text.data + off[i].subject;
    }
    free(off);
    free(got);
    *n = ngot;
    return PB_OK;
}

/* ---- settle ----------------------------------------------------------------------------------- */

static pb_status_t stale(nats_source_t *s, uint64_t tag, const char *what, pb_error_t *err)
{
    return pb_fail(err, PB_TRANSIENT, "cannot %s message %llu: not outstanding on the current "
                                      "connection to nats at %s (reconnected since?)", what,
                   (unsigned long long)tag, s->where);
}

static pb_status_t src_settle(pb_source_t *src, const pb_settle_t *list, size_t n, pb_error_t *err)
{
    nats_source_t *s = (nats_source_t *)src;
    if (!s->nc)
        return pb_fail(err, PB_TRANSIENT, "not connected to nats at %s", s->where);
    for (size_t i = 0; i < n; i++)
        if (!pb_tags_find(&s->tags, list[i].tag))
            return stale(s, list[i].tag, "settle", err);
    char nak[64];
    snprintf(nak, sizeof nak, "-NAK {\"delay\": %lld}", (long long)(RETRY_DELAY_MS * NS_PER_MS));
    for (size_t i = 0; i < n; i++) {
        pb_tag_entry_t *e = pb_tags_find(&s->tags, list[i].tag);
        const char *reply = list[i].how == PB_SETTLE_DONE    ? "+ACK"
                            : list[i].how == PB_SETTLE_RETRY ? nak
                                                             : "+TERM";
        natsStatus ns = reply_ack(s, e->item, reply);
        if (ns != NATS_OK)
            return lost(s, err, "settling messages", ns);
        retire(s, e);
    }
    return PB_OK;
}

/* The durable consumer's messages not delivered yet, delivered and not acknowledged, and
 * waiting for redelivery. Our acks are flushed first, so that they count. */
static pb_status_t src_pending(pb_source_t *src, int64_t *pending, pb_error_t *err)
{
    nats_source_t *s = (nats_source_t *)src;
    if (!s->nc || !s->js)
        return pb_fail(err, PB_TRANSIENT, "not connected to nats at %s", s->where);
    natsStatus ns = natsConnection_FlushTimeout(s->nc, API_WAIT_MS);
    if (ns != NATS_OK)
        return lost(s, err, "flushing acknowledgements", ns);
    jsConsumerInfo *ci = NULL;
    jsErrCode jerr = 0;
    ns = js_GetConsumerInfo(&ci, s->js, s->base.cfg->nats_stream, s->durable, NULL, &jerr);
    if (ns != NATS_OK)
        return lost(s, err, "reading the durable consumer's state", ns);
    /* delivered to us and still in the subscription's queue counts as ack pending */
    *pending = (int64_t)ci->NumPending + ci->NumAckPending + ci->NumRedelivered;
    jsConsumerInfo_Destroy(ci);
    return PB_OK;
}

/* ---- free / new ----------------------------------------------------------------------------- */

static void src_free(pb_source_t *src)
{
    if (!src)
        return;
    nats_source_t *s = (nats_source_t *)src;
    drop_connection(s);
    free_done(s);
    free(s->done);
    pb_tags_free(&s->tags);
    pb_buf_free(&s->text);
    pb_nats_stream_desc_free(&s->stream);
    free(s);
    pb_nats_lib_release();
}

/* Every event of the stream comes when the durable consumer has no filter, or one as wide as
 * the stream's subjects; a filter by event type takes only those. */
static bool src_takes_every_event(const pb_source_t *src, char *why, size_t n)
{
    const pb_config_t *cfg = src->cfg;
    const char *f = cfg->nats_filter_subject;
    char all[512];
    snprintf(all, sizeof all, "%s>", cfg->nats_subject_prefix);
    const char *subjects = *cfg->nats_stream_subjects ? cfg->nats_stream_subjects : all;
    if (!*f || strcmp(f, ">") == 0 || strcmp(f, subjects) == 0) {
        snprintf(why, n, "it reads the whole stream %s", cfg->nats_stream);
        return true;
    }
    snprintf(why, n, "nats.filter_subject '%s' may take only some event types", f);
    return false;
}

static const pb_source_ops_t nats_source_ops = {
    .name = "nats",
    .connect = src_connect,
    .receive = src_receive,
    .settle = src_settle,
    .pending = src_pending,
    .takes_every_event = src_takes_every_event,
    .free = src_free,
};

pb_status_t pb_source_nats_new(const pb_config_t *cfg, pb_source_t **out, pb_error_t *err)
{
    *out = NULL;
    if (pb_nats_check_url(cfg, err) != PB_OK)
        return PB_FATAL; /* a configuration error, found before connecting */
    if (cfg->nats_max_deliver > 0 && cfg->nats_max_deliver <= cfg->consume_max_attempts)
        return pb_fail(err, PB_FATAL,
                       "nats.max_deliver (%lld) must exceed consume.max_attempts (%lld): the "
                       "inbox moves a failing message to postbox.inbox_dead after its attempts; "
                       "the server would stop delivering it first (0: unlimited)",
                       (long long)cfg->nats_max_deliver, (long long)cfg->consume_max_attempts);
    if (*cfg->nats_filter_subject && !pb_nats_subject_matches(">", cfg->nats_filter_subject))
        return pb_fail(err, PB_FATAL, "nats.filter_subject \"%s\" is not a subject",
                       cfg->nats_filter_subject);
    if (cfg->consume_gap_timeout > 0 && cfg->consume_gap_timeout <= cfg->nats_ack_wait &&
        strcmp(cfg->consume_wait_for_gaps, "never") != 0)
        log_warn(FAC, "consume.gap_timeout %lld ms is not above nats.ack_wait %lld ms: after a "
                      "consumer crash, an aggregate's later messages may go on before the earlier "
                      "ones are redelivered", (long long)cfg->consume_gap_timeout,
                 (long long)cfg->nats_ack_wait);
    nats_source_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->base.ops = &nats_source_ops;
    s->base.cfg = cfg;
    if (*cfg->nats_durable) {
        snprintf(s->durable, sizeof s->durable, "%s", cfg->nats_durable);
        if (strlen(cfg->nats_durable) >= sizeof s->durable ||
            strpbrk(cfg->nats_durable, ".*> \t/\\")) {
            free(s);
            return pb_fail(err, PB_FATAL, "nats.durable \"%s\": a consumer name may not contain "
                                          "'.', '*', '>', '/', '\\' or blanks (at most %zu "
                                          "bytes)", cfg->nats_durable, sizeof s->durable - 1);
        }
    } else {
        /* postbox_<consume.consumer>, other characters than [A-Za-z0-9_-] as '_' */
        snprintf(s->durable, sizeof s->durable, "postbox_%s", cfg->consume_consumer);
        for (char *p = s->durable; *p; p++)
            if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-')
                *p = '_';
    }
    pb_redact_nats_servers(cfg->nats_url, s->where, sizeof s->where);
    pb_nats_lib_retain();
    *out = &s->base;
    return PB_OK;
}
