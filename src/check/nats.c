/* NATS JetStream: reachable and the credentials accepted (pb_nats_connect, as the sink and the
 * source connect), JetStream enabled, and the stream looked up without changing it: there (or
 * to be created at start), bounded by a limit, storing the relay's subjects. */
#include <stdio.h>

#include "broker/nats/conn.h"
#include "check/check_int.h"
#include "check/judge.h"

void pb_check_nats(pb_check_ctx_t *ctx, bool sink, bool source)
{
    (void)source; /* the source reads the same stream; its durable consumer is made at start */
    const pb_config_t *cfg = ctx->cfg;
    pb_check_report_t *r = ctx->r;
    pb_check_finding_t *f;
    pb_error_t err;
    char where[300] = "";
    natsConnection *nc = NULL;
    jsCtx *js = NULL;
    pb_nats_lib_retain();
    pb_status_t st = pb_nats_connect(cfg, "check", &nc, where, sizeof where, &err);
    if (st != PB_OK) {
        f = pb_check_add(r, PB_CHECK_FAIL, "nats.connect", "%s", err.msg);
        pb_check_hint(f, "%s", st == PB_TRANSIENT
                                   ? "is nats-server running and reachable at nats.url?"
                                   : "check the credentials (nats.url's user and password, "
                                     "nats.token_file, nats.credentials) and nats.tls_*");
        goto out;
    }
    pb_check_add(r, PB_CHECK_OK, "nats.connect", "connected to nats at %s", where);
    jsOptions jo;
    jsOptions_Init(&jo);
    jo.Wait = 5000;
    natsStatus ns = natsConnection_JetStream(&js, nc, &jo);
    if (ns != NATS_OK) {
        char buf[300];
        pb_check_add(r, PB_CHECK_FAIL, "nats.jetstream", "nats at %s: jetstream context: %s",
                     where, pb_nats_error_text(ns, buf, sizeof buf));
        goto out;
    }
    if (pb_nats_check_jetstream(js, where, &err) != PB_OK) {
        f = pb_check_add(r, PB_CHECK_FAIL, "nats.jetstream", "%s", err.msg);
        pb_check_hint(f, "run nats-server with JetStream (-js, or jetstream {} in its "
                         "configuration): core NATS would lose events");
        goto out;
    }
    bool exists, limited;
    pb_nats_stream_desc_t desc;
    if (pb_nats_inspect_stream(js, cfg, &exists, &limited, &desc, &err) != PB_OK) {
        pb_check_add(r, PB_CHECK_FAIL, "nats.stream", "%s", err.msg);
        goto out;
    }
    pb_judge_nats_stream(r, "nats.stream", exists, limited, desc.text, cfg);
    /* a stream the relay does not manage must store its subjects as it is */
    if (sink && exists && !cfg->nats_stream_create &&
        pb_nats_check_coverage(cfg, &desc, &err) != PB_OK) {
        f = pb_check_add(r, PB_CHECK_FAIL, "nats.subjects", "%s", err.msg);
        pb_check_hint(f, "add the subjects to the stream, or let postbox manage it with "
                         "nats.stream_create = true");
    }
    pb_nats_stream_desc_free(&desc);
out:
    if (js)
        jsCtx_Destroy(js);
    if (nc)
        natsConnection_Destroy(nc);
    pb_nats_lib_release();
}
