#include "relay/mask.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "common/hmac.h"
#include "common/secret_file.h"
#include "sink/sink.h"

#define HEADERS_PREFIX "headers:"
#define MAX_KEEP 100  /* lastN: N at most this */
#define MAX_INDEX 1000000000u

typedef enum seg_kind { SEG_KEY, SEG_ANY_KEY, SEG_INDEX, SEG_ANY_INDEX } seg_kind_t;

typedef struct seg {
    seg_kind_t kind;
    char *key; /* SEG_KEY: the member name, decoded */
    size_t key_len;
    size_t index; /* SEG_INDEX */
} seg_t;

typedef enum action { ACT_DROP, ACT_LAST, ACT_HMAC } action_t;

typedef struct rule {
    action_t act;
    unsigned keep;  /* ACT_LAST: characters kept at the end */
    bool headers;   /* a path into the headers, not the payload */
    seg_t *segs;
    size_t n_segs;  /* >= 1 */
    char *text;     /* the rule as written, for messages */
} rule_t;

typedef struct type_rules {
    char *type;
    rule_t *rules;
    size_t n;
} type_rules_t;

struct pb_mask {
    type_rules_t *types;
    size_t n_types;
    const type_rules_t *any; /* the "*" entry, or NULL */
    unsigned char *key;
    size_t key_len;
};

/* ---- rules text ------------------------------------------------------------------------- */

static void free_rules(rule_t *rules, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < rules[i].n_segs; k++)
            free(rules[i].segs[k].key);
        free(rules[i].segs);
        free(rules[i].text);
    }
    free(rules);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

/* The end of the rule starting at p: the next ',' outside a quoted name, or the end. A ';'
 * outside quotes is refused: in the config file a ';' after a space starts a comment, which
 * would silently cut the rules after it. */
static const char *rule_end(const char *p, bool *semicolon)
{
    bool quoted = false;
    *semicolon = false;
    for (; *p; p++) {
        if (quoted) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                quoted = false;
        } else if (*p == '"') {
            quoted = true;
        } else if (*p == ',') {
            break;
        } else if (*p == ';') {
            *semicolon = true;
        }
    }
    return p;
}

static bool name_char(char c)
{
    return c && !is_space(c) && c != '.' && c != '[' && c != ']' && c != '"' && c != '*' &&
           c != ',' && c != ';' && (unsigned char)c >= 0x20 && c != 0x7f;
}

static void add_seg(rule_t *r, seg_kind_t kind, const char *key, size_t key_len, size_t index)
{
    r->segs = pb_realloc(r->segs, (r->n_segs + 1) * sizeof *r->segs);
    seg_t *s = &r->segs[r->n_segs++];
    *s = (seg_t){.kind = kind, .key_len = key_len, .index = index};
    if (kind == SEG_KEY) {
        s->key = pb_malloc(key_len + 1);
        memcpy(s->key, key, key_len);
        s->key[key_len] = '\0';
    }
}

/* A bracket segment at *pp ('['): [N], [*] or ["name"]. */
static bool parse_bracket(rule_t *r, const char **pp, const char *end, const char **why)
{
    const char *p = *pp + 1;
    if (p < end && *p == '*') {
        if (p + 1 >= end || p[1] != ']')
            return *why = "expected ']' after '[*'", false;
        add_seg(r, SEG_ANY_INDEX, NULL, 0, 0);
        *pp = p + 2;
        return true;
    }
    if (p < end && *p >= '0' && *p <= '9') {
        size_t idx = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++) {
            idx = idx * 10 + (size_t)(*p - '0');
            if (idx > MAX_INDEX)
                return *why = "array index too large", false;
        }
        if (p >= end || *p != ']')
            return *why = "expected ']' after an array index", false;
        add_seg(r, SEG_INDEX, NULL, 0, idx);
        *pp = p + 1;
        return true;
    }
    if (p < end && *p == '"') {
        pb_buf_t name = {0};
        for (p++; p < end && *p != '"'; p++) {
            if (*p == '\\' && p + 1 < end)
                p++;
            pb_buf_putc(&name, *p);
        }
        if (p + 1 >= end || p[1] != ']' || name.len == 0) {
            *why = p + 1 >= end || p[1] != ']' ? "expected '\"]' after a quoted name"
                                               : "empty quoted name";
            pb_buf_free(&name);
            return false;
        }
        add_seg(r, SEG_KEY, name.data, name.len, 0);
        pb_buf_free(&name);
        *pp = p + 2;
        return true;
    }
    return *why = "expected a number, '*' or a quoted name after '['", false;
}

/* A member segment at *pp: a name or '*'. */
static bool parse_member(rule_t *r, const char **pp, const char *end, const char **why)
{
    const char *p = *pp;
    if (p < end && *p == '*') {
        add_seg(r, SEG_ANY_KEY, NULL, 0, 0);
        *pp = p + 1;
        return true;
    }
    const char *s = p;
    while (p < end && name_char(*p))
        p++;
    if (p == s)
        return *why = p < end && *p == '*' ? "'*' must be a whole segment"
                                           : "expected a field name",
               false;
    add_seg(r, SEG_KEY, s, (size_t)(p - s), 0);
    *pp = p;
    return true;
}

static bool parse_path(rule_t *r, const char *p, const char *end, const char **why)
{
    size_t plen = strlen(HEADERS_PREFIX);
    if ((size_t)(end - p) >= plen && memcmp(p, HEADERS_PREFIX, plen) == 0) {
        r->headers = true;
        p += plen;
    }
    if (p >= end)
        return *why = "no path", false;
    if (!(*p == '[' ? parse_bracket(r, &p, end, why) : parse_member(r, &p, end, why)))
        return false;
    while (p < end) {
        bool ok;
        if (*p == '.') {
            p++;
            ok = parse_member(r, &p, end, why);
        } else if (*p == '[') {
            ok = parse_bracket(r, &p, end, why);
        } else {
            return *why = "unexpected character in the path (quote odd names: [\"a b\"])", false;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* One rule: "<action> <path>" in s[0..n), trimmed. */
static bool parse_rule(rule_t *r, const char *s, size_t n, const char **why)
{
    const char *end = s + n;
    const char *p = s;
    while (p < end && !is_space(*p))
        p++;
    size_t alen = (size_t)(p - s);
    if (alen == 4 && memcmp(s, "drop", 4) == 0) {
        r->act = ACT_DROP;
    } else if (alen == 4 && memcmp(s, "hmac", 4) == 0) {
        r->act = ACT_HMAC;
    } else if (alen > 4 && alen <= 7 && memcmp(s, "last", 4) == 0 &&
               strspn(s + 4, "0123456789") >= alen - 4) {
        r->act = ACT_LAST;
        unsigned keep = 0;
        for (const char *d = s + 4; d < p; d++)
            keep = keep * 10 + (unsigned)(*d - '0');
        if (keep > MAX_KEEP)
            return *why = "lastN keeps at most 100 characters", false;
        r->keep = keep;
    } else {
        return *why = "unknown action (expected drop, hmac or lastN such as last4)", false;
    }
    while (p < end && is_space(*p))
        p++;
    if (p == s + alen)
        return *why = p == end ? "no path after the action" : "expected a space after the action",
               false;
    return parse_path(r, p, end, why);
}

static pb_status_t parse_rules(const char *text, rule_t **out, size_t *n_out, pb_error_t *err)
{
    rule_t *rules = NULL;
    size_t n = 0, idx = 0;
    const char *p = text;
    for (;;) {
        idx++;
        bool semicolon;
        const char *e = rule_end(p, &semicolon);
        const char *s = p, *t = e;
        while (s < t && is_space(*s))
            s++;
        while (t > s && is_space(t[-1]))
            t--;
        int len = (int)(t - s);
        const char *why = NULL;
        if (semicolon)
            why = "rules are separated by ',' (in the config file a ';' after a space starts a "
                  "comment)";
        else if (len == 0)
            why = *text ? "empty rule" : "no rules";
        if (!why && n == PB_MASK_MAX_RULES)
            why = "more than 64 rules";
        if (!why) {
            rules = pb_realloc(rules, (n + 1) * sizeof *rules);
            rule_t *r = &rules[n++];
            *r = (rule_t){0};
            r->text = pb_malloc((size_t)len + 1);
            memcpy(r->text, s, (size_t)len);
            r->text[len] = '\0';
            parse_rule(r, s, (size_t)len, &why);
        }
        if (why) {
            free_rules(rules, n);
            return pb_fail(err, PB_FATAL, "rule %zu \"%.*s\": %s", idx, len > 80 ? 80 : len, s,
                           why);
        }
        if (!*e)
            break;
        p = e + 1;
    }
    *out = rules;
    *n_out = n;
    return PB_OK;
}

pb_status_t pb_mask_check_rules(const char *event_type, const char *rules, bool *uses_hmac,
                                pb_error_t *err)
{
    if (!*event_type)
        return pb_fail(err, PB_FATAL, "an empty event type");
    rule_t *parsed;
    size_t n;
    pb_status_t st = parse_rules(rules, &parsed, &n, err);
    if (st != PB_OK)
        return st;
    bool hmac = false;
    for (size_t i = 0; i < n; i++)
        hmac |= parsed[i].act == ACT_HMAC;
    if (uses_hmac)
        *uses_hmac = hmac;
    free_rules(parsed, n);
    return PB_OK;
}

/* ---- the engine ------------------------------------------------------------------------- */

void pb_mask_free(pb_mask_t *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n_types; i++) {
        free(m->types[i].type);
        free_rules(m->types[i].rules, m->types[i].n);
    }
    free(m->types);
    if (m->key) {
        OPENSSL_cleanse(m->key, m->key_len);
        free(m->key);
    }
    free(m);
}

pb_status_t pb_mask_build(size_t n, char *const *types, char *const *rules,
                          const unsigned char *key, size_t key_len, pb_mask_t **out,
                          pb_error_t *err)
{
    *out = NULL;
    pb_mask_t *m = pb_malloc(sizeof *m);
    *m = (pb_mask_t){0};
    m->types = n ? pb_malloc(n * sizeof *m->types) : NULL;
    bool hmac = false;
    for (size_t i = 0; i < n; i++) {
        type_rules_t *t = &m->types[m->n_types];
        pb_error_t inner;
        if (parse_rules(rules[i], &t->rules, &t->n, &inner) != PB_OK) {
            pb_mask_free(m);
            return pb_fail(err, PB_FATAL, "mask.%s: %s", types[i], inner.msg);
        }
        t->type = pb_strdup(types[i]);
        m->n_types++;
        for (size_t k = 0; k < t->n; k++)
            hmac |= t->rules[k].act == ACT_HMAC;
        if (strcmp(t->type, "*") == 0)
            m->any = t;
    }
    for (size_t i = 0; m->any && i < m->n_types; i++) {
        if (&m->types[i] != m->any && m->types[i].n + m->any->n > PB_MASK_MAX_RULES) {
            pb_status_t st = pb_fail(err, PB_FATAL,
                                     "mask.%s: more than %d rules with those of mask.*",
                                     m->types[i].type, PB_MASK_MAX_RULES);
            pb_mask_free(m);
            return st;
        }
    }
    if (hmac) {
        if (!key || key_len < PB_MASK_MIN_KEY) {
            pb_mask_free(m);
            return pb_fail(err, PB_FATAL,
                           "hmac rules need a key of at least %d bytes (relay.mask_key_file)",
                           PB_MASK_MIN_KEY);
        }
        m->key = pb_malloc(key_len);
        memcpy(m->key, key, key_len);
        m->key_len = key_len;
    }
    *out = m;
    return PB_OK;
}

/* Reads a secret key file: a regular file that neither group nor others may read or write
 * (libpq's rule for .pgpass), of PB_MASK_MIN_KEY..PB_MASK_MAX_KEY bytes after one trailing
 * newline is cut. */
static pb_status_t read_key_file(const char *path, unsigned char *key, size_t *len,
                                 pb_error_t *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return pb_fail(err, PB_FATAL, "relay.mask_key_file %s: cannot open: %s", path,
                       strerror(errno));
    pb_status_t st = pb_check_secret_fd("relay.mask_key_file", path, fd, err);
    ssize_t got = 0;
    if (st == PB_OK) {
        /* one byte more than allowed, to tell a file that is too long */
        size_t want = PB_MASK_MAX_KEY + 2, have = 0;
        while (have < want && (got = read(fd, key + have, want - have)) > 0)
            have += (size_t)got;
        if (got < 0)
            st = pb_fail(err, PB_FATAL, "relay.mask_key_file %s: %s", path, strerror(errno));
        if (have && key[have - 1] == '\n')
            have--;
        if (have && key[have - 1] == '\r')
            have--;
        *len = have;
        if (st == PB_OK && (have < PB_MASK_MIN_KEY || have > PB_MASK_MAX_KEY))
            st = pb_fail(err, PB_FATAL,
                         "relay.mask_key_file %s: the key must have %d to %d bytes, it has %zu "
                         "(make one with: head -c 32 /dev/urandom > FILE)",
                         path, PB_MASK_MIN_KEY, PB_MASK_MAX_KEY, have);
    }
    close(fd);
    return st;
}

pb_status_t pb_mask_new(const pb_config_t *cfg, pb_mask_t **out, pb_error_t *err)
{
    *out = NULL;
    bool hmac = false;
    for (size_t i = 0; i < cfg->n_masks; i++) {
        bool uses = false;
        pb_error_t inner;
        if (pb_mask_check_rules(cfg->mask_types[i], cfg->mask_rules[i], &uses, &inner) != PB_OK)
            return pb_fail(err, PB_FATAL, "mask.%s: %s", cfg->mask_types[i], inner.msg);
        hmac |= uses;
    }
    unsigned char key[PB_MASK_MAX_KEY + 2];
    size_t key_len = 0;
    if (hmac) {
        if (!*cfg->relay_mask_key_file)
            return pb_fail(err, PB_FATAL,
                           "[mask] has hmac rules but relay.mask_key_file is not set");
        pb_status_t st = read_key_file(cfg->relay_mask_key_file, key, &key_len, err);
        if (st != PB_OK) {
            OPENSSL_cleanse(key, sizeof key);
            return st;
        }
    }
    pb_status_t st = pb_mask_build(cfg->n_masks, cfg->mask_types, cfg->mask_rules,
                                   hmac ? key : NULL, key_len, out, err);
    OPENSSL_cleanse(key, sizeof key);
    return st;
}

static const type_rules_t *rules_of(const pb_mask_t *m, const char *event_type)
{
    for (size_t i = 0; event_type && i < m->n_types; i++)
        if (&m->types[i] != m->any && strcmp(m->types[i].type, event_type) == 0)
            return &m->types[i];
    return NULL;
}

bool pb_mask_applies(const pb_mask_t *m, const char *event_type)
{
    return m && (m->any || rules_of(m, event_type));
}

/* The rules for one root (payload or headers) of an event type, its own before those of "*"
 * (the first listed wins where two replace one value). */
static size_t collect(const pb_mask_t *m, const char *event_type, bool headers,
                      const rule_t *set[PB_MASK_MAX_RULES])
{
    size_t n = 0;
    const type_rules_t *lists[2] = {rules_of(m, event_type), m->any};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && i < lists[l]->n; i++)
            if (lists[l]->rules[i].headers == headers)
                set[n++] = &lists[l]->rules[i];
    return n;
}

void pb_mask_hmac_hex(const unsigned char *key, size_t key_len, const void *data, size_t len,
                      char hex[65])
{
    PB_ASSERT(key_len <= PB_MASK_MAX_KEY);
    pb_hmac_sha256_hex(key, key_len, data, len, hex);
}

/* ---- the rewriter: JSON text in, JSON text out ------------------------------------------ */

typedef enum vtype { V_STR, V_NUM, V_TRUE, V_FALSE, V_NULL, V_OBJ, V_ARR } vtype_t;

typedef struct rw {
    const char *start, *p, *end;
    pb_buf_t *out;
    const rule_t *const *rules;
    const pb_mask_t *m;
    bool changed;
    pb_buf_t tmp; /* a decoded string */
    pb_error_t *why;
} rw_t;

static bool bad(rw_t *w, const char *what)
{
    pb_fail(w->why, PB_FATAL, "not valid JSON at byte %zu: %s", (size_t)(w->p - w->start), what);
    return false;
}

static void skip_ws(rw_t *w)
{
    while (w->p < w->end && (*w->p == ' ' || *w->p == '\t' || *w->p == '\n' || *w->p == '\r'))
        w->p++;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The code unit of the \uXXXX escape at s (already checked to be one). */
static unsigned u_escape(const char *s)
{
    unsigned v = 0;
    for (int i = 2; i < 6; i++)
        v = v * 16 + (unsigned)hex_digit(s[i]);
    return v;
}

/* A string at p ('"'), validated; p moves past its closing quote. *escaped: it has escapes. */
static bool scan_string(rw_t *w, bool *escaped)
{
    *escaped = false;
    w->p++;
    while (w->p < w->end) {
        unsigned char c = (unsigned char)*w->p;
        if (c == '"') {
            w->p++;
            return true;
        }
        if (c < 0x20)
            return bad(w, "control character in a string");
        if (c == '\\') {
            *escaped = true;
            if (w->p + 1 >= w->end)
                break;
            char e = w->p[1];
            if (e == 'u') {
                if (w->end - w->p < 6)
                    break;
                for (int i = 2; i < 6; i++)
                    if (hex_digit(w->p[i]) < 0)
                        return bad(w, "bad \\u escape");
                w->p += 6;
                continue;
            }
            if (e == '\0' || !strchr("\"\\/bfnrt", e))
                return bad(w, "bad escape");
            w->p += 2;
            continue;
        }
        w->p++;
    }
    return bad(w, "unterminated string");
}

static bool scan_digits(rw_t *w)
{
    const char *s = w->p;
    while (w->p < w->end && *w->p >= '0' && *w->p <= '9')
        w->p++;
    return w->p > s;
}

static bool scan_number(rw_t *w)
{
    if (w->p < w->end && *w->p == '-')
        w->p++;
    if (w->p < w->end && *w->p == '0')
        w->p++;
    else if (!(w->p < w->end && *w->p >= '1' && *w->p <= '9' && scan_digits(w)))
        return bad(w, "bad number");
    if (w->p < w->end && *w->p == '.') {
        w->p++;
        if (!scan_digits(w))
            return bad(w, "bad number");
    }
    if (w->p < w->end && (*w->p == 'e' || *w->p == 'E')) {
        w->p++;
        if (w->p < w->end && (*w->p == '+' || *w->p == '-'))
            w->p++;
        if (!scan_digits(w))
            return bad(w, "bad number");
    }
    return true;
}

static bool scan_word(rw_t *w, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(w->end - w->p) < n || memcmp(w->p, word, n) != 0)
        return bad(w, "unexpected character");
    w->p += n;
    return true;
}

/* One value at p (after whitespace), validated and skipped; *type tells what it was. */
static bool scan_value(rw_t *w, size_t depth, vtype_t *type)
{
    if (depth > PB_MASK_MAX_DEPTH)
        return bad(w, "nested deeper than 512 levels");
    if (w->p >= w->end)
        return bad(w, "a value expected");
    bool escaped;
    vtype_t inner;
    switch (*w->p) {
    case '"':
        *type = V_STR;
        return scan_string(w, &escaped);
    case 't':
        *type = V_TRUE;
        return scan_word(w, "true");
    case 'f':
        *type = V_FALSE;
        return scan_word(w, "false");
    case 'n':
        *type = V_NULL;
        return scan_word(w, "null");
    case '{':
    case '[': {
        char close = *w->p == '{' ? '}' : ']';
        *type = close == '}' ? V_OBJ : V_ARR;
        w->p++;
        skip_ws(w);
        if (w->p < w->end && *w->p == close) {
            w->p++;
            return true;
        }
        for (;;) {
            if (close == '}') {
                if (w->p >= w->end || *w->p != '"')
                    return bad(w, "a member name expected");
                if (!scan_string(w, &escaped))
                    return false;
                skip_ws(w);
                if (w->p >= w->end || *w->p != ':')
                    return bad(w, "':' expected");
                w->p++;
                skip_ws(w);
            }
            if (!scan_value(w, depth + 1, &inner))
                return false;
            skip_ws(w);
            if (w->p < w->end && *w->p == ',') {
                w->p++;
                skip_ws(w);
                continue;
            }
            if (w->p < w->end && *w->p == close) {
                w->p++;
                return true;
            }
            return bad(w, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    default:
        *type = V_NUM;
        return scan_number(w);
    }
}

/* The start of the character after the one at s in a string's raw text (an escape, a
 * surrogate pair of escapes, or one UTF-8 sequence; a stray byte counts as one). */
static const char *next_char(const char *s, const char *end)
{
    if (*s == '\\') {
        if (s[1] != 'u')
            return s + 2;
        unsigned u = u_escape(s);
        if (u >= 0xD800 && u <= 0xDBFF && end - s >= 12 && s[6] == '\\' && s[7] == 'u') {
            unsigned lo = u_escape(s + 6);
            if (lo >= 0xDC00 && lo <= 0xDFFF)
                return s + 12;
        }
        return s + 6;
    }
    unsigned char c = (unsigned char)*s;
    size_t n = c < 0x80             ? 1
               : (c & 0xE0) == 0xC0 ? 2
               : (c & 0xF0) == 0xE0 ? 3
               : (c & 0xF8) == 0xF0 ? 4
                                    : 1;
    size_t k = 1;
    while (k < n && s + k < end && ((unsigned char)s[k] & 0xC0) == 0x80)
        k++;
    return s + k;
}

static void put_utf8(pb_buf_t *b, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xC0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xE0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        u[0] = (char)(0xF0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        u[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    pb_buf_append(b, u, n);
}

/* Decodes a validated string's raw text s[0..end) (without quotes) into b (reset first); a lone
 * surrogate becomes U+FFFD. */
static void decode_string(pb_buf_t *b, const char *s, const char *end)
{
    pb_buf_reset(b);
    while (s < end) {
        if (*s != '\\') {
            const char *e = s;
            while (e < end && *e != '\\')
                e++;
            pb_buf_append(b, s, (size_t)(e - s));
            s = e;
            continue;
        }
        char c = s[1];
        if (c != 'u') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            pb_buf_putc(b, to[strchr(from, c) - from]);
            s += 2;
            continue;
        }
        unsigned cp = u_escape(s);
        const char *next = next_char(s, end);
        if (next - s == 12)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (u_escape(s + 6) - 0xDC00);
        else if (cp >= 0xD800 && cp <= 0xDFFF)
            cp = 0xFFFD;
        put_utf8(b, cp);
        s = next;
    }
}

/* Whether a member name's raw text (with quotes) is the rule segment's name. */
static bool key_matches(rw_t *w, const seg_t *seg, const char *raw, const char *raw_end,
                        bool escaped)
{
    if (seg->kind == SEG_ANY_KEY)
        return true;
    if (seg->kind != SEG_KEY)
        return false;
    const char *s = raw + 1, *e = raw_end - 1;
    if (!escaped)
        return (size_t)(e - s) == seg->key_len && memcmp(s, seg->key, seg->key_len) == 0;
    decode_string(&w->tmp, s, e);
    return w->tmp.len == seg->key_len && memcmp(w->tmp.data, seg->key, seg->key_len) == 0;
}

static bool index_matches(const seg_t *seg, size_t index)
{
    return seg->kind == SEG_ANY_INDEX || (seg->kind == SEG_INDEX && seg->index == index);
}

static const char *type_name(vtype_t t)
{
    static const char *const names[] = {"a string", "a number",  "a boolean", "a boolean",
                                        "null",     "an object", "an array"};
    return names[t];
}

/* Writes the replacement of the value s[0..e) of type t under rule r. */
static bool replace(rw_t *w, const rule_t *r, const char *s, const char *e, vtype_t t)
{
    if (t == V_NULL) { /* nothing to hide */
        pb_buf_append(w->out, s, (size_t)(e - s));
        return true;
    }
    if (r->act == ACT_HMAC) {
        char hex[65];
        if (t == V_STR) {
            decode_string(&w->tmp, s + 1, e - 1);
            pb_mask_hmac_hex(w->m->key, w->m->key_len, w->tmp.data, w->tmp.len, hex);
        } else { /* a number, a boolean, an object or an array: over its JSON text */
            pb_mask_hmac_hex(w->m->key, w->m->key_len, s, (size_t)(e - s), hex);
        }
        pb_buf_putc(w->out, '"');
        pb_buf_append(w->out, hex, 64);
        pb_buf_putc(w->out, '"');
        return true;
    }
    if (t != V_STR && t != V_NUM) {
        pb_fail(w->why, PB_FATAL, "rule \"%s\": the value is %s (only strings and numbers can be "
                                  "masked)",
                r->text, type_name(t));
        return false;
    }
    /* lastN: every character but the last N becomes '*' */
    const char *body = t == V_STR ? s + 1 : s, *body_end = t == V_STR ? e - 1 : e;
    size_t count = 0;
    for (const char *c = body; c < body_end; c = next_char(c, body_end))
        count++;
    size_t hide = count > r->keep ? count - r->keep : 0;
    const char *tail = body;
    for (size_t i = 0; i < hide; i++)
        tail = next_char(tail, body_end);
    pb_buf_putc(w->out, '"');
    for (size_t i = 0; i < hide; i++)
        pb_buf_putc(w->out, '*');
    pb_buf_append(w->out, tail, (size_t)(body_end - tail)); /* a number's text needs no escape */
    pb_buf_putc(w->out, '"');
    return true;
}

static bool rewrite_value(rw_t *w, uint64_t alive, size_t depth);

/* One member or element whose path leads rules `child` deeper and is the whole path of rules
 * `hits`: dropped, replaced, rewritten or copied. *first: nothing written in its container yet. */
static bool rewrite_item(rw_t *w, const char *key, const char *key_end, uint64_t child,
                         uint64_t hits, size_t depth, bool *first)
{
    const char *s = w->p;
    vtype_t t;
    const rule_t *hit = NULL;
    for (uint64_t left = hits; left; left &= left - 1) {
        int i = __builtin_ctzll(left); /* the set bits only, lowest (first listed) first */
        if (w->rules[i]->act == ACT_DROP) {
            w->changed = true;
            return scan_value(w, depth, &t);
        }
        if (!hit)
            hit = w->rules[i];
    }
    if (!*first)
        pb_buf_putc(w->out, ',');
    *first = false;
    if (key) {
        pb_buf_append(w->out, key, (size_t)(key_end - key));
        pb_buf_putc(w->out, ':');
    }
    if (hit) {
        w->changed = true;
        return scan_value(w, depth, &t) && replace(w, hit, s, w->p, t);
    }
    if (child)
        return rewrite_value(w, child, depth);
    if (!scan_value(w, depth, &t))
        return false;
    pb_buf_append(w->out, s, (size_t)(w->p - s));
    return true;
}

/* A value at p whose path (of depth segments) leads the rules in `alive` deeper. */
static bool rewrite_value(rw_t *w, uint64_t alive, size_t depth)
{
    if (depth > PB_MASK_MAX_DEPTH)
        return bad(w, "nested deeper than 512 levels");
    if (w->p >= w->end || (*w->p != '{' && *w->p != '[')) {
        const char *s = w->p;
        vtype_t t;
        if (!scan_value(w, depth, &t))
            return false;
        pb_buf_append(w->out, s, (size_t)(w->p - s));
        return true;
    }
    bool object = *w->p == '{';
    char close = object ? '}' : ']';
    pb_buf_putc(w->out, *w->p);
    w->p++;
    skip_ws(w);
    bool first = true;
    if (w->p < w->end && *w->p == close) {
        w->p++;
        pb_buf_putc(w->out, close);
        return true;
    }
    for (size_t index = 0;; index++) {
        const char *key = NULL, *key_end = NULL;
        bool escaped = false;
        if (object) {
            if (w->p >= w->end || *w->p != '"')
                return bad(w, "a member name expected");
            key = w->p;
            if (!scan_string(w, &escaped))
                return false;
            key_end = w->p;
            skip_ws(w);
            if (w->p >= w->end || *w->p != ':')
                return bad(w, "':' expected");
            w->p++;
            skip_ws(w);
        }
        uint64_t child = 0, hits = 0;
        for (uint64_t left = alive; left; left &= left - 1) {
            int i = __builtin_ctzll(left);
            uint64_t bit = UINT64_C(1) << i;
            const seg_t *seg = &w->rules[i]->segs[depth];
            if (object ? !key_matches(w, seg, key, key_end, escaped) : !index_matches(seg, index))
                continue;
            if (w->rules[i]->n_segs == depth + 1)
                hits |= bit;
            else
                child |= bit;
        }
        if (!rewrite_item(w, key, key_end, child, hits, depth + 1, &first))
            return false;
        skip_ws(w);
        if (w->p < w->end && *w->p == ',') {
            w->p++;
            skip_ws(w);
            continue;
        }
        if (w->p < w->end && *w->p == close) {
            w->p++;
            pb_buf_putc(w->out, close);
            return true;
        }
        return bad(w, object ? "',' or '}' expected" : "',' or ']' expected");
    }
}

pb_status_t pb_mask_rewrite(const pb_mask_t *m, const char *event_type, bool headers,
                            const char *json, size_t len, pb_buf_t *out, bool *changed,
                            pb_error_t *why)
{
    *changed = false;
    if (!json)
        json = "";
    const rule_t *set[PB_MASK_MAX_RULES];
    size_t n = collect(m, event_type, headers, set);
    rw_t w = {.start = json, .p = json, .end = json + len, .out = out, .rules = set, .m = m,
              .why = why};
    size_t mark = out->len;
    uint64_t alive = n == PB_MASK_MAX_RULES ? UINT64_MAX : (UINT64_C(1) << n) - 1;
    skip_ws(&w);
    bool ok = n == 0 ? true : rewrite_value(&w, alive, 0);
    if (ok && n) {
        skip_ws(&w);
        if (w.p != w.end)
            ok = bad(&w, "text after the value");
    }
    pb_buf_free(&w.tmp);
    if (!ok || !w.changed) {
        out->len = mark;
        if (out->data)
            out->data[mark] = '\0';
        return ok ? PB_OK : PB_FATAL;
    }
    *changed = true;
    return PB_OK;
}

/* ---- events ----------------------------------------------------------------------------- */

bool pb_mask_event(const pb_mask_t *m, pb_event_t *ev, pb_masked_t *keep, pb_result_t *result)
{
    if (!pb_mask_applies(m, ev->event_type))
        return true;
    pb_error_t why;
    bool changed = false;
    pb_buf_reset(&keep->payload);
    pb_buf_reset(&keep->headers);
    if (pb_mask_rewrite(m, ev->event_type, false, ev->payload, ev->payload_len, &keep->payload,
                        &changed, &why) != PB_OK) {
        pb_result_setf(result, PB_OUT_REJECT, "payload cannot be masked by the [mask] rules of "
                                              "\"%s\": %s",
                       ev->event_type, why.msg);
        return false;
    }
    bool payload_changed = changed;
    /* no headers (NULL or blank) hold nothing to mask */
    bool has_headers = ev->headers && ev->headers[strspn(ev->headers, " \t\r\n")];
    if (has_headers &&
        pb_mask_rewrite(m, ev->event_type, true, ev->headers, strlen(ev->headers), &keep->headers,
                        &changed, &why) != PB_OK) {
        pb_result_setf(result, PB_OUT_REJECT, "headers cannot be masked by the [mask] rules of "
                                              "\"%s\": %s",
                       ev->event_type, why.msg);
        return false;
    }
    bool headers_changed = has_headers && changed;
    if (!payload_changed && !headers_changed)
        return true;
    keep->active = true;
    keep->orig_payload = ev->payload;
    keep->orig_payload_len = ev->payload_len;
    keep->orig_headers = ev->headers;
    if (payload_changed) {
        ev->payload = keep->payload.data;
        ev->payload_len = keep->payload.len;
    }
    if (headers_changed)
        ev->headers = keep->headers.data;
    return true;
}

void pb_mask_restore(pb_event_t *ev, pb_masked_t *keep)
{
    if (keep->active) {
        ev->payload = keep->orig_payload;
        ev->payload_len = keep->orig_payload_len;
        ev->headers = keep->orig_headers;
        keep->active = false;
    }
    pb_buf_free(&keep->payload);
    pb_buf_free(&keep->headers);
}
