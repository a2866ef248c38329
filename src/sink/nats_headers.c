/* A NATS message's header block built by the sink (see nats_headers.h for why and how). */
#include "sink/nats_headers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pb_nats_headers_reset(pb_nats_headers_t *h)
{
    pb_buf_reset(&h->block);
    h->last_sep = 0;
    h->n = 0;
}

void pb_nats_headers_add(pb_nats_headers_t *h, const char *key, size_t klen, const char *val,
                         size_t vlen)
{
    h->last_sep = h->block.len + klen;
    char *p = pb_buf_extend(&h->block, klen + 2 + vlen + 2); /* per header: one growth check */
    memcpy(p, key, klen);
    memcpy(p + klen, ": ", 2);
    memcpy(p + klen + 2, val, vlen);
    memcpy(p + klen + 2 + vlen, "\r\n", 2);
    h->n++;
}

/* natsMsgHeader_Set(m, key, value) with key = block[0, key_end) and value = block[val, val_end):
 * both ended by a NUL written over the byte after them for the call (nats.c copies them), then
 * restored. */
static natsStatus set_span(pb_nats_headers_t *h, natsMsg *m, size_t key, size_t key_end,
                           size_t val, size_t val_end)
{
    char *b = h->block.data;
    char at_key_end = b[key_end], at_val_end = b[val_end];
    b[key_end] = '\0';
    b[val_end] = '\0';
    natsStatus ns = natsMsgHeader_Set(m, b + key, b + val);
    b[key_end] = at_key_end;
    b[val_end] = at_val_end;
    return ns;
}

natsStatus pb_nats_headers_apply(pb_nats_headers_t *h, natsMsg *m, pb_nats_hdr_mode_t mode)
{
    if (!h->n)
        return NATS_OK;
    size_t end = h->block.len - 2; /* the last header's CRLF */
    if (mode == PB_NATS_HDR_PACKED)
        return set_span(h, m, 0, h->last_sep, h->last_sep + 2, end);
    natsStatus ns = NATS_OK;
    for (size_t line = 0; ns == NATS_OK && line < h->block.len;) {
        /* keys hold no ':' and values no CR (the caller's checks) */
        const char *b = h->block.data;
        size_t sep = (size_t)((const char *)memchr(b + line, ':', h->block.len - line) - b);
        size_t crlf = (size_t)((const char *)memchr(b + sep, '\r', h->block.len - sep) - b);
        ns = set_span(h, m, line, sep, sep + 2, crlf);
        line = crlf + 2;
    }
    return ns;
}

/* The probe's headers: values with a blank and a colon, as real ones (timestamps) have. */
static const char *const probe_keys[] = {"Pb-Probe-A", "Pb-Probe-B", "Pb-Probe-C"};
static const char *const probe_vals[] = {"1", "two words", "2026-12-03T08:00:00Z"};
#define PROBE_N (sizeof probe_keys / sizeof probe_keys[0])

/* Whether got carries exactly the probe's headers. */
static bool probe_headers_back(natsMsg *got, char *why, size_t n)
{
    const char **keys = NULL;
    int count = 0;
    natsStatus ns = natsMsgHeader_Keys(got, &keys, &count);
    free((void *)keys);
    if (ns != NATS_OK || count != (int)PROBE_N) {
        snprintf(why, n, "%d headers came back instead of %zu", ns == NATS_OK ? count : 0,
                 PROBE_N);
        return false;
    }
    for (size_t i = 0; i < PROBE_N; i++) {
        const char *v = NULL;
        if (natsMsgHeader_Get(got, probe_keys[i], &v) != NATS_OK || strcmp(v, probe_vals[i])) {
            snprintf(why, n, "header %s came back as \"%.40s\"", probe_keys[i], v ? v : "");
            return false;
        }
    }
    return true;
}

bool pb_nats_headers_probe(natsConnection *nc, const char *subject, int64_t timeout_ms, char *why,
                           size_t n)
{
    natsSubscription *sub = NULL;
    natsMsg *m = NULL, *got = NULL;
    pb_nats_headers_t h = {0};
    for (size_t i = 0; i < PROBE_N; i++)
        pb_nats_headers_add(&h, probe_keys[i], strlen(probe_keys[i]), probe_vals[i],
                            strlen(probe_vals[i]));
    const char *step = "subscribing";
    natsStatus ns = natsConnection_SubscribeSync(&sub, nc, subject);
    if (ns == NATS_OK) {
        step = "building the message";
        ns = natsMsg_Create(&m, subject, NULL, "", 0);
    }
    if (ns == NATS_OK)
        ns = pb_nats_headers_apply(&h, m, PB_NATS_HDR_PACKED);
    if (ns == NATS_OK) {
        step = "publishing";
        ns = natsConnection_PublishMsg(nc, m);
    }
    if (ns == NATS_OK) {
        step = "waiting for it";
        ns = natsSubscription_NextMsg(&got, sub, timeout_ms);
    }
    bool ok = false;
    if (ns != NATS_OK)
        snprintf(why, n, "%s: %s", step, natsStatus_GetText(ns));
    else
        ok = probe_headers_back(got, why, n);
    natsMsg_Destroy(got);
    natsMsg_Destroy(m);
    if (sub)
        (void)natsSubscription_Unsubscribe(sub); /* best effort: the connection may be gone */
    natsSubscription_Destroy(sub);
    pb_nats_headers_free(&h);
    return ok;
}

void pb_nats_headers_free(pb_nats_headers_t *h)
{
    pb_buf_free(&h->block);
    h->last_sep = h->n = 0;
}
