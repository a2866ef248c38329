/* RabbitMQ: reachable and the credentials accepted (pb_amqp_open, as the sink and the source
 * open it), the exchange there (or to be declared at start), the consumer's queue there and
 * bounded. Passive declares only, changing nothing: an exchange or queue that exists is declared
 * again as the relay or the consumer would declare it at start, which changes nothing either and
 * tells whether its arguments match (a queue declared without the bound, by an older postbox or
 * by hand, fails there). A queue postbox does not declare (amqp.queue_declare = false) is probed
 * for a bound argument by declares it refuses or accepts as it is (broker/amqp/queue_bound.h). */
#include <amqp.h>
#include <stdio.h>
#include <string.h>

#include "broker/amqp/conn.h"
#include "broker/amqp/queue_bound.h"
#include "broker/amqp/url.h"
#include "check/check_int.h"
#include "check/judge.h"

typedef struct amqp_check {
    pb_check_ctx_t *ctx;
    pb_amqp_url_t url;
    char where[300];
    pb_amqp_link_t lk;
} amqp_check_t;

/* After a refused passive declare the broker closed the channel: a new one. False (with a
 * finding) when that fails or the connection is gone. */
static bool reopen(amqp_check_t *a, const char *name)
{
    pb_error_t err;
    if (a->lk.conn && pb_amqp_link_channel_open(&a->lk, &err) == PB_OK)
        return true;
    pb_check_add(a->ctx->r, PB_CHECK_FAIL, name, "rabbitmq at %s: the connection was lost",
                 a->where);
    return false;
}

/* A passive declare: true with *found when the answer is "exists" or "not found"; false with a
 * finding otherwise (refused, the connection lost), and the checks of this broker stop there. */
static bool exists(amqp_check_t *a, const char *name, const char *kind, const char *obj,
                   bool *found)
{
    char buf[320];
    int code = pb_amqp_link_passive(&a->lk, kind, obj, buf, sizeof buf);
    *found = code == 0;
    if (code == 0)
        return true;
    if (code == AMQP_NOT_FOUND)
        return reopen(a, name);
    pb_check_finding_t *f;
    if (code == AMQP_ACCESS_REFUSED) {
        f = pb_check_add(a->ctx->r, PB_CHECK_FAIL, name,
                         "user \"%s\" may not use %s \"%s\" on vhost \"%s\": %s", a->url.user, kind,
                         obj, a->url.vhost, buf);
        pb_check_hint(f, "give the user configure, write and read permissions on the vhost "
                         "(rabbitmqctl set_permissions)");
        return false;
    }
    pb_check_add(a->ctx->r, PB_CHECK_FAIL, name, "rabbitmq at %s: %s", a->where, buf);
    return false;
}

static bool check_exchange(amqp_check_t *a)
{
    const pb_config_t *cfg = a->ctx->cfg;
    const char *ex = cfg->amqp_exchange, *alt = cfg->amqp_alternate_exchange;
    pb_check_report_t *r = a->ctx->r;
    pb_check_finding_t *f;
    if (!*ex) {
        pb_check_add(r, PB_CHECK_OK, "amqp.exchange", "the default exchange (amqp.exchange = \"\")");
        return true;
    }
    bool alt_found = true, found;
    if (*alt && !exists(a, "amqp.alternate_exchange", "exchange", alt, &alt_found))
        return false;
    if (*alt && !alt_found) {
        if (cfg->amqp_declare_exchange) {
            pb_check_add(r, PB_CHECK_OK, "amqp.alternate_exchange",
                         "alternate exchange \"%s\" does not exist yet: declared at start", alt);
        } else {
            f = pb_check_add(r, PB_CHECK_FAIL, "amqp.alternate_exchange",
                             "alternate exchange \"%s\" does not exist on vhost \"%s\"", alt,
                             a->url.vhost);
            pb_check_hint(f, "create it (a durable fanout exchange), or set "
                             "amqp.declare_exchange = true");
        }
    }
    if (!exists(a, "amqp.exchange", "exchange", ex, &found))
        return false;
    if (!found) {
        if (cfg->amqp_declare_exchange) {
            pb_check_add(r, PB_CHECK_OK, "amqp.exchange",
                         "exchange \"%s\" does not exist yet: declared (durable %s) at start", ex,
                         cfg->amqp_exchange_type);
            return true;
        }
        f = pb_check_add(r, PB_CHECK_FAIL, "amqp.exchange",
                         "exchange \"%s\" does not exist on vhost \"%s\", and "
                         "amqp.declare_exchange = false: nothing can be published",
                         ex, a->url.vhost);
        pb_check_hint(f, "create it (durable, type %s), or set amqp.declare_exchange = true",
                      cfg->amqp_exchange_type);
        return true;
    }
    if (!cfg->amqp_declare_exchange || !alt_found) {
        pb_check_add(r, PB_CHECK_OK, "amqp.exchange", "exchange \"%s\" exists", ex);
        return true;
    }
    /* it exists (and so does the alternate one): declaring it as the relay does changes nothing
     * and tells whether it is what the configuration says */
    pb_error_t err;
    if (pb_amqp_link_setup_exchange(&a->lk, cfg, a->url.vhost, a->url.user, &err) != PB_OK) {
        f = pb_check_add(r, PB_CHECK_FAIL, "amqp.exchange", "%s", err.msg);
        pb_check_hint(f, "the relay refuses it at start: make amqp.exchange_type and "
                         "amqp.alternate_exchange match the exchange, or delete it so that postbox "
                         "declares it");
        return reopen(a, "amqp.exchange");
    }
    pb_check_add(r, PB_CHECK_OK, "amqp.exchange", "exchange \"%s\" exists as configured "
                                                  "(durable %s%s%s)",
                 ex, cfg->amqp_exchange_type, *alt ? ", alternate exchange " : "", alt);
    return true;
}

static void check_queue(amqp_check_t *a)
{
    const pb_config_t *cfg = a->ctx->cfg;
    const char *q = cfg->amqp_queue;
    bool found;
    if (!exists(a, "amqp.queue", "queue", q, &found))
        return;
    if (!found) {
        if (cfg->amqp_queue_declare) {
            pb_judge_amqp_queue_bound(a->ctx->r, "amqp.queue", false, cfg);
            return;
        }
        pb_check_finding_t *f = pb_check_add(a->ctx->r, PB_CHECK_FAIL, "amqp.queue",
                                             "queue \"%s\" does not exist on vhost \"%s\", and "
                                             "amqp.queue_declare = false",
                                             q, a->url.vhost);
        pb_check_hint(f, "create it (durable, bounded: x-message-ttl or x-max-length), or set "
                         "amqp.queue_declare = true");
        return;
    }
    pb_error_t err;
    if (!cfg->amqp_queue_declare) {
        pb_amqp_queue_bound_t bound;
        char detail[400];
        if (pb_amqp_probe_queue_bound(&a->lk, q, &bound, detail, sizeof detail, &err) != PB_OK) {
            pb_check_add(a->ctx->r, PB_CHECK_FAIL, "amqp.queue", "rabbitmq at %s: %s", a->where,
                         err.msg);
            return;
        }
        pb_judge_amqp_queue_probed(a->ctx->r, "amqp.queue", bound, detail, cfg);
        return;
    }
    if (pb_amqp_link_setup_queue(&a->lk, cfg, a->url.vhost, a->url.user, &err) != PB_OK) {
        pb_check_finding_t *f = pb_check_add(a->ctx->r, PB_CHECK_FAIL, "amqp.queue", "%s",
                                             err.msg);
        pb_check_hint(f, "postbox consume refuses the queue at start: declare it again with the "
                         "configured arguments (delete it, or bound it by a policy and set "
                         "amqp.queue_message_ttl = 0 and amqp.allow_unlimited = true)");
        return;
    }
    pb_judge_amqp_queue_bound(a->ctx->r, "amqp.queue", true, cfg);
}

void pb_check_amqp(pb_check_ctx_t *ctx, bool sink, bool source)
{
    const pb_config_t *cfg = ctx->cfg;
    amqp_check_t a = {.ctx = ctx};
    pb_error_t err;
    pb_check_finding_t *f;
    if (pb_amqp_url_parse(cfg->amqp_url, &a.url, &err) != PB_OK) {
        pb_check_add(ctx->r, PB_CHECK_FAIL, "amqp.connect", "%s", err.msg);
        return;
    }
    pb_amqp_url_where(&a.url, a.where, sizeof a.where);
    pb_status_t st = pb_amqp_open(&a.url, cfg, 0, &a.lk.conn, &err);
    if (st != PB_OK) {
        f = pb_check_add(ctx->r, PB_CHECK_FAIL, "amqp.connect", "%s", err.msg);
        pb_check_hint(f, "%s", st == PB_TRANSIENT
                                   ? "is RabbitMQ running and reachable at the host and port of "
                                     "amqp.url?"
                                   : "check the user and password of amqp.url (or "
                                     "amqp.password_file), its vhost, and amqp.tls_*");
        pb_amqp_url_free(&a.url);
        return;
    }
    pb_check_add(ctx->r, PB_CHECK_OK, "amqp.connect",
                 "connected to rabbitmq at %s, vhost \"%s\", as user \"%s\"", a.where,
                 a.url.vhost, a.url.user);
    bool ok = reopen(&a, "amqp.connect");
    /* the consumer declares the exchange too when it binds its queue */
    bool exchange = sink || (source && cfg->amqp_queue_declare && *cfg->amqp_bindings);
    if (ok && exchange)
        ok = check_exchange(&a);
    if (ok && source)
        check_queue(&a);
    pb_amqp_link_close(&a.lk);
    pb_amqp_url_free(&a.url);
}
