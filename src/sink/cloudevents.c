#include "sink/cloudevents.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>
#include <libpq-fe.h>

#include "common/bytes.h"
#include "sink/sink.h"

static const char *const attr_names[PB_CE_NATTRS] = {
    [PB_CE_SPECVERSION_I] = "specversion",
    [PB_CE_ID_I] = "id",
    [PB_CE_SOURCE_I] = "source",
    [PB_CE_TYPE_I] = "type",
    [PB_CE_SUBJECT_I] = "subject",
    [PB_CE_TIME_I] = "time",
    [PB_CE_DATACONTENTTYPE_I] = "datacontenttype",
    [PB_CE_TRACEPARENT_I] = "traceparent",
    [PB_CE_TRACESTATE_I] = "tracestate",
    [PB_CE_SEQUENCE_I] = PB_CE_SEQUENCE_ATTR,
};

/* ---- characters ------------------------------------------------------------------------------ */

static const char hex_upper[] = "0123456789ABCDEF";

static bool is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static bool is_hex(unsigned char c)
{
    return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* RFC 3986: unreserved = ALPHA / DIGIT / "-" / "." / "_" / "~" */
static bool is_unreserved(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* sub-delims = "!" / "$" / "&" / "'" / "(" / ")" / "*" / "+" / "," / ";" / "=" */
static bool is_sub_delim(unsigned char c)
{
    return c && strchr("!$&'()*+,;=", c) != NULL;
}

/* pchar without pct-encoded (checked apart): unreserved / sub-delims / ":" / "@" */
static bool is_pchar(unsigned char c)
{
    return is_unreserved(c) || is_sub_delim(c) || c == ':' || c == '@';
}

/* Where in p[0..len) the byte-by-byte look must start: the first byte that the word test
 * `candidate` flags, else len (the bytes after the last whole word are tested as one word that
 * overlaps the one before). */
static inline size_t first_candidate(const unsigned char *p, size_t len,
                                     uint64_t (*candidate)(uint64_t))
{
    size_t i = 0;
    for (uint64_t f; i + 8 <= len; i += 8)
        if ((f = candidate(pb_bytes_load(p + i))))
            return i + pb_bytes_first(f);
    return i < len && len >= 8 && !candidate(pb_bytes_load(p + len - 8)) ? len : i;
}

/* Whether w holds a byte has_control must look at: C0, DEL, or the lead byte of C1. */
static inline uint64_t control_candidate(uint64_t w)
{
    return pb_bytes_below(w, 0x20) | pb_bytes_has(w, 0x7f) | pb_bytes_has(w, 0xc2);
}

/* Whether s[0..len) holds a control character: C0, DEL, or C1 (U+0080..U+009F, in UTF-8 the
 * bytes C2 80..C2 9F). A CloudEvents String may hold none. */
static bool has_control(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = first_candidate(p, len, control_candidate); i < len; i++) {
        if (p[i] < 0x20 || p[i] == 0x7f)
            return true;
        if (p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
            return true;
    }
    return false;
}

static bool nats_needs_encoding(unsigned char c)
{
    return c <= 0x20 || c >= 0x7f || c == '"' || c == '%';
}

/* Whether w holds a byte nats_needs_encoding may hold true for. */
static inline uint64_t nats_candidate(uint64_t w)
{
    return pb_bytes_below(w, 0x21) | pb_bytes_high(w) | pb_bytes_has(w, 0x7f) |
           pb_bytes_has(w, '"') | pb_bytes_has(w, '%');
}

/* The length of the prefix of s[0..len) that the NATS binding leaves as it is. */
static size_t nats_plain_prefix(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = first_candidate(p, len, nats_candidate);
    while (i < len && !nats_needs_encoding(p[i]))
        i++;
    return i;
}

bool pb_ce_nats_encode(pb_buf_t *b, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = nats_plain_prefix(s, len);
    pb_buf_append(b, s, i);
    if (i == len)
        return false;
    for (; i < len; i++) {
        if (nats_needs_encoding(p[i])) {
            char esc[3] = {'%', hex_upper[p[i] >> 4], hex_upper[p[i] & 15]};
            pb_buf_append(b, esc, 3);
        } else {
            pb_buf_putc(b, (char)p[i]);
        }
    }
    return true;
}

/* ---- the source: RFC 3986 URI-reference ------------------------------------------------------ */

/* Checks s[*i..end) against a component's characters (ok, plus pct-encoded), moving *i to the
 * first byte that is neither. False (with *i at the offending '%') on a malformed escape. */
static bool scan_chars(const char *s, size_t *i, size_t end, bool (*ok)(unsigned char))
{
    while (*i < end) {
        unsigned char c = (unsigned char)s[*i];
        if (c == '%') {
            if (*i + 2 >= end || !is_hex((unsigned char)s[*i + 1]) ||
                !is_hex((unsigned char)s[*i + 2]))
                return false;
            *i += 3;
            continue;
        }
        if (!ok(c))
            return true;
        (*i)++;
    }
    return true;
}

static bool userinfo_char(unsigned char c)
{
    return is_unreserved(c) || is_sub_delim(c) || c == ':';
}

static bool regname_char(unsigned char c)
{
    return is_unreserved(c) || is_sub_delim(c);
}

static bool path_char(unsigned char c)
{
    return is_pchar(c) || c == '/';
}

static bool query_char(unsigned char c)
{
    return is_pchar(c) || c == '/' || c == '?';
}

/* "character 'X' at offset N: why" */
static pb_status_t source_error(const char *s, size_t at, const char *why, pb_error_t *err)
{
    char shown[200], ch[16] = "";
    pb_text_escape(shown, sizeof shown, s);
    if ((unsigned char)s[at] < 0x80) {
        char one[2] = {s[at], '\0'};
        pb_text_escape(ch, sizeof ch, one);
    } else {
        snprintf(ch, sizeof ch, "\\x%02x", (unsigned char)s[at]);
    }
    return pb_fail(err, PB_FATAL,
                   "relay.cloudevents_source \"%s\" is not a URI-reference (RFC 3986): "
                   "character '%s' at offset %zu: %s (e.g. urn:example:orders, "
                   "https://example.com/orders or /orders; percent-encode other characters)",
                   shown, ch, at, why);
}

/* The authority s[start..end) (after "//"): [ userinfo "@" ] host [ ":" port ]. */
static pb_status_t check_authority(const char *s, size_t start, size_t end, pb_error_t *err)
{
    size_t i = start;
    const char *at = memchr(s + start, '@', end - start);
    if (at) {
        size_t ue = (size_t)(at - s);
        if (!scan_chars(s, &i, ue, userinfo_char))
            return source_error(s, i, "a malformed percent escape", err);
        if (i < ue)
            return source_error(s, i, "not allowed in the user information", err);
        i = ue + 1;
    }
    if (i < end && s[i] == '[') { /* IP-literal: IPv6address / IPvFuture */
        size_t j = i + 1;
        bool future = j < end && (s[j] == 'v' || s[j] == 'V');
        while (j < end && s[j] != ']') {
            unsigned char c = (unsigned char)s[j];
            bool ok = future ? (is_unreserved(c) || is_sub_delim(c) || c == ':')
                             : (is_hex(c) || c == ':' || c == '.');
            if (!ok)
                return source_error(s, j, "not allowed in an IP literal", err);
            j++;
        }
        if (j >= end)
            return source_error(s, i, "an IP literal without its closing ']'", err);
        if (j == i + 1)
            return source_error(s, i, "an empty IP literal", err);
        i = j + 1;
    } else {
        if (!scan_chars(s, &i, end, regname_char))
            return source_error(s, i, "a malformed percent escape", err);
    }
    if (i < end && s[i] == ':') {
        for (i++; i < end; i++)
            if (!is_digit((unsigned char)s[i]))
                return source_error(s, i, "not allowed in the port (digits only)", err);
    }
    if (i < end)
        return source_error(s, i, "not allowed in the host", err);
    return PB_OK;
}

pb_status_t pb_ce_check_source(const char *s, pb_error_t *err)
{
    if (!s || !*s)
        return PB_OK; /* the default */
    size_t len = strlen(s), i = 0;
    /* scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ) ":" */
    bool scheme = false;
    if (is_alpha((unsigned char)s[0])) {
        size_t j = 1;
        while (j < len && (is_alpha((unsigned char)s[j]) || is_digit((unsigned char)s[j]) ||
                           s[j] == '+' || s[j] == '-' || s[j] == '.'))
            j++;
        if (j < len && s[j] == ':') {
            scheme = true;
            i = j + 1;
        }
    }
    if (!scheme) { /* relative-ref: its first segment (path-noscheme) holds no ':' */
        size_t first = strcspn(s, ":/?#");
        if (s[first] == ':')
            return source_error(s, first, "no scheme before it (a letter, then letters, digits, "
                                          "+ - or .), nor a path segment in front of it", err);
    }
    /* hier-part / relative-part */
    if (i + 1 < len && s[i] == '/' && s[i + 1] == '/') {
        size_t start = i + 2, end = start;
        while (end < len && s[end] != '/' && s[end] != '?' && s[end] != '#')
            end++;
        pb_status_t st = check_authority(s, start, end, err);
        if (st != PB_OK)
            return st;
        i = end;
    }
    if (!scan_chars(s, &i, len, path_char))
        return source_error(s, i, "a malformed percent escape", err);
    if (i < len && s[i] == '?') {
        i++;
        if (!scan_chars(s, &i, len, query_char))
            return source_error(s, i, "a malformed percent escape", err);
    }
    if (i < len && s[i] == '#') {
        i++;
        if (!scan_chars(s, &i, len, query_char))
            return source_error(s, i, "a malformed percent escape", err);
    }
    if (i < len)
        return source_error(s, i, "not allowed there", err);
    return PB_OK;
}

/* ---- the default source ---------------------------------------------------------------------- */

/* The login name of this process, as libpq takes it for a user that is not given. */
static void login_name(char *out, size_t n)
{
    struct passwd pw, *res = NULL;
    char buf[1024];
    if (getpwuid_r(geteuid(), &pw, buf, sizeof buf, &res) == 0 && res && res->pw_name)
        snprintf(out, n, "%s", res->pw_name);
    else
        snprintf(out, n, "postgres");
}

void pb_ce_default_source(const char *dsn, char *out, size_t n)
{
    char db[256] = "", user[256] = "";
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(dsn ? dsn : "", &errmsg);
    PQfreemem(errmsg);
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (o->val && *o->val && strcmp(o->keyword, "dbname") == 0)
            snprintf(db, sizeof db, "%s", o->val);
        else if (o->val && *o->val && strcmp(o->keyword, "user") == 0)
            snprintf(user, sizeof user, "%s", o->val);
    }
    PQconninfoFree(opts);
    const char *env;
    if (!*db && (env = getenv("PGDATABASE")) && *env)
        snprintf(db, sizeof db, "%s", env);
    if (!*db && !*user && (env = getenv("PGUSER")) && *env)
        snprintf(user, sizeof user, "%s", env);
    if (!*db && !*user)
        login_name(user, sizeof user);
    const char *name = *db ? db : user;

    /* "/postbox/" + the name as a path segment: pchar kept, every other byte %XY */
    size_t k = (size_t)snprintf(out, n, "%s", PB_CE_SOURCE_DEFAULT_PREFIX);
    for (const unsigned char *p = (const unsigned char *)name; *p && k + 4 <= n; p++) {
        if (is_pchar(*p)) {
            out[k++] = (char)*p;
        } else {
            out[k++] = '%';
            out[k++] = hex_upper[*p >> 4];
            out[k++] = hex_upper[*p & 15];
        }
    }
    if (k < n)
        out[k] = '\0';
}

/* ---- the sink's state ------------------------------------------------------------------------ */

/* The attributes a Redis entry holds in postbox's own fields (event_id, event_type, created_at,
 * traceparent, tracestate, aggregate_sequence): not written twice, an entry lives in memory. */
static bool redis_own_field(int a)
{
    return a == PB_CE_ID_I || a == PB_CE_TYPE_I || a == PB_CE_TIME_I ||
           a == PB_CE_TRACEPARENT_I || a == PB_CE_TRACESTATE_I || a == PB_CE_SEQUENCE_I;
}

pb_status_t pb_ce_new(const pb_config_t *cfg, pb_ce_binding_t binding, const char *prefix,
                      pb_ce_t **out, pb_error_t *err)
{
    *out = NULL;
    pb_status_t st = pb_ce_check_source(cfg->relay_cloudevents_source, err);
    if (st != PB_OK)
        return st;
    const char *pfx = binding == PB_CE_AMQP   ? (prefix ? prefix : "cloudEvents_")
                      : binding == PB_CE_NATS ? "ce-"
                      : binding == PB_CE_JSON ? ""
                                              : "ce_";
    pb_ce_t *ce = pb_malloc(sizeof *ce);
    memset(ce, 0, sizeof *ce);
    ce->binding = binding;
    for (int a = 0; a < PB_CE_NATTRS; a++) {
        if (a == PB_CE_DATACONTENTTYPE_I && binding == PB_CE_AMQP)
            ce->names[a][0] = '\0'; /* the content_type property */
        else if (binding == PB_CE_REDIS && redis_own_field(a))
            ce->names[a][0] = '\0'; /* a field postbox's entry has already */
        else if (a == PB_CE_DATACONTENTTYPE_I && binding == PB_CE_KAFKA)
            snprintf(ce->names[a], PB_CE_NAME_MAX, "content-type");
        else
            snprintf(ce->names[a], PB_CE_NAME_MAX, "%s%s", pfx, attr_names[a]);
        ce->name_len[a] = strlen(ce->names[a]);
    }
    char dflt[1024];
    const char *source = cfg->relay_cloudevents_source;
    if (!*source) {
        pb_ce_default_source(cfg->postgres_dsn, dflt, sizeof dflt);
        source = dflt;
    }
    pb_buf_t b = {0};
    if (binding == PB_CE_NATS)
        pb_ce_nats_encode(&b, source, strlen(source));
    else
        pb_buf_puts(&b, source);
    ce->source = b.data; /* owned: freed with ce */
    ce->source_len = b.len;
    *out = ce;
    return PB_OK;
}

void pb_ce_free(pb_ce_t *ce)
{
    if (!ce)
        return;
    free(ce->source);
    pb_buf_free(&ce->scratch);
    free(ce);
}

bool pb_ce_owns(const pb_ce_t *ce, const char *name, size_t len)
{
    /* every name starts with c or C (ce_, ce-, cloudEvents, content-type): most stop here */
    if (!ce || !len || (name[0] != 'c' && name[0] != 'C'))
        return false;
    for (int a = 0; a < PB_CE_NATTRS; a++)
        if (ce->name_len[a] == len && strncasecmp(name, ce->names[a], len) == 0)
            return true;
    return false;
}

bool pb_ce_check_event(const pb_event_t *ev, pb_result_t *res)
{
    static const char *const what[4] = {"event_id", "event_type", "aggregate_type",
                                        "aggregate_id"};
    const char *vals[4] = {ev->event_id, ev->event_type, ev->aggregate_type, ev->aggregate_id};
    for (int k = 0; k < 4; k++) {
        if (!vals[k] || (k < 2 && !*vals[k])) {
            pb_result_setf(res, PB_OUT_REJECT, "cloudevents: the event has no %s", what[k]);
            return false;
        }
        if (has_control(vals[k], strlen(vals[k]))) {
            pb_result_setf(res, PB_OUT_REJECT, "cloudevents: %s holds a control character, "
                                               "which a CloudEvents attribute may not", what[k]);
            return false;
        }
    }
    return true;
}

/* ---- one event's attributes ------------------------------------------------------------------ */

/* The event's header `key` when it is a non-empty string without control characters. */
static bool trace_header(const pb_event_t *ev, const char *key, const char **val, size_t *len)
{
    if (!pb_header_string(ev, key, val, len) || *len == 0)
        return false;
    return !has_control(*val, *len); /* a NUL inside is a control character too */
}

/* Writes v in decimal into out (at least 21 bytes); returns the length. */
static size_t put_int64(char *out, int64_t v)
{
    char tmp[24];
    size_t k = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    size_t n = 0;
    if (v < 0)
        out[n++] = '-';
    while (k)
        out[n++] = tmp[--k];
    out[n] = '\0';
    return n;
}

/* A value that lives in ce->scratch: its offset there, made a pointer once the buffer is done. */
typedef struct scratch_ref {
    int attr;
    size_t off, len;
} scratch_ref_t;

size_t pb_ce_attrs(pb_ce_t *ce, const pb_event_t *ev, pb_ce_attr_t *out)
{
    bool nats = ce->binding == PB_CE_NATS;
    scratch_ref_t refs[PB_CE_NATTRS];
    size_t nrefs = 0, n = 0;
    pb_buf_reset(&ce->scratch);
#define PUT(a, v, l)                                                                              \
    (out[n] = (pb_ce_attr_t){.name = ce->names[a], .name_len = ce->name_len[a], .value = (v),   \
                             .len = (l)},                                                        \
     n++)
    /* a value that NATS may need encoded: as it is, or encoded into the scratch buffer */
#define PUT_TEXT(a, v, l)                                                                         \
    do {                                                                                          \
        const char *v_ = (v);                                                                     \
        size_t l_ = (l);                                                                          \
        if (nats && nats_plain_prefix(v_, l_) < l_) {                                             \
            size_t off_ = ce->scratch.len;                                                        \
            pb_ce_nats_encode(&ce->scratch, v_, l_);                                              \
            refs[nrefs++] = (scratch_ref_t){(int)n, off_, ce->scratch.len - off_};                \
            PUT(a, NULL, 0);                                                                      \
        } else {                                                                                  \
            PUT(a, v_, l_);                                                                       \
        }                                                                                         \
    } while (0)

    PUT(PB_CE_SPECVERSION_I, PB_CE_SPECVERSION, sizeof PB_CE_SPECVERSION - 1);
    /* pb_ce_check_event refused events without these; an empty text would do no harm here */
    const char *id = ev->event_id ? ev->event_id : "";
    const char *type = ev->event_type ? ev->event_type : "";
    const char *agg_type = ev->aggregate_type ? ev->aggregate_type : "";
    const char *agg_id = ev->aggregate_id ? ev->aggregate_id : "";
    const size_t *named = ce->name_len; /* 0: the binding carries it otherwise */
    if (named[PB_CE_ID_I])
        PUT_TEXT(PB_CE_ID_I, id, strlen(id));
    PUT(PB_CE_SOURCE_I, ce->source, ce->source_len);
    if (named[PB_CE_TYPE_I])
        PUT_TEXT(PB_CE_TYPE_I, type, strlen(type));

    /* subject: aggregate_type/aggregate_id */
    size_t off = ce->scratch.len;
    size_t tl = strlen(agg_type), il = strlen(agg_id);
    if (nats) {
        pb_ce_nats_encode(&ce->scratch, agg_type, tl);
        pb_buf_putc(&ce->scratch, '/');
        pb_ce_nats_encode(&ce->scratch, agg_id, il);
    } else {
        pb_buf_append(&ce->scratch, agg_type, tl);
        pb_buf_putc(&ce->scratch, '/');
        pb_buf_append(&ce->scratch, agg_id, il);
    }
    refs[nrefs++] = (scratch_ref_t){(int)n, off, ce->scratch.len - off};
    PUT(PB_CE_SUBJECT_I, NULL, 0);

    if (named[PB_CE_TIME_I] && ev->created_at_us != 0) {
        if (ce->time_len == 0 || ce->time_us != ev->created_at_us) {
            pb_format_utc_us(ev->created_at_us, ce->time, sizeof ce->time);
            ce->time_len = strlen(ce->time);
            ce->time_us = ev->created_at_us;
        }
        PUT(PB_CE_TIME_I, ce->time, ce->time_len);
    }
    if (named[PB_CE_DATACONTENTTYPE_I])
        PUT(PB_CE_DATACONTENTTYPE_I, PB_CE_DATACONTENTTYPE, sizeof PB_CE_DATACONTENTTYPE - 1);
    const char *tv;
    size_t tlen;
    if (named[PB_CE_TRACEPARENT_I] && trace_header(ev, "traceparent", &tv, &tlen)) {
        PUT_TEXT(PB_CE_TRACEPARENT_I, tv, tlen);
        if (trace_header(ev, "tracestate", &tv, &tlen))
            PUT_TEXT(PB_CE_TRACESTATE_I, tv, tlen);
    }
    if (named[PB_CE_SEQUENCE_I] && ev->sequence > 0) {
        size_t sl = put_int64(ce->sequence, ev->sequence);
        PUT(PB_CE_SEQUENCE_I, ce->sequence, sl);
    }
#undef PUT_TEXT
#undef PUT
    for (size_t r = 0; r < nrefs; r++) {
        out[refs[r].attr].value = ce->scratch.data + refs[r].off;
        out[refs[r].attr].len = refs[r].len;
    }
    return n;
}
