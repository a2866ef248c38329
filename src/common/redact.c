#include "common/redact.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

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

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
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
        while (in[j] == ' ' || in[j] == '\t')
            j++;
        if (in[j] != '=')
            return 0;
        j++;
        while (in[j] == ' ' || in[j] == '\t')
            j++;
        return j;
    }
    return 0;
}

/* End of a value at in + j: a single-quoted libpq value (backslash escapes), or a bare one up
 * to a blank or the next URL query parameter. */
static size_t value_end(const char *in, size_t j)
{
    if (in[j] == '\'') {
        for (j++; in[j] && in[j] != '\''; j++)
            if (in[j] == '\\' && in[j + 1])
                j++;
        return in[j] ? j + 1 : j;
    }
    for (; in[j] && !is_blank(in[j]) && in[j] != '&'; j++)
        if (in[j] == '\\' && in[j + 1])
            j++;
    return j;
}

static bool token_scheme(const char *scheme, size_t len)
{
    return (len == 4 && strncasecmp(scheme, "nats", 4) == 0) ||
           (len == 3 && strncasecmp(scheme, "tls", 3) == 0);
}

/* The authority of the URL whose "://" is at in + i (scheme from in + scheme): writes it with
 * the secret hidden and returns the offset where copying goes on. */
static size_t redact_url(const char *in, size_t scheme, size_t i, sink_t *o)
{
    size_t a = i + 3;
    put(o, in + i, 3);
    /* the userinfo of this URL ends at the last '@' before the next URL or blank: a password
     * with an unencoded '@', '/' or ',' is hidden whole */
    size_t e = a, at = 0;
    bool has_at = false;
    while (in[e] && !is_blank(in[e]) && strncmp(in + e, "://", 3) != 0) {
        if (in[e] == '@')
            at = e, has_at = true;
        e++;
    }
    if (is_blank(in[e]) && strcspn(in + a, "/?#") >= e - a) {
        /* a blank in the authority (a password left unencoded, which the URL parsers take: their
         * userinfo ends at the last '@' before '/', '?' or '#'): so does this one, on the line,
         * so a text after such a URL may be hidden too, never the password shown */
        for (size_t f = e; in[f] && in[f] != '\n' && !strchr("/?#", in[f]) &&
                           strncmp(in + f, "://", 3) != 0;
             f++)
            if (in[f] == '@')
                at = f, has_at = true;
    }
    if (has_at) {
        /* every password is hidden, "password" too: it may be the real one (usage texts read
         * "user:***@host" then) */
        const char *colon = memchr(in + a, ':', at - a);
        if (colon) {
            put(o, in + a, (size_t)(colon - (in + a)) + 1);
            put(o, HIDDEN, 3);
            return at;
        }
        if (token_scheme(in + scheme, i - scheme) && at > a) {
            put(o, HIDDEN, 3); /* nats://TOKEN@host */
            return at;
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
        bool digits = true;
        while (q < e && in[q] != '/' && in[q] != '?' && in[q] != '#' && in[q] != ',') {
            digits = digits && isdigit((unsigned char)in[q]);
            q++;
        }
        if (q > p && !digits) {
            put(o, in + a, p - a);
            put(o, HIDDEN, 3);
            return q;
        }
    }
    return a;
}

/* Whether a text can hold a secret at all: a URL, or a word every secret key starts with
 * ("pass" for password, sslpassword and passwd). Most log records have neither, and are copied
 * without the scan below. */
static bool may_hold_secret(const char *in)
{
    for (const char *p = in; *p; p++) {
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

void pb_redact_secret(const char *in, char *out, size_t outsz)
{
    if (!outsz)
        return;
    sink_t o = {out, 0, outsz};
    out[0] = '\0';
    if (!in)
        return;
    if (!may_hold_secret(in)) {
        put(&o, in, strlen(in));
        return;
    }
    size_t i = 0, scheme = 0;
    while (in[i] && o.len + 1 < o.cap) {
        if (strncmp(in + i, "://", 3) == 0 && i > scheme) {
            i = redact_url(in, scheme, i, &o);
            scheme = i;
            continue;
        }
        size_t v = secret_value_at(in, i);
        if (v) {
            put(&o, in + i, v - i);
            put(&o, HIDDEN, 3);
            i = value_end(in, v);
            scheme = i;
            continue;
        }
        if (!scheme_char(in[i]))
            scheme = i + 1; /* a scheme starts after anything that cannot be part of one */
        put(&o, in + i, 1);
        i++;
    }
}
