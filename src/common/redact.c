#include "common/redact.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <stdlib.h>
#include <strings.h>

#include "common/str.h"

/* Keys whose value is a secret, in URL queries and libpq key=value strings. */
static const char *const secret_keys[] = {"password", "sslpassword", "passwd", "token", "secret"};
#define HIDDEN "***"

typedef struct sink {
    char *buf;
    size_t len;
    size_t cap; /* > 0 */
} sink_t;

static void put(sink_t *o, const char *s, size_t n)
{
    size_t room = o->cap - 1 - o->len;
    if (n > room)
        n = room;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

static bool scheme_char(char c)
{
    return isalnum((unsigned char)c) || c == '+' || c == '-' || c == '.';
}

static bool key_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '-';
}

/* White space as libpq's parser (isspace) and libnats's trimming see it. */
static bool is_blank(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* At in + i a secret key starts (not inside a longer word) and '=' follows it, blanks allowed
 * around: returns the offset of its value, else 0. */
static size_t secret_value_at(const char *in, size_t i)
{
    if (i > 0 && key_char(in[i - 1]))
        return 0;
    for (size_t k = 0; k < sizeof secret_keys / sizeof secret_keys[0]; k++) {
        size_t len = strlen(secret_keys[k]);
        if (strncasecmp(in + i, secret_keys[k], len) != 0 || key_char(in[i + len]))
            continue;
        size_t j = i + len;
        while (is_blank(in[j]))
            j++;
        if (in[j] != '=')
            return 0;
        j++;
        while (is_blank(in[j]))
            j++;
        return j;
    }
    return 0;
}

/* End of a value at in + j: a quoted one (single quotes in libpq strings, double quotes in JAAS
 * lines; backslash escapes), or a bare one up to a blank or, for a URL query parameter (query),
 * the next parameter ('&'). */
static size_t value_end(const char *in, size_t j, bool query)
{
    if (in[j] == '\'' || in[j] == '"') {
        char quote = in[j];
        for (j++; in[j] && in[j] != quote; j++)
            if (in[j] == '\\' && in[j + 1])
                j++;
        return in[j] ? j + 1 : j;
    }
    for (; in[j] && !is_blank(in[j]) && !(query && in[j] == '&'); j++) /* libpq: no '#' fragments */
        if (in[j] == '\\' && in[j + 1])
            j++;
    return j;
}

/* NATS's schemes (ws and wss: its websocket ones): a userinfo without ':' is a token, and a comma
 * starts the next server of the list (postbox hands libnats nats.url split at commas). */
static bool nats_scheme(const char *scheme, size_t len)
{
    static const char *const names[] = {"nats", "tls", "ws", "wss"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (len == strlen(names[k]) && strncasecmp(scheme, names[k], len) == 0)
            return true;
    return false;
}

/* Whether in[p, q) is a port: digits, then at most closing punctuation of the text around the
 * URL ("at nats://h:4222: refused", "(amqp://h:5672)."). */
static bool port_text(const char *in, size_t p, size_t q)
{
    size_t d = p;
    while (d < q && isdigit((unsigned char)in[d]))
        d++;
    if (d == p)
        return false;
    for (; d < q; d++)
        if (!strchr(":;.)]}>\"'", in[d]))
            return false;
    return true;
}

/* Where copying goes on after in[from, to) is hidden: at to, or past the end of a key = value
 * secret that starts inside the hidden text and goes on after it. */
static size_t hidden_end(const char *in, size_t from, size_t to)
{
    /* every key in the range counts, also one inside another's value (readers differ on where
     * a value ends: libpq skips blanks after '=', a JAAS reader does not; quotes pair up
     * differently), and so does every key in what that hides in turn */
    size_t resume = to;
    for (size_t k = from; k < resume; k++) {
        size_t v = secret_value_at(in, k);
        size_t end = v ? value_end(in, v, false) : 0;
        resume = end > resume ? end : resume;
    }
    return resume;
}

/* Whether a key = value secret starts in in[from, to) (a user name shown must hold none). */
static bool has_secret_key(const char *in, size_t from, size_t to)
{
    for (size_t k = from; k < to; k++)
        if (secret_value_at(in, k))
            return true;
    return false;
}

/* The authority of a URL, from in + a (after "://"), with its secret hidden; returns the offset
 * where copying goes on. In a NATS list (nats) a comma ends it. */
static size_t redact_authority(const char *in, size_t a, bool nats, sink_t *o)
{
    /* the userinfo ends at the last '@' before the next URL or blank: a password with an
     * unencoded '@' or '/' (or, outside NATS lists, ',') is hidden whole */
    size_t e = a, at = 0;
    bool has_at = false;
    while (in[e] && !is_blank(in[e]) && strncmp(in + e, "://", 3) != 0 && !(nats && in[e] == ',')) {
        if (in[e] == '@')
            at = e, has_at = true;
        e++;
    }
    if (is_blank(in[e]) && strcspn(in + a, "/") >= e - a) {
        /* a blank in the authority (a password left unencoded, which the URL parsers take: their
         * userinfo ends at an '@' before the next '/', '?' and '#' included): so does this one,
         * so a text after such a URL may be hidden too, never the password shown */
        for (size_t f = e; in[f] && in[f] != '/' &&
                           !(nats && in[f] == ',') && strncmp(in + f, "://", 3) != 0;
             f++)
            if (in[f] == '@')
                at = f, has_at = true;
    }
    if (has_at) {
        /* every password is hidden, "password" too: it may be the real one (usage texts read
         * "user:***@host" then); a key = value secret that starts in the hidden part is hidden
         * to its end, past the '@' if it goes on there */
        size_t resume = hidden_end(in, a, at);
        const char *colon = memchr(in + a, ':', at - a);
        if (colon && colon < in + e && !has_secret_key(in, a, (size_t)(colon - in))) {
            put(o, in + a, (size_t)(colon - (in + a)) + 1);
            put(o, HIDDEN, 3);
            return resume;
        }
        if (colon) {
            put(o, HIDDEN, 3); /* the user is not told from text after a blank: all hidden */
            return resume;
        }
        if (nats && at > a) {
            put(o, HIDDEN, 3); /* nats://TOKEN@host */
            return resume;
        }
        return a; /* a user name alone: scanned on like free text */
    }
    /* no '@': "scheme://user:secret" with the host forgotten shows the password as a port */
    size_t h = a;
    if (in[h] == '[')
        while (h < e && in[h] != ']')
            h++;
    while (h < e && in[h] != ':' && in[h] != '/' && in[h] != '?' && in[h] != ',')
        h++;
    if (h < e && in[h] == ':') {
        size_t p = h + 1, q = p;
        while (q < e && in[q] != '/' && in[q] != '?' && in[q] != '#' && in[q] != ',')
            q++;
        if (q > p && !port_text(in, p, q)) {
            put(o, in + a, p - a);
            put(o, HIDDEN, 3);
            return hidden_end(in, p, q);
        }
    }
    return a;
}

/* Whether a word may start at in + i: a URL without a scheme begins there. */
static bool word_start(const char *in, size_t i)
{
    return i == 0 || is_blank(in[i - 1]) || strchr(",\"'(<[=", in[i - 1]);
}

/* A URL without a scheme at in + i, which libnats reads as nats://: the password of
 * "user:password@host" is hidden, and in a NATS server list (list) the token of "token@host".
 * Returns where copying goes on, i when there is nothing to hide. */
static size_t redact_schemeless(const char *in, size_t i, bool list, sink_t *o)
{
    size_t e = i, at = 0;
    bool has_at = false;
    for (; in[e] && !is_blank(in[e]) && in[e] != ','; e++) {
        if (strncmp(in + e, "://", 3) == 0)
            return i; /* a URL with a scheme: redact_authority's */
        if (in[e] == '@')
            at = e, has_at = true;
    }
    if (!has_at)
        return i;
    const char *colon = memchr(in + i, ':', at - i);
    if (colon && !has_secret_key(in, i, (size_t)(colon - in))) {
        put(o, in + i, (size_t)(colon - (in + i)) + 1);
        put(o, HIDDEN, 3);
        return hidden_end(in, (size_t)(colon - in), at);
    }
    if (colon || (list && at > i)) {
        put(o, HIDDEN, 3); /* a token, or a "user" that holds a key = value secret */
        return hidden_end(in, i, at);
    }
    return i;
}

/* Whether a text can hold a secret at all: a URL, a userinfo ('@'), or a word every secret key
 * starts with ("pass" for password, sslpassword and passwd). Most log records have none, and
 * are copied without the scan below. */
static bool may_hold_secret(const char *in)
{
    for (const char *p = in; *p; p++) {
        if (*p == '@')
            return true;
        switch (*p | 0x20) { /* ASCII letters to lower case; ':' stays ':' */
        case ':':
            if (p[1] == '/' && p[2] == '/')
                return true;
            break;
        case 'p':
            if (strncasecmp(p, "pass", 4) == 0)
                return true;
            break;
        case 't':
            if (strncasecmp(p, "token", 5) == 0)
                return true;
            break;
        case 's':
            if (strncasecmp(p, "secret", 6) == 0)
                return true;
            break;
        }
    }
    return false;
}

/* Whether the key at in + i is a parameter of a URL's query: after '?' or '&', in a word that
 * holds "://" (elsewhere '&' is part of a value, as in libpq's key=value strings). */
static bool in_url_query(const char *in, size_t i)
{
    if (i == 0 || (in[i - 1] != '?' && in[i - 1] != '&'))
        return false;
    for (size_t k = i; k >= 3 && !is_blank(in[k - 1]); k--)
        if (strncmp(in + k - 3, "://", 3) == 0)
            return true;
    return false;
}

static void scan(const char *in, sink_t *o)
{
    if (!may_hold_secret(in)) {
        put(o, in, strlen(in));
        return;
    }
    size_t i = 0, scheme = 0;
    bool list = false; /* in a NATS server list: a server's userinfo without ':' is a token */
    while (in[i] && o->len + 1 < o->cap) {
        if (strncmp(in + i, "://", 3) == 0) { /* an empty scheme too: hiding more is safe */
            bool nats = nats_scheme(in + scheme, i - scheme);
            put(o, in + i, 3);
            i = redact_authority(in, i + 3, nats, o);
            list = nats;
            scheme = i;
            continue;
        }
        size_t v = secret_value_at(in, i);
        if (v) {
            put(o, in + i, v - i);
            put(o, HIDDEN, 3);
            /* libpq takes '&' into a key=value password: only a query parameter ends there;
             * "password= password=x" is libpq's "password=x" and a JAAS reader's "x": both go */
            i = hidden_end(in, v, value_end(in, v, in_url_query(in, i)));
            scheme = i;
            continue;
        }
        if (word_start(in, i)) {
            size_t j = redact_schemeless(in, i, list, o);
            if (j != i) {
                i = scheme = j;
                continue;
            }
        }
        if (is_blank(in[i]) && !(i > 0 && in[i - 1] == ','))
            list = false; /* "h1, h2" is still one list (libnats trims its servers) */
        if (!scheme_char(in[i]))
            scheme = i + 1; /* a scheme starts after anything that cannot be part of one */
        put(o, in + i, 1);
        i++;
    }
}

void pb_redact_secret(const char *in, char *out, size_t outsz)
{
    if (!outsz)
        return;
    sink_t o = {out, 0, outsz};
    out[0] = '\0';
    if (in)
        scan(in, &o);
}

/* One server of nats.url, in[0, n), as libnats reads it: the scheme ends at the first "://",
 * the userinfo at the last '@' after it, the user at its first ':' (without one, a token). */
static void redact_server(const char *in, size_t n, sink_t *o)
{
    while (n && isspace((unsigned char)*in)) { /* libnats trims each server */
        put(o, in++, 1);
        n--;
    }
    size_t rest = 0;
    for (size_t k = 0; k + 3 <= n; k++)
        if (memcmp(in + k, "://", 3) == 0) {
            rest = k + 3;
            break;
        }
    size_t at = n;
    for (size_t k = rest; k < n; k++)
        if (in[k] == '@')
            at = k;
    size_t from = at < n ? at : 0;
    char *copy = pb_malloc(n - from + 1);
    memcpy(copy, in + from, n - from);
    copy[n - from] = '\0';
    if (at < n) {
        put(o, in, rest);
        const char *colon = memchr(in + rest, ':', at - rest);
        if (colon)
            put(o, in + rest, (size_t)(colon - in) + 1 - rest);
        if (colon ? colon + 1 < in + at : at > rest)
            put(o, HIDDEN, 3);
    }
    scan(copy, o); /* the rest (or, without userinfo, the whole server) as any text */
    free(copy);
}

void pb_redact_nats_servers(const char *in, char *out, size_t outsz)
{
    if (!outsz)
        return;
    sink_t o = {out, 0, outsz};
    out[0] = '\0';
    for (const char *p = in; p;) {
        size_t n = strcspn(p, ",");
        redact_server(p, n, &o);
        if (!p[n])
            break;
        put(&o, ",", 1);
        p += n + 1;
    }
}
