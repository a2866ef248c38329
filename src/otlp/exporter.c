#include "otlp/exporter.h"

#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/log_limit.h"
#include "common/redact.h"
#include "common/str.h"
#include "metrics/metrics.h"

#define FAC "otlp"
#define TRACES_PATH "/v1/traces"
#define DROP_LOG_INTERVAL_MS 60000
#define FLUSH_POLL_MS 50

struct pb_otlp {
    const pb_config_t *cfg;
    CURLM *multi;
    CURL *easy;                 /* one handle, reused: its connection stays open between requests */
    struct curl_slist *headers;
    char *url;                  /* <endpoint>/v1/traces */
    char shown_url[512];        /* the same with any password hidden, for logs */
    char errbuf[CURL_ERROR_SIZE];
    pb_buf_t pending;           /* spans waiting: JSON objects separated by commas */
    size_t pending_spans;
    pb_buf_t body;              /* the request in flight (owned here until it is done) */
    size_t body_spans;
    bool in_flight;
    bool failing;               /* the last request failed: warned once, until one succeeds */
    uint64_t failed_since_warn; /* spans lost since that warning */
    pb_log_limit_t drop_log;
};

pb_status_t pb_otlp_check_endpoint(const char *endpoint, pb_error_t *err)
{
    if (!*endpoint)
        return PB_OK;
    char shown[512];
    pb_redact_secret(endpoint, shown, sizeof shown);
    if (pb_has_control_char(endpoint))
        return pb_fail(err, PB_FATAL, "relay.otlp_endpoint holds a control character such as a "
                                      "newline (percent-encode it)");
    CURLU *u = curl_url();
    if (!u)
        pb_out_of_memory();
    pb_status_t st = PB_OK;
    char *scheme = NULL, *query = NULL, *fragment = NULL;
    CURLUcode rc = curl_url_set(u, CURLUPART_URL, endpoint, CURLU_NON_SUPPORT_SCHEME);
    if (rc != CURLUE_OK) {
        st = pb_fail(err, PB_FATAL, "relay.otlp_endpoint \"%s\" is not a URL (%s): expected the "
                                    "collector's base URL, e.g. http://127.0.0.1:4318",
                     shown, curl_url_strerror(rc));
    } else if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
               (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)) {
        st = pb_fail(err, PB_FATAL, "relay.otlp_endpoint \"%s\": the scheme must be http or https "
                                    "(OTLP/HTTP)", shown);
    } else if (curl_url_get(u, CURLUPART_QUERY, &query, 0) == CURLUE_OK ||
               curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0) == CURLUE_OK) {
        st = pb_fail(err, PB_FATAL, "relay.otlp_endpoint \"%s\" has a query or fragment: give the "
                                    "base URL, to which %s is appended", shown, TRACES_PATH);
    }
    curl_free(scheme);
    curl_free(query);
    curl_free(fragment);
    curl_url_cleanup(u);
    return st;
}

/* The collector's answer is not needed (partial success is not retried either). */
static size_t discard_body(char *data, size_t size, size_t n, void *arg)
{
    (void)data;
    (void)arg;
    return size * n;
}

static pb_status_t set_up_handle(pb_otlp_t *o, pb_error_t *err)
{
    const pb_config_t *cfg = o->cfg;
    o->headers = curl_slist_append(NULL, "Content-Type: application/json");
    /* no "Expect: 100-continue" round trip before a large body */
    struct curl_slist *more = o->headers ? curl_slist_append(o->headers, "Expect:") : NULL;
    if (!more)
        return pb_fail(err, PB_FATAL, "otlp: out of memory for the request headers");
    o->headers = more;
    CURLcode rc = CURLE_OK;
#define SET(opt, val)                                                                             \
    do {                                                                                          \
        if (rc == CURLE_OK)                                                                       \
            rc = curl_easy_setopt(o->easy, opt, val);                                             \
    } while (0)
    SET(CURLOPT_URL, o->url);
    SET(CURLOPT_HTTPHEADER, o->headers);
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    SET(CURLOPT_USERAGENT, "postbox/" POSTBOX_VERSION_STRING);
    SET(CURLOPT_NOSIGNAL, 1L); /* no SIGALRM: the relay's signals are its own */
    SET(CURLOPT_TIMEOUT_MS, (long)cfg->relay_otlp_timeout);
    SET(CURLOPT_CONNECTTIMEOUT_MS, (long)cfg->relay_otlp_timeout);
    SET(CURLOPT_WRITEFUNCTION, discard_body);
    SET(CURLOPT_ERRORBUFFER, o->errbuf);
#undef SET
    if (rc != CURLE_OK)
        return pb_fail(err, PB_FATAL, "otlp: cannot set up the HTTP client: %s",
                       curl_easy_strerror(rc));
    return PB_OK;
}

pb_status_t pb_otlp_new(const pb_config_t *cfg, pb_otlp_t **out, pb_error_t *err)
{
    *out = NULL;
    if (!*cfg->relay_otlp_endpoint)
        return PB_OK;
    pb_status_t st = pb_otlp_check_endpoint(cfg->relay_otlp_endpoint, err);
    if (st != PB_OK)
        return st;
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return pb_fail(err, PB_FATAL, "otlp: libcurl could not be initialised");
    pb_otlp_t *o = pb_malloc(sizeof *o);
    memset(o, 0, sizeof *o);
    o->cfg = cfg;
    o->drop_log.interval_ms = DROP_LOG_INTERVAL_MS;
    size_t base = strlen(cfg->relay_otlp_endpoint);
    while (base > 0 && cfg->relay_otlp_endpoint[base - 1] == '/')
        base--;
    o->url = pb_malloc(base + sizeof TRACES_PATH);
    memcpy(o->url, cfg->relay_otlp_endpoint, base);
    memcpy(o->url + base, TRACES_PATH, sizeof TRACES_PATH);
    pb_redact_secret(o->url, o->shown_url, sizeof o->shown_url);
    o->multi = curl_multi_init();
    o->easy = curl_easy_init();
    if (!o->multi || !o->easy)
        st = pb_fail(err, PB_FATAL, "otlp: libcurl could not make a handle");
    else
        st = set_up_handle(o, err);
    if (st != PB_OK) {
        pb_otlp_free(o);
        return st;
    }
    pb_metrics_otlp_spans(0, 0, 0); /* the counters show from the start */
    log_info(FAC, "exporting a publish span per batch to %s (OTLP/HTTP JSON, at most %lld bytes "
                  "waiting, requests of at most %lld ms)",
             o->shown_url, (long long)cfg->relay_otlp_max_pending,
             (long long)cfg->relay_otlp_timeout);
    *out = o;
    return PB_OK;
}

void pb_otlp_add(pb_otlp_t *o, const pb_otlp_span_t *span)
{
    if (!o)
        return;
    size_t before = o->pending.len;
    if (o->pending_spans)
        pb_buf_putc(&o->pending, ',');
    pb_otlp_span_json(span, &o->pending);
    if (o->pending.len > (size_t)o->cfg->relay_otlp_max_pending) {
        o->pending.len = before; /* the spans before it stay whole */
        o->pending.data[before] = '\0';
        pb_metrics_otlp_spans(0, 0, 1);
        uint64_t held;
        if (pb_log_limit_pass(&o->drop_log, pb_monotonic_ms(), &held))
            log_warn(FAC, "a span was dropped: %lld bytes of spans wait for %s already "
                          "(relay.otlp_max_pending; %llu more dropped since the last such line)",
                     (long long)o->cfg->relay_otlp_max_pending, o->shown_url,
                     (unsigned long long)held);
        return;
    }
    o->pending_spans++;
}

/* Accounts for the request just done: exported, or failed (one warning until it works again). */
static void finish_request(pb_otlp_t *o, CURLcode rc)
{
    long status = 0;
    if (rc == CURLE_OK && curl_easy_getinfo(o->easy, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
        status = 0;
    bool ok = rc == CURLE_OK && status >= 200 && status < 300;
    if (ok) {
        pb_metrics_otlp_spans(o->body_spans, 0, 0);
        if (o->failing)
            log_info(FAC, "%s takes spans again (%llu spans were lost meanwhile)", o->shown_url,
                     (unsigned long long)o->failed_since_warn);
        o->failing = false;
    } else {
        pb_metrics_otlp_spans(0, o->body_spans, 0);
        if (!o->failing) {
            char why[CURL_ERROR_SIZE + 64];
            if (rc != CURLE_OK)
                snprintf(why, sizeof why, "%s", o->errbuf[0] ? o->errbuf : curl_easy_strerror(rc));
            else
                snprintf(why, sizeof why, "HTTP status %ld", status);
            log_warn(FAC, "span export to %s failed: %s; spans are lost until it works again "
                          "(postbox_otlp_spans_failed_total; publishing goes on)",
                     o->shown_url, why);
            o->failing = true;
            o->failed_since_warn = 0;
        }
        o->failed_since_warn += o->body_spans;
    }
    pb_buf_reset(&o->body);
    o->body_spans = 0;
    o->in_flight = false;
}

/* Sends the spans waiting as one request, without waiting for it. */
static void start_request(pb_otlp_t *o)
{
    pb_buf_reset(&o->body);
    pb_otlp_request_json(o->cfg->relay_otlp_service_name, POSTBOX_VERSION_STRING, o->pending.data,
                         o->pending.len, &o->body);
    o->body_spans = o->pending_spans;
    pb_buf_reset(&o->pending);
    o->pending_spans = 0;
    o->errbuf[0] = '\0';
    CURLcode rc = curl_easy_setopt(o->easy, CURLOPT_POSTFIELDS, o->body.data);
    if (rc == CURLE_OK)
        rc = curl_easy_setopt(o->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body.len);
    if (rc != CURLE_OK) {
        finish_request(o, rc);
        return;
    }
    CURLMcode mc = curl_multi_add_handle(o->multi, o->easy);
    if (mc != CURLM_OK) {
        snprintf(o->errbuf, sizeof o->errbuf, "%s", curl_multi_strerror(mc));
        finish_request(o, CURLE_FAILED_INIT);
        return;
    }
    o->in_flight = true;
}

void pb_otlp_poll(pb_otlp_t *o)
{
    if (!o)
        return;
    if (!o->in_flight && o->pending_spans)
        start_request(o);
    if (!o->in_flight)
        return;
    int running = 0;
    CURLMcode mc = curl_multi_perform(o->multi, &running);
    CURLcode rc = CURLE_OK;
    bool done = false;
    if (mc != CURLM_OK) {
        snprintf(o->errbuf, sizeof o->errbuf, "%s", curl_multi_strerror(mc));
        rc = CURLE_FAILED_INIT;
        done = true;
    }
    CURLMsg *msg;
    int left;
    while (!done && (msg = curl_multi_info_read(o->multi, &left)) != NULL) {
        if (msg->msg == CURLMSG_DONE && msg->easy_handle == o->easy) {
            rc = msg->data.result;
            done = true;
        }
    }
    if (!done)
        return;
    /* removing a handle the multi holds cannot fail; a failure would only leak a connection */
    if (curl_multi_remove_handle(o->multi, o->easy) != CURLM_OK)
        log_debug(FAC, "could not detach the finished request");
    finish_request(o, rc);
}

void pb_otlp_flush(pb_otlp_t *o)
{
    if (!o)
        return;
    int64_t until = pb_monotonic_ms() + o->cfg->relay_otlp_timeout;
    for (;;) {
        pb_otlp_poll(o);
        if ((!o->in_flight && !o->pending_spans) || pb_monotonic_ms() >= until)
            break;
        if (curl_multi_poll(o->multi, NULL, 0, FLUSH_POLL_MS, NULL) != CURLM_OK)
            break;
    }
    size_t left = o->pending_spans + (o->in_flight ? o->body_spans : 0);
    if (left) {
        pb_metrics_otlp_spans(0, 0, left);
        log_warn(FAC, "stopping with %zu span(s) not exported to %s (dropped)", left,
                 o->shown_url);
    }
}

void pb_otlp_free(pb_otlp_t *o)
{
    if (!o)
        return;
    if (o->in_flight && curl_multi_remove_handle(o->multi, o->easy) != CURLM_OK)
        log_debug(FAC, "could not detach the request in flight");
    curl_easy_cleanup(o->easy);
    curl_multi_cleanup(o->multi);
    curl_slist_free_all(o->headers);
    pb_buf_free(&o->pending);
    pb_buf_free(&o->body);
    free(o->url);
    free(o);
    curl_global_cleanup();
}
