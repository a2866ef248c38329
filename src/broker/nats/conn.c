#include "broker/nats/conn.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/route.h"
#include "common/secret_file.h"
#include "common/str.h"

#define NS_PER_MS INT64_C(1000000)
#define CONNECT_TIMEOUT_MS 5000
#define RECONNECT_WAIT_MS 1000
#define PING_INTERVAL_MS 10000
#define MAX_PINGS_OUT 3
#define TOKEN_MAX 4096

/* ---- library lifetime ----------------------------------------------------------------------- */

static pthread_mutex_t lib_mu = PTHREAD_MUTEX_INITIALIZER;
static int lib_refs;

void pb_nats_lib_retain(void)
{
    pthread_mutex_lock(&lib_mu);
    if (lib_refs++ == 0)
        (void)nats_Open(-1);
    pthread_mutex_unlock(&lib_mu);
}

void pb_nats_lib_release(void)
{
    pthread_mutex_lock(&lib_mu);
    if (lib_refs > 0 && --lib_refs == 0)
        (void)nats_CloseAndWait(2000); /* its threads gone: clean exits, quiet leak checkers */
    pthread_mutex_unlock(&lib_mu);
}

/* ---- errors --------------------------------------------------------------------------------- */

const char *pb_nats_error_text(natsStatus s, char *buf, size_t n)
{
    natsStatus last = NATS_OK;
    const char *detail = nats_GetLastError(&last);
    const char *base = natsStatus_GetText(s);
    if (last == s && detail && *detail && strcmp(detail, base) != 0)
        snprintf(buf, n, "%s: %s", base, detail);
    else
        snprintf(buf, n, "%s", base);
    return buf;
}

bool pb_nats_status_transient(natsStatus s)
{
    switch (s) {
    case NATS_IO_ERROR:
    case NATS_CONNECTION_CLOSED:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_TIMEOUT:
    case NATS_NOT_YET_CONNECTED:
    case NATS_SSL_ERROR:
    case NATS_SLOW_CONSUMER:
    case NATS_NO_MEMORY:
    case NATS_MISSED_HEARTBEAT:
        return true;
    default:
        return false;
    }
}

bool pb_nats_js_transient(natsStatus s, jsErrCode jerr)
{
    switch (jerr) {
    case JSClusterNoPeersErr:    /* fewer servers up (or joined) than nats.replicas */
    case JSClusterNotAvailErr:   /* "JetStream system temporarily unavailable" */
    case JSClusterNotLeaderErr:  /* the meta leader moved while the request was on its way */
    case JSClusterIncompleteErr: /* a peer did not answer */
        return true;
    default:
        return pb_nats_status_transient(s);
    }
}

const char *pb_nats_conn_status_name(natsConnStatus st)
{
    switch (st) {
    case NATS_CONN_STATUS_DISCONNECTED: return "disconnected";
    case NATS_CONN_STATUS_CONNECTING: return "connecting";
    case NATS_CONN_STATUS_CONNECTED: return "connected";
    case NATS_CONN_STATUS_CLOSED: return "closed";
    case NATS_CONN_STATUS_RECONNECTING: return "reconnecting";
    case NATS_CONN_STATUS_DRAINING_SUBS: return "draining subscriptions";
    case NATS_CONN_STATUS_DRAINING_PUBS: return "draining publishers";
    }
    return "unknown";
}

/* ---- the server list ------------------------------------------------------------------------ */

static void free_list(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Splits list at commas into *items (each trimmed of blanks, a copy); false, with nothing kept,
 * when an item is empty (two commas, or a comma at an end). */
static bool split_list(const char *list, char ***items, size_t *n)
{
    size_t cap = 1;
    for (const char *q = list; *q; q++)
        cap += *q == ',';
    char **v = pb_malloc(cap * sizeof *v);
    size_t k = 0;
    for (const char *p = list;;) {
        const char *end = p + strcspn(p, ",");
        const char *a = p, *b = end;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b) {
            free_list(v, k);
            return false;
        }
        v[k] = pb_malloc((size_t)(b - a) + 1);
        memcpy(v[k], a, (size_t)(b - a));
        v[k++][b - a] = '\0';
        if (!*end)
            break;
        p = end + 1;
    }
    *items = v;
    *n = k;
    return true;
}

void pb_nats_servers_free(char **servers, size_t n)
{
    free_list(servers, n);
}

pb_status_t pb_nats_check_url(const pb_config_t *cfg, pb_error_t *err)
{
    if (!*cfg->nats_url)
        return pb_fail(err, PB_FATAL, "nats.url is empty");
    char **servers;
    size_t n;
    bool tls;
    pb_status_t st = pb_nats_servers(cfg->nats_url, &servers, &n, &tls, err);
    if (st == PB_OK)
        pb_nats_servers_free(servers, n);
    return st;
}

/* Whether server (trimmed) names the scheme tls://; an unknown scheme is an error. libnats
 * itself ignores the scheme: "wss://" or a typo would connect in plain text. */
static pb_status_t check_scheme(const char *server, bool *tls, pb_error_t *err)
{
    const char *sep = strstr(server, "://");
    size_t len = sep ? (size_t)(sep - server) : 0;
    *tls = sep && len == 3 && strncasecmp(server, "tls", 3) == 0;
    if (!sep || *tls || (len == 4 && strncasecmp(server, "nats", 4) == 0))
        return PB_OK;
    char shown[256];
    pb_redact_nats_servers(server, shown, sizeof shown);
    return pb_fail(err, PB_FATAL, "nats.url server \"%s\": scheme \"%.*s\" is not supported, use "
                                  "nats:// or tls:// (libnats has no websocket transport)",
                   shown, (int)(len < 32 ? len : 32), server);
}

pb_status_t pb_nats_servers(const char *url, char ***servers, size_t *n, bool *tls,
                            pb_error_t *err)
{
    *servers = NULL;
    *n = 0;
    *tls = false;
    char **v;
    size_t k;
    if (!split_list(url, &v, &k))
        return pb_fail(err, PB_FATAL, "nats.url: an empty server (two commas, or a comma at an "
                                      "end): list servers as nats://host:port,nats://host2:port");
    for (size_t i = 0; i < k; i++) {
        bool server_tls;
        pb_status_t st = check_scheme(v[i], &server_tls, err);
        if (st != PB_OK) {
            free_list(v, k);
            return st;
        }
        *tls = *tls || server_tls;
    }
    *servers = v;
    *n = k;
    return PB_OK;
}

/* ---- connecting ----------------------------------------------------------------------------- */

static const char *fac_of(void *closure)
{
    return (const char *)closure;
}

static void on_disconnected(natsConnection *nc, void *closure)
{
    if (natsConnection_IsClosed(nc)) /* our own close */
        log_debug(fac_of(closure), "nats connection closed");
    else
        log_warn(fac_of(closure), "disconnected from nats; nats.c reconnects by itself");
}

static void on_reconnected(natsConnection *nc, void *closure)
{
    char url[256] = "";
    (void)natsConnection_GetConnectedUrl(nc, url, sizeof url);
    char red[300];
    pb_redact_secret(url, red, sizeof red);
    log_info(fac_of(closure), "reconnected to nats at %s", red);
}

static void on_async_error(natsConnection *nc, natsSubscription *sub, natsStatus err, void *closure)
{
    (void)nc;
    (void)sub;
    log_warn(fac_of(closure), "nats asynchronous error: %s", natsStatus_GetText(err));
}

static pb_status_t opt_fail(natsStatus s, const char *what, pb_error_t *err)
{
    char buf[300];
    return pb_fail(err, PB_FATAL, "nats: %s: %s", what, pb_nats_error_text(s, buf, sizeof buf));
}

/* Options for connecting to servers[0..n) (the whole list, or one server to probe). */
static pb_status_t build_options(const pb_config_t *cfg, const char *fac, char **servers, size_t n,
                                 bool tls, natsOptions **out, pb_error_t *err)
{
    natsOptions *o = NULL;
    natsStatus s = natsOptions_Create(&o);
    if (s != NATS_OK)
        return opt_fail(s, "creating connection options", err);
    pb_status_t st = PB_OK;
    void *closure = (void *)(uintptr_t)fac; /* only read back as const char * */
#define TRY(call, what)                                                                            \
    do {                                                                                           \
        if ((s = (call)) != NATS_OK) {                                                             \
            st = opt_fail(s, what, err);                                                           \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)
    /* the list split here: libnats 3.4's SetURL reads "a,b" as one URL (host "a,b") */
    TRY(natsOptions_SetServers(o, (const char **)servers, (int)n),
        "nats.url is not a valid server URL list");
    TRY(natsOptions_SetName(o, "postbox"), "setting the client name");
    TRY(natsOptions_SetTimeout(o, CONNECT_TIMEOUT_MS), "setting the connect timeout");
    TRY(natsOptions_SetMaxReconnect(o, -1), "setting the reconnect policy");
    TRY(natsOptions_SetReconnectWait(o, RECONNECT_WAIT_MS), "setting the reconnect wait");
    TRY(natsOptions_SetPingInterval(o, PING_INTERVAL_MS), "setting the ping interval");
    TRY(natsOptions_SetMaxPingsOut(o, MAX_PINGS_OUT), "setting the ping limit");
    TRY(natsOptions_SetDisconnectedCB(o, on_disconnected, closure), "setting callbacks");
    TRY(natsOptions_SetReconnectedCB(o, on_reconnected, closure), "setting callbacks");
    TRY(natsOptions_SetErrorHandler(o, on_async_error, closure), "setting callbacks");

    if (tls || *cfg->nats_tls_ca_cert || *cfg->nats_tls_cert) {
        TRY(natsOptions_SetSecure(o, true),
            "enabling TLS (is libnats built with TLS support?)");
        if (*cfg->nats_tls_ca_cert)
            TRY(natsOptions_LoadCATrustedCertificates(o, cfg->nats_tls_ca_cert),
                "loading nats.tls_ca_cert");
        if (*cfg->nats_tls_cert || *cfg->nats_tls_key) {
            if (!*cfg->nats_tls_cert || !*cfg->nats_tls_key) {
                st = pb_fail(err, PB_FATAL, "nats.tls_cert and nats.tls_key go together");
                goto done;
            }
            TRY(natsOptions_LoadCertificatesChain(o, cfg->nats_tls_cert, cfg->nats_tls_key),
                "loading nats.tls_cert / nats.tls_key");
        }
        if (!cfg->nats_tls_verify)
            TRY(natsOptions_SkipServerVerification(o, true), "turning off TLS verification");
    }
    if (*cfg->nats_credentials) {
        if ((st = pb_check_secret_file("nats.credentials", cfg->nats_credentials, err)) != PB_OK)
            goto done;
        if (access(cfg->nats_credentials, R_OK) != 0) {
            st = pb_fail(err, PB_FATAL, "nats.credentials %s: cannot read: %s",
                         cfg->nats_credentials, strerror(errno));
            goto done;
        }
        TRY(natsOptions_SetUserCredentialsFromFiles(o, cfg->nats_credentials, NULL),
            "using nats.credentials");
    }
    if (*cfg->nats_token_file) {
        char token[TOKEN_MAX];
        if ((st = pb_read_secret_file("nats.token_file", cfg->nats_token_file, token, sizeof token, err)) != PB_OK)
            goto done;
        s = natsOptions_SetToken(o, token);
        memset(token, 0, sizeof token);
        if (s != NATS_OK) {
            st = opt_fail(s, "using nats.token_file", err);
            goto done;
        }
    }
#undef TRY
done:
    if (st != PB_OK) {
        natsOptions_Destroy(o);
        return st;
    }
    *out = o;
    return PB_OK;
}

/* Connects to servers[0..n); the status of natsConnection_Connect, its text in buf. */
static natsStatus try_connect(const pb_config_t *cfg, const char *fac, char **servers, size_t n,
                              bool tls, natsConnection **nc, char *buf, size_t bufsz,
                              pb_error_t *err, pb_status_t *st)
{
    *nc = NULL;
    natsOptions *o;
    if ((*st = build_options(cfg, fac, servers, n, tls, &o, err)) != PB_OK)
        return NATS_ERR;
    natsStatus s = natsConnection_Connect(nc, o);
    natsOptions_Destroy(o);
    if (s != NATS_OK) {
        pb_nats_error_text(s, buf, bufsz);
        *nc = NULL;
    }
    return s;
}

/* libnats reports only the error of the last server it tried: each server of a list is tried on
 * its own to learn which fail the TLS handshake. Returns how many do; the first such server
 * and its error go to first. */
static size_t tls_failures(const pb_config_t *cfg, const char *fac, char **servers, size_t n,
                           bool tls, char *first, size_t firstsz)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        natsConnection *nc;
        char buf[300];
        pb_error_t ignored;
        pb_status_t st;
        natsStatus s = try_connect(cfg, fac, &servers[i], 1, tls, &nc, buf, sizeof buf,
                                   &ignored, &st);
        if (s == NATS_OK) {
            natsConnection_Destroy(nc); /* up meanwhile: the next attempt will find it */
            continue;
        }
        if (st != PB_OK || s != NATS_SSL_ERROR)
            continue;
        if (!failed++) {
            char shown[256];
            pb_redact_nats_servers(servers[i], shown, sizeof shown);
            snprintf(first, firstsz, "%s: %s", shown, buf);
        }
    }
    return failed;
}

pb_status_t pb_nats_connect(const pb_config_t *cfg, const char *fac, natsConnection **nc,
                            char *where, size_t wheresz, pb_error_t *err)
{
    *nc = NULL;
    pb_redact_nats_servers(cfg->nats_url, where, wheresz);
    char **servers;
    size_t n;
    bool tls;
    pb_status_t st = pb_nats_servers(cfg->nats_url, &servers, &n, &tls, err);
    if (st != PB_OK)
        return st;
    char buf[300];
    natsStatus s = try_connect(cfg, fac, servers, n, tls, nc, buf, sizeof buf, err, &st);
    size_t tls_failed = 0;
    char first[600] = "";
    if (st == PB_OK && n > 1 &&
        (s == NATS_SSL_ERROR || s == NATS_NO_SERVER || s == NATS_IO_ERROR || s == NATS_TIMEOUT))
        tls_failed = tls_failures(cfg, fac, servers, n, tls, first, sizeof first);
    pb_nats_servers_free(servers, n);
    if (st != PB_OK || s == NATS_OK)
        return st;
    if (n > 1 && tls_failed == n)
        /* a certificate no server of the list presents acceptably: as fatal as with one */
        return pb_fail(err, PB_FATAL,
                       "tls failed with every nats server of %s, e.g. %s (check nats.tls_ca_cert "
                       "and that each certificate names the host of its server in nats.url)",
                       where, first);
    if (tls_failed)
        /* some servers may only be down: retried, and the TLS failure said every time */
        return pb_fail(err, PB_TRANSIENT,
                       "cannot connect to nats at %s: %s; tls failed with %zu of its %zu servers, "
                       "e.g. %s (check nats.tls_ca_cert and the host names of nats.url)",
                       where, buf, tls_failed, n, first);
    switch (s) {
    case NATS_CONNECTION_AUTH_FAILED:
    case NATS_NOT_PERMITTED:
        return pb_fail(err, PB_FATAL, "nats at %s refused the credentials: %s", where, buf);
    case NATS_SECURE_CONNECTION_WANTED:
        return pb_fail(err, PB_FATAL, "nats at %s does not offer TLS, but tls:// or a TLS file "
                                      "is configured: %s", where, buf);
    case NATS_SECURE_CONNECTION_REQUIRED:
        return pb_fail(err, PB_FATAL, "nats at %s requires TLS: use a tls:// URL: %s", where, buf);
    case NATS_SSL_ERROR:
        if (n > 1) /* the last server tried failed TLS, the others are down: retried */
            return pb_fail(err, PB_TRANSIENT, "cannot connect to nats at %s: %s", where, buf);
        /* the server answered and the TLS handshake failed: a certificate that does not
         * verify (another CA, another host name) or TLS settings that do not match; retrying
         * cannot change that */
        return pb_fail(err, PB_FATAL,
                       "tls with nats at %s failed: %s (check nats.tls_ca_cert and that the "
                       "certificate names the host of nats.url)", where, buf);
    case NATS_INVALID_ARG:
    case NATS_ADDRESS_MISSING:
    case NATS_INVALID_SUBJECT:
    case NATS_ILLEGAL_STATE:
        return pb_fail(err, PB_FATAL, "cannot connect to nats at %s: %s", where, buf);
    default:
        return pb_fail(err, PB_TRANSIENT, "cannot connect to nats at %s: %s", where, buf);
    }
}

pb_status_t pb_nats_check_jetstream(jsCtx *js, const char *where, pb_error_t *err)
{
    jsAccountInfo *ai = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetAccountInfo(&ai, js, NULL, &jerr);
    if (s == NATS_OK) {
        jsAccountInfo_Destroy(ai);
        return PB_OK;
    }
    char buf[300];
    pb_nats_error_text(s, buf, sizeof buf);
    if (s == NATS_NO_RESPONDERS || jerr == JSNotEnabledForAccountErr || jerr == JSNotEnabledErr)
        return pb_fail(err, PB_FATAL,
                       "jetstream is not enabled on the nats server at %s (%s): postbox needs "
                       "jetstream, core nats is at-most-once (start nats-server with -js, or "
                       "enable jetstream for the account)", where, buf);
    if (pb_nats_js_transient(s, jerr))
        return pb_fail(err, PB_TRANSIENT, "nats at %s: jetstream account info: %s", where, buf);
    return pb_fail(err, PB_FATAL, "nats at %s: jetstream account info: %s", where, buf);
}

/* ---- subjects ------------------------------------------------------------------------------- */

bool pb_nats_subject_valid(const char *s)
{
    if (!s || !*s)
        return false;
    const char *tok = s;
    for (const char *p = s;; p++) {
        if (*p == '.' || *p == '\0') {
            size_t len = (size_t)(p - tok);
            if (len == 0)
                return false;
            if (len == 1 && (*tok == '*' || *tok == '>'))
                return false;
            if (*p == '\0')
                return true;
            tok = p + 1;
        } else if ((unsigned char)*p <= ' ' || *p == 0x7f) {
            return false;
        }
    }
}

bool pb_nats_subject_matches(const char *pattern, const char *subject)
{
    const char *p = pattern, *s = subject;
    for (;;) {
        size_t plen = strcspn(p, ".");
        size_t slen = strcspn(s, ".");
        if (plen == 1 && *p == '>')
            return slen > 0; /* ">" needs at least one more token */
        if (slen == 0)
            return false;
        if (!(plen == 1 && *p == '*') && (plen != slen || memcmp(p, s, plen) != 0))
            return false;
        p += plen;
        s += slen;
        if (!*p || !*s)
            return !*p && !*s;
        p++;
        s++;
    }
}

pb_status_t pb_nats_config_subjects(const pb_config_t *cfg, char ***subjects, size_t *n,
                                    pb_error_t *err)
{
    *subjects = NULL;
    *n = 0;
    const char *list = cfg->nats_stream_subjects;
    if (strspn(list, " \t") == strlen(list)) {
        if (!*cfg->nats_subject_prefix)
            return pb_fail(err, PB_FATAL, "nats.stream_subjects is empty and so is "
                                          "nats.subject_prefix: name the stream's subjects");
        char **v = pb_malloc(sizeof *v);
        size_t plen = strlen(cfg->nats_subject_prefix);
        v[0] = pb_malloc(plen + 3);
        /* "postbox." -> "postbox.>", "postbox" -> "postbox.>" */
        snprintf(v[0], plen + 3, "%s%s>", cfg->nats_subject_prefix,
                 cfg->nats_subject_prefix[plen - 1] == '.' ? "" : ".");
        *subjects = v;
        *n = 1;
        return PB_OK;
    }
    if (!split_list(list, subjects, n))
        return pb_fail(err, PB_FATAL, "nats.stream_subjects \"%s\": empty subject between "
                                      "commas", list);
    return PB_OK;
}

void pb_nats_stream_desc_free(pb_nats_stream_desc_t *d)
{
    if (!d)
        return;
    free_list(d->subjects, d->nsubjects);
    d->subjects = NULL;
    d->nsubjects = 0;
}

/* ---- the stream ----------------------------------------------------------------------------- */

static const char *fmt_ns(int64_t ns, char *buf, size_t n)
{
    int64_t ms = ns / NS_PER_MS;
    if (ns <= 0)
        snprintf(buf, n, "none");
    else if (ms % 86400000 == 0)
        snprintf(buf, n, "%" PRId64 "d", ms / 86400000);
    else if (ms % 3600000 == 0)
        snprintf(buf, n, "%" PRId64 "h", ms / 3600000);
    else if (ms % 60000 == 0)
        snprintf(buf, n, "%" PRId64 "m", ms / 60000);
    else if (ms % 1000 == 0)
        snprintf(buf, n, "%" PRId64 "s", ms / 1000);
    else
        snprintf(buf, n, "%" PRId64 "ms", ms);
    return buf;
}

static bool has_limit(const jsStreamConfig *sc)
{
    return sc->MaxAge > 0 || sc->MaxMsgs > 0 || sc->MaxBytes > 0;
}

static bool same_subjects(const jsStreamConfig *sc, char **want, size_t n)
{
    if ((size_t)(sc->SubjectsLen < 0 ? 0 : sc->SubjectsLen) != n)
        return false;
    for (size_t i = 0; i < n; i++) {
        bool found = false;
        for (int j = 0; j < sc->SubjectsLen && !found; j++)
            found = strcmp(sc->Subjects[j], want[i]) == 0;
        if (!found)
            return false;
    }
    return true;
}

static int64_t limit_or_unlimited(int64_t v)
{
    return v > 0 ? v : -1;
}

/* The stream configuration the options describe. Subjects are borrowed from subjects. */
static void config_from_options(const pb_config_t *cfg, char **subjects, size_t n,
                                jsStreamConfig *sc)
{
    jsStreamConfig_Init(sc);
    sc->Name = cfg->nats_stream;
    sc->Subjects = (const char **)subjects;
    sc->SubjectsLen = (int)n;
    sc->Retention = js_LimitsPolicy;
    sc->Discard = js_DiscardOld;
    sc->Storage = strcmp(cfg->nats_storage, "memory") == 0 ? js_MemoryStorage : js_FileStorage;
    sc->Replicas = cfg->nats_replicas;
    sc->MaxAge = cfg->nats_max_age * NS_PER_MS;
    sc->MaxMsgs = limit_or_unlimited(cfg->nats_max_msgs);
    sc->MaxBytes = limit_or_unlimited(cfg->nats_max_bytes);
    sc->Duplicates = cfg->nats_duplicate_window * NS_PER_MS;
}

static pb_status_t no_limit(const pb_config_t *cfg, bool configured, pb_error_t *err)
{
    return pb_fail(err, PB_FATAL,
                   "stream \"%s\" has no limit (max_age, max_msgs or max_bytes): it would grow "
                   "without bound; %s, or set nats.allow_unlimited = true to accept that",
                   cfg->nats_stream,
                   configured ? "set nats.max_age, nats.max_msgs or nats.max_bytes"
                              : "give the existing stream a limit (or let postbox manage it "
                                "with nats.stream_create = true and nats.max_age, ...)");
}

static pb_status_t js_fail(natsStatus s, jsErrCode jerr, const char *what, const pb_config_t *cfg,
                           pb_error_t *err)
{
    char buf[300];
    pb_nats_error_text(s, buf, sizeof buf);
    pb_status_t cls = pb_nats_js_transient(s, jerr) ? PB_TRANSIENT : PB_FATAL;
    if (jerr == JSClusterNoPeersErr)
        return pb_fail(err, cls, "%s stream \"%s\": %s (jetstream error %d: fewer cluster "
                                 "servers up than nats.replicas = %lld; retried)", what,
                       cfg->nats_stream, buf, (int)jerr, (long long)cfg->nats_replicas);
    if (jerr)
        return pb_fail(err, cls, "%s stream \"%s\": %s (jetstream error %d)", what,
                       cfg->nats_stream, buf, (int)jerr);
    return pb_fail(err, cls, "%s stream \"%s\": %s", what, cfg->nats_stream, buf);
}

static const char *fmt_limit(int64_t v, char *buf, size_t n)
{
    if (v <= 0)
        snprintf(buf, n, "none");
    else
        snprintf(buf, n, "%" PRId64, v);
    return buf;
}

static void describe(const jsStreamInfo *si, pb_nats_stream_desc_t *d)
{
    const jsStreamConfig *sc = si->Config;
    char subj[160] = "", age[32], dup[32], msgs[32], bytes[32];
    size_t off = 0;
    for (int i = 0; i < sc->SubjectsLen && off < sizeof subj; i++)
        off += (size_t)snprintf(subj + off, sizeof subj - off, "%s%s", i ? "," : "",
                                sc->Subjects[i]);
    snprintf(d->text, sizeof d->text,
             "stream \"%s\" subjects [%s] storage %s replicas %" PRId64 " max_age %s max_msgs "
             "%s max_bytes %s duplicate_window %s messages %" PRIu64,
             sc->Name, subj, sc->Storage == js_MemoryStorage ? "memory" : "file", sc->Replicas,
             fmt_ns(sc->MaxAge, age, sizeof age), fmt_limit(sc->MaxMsgs, msgs, sizeof msgs),
             fmt_limit(sc->MaxBytes, bytes, sizeof bytes),
             fmt_ns(sc->Duplicates, dup, sizeof dup), si->State.Msgs);
    free_list(d->subjects, d->nsubjects);
    d->nsubjects = (size_t)(sc->SubjectsLen > 0 ? sc->SubjectsLen : 0);
    d->subjects = pb_malloc((d->nsubjects ? d->nsubjects : 1) * sizeof *d->subjects);
    for (size_t i = 0; i < d->nsubjects; i++)
        d->subjects[i] = pb_strdup(sc->Subjects[i]);
}

pb_status_t pb_nats_ensure_stream(jsCtx *js, const pb_config_t *cfg, const char *fac,
                                  pb_nats_stream_desc_t *desc, pb_error_t *err)
{
    memset(desc, 0, sizeof *desc);
    if (!*cfg->nats_stream)
        return pb_fail(err, PB_FATAL, "nats.stream is empty: name the jetstream stream");
    if (strpbrk(cfg->nats_stream, ". \t*>/\\"))
        return pb_fail(err, PB_FATAL, "nats.stream \"%s\": a stream name may not contain '.', "
                                      "'*', '>', '/', '\\' or blanks", cfg->nats_stream);
    if (cfg->nats_max_age > 0 && cfg->nats_duplicate_window > cfg->nats_max_age)
        return pb_fail(err, PB_FATAL, "nats.duplicate_window (%lld ms) is longer than "
                                      "nats.max_age (%lld ms)",
                       (long long)cfg->nats_duplicate_window, (long long)cfg->nats_max_age);
    char **subjects;
    size_t nsub;
    pb_status_t st = pb_nats_config_subjects(cfg, &subjects, &nsub, err);
    if (st != PB_OK)
        return st;

    jsStreamConfig want;
    config_from_options(cfg, subjects, nsub, &want);
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    for (int round = 0; round < 2 && st == PB_OK && !si; round++) {
        natsStatus s = js_GetStreamInfo(&si, js, cfg->nats_stream, NULL, &jerr);
        if (s == NATS_OK)
            break;
        if (s != NATS_NOT_FOUND && jerr != JSStreamNotFoundErr) {
            st = js_fail(s, jerr, "looking up", cfg, err);
            break;
        }
        if (!cfg->nats_stream_create) {
            st = pb_fail(err, PB_FATAL, "stream \"%s\" does not exist (create it, or set "
                                        "nats.stream_create = true)", cfg->nats_stream);
            break;
        }
        if (!has_limit(&want) && !cfg->nats_allow_unlimited) {
            st = no_limit(cfg, true, err);
            break;
        }
        s = js_AddStream(&si, js, &want, NULL, &jerr);
        if (s == NATS_OK) {
            desc->created = true;
            break;
        }
        if (jerr == JSStreamNameExistErr)
            continue; /* created by someone else meanwhile: verify it */
        if (jerr == JSStreamSubjectOverlapErr)
            st = pb_fail(err, PB_FATAL, "cannot create stream \"%s\": its subjects overlap with "
                                        "another stream's (set nats.stream_subjects or "
                                        "nats.stream)", cfg->nats_stream);
        else
            st = js_fail(s, jerr, "creating", cfg, err);
    }
    if (st == PB_OK && !si)
        st = pb_fail(err, PB_TRANSIENT, "stream \"%s\": created and gone again", cfg->nats_stream);

    if (st == PB_OK && !desc->created && cfg->nats_stream_create) {
        const jsStreamConfig *have = si->Config;
        if (have->Storage != want.Storage) {
            st = pb_fail(err, PB_FATAL, "stream \"%s\" exists with %s storage, nats.storage is "
                                        "%s: storage cannot be changed (delete the stream or "
                                        "change nats.storage)", cfg->nats_stream,
                         have->Storage == js_MemoryStorage ? "memory" : "file", cfg->nats_storage);
        } else if (!same_subjects(have, subjects, nsub) || have->MaxAge != want.MaxAge ||
                   limit_or_unlimited(have->MaxMsgs) != want.MaxMsgs ||
                   limit_or_unlimited(have->MaxBytes) != want.MaxBytes ||
                   have->Duplicates != want.Duplicates || have->Replicas != want.Replicas) {
            if (!has_limit(&want) && !cfg->nats_allow_unlimited) {
                st = no_limit(cfg, true, err);
            } else {
                jsStreamInfo *upd = NULL;
                natsStatus s = js_UpdateStream(&upd, js, &want, NULL, &jerr);
                if (s != NATS_OK) {
                    st = js_fail(s, jerr, "updating the settings of existing", cfg, err);
                } else {
                    jsStreamInfo_Destroy(si);
                    si = upd;
                    desc->updated = true;
                }
            }
        }
    }
    if (st == PB_OK && !has_limit(si->Config) && !cfg->nats_allow_unlimited)
        st = no_limit(cfg, cfg->nats_stream_create, err);
    if (st == PB_OK) {
        describe(si, desc);
        desc->leaderless = si->Cluster && (!si->Cluster->Leader || !*si->Cluster->Leader);
        char dup[32], down[32];
        if (si->Config->Duplicates < cfg->nats_relay_worst_downtime * NS_PER_MS)
            log_warn(fac, "stream \"%s\" has a duplicate window of %s, shorter than "
                          "nats.relay_worst_downtime %s: events a relay published just before "
                          "a longer outage are stored twice (the consumers' inbox still drops "
                          "them)", cfg->nats_stream,
                     fmt_ns(si->Config->Duplicates, dup, sizeof dup),
                     fmt_ns(cfg->nats_relay_worst_downtime * NS_PER_MS, down, sizeof down));
        if (si->Config->Storage == js_MemoryStorage)
            log_warn(fac, "stream \"%s\" uses memory storage: its messages are lost when the "
                          "server stops", cfg->nats_stream);
        if (!has_limit(si->Config))
            log_warn(fac, "stream \"%s\" has no limit (allowed by nats.allow_unlimited): it "
                          "grows without bound", cfg->nats_stream);
    }
    jsStreamInfo_Destroy(si);
    free_list(subjects, nsub);
    return st;
}

bool pb_nats_render_subject(const pb_config_t *cfg, const pb_event_t *ev, char *out, size_t n)
{
    size_t plen = strlen(cfg->nats_subject_prefix);
    if (plen >= n)
        return false;
    memcpy(out, cfg->nats_subject_prefix, plen);
    return pb_route_render(cfg->nats_subject, ev, out + plen, n - plen);
}

pb_status_t pb_nats_check_coverage(const pb_config_t *cfg, const pb_nats_stream_desc_t *d,
                                   pb_error_t *err)
{
    pb_event_t sample = {.event_id = "00000000-0000-0000-0000-000000000000",
                         .aggregate_type = "aggregate",
                         .aggregate_id = "1",
                         .event_type = "event.v1"};
    char subj[PB_NATS_SUBJECT_MAX];
    if (!pb_nats_render_subject(cfg, &sample, subj, sizeof subj) || !pb_nats_subject_valid(subj))
        return pb_fail(err, PB_FATAL, "nats.subject_prefix + nats.subject give the invalid "
                                      "subject \"%s\" for a sample event", subj);
    for (size_t i = 0; i < d->nsubjects; i++)
        if (pb_nats_subject_matches(d->subjects[i], subj))
            return PB_OK;
    return pb_fail(err, PB_FATAL,
                   "subject \"%s\" (nats.subject_prefix + nats.subject for a sample event) is "
                   "not stored by %s: publishing would fail (set nats.stream_subjects or "
                   "nats.subject_prefix)", subj, d->text);
}

pb_status_t pb_nats_inspect_stream(jsCtx *js, const pb_config_t *cfg, bool *exists,
                                   bool *limited, pb_nats_stream_desc_t *desc, pb_error_t *err)
{
    memset(desc, 0, sizeof *desc);
    *exists = *limited = false;
    jsStreamInfo *si = NULL;
    jsErrCode jerr = 0;
    natsStatus s = js_GetStreamInfo(&si, js, cfg->nats_stream, NULL, &jerr);
    if (s == NATS_NOT_FOUND || jerr == JSStreamNotFoundErr)
        return PB_OK;
    if (s != NATS_OK)
        return js_fail(s, jerr, "looking up", cfg, err);
    *exists = true;
    *limited = has_limit(si->Config);
    describe(si, desc);
    jsStreamInfo_Destroy(si);
    return PB_OK;
}
