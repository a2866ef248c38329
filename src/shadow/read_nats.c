/* nats:STREAM, read message by message by sequence (the JetStream API's direct get), from the
 * stream's first sequence to its last at the start: no consumer is made, nothing is
 * acknowledged or removed (shadow/read.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nats/nats.h>

#include "broker/nats/conn.h"
#include "shadow/read.h"

/* The message's headers as attributes (a header of several values: the first), and its
 * subject as attribute "subject". */
static void add_message(natsMsg *msg, pb_shadow_msgs_t *out)
{
    int len = natsMsg_GetDataLength(msg);
    const char *data = natsMsg_GetData(msg);
    pb_shadow_msg_t *m = pb_shadow_msgs_add(out, data ? data : "", len > 0 ? (size_t)len : 0);
    const char **keys = NULL;
    int count = 0;
    if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
        for (int i = 0; i < count; i++) {
            const char *value = NULL;
            if (natsMsgHeader_Get(msg, keys[i], &value) == NATS_OK && value)
                pb_shadow_msg_set_attr(m, keys[i], value, strlen(value));
        }
        free((void *)keys);
    }
    const char *subject = natsMsg_GetSubject(msg);
    if (subject)
        pb_shadow_msg_set_attr(m, "subject", subject, strlen(subject));
}

static pb_status_t read_all(jsCtx *js, const char *where, const char *stream, size_t limit,
                            pb_shadow_msgs_t *out, pb_error_t *err)
{
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, stream, NULL, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return pb_fail(err, PB_FATAL, "nats at %s: no stream \"%s\"", where, stream);
    if (s != NATS_OK)
        return pb_fail(err, pb_nats_status_transient(s) ? PB_TRANSIENT : PB_FATAL,
                       "nats at %s: stream \"%s\": %s", where, stream, natsStatus_GetText(s));
    uint64_t first = si->State.FirstSeq, last = si->State.LastSeq, msgs = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    if (msgs > limit)
        return pb_fail(err, PB_FATAL, "stream \"%s\" holds more than %zu messages (--limit)",
                       stream, limit);
    for (uint64_t seq = first; msgs > 0 && seq <= last; seq++) {
        natsMsg *msg = NULL;
        s = js_GetMsg(&msg, js, stream, seq, NULL, &jerr);
        if (s == NATS_NOT_FOUND || jerr == JSNoMessageFoundErr)
            continue; /* deleted, or removed by the stream's limits meanwhile */
        if (s != NATS_OK)
            return pb_fail(err, pb_nats_status_transient(s) ? PB_TRANSIENT : PB_FATAL,
                           "nats at %s: stream \"%s\", message %" PRIu64 ": %s", where, stream,
                           seq, natsStatus_GetText(s));
        add_message(msg, out);
        natsMsg_Destroy(msg);
    }
    return PB_OK;
}

pb_status_t pb_shadow_read_nats(const pb_config_t *cfg, const char *stream, size_t limit,
                                pb_shadow_msgs_t *out, pb_error_t *err)
{
    natsConnection *nc = NULL;
    char where[512];
    pb_nats_lib_retain();
    pb_status_t st = pb_nats_connect(cfg, "shadow", &nc, where, sizeof where, err);
    if (st != PB_OK) {
        pb_nats_lib_release();
        return st;
    }
    jsCtx *js = NULL;
    natsStatus s = natsConnection_JetStream(&js, nc, NULL);
    if (s != NATS_OK)
        st = pb_fail(err, PB_FATAL, "nats at %s: %s", where, natsStatus_GetText(s));
    else
        st = read_all(js, where, stream, limit, out, err);
    jsCtx_Destroy(js);
    natsConnection_Destroy(nc);
    pb_nats_lib_release();
    return st;
}
