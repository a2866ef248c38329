#include "relay/mask.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <strings.h>

#include <openssl/crypto.h>

#include "common/hmac.h"
#include "common/secret_file.h"
#include "sink/sink.h"

#define HEADERS_PREFIX "headers:"
#define MAX_KEEP 100  /* lastN: N at most this */
#define MAX_INDEX 1000000000u
#define MAX_SEGMENTS 32 /* of one path: the rewriter keeps each rule's position in a byte */

typedef enum seg_kind { SEG_KEY, SEG_ANY_KEY, SEG_INDEX, SEG_ANY_INDEX } seg_kind_t;

typedef struct seg {
    seg_kind_t kind;
    char *key; /* SEG_KEY: the member name, decoded */
    size_t key_len;
    size_t index; /* SEG_INDEX */
} seg_t;

typedef enum action { ACT_DROP, ACT_LAST, ACT_HMAC, ACT_KEEP } action_t;

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
    char **allow;            /* relay.mask_allow_types, split; "*" among them: every type */
    size_t n_allow;
    pb_hmac_t *mac; /* the hmac rules' key, made ready once; NULL without hmac rules */
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
    } else if (alen == 4 && memcmp(s, "keep", 4) == 0) {
        r->act = ACT_KEEP;
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
        return *why = "unknown action (expected drop, keep, hmac or lastN such as last4)", false;
    }
    while (p < end && is_space(*p))
        p++;
    if (p == s + alen)
        return *why = p == end ? "no path after the action" : "expected a space after the action",
               false;
    if (!parse_path(r, p, end, why))
        return false;
    if (r->n_segs > MAX_SEGMENTS)
        return *why = "a path of more than 32 segments", false;
    if (r->act == ACT_KEEP && r->headers)
        return *why = "keep names payload fields (headers are only masked by drop, lastN and hmac)",
               false;
    return true;
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
    for (size_t i = 0; i < m->n_allow; i++)
        free(m->allow[i]);
    free(m->allow);
    pb_hmac_free(m->mac);
    free(m);
}

/* Event types match whatever their case: producers write "Order.Created" as often as
 * "order.created", and a rule must not miss either. */
static bool same_type(const char *a, const char *b)
{
    return strcasecmp(a, b) == 0;
}

/* Splits relay.mask_allow_types ("a, b, *") into m->allow. */
static pb_status_t parse_allow(pb_mask_t *m, const char *text, pb_error_t *err)
{
    if (!text || !text[strspn(text, " \t")])
        return PB_OK;
    for (const char *p = text;;) {
        const char *e = strchr(p, ',');
        if (!e)
            e = p + strlen(p);
        const char *s = p, *t = e;
        while (s < t && is_space(*s))
            s++;
        while (t > s && is_space(t[-1]))
            t--;
        if (s == t)
            return pb_fail(err, PB_FATAL, "relay.mask_allow_types \"%s\": an empty event type "
                                          "(separate types with commas)",
                           text);
        m->allow = pb_realloc(m->allow, (m->n_allow + 1) * sizeof *m->allow);
        m->allow[m->n_allow] = pb_malloc((size_t)(t - s) + 1);
        memcpy(m->allow[m->n_allow], s, (size_t)(t - s));
        m->allow[m->n_allow++][t - s] = '\0';
        if (!*e)
            return PB_OK;
        p = e + 1;
    }
}

static bool allow_listed(const pb_mask_t *m, const char *event_type)
{
    for (size_t i = 0; i < m->n_allow; i++)
        if (strcmp(m->allow[i], "*") == 0 || (event_type && same_type(m->allow[i], event_type)))
            return true;
    return false;
}

static const type_rules_t *rules_of(const pb_mask_t *m, const char *event_type)
{
    for (size_t i = 0; event_type && i < m->n_types; i++)
        if (&m->types[i] != m->any && same_type(m->types[i].type, event_type))
            return &m->types[i];
    return NULL;
}

/* What the rules of every type say together: no two entries for one type, keep only where the
 * allow list applies, no allow-listed type without rules. */
static pb_status_t check_together(const pb_mask_t *m, pb_error_t *err)
{
    for (size_t i = 0; i < m->n_types; i++)
        for (size_t k = i + 1; k < m->n_types; k++)
            if (same_type(m->types[i].type, m->types[k].type))
                return pb_fail(err, PB_FATAL,
                               "mask.%s and mask.%s name the same event type (event types "
                               "match whatever their case)",
                               m->types[i].type, m->types[k].type);
    for (size_t i = 0; i < m->n_types; i++) {
        const type_rules_t *t = &m->types[i];
        bool allow = t == m->any ? m->n_allow > 0 : allow_listed(m, t->type);
        for (size_t k = 0; k < t->n && !allow; k++)
            if (t->rules[k].act == ACT_KEEP)
                return pb_fail(err, PB_FATAL,
                               "mask.%s: rule \"%s\": keep applies only to the event types of "
                               "relay.mask_allow_types (the others publish every field no rule "
                               "drops)",
                               t->type, t->rules[k].text);
    }
    for (size_t i = 0; i < m->n_allow; i++) {
        bool every = strcmp(m->allow[i], "*") == 0;
        if (every ? m->n_types == 0 : !m->any && !rules_of(m, m->allow[i]))
            return pb_fail(err, PB_FATAL,
                           "relay.mask_allow_types names \"%s\" but [mask] has no rules for it "
                           "(it would publish an empty payload): list its fields with keep",
                           m->allow[i]);
    }
    return PB_OK;
}

pb_status_t pb_mask_build(size_t n, char *const *types, char *const *rules,
                          const char *allow_types, const unsigned char *key, size_t key_len,
                          pb_mask_t **out, pb_error_t *err)
{
    *out = NULL;
    pb_mask_t *m = pb_malloc(sizeof *m);
    *m = (pb_mask_t){0};
    m->types = n ? pb_malloc(n * sizeof *m->types) : NULL;
    bool hmac = false;
    for (size_t i = 0; i < n; i++) {
        type_rules_t *t = &m->types[m->n_types];
        pb_error_t inner;
        if (!*types[i] || parse_rules(rules[i], &t->rules, &t->n, &inner) != PB_OK) {
            pb_mask_free(m);
            return pb_fail(err, PB_FATAL, "mask.%s: %s", types[i],
                           *types[i] ? inner.msg : "an empty event type");
        }
        t->type = pb_strdup(types[i]);
        m->n_types++;
        for (size_t k = 0; k < t->n; k++)
            hmac |= t->rules[k].act == ACT_HMAC;
        if (strcmp(t->type, "*") == 0)
            m->any = t;
    }
    pb_status_t st = parse_allow(m, allow_types, err);
    if (st == PB_OK)
        st = check_together(m, err);
    if (st != PB_OK) {
        pb_mask_free(m);
        return st;
    }
    for (size_t i = 0; m->any && i < m->n_types; i++) {
        if (&m->types[i] != m->any && m->types[i].n + m->any->n > PB_MASK_MAX_RULES) {
            st = pb_fail(err, PB_FATAL, "mask.%s: more than %d rules with those of mask.*",
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
        PB_ASSERT(key_len <= PB_MASK_MAX_KEY);
        m->mac = pb_hmac_new(key, key_len);
    }
    *out = m;
    return PB_OK;
}

pb_status_t pb_mask_check_config(const pb_config_t *cfg, pb_error_t *err)
{
    bool hmac = false;
    for (size_t i = 0; i < cfg->n_masks; i++) {
        bool uses = false;
        pb_error_t inner;
        if (pb_mask_check_rules(cfg->mask_types[i], cfg->mask_rules[i], &uses, &inner) != PB_OK)
            return pb_fail(err, PB_FATAL, "mask.%s: %s", cfg->mask_types[i], inner.msg);
        hmac |= uses;
    }
    if (hmac && !*cfg->relay_mask_key_file)
        return pb_fail(err, PB_FATAL, "[mask] has hmac rules but relay.mask_key_file is not set");
    /* the rules together, with a stand-in key (the key file is read at start) */
    static const unsigned char stand_in[PB_MASK_MIN_KEY];
    pb_mask_t *m = NULL;
    pb_status_t st = pb_mask_build(cfg->n_masks, cfg->mask_types, cfg->mask_rules,
                                   cfg->relay_mask_allow_types, stand_in, sizeof stand_in, &m,
                                   err);
    pb_mask_free(m);
    return st;
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
    pb_status_t st = pb_mask_check_config(cfg, err);
    if (st != PB_OK)
        return st;
    bool hmac = false;
    for (size_t i = 0; i < cfg->n_masks; i++) {
        bool uses = false;
        if (pb_mask_check_rules(cfg->mask_types[i], cfg->mask_rules[i], &uses, err) != PB_OK)
            return PB_FATAL; /* checked above */
        hmac |= uses;
    }
    unsigned char key[PB_MASK_MAX_KEY + 2];
    size_t key_len = 0;
    if (hmac) {
        st = read_key_file(cfg->relay_mask_key_file, key, &key_len, err);
        if (st != PB_OK) {
            OPENSSL_cleanse(key, sizeof key);
            return st;
        }
    }
    st = pb_mask_build(cfg->n_masks, cfg->mask_types, cfg->mask_rules,
                       cfg->relay_mask_allow_types, hmac ? key : NULL, key_len, out, err);
    OPENSSL_cleanse(key, sizeof key);
    return st;
}

bool pb_mask_applies(const pb_mask_t *m, const char *event_type)
{
    return m && (m->any || rules_of(m, event_type) || allow_listed(m, event_type));
}

/* The rules for one root (payload or headers) of an event type, its own before those of "*"
 * (the first listed wins where two replace one value). *allow: the payload of an allow-listed
 * type (only what a rule publishes goes out); keep rules count only there. */
static size_t collect(const pb_mask_t *m, const char *event_type, bool headers,
                      const rule_t *set[PB_MASK_MAX_RULES], bool *allow)
{
    size_t n = 0;
    *allow = !headers && allow_listed(m, event_type);
    const type_rules_t *lists[2] = {rules_of(m, event_type), m->any};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && i < lists[l]->n; i++)
            if (lists[l]->rules[i].headers == headers &&
                (*allow || lists[l]->rules[i].act != ACT_KEEP))
                set[n++] = &lists[l]->rules[i];
    return n;
}

/* ---- the rewriter: JSON text in, JSON text out ------------------------------------------ */

typedef enum vtype { V_STR, V_NUM, V_TRUE, V_FALSE, V_NULL, V_OBJ, V_ARR } vtype_t;

/* The rules that go on below a value: a bit per rule of the set, and each one's next segment.
 * A name meeting an array goes on into its elements without taking a segment, so rules that
 * went different ways sit at different segments. */
typedef struct walk {
    uint64_t alive;
    uint8_t next[PB_MASK_MAX_RULES];
} walk_t;

typedef struct rw {
    const char *start, *p, *end;
    pb_buf_t *out;
    const rule_t *const *rules;
    uint64_t publishing; /* the rules that publish what they name: keep, lastN, hmac */
    const pb_mask_t *m;
    bool changed;
    pb_buf_t tmp; /* a decoded string */
    pb_error_t *why;
    pb_mask_unfit_t *unfit; /* may be NULL */
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

static bool same_name(const char *a, const char *b, size_t n, bool any_case)
{
    return any_case ? strncasecmp(a, b, n) == 0 && !memchr(a, '\0', n) : memcmp(a, b, n) == 0;
}

/* Whether a member name's raw text (with quotes) is segment `at` of rule r. A header's name
 * matches whatever its case: every broker treats header names so. */
static bool key_matches(rw_t *w, const rule_t *r, size_t at, const char *raw,
                        const char *raw_end, bool escaped)
{
    const seg_t *seg = &r->segs[at];
    if (seg->kind == SEG_ANY_KEY)
        return true;
    if (seg->kind != SEG_KEY)
        return false;
    bool any_case = r->headers && at == 0;
    const char *s = raw + 1, *e = raw_end - 1;
    if (!escaped)
        return (size_t)(e - s) == seg->key_len && same_name(s, seg->key, seg->key_len, any_case);
    decode_string(&w->tmp, s, e);
    return w->tmp.len == seg->key_len && same_name(w->tmp.data, seg->key, seg->key_len, any_case);
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

/* The type of the value at p, from its first character (validated when it is scanned). */
static vtype_t peek_type(const rw_t *w)
{
    if (w->p >= w->end)
        return V_NUM; /* scanning it reports the error */
    switch (*w->p) {
    case '"':
        return V_STR;
    case '{':
        return V_OBJ;
    case '[':
        return V_ARR;
    case 'n':
        return V_NULL;
    case 't':
        return V_TRUE;
    case 'f':
        return V_FALSE;
    default:
        return V_NUM;
    }
}

/* Takes out of `below` the rules whose next segment cannot apply inside a value of type t, and
 * returns those that fail on it: a name needs an object (or an array, whose elements it goes
 * into), an index an array. null holds nothing to hide, after a `*` a value of another shape is
 * simply not one the path selects, and a keep that cannot go on publishes nothing; any other
 * misfit is a rule that could not apply. */
static uint64_t misfits(const rw_t *w, walk_t *below, vtype_t t)
{
    uint64_t failed = 0;
    for (uint64_t left = below->alive; left; left &= left - 1) {
        int i = __builtin_ctzll(left);
        const rule_t *r = w->rules[i];
        seg_kind_t next = r->segs[below->next[i]].kind;
        bool name = next == SEG_KEY || next == SEG_ANY_KEY;
        if (t == V_ARR || (t == V_OBJ && name))
            continue;
        below->alive &= ~(UINT64_C(1) << i);
        bool after_any = below->next[i] > 0 && r->segs[below->next[i] - 1].kind == SEG_ANY_KEY;
        if (t != V_NULL && !after_any && r->act != ACT_KEEP)
            failed |= UINT64_C(1) << i;
    }
    return failed;
}

/* Notes a value dropped because rule r could not apply to it: count and say where. */
static void note_unfit(rw_t *w, const rule_t *r, const char *key, const char *key_end,
                       size_t index, vtype_t t)
{
    if (!w->unfit)
        return;
    if (w->unfit->n++ > 0)
        return;
    if (key)
        snprintf(w->unfit->first, sizeof w->unfit->first,
                 "rule \"%.80s\" cannot go into member %.*s, %s: dropped", r->text,
                 (int)(key_end - key > 80 ? 80 : key_end - key), key, type_name(t));
    else
        snprintf(w->unfit->first, sizeof w->unfit->first,
                 "rule \"%.80s\" cannot go into element %zu, %s: dropped", r->text, index,
                 type_name(t));
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
            pb_hmac_hex(w->m->mac, w->tmp.data, w->tmp.len, hex);
        } else { /* a number, a boolean, an object or an array: over its JSON text */
            pb_hmac_hex(w->m->mac, s, (size_t)(e - s), hex);
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

static bool rewrite_value(rw_t *w, const walk_t *walk, bool allow, size_t depth);

/* Skips the value at p: it is not published. */
static bool leave_out(rw_t *w, size_t depth)
{
    vtype_t t;
    w->changed = true;
    return scan_value(w, depth, &t);
}

/* One member (key) or element (index) that the rules of `hits` name whole and the rules of
 * `below` lead into: dropped, replaced, rewritten or copied. allow: in the payload of an
 * allow-listed type, where only what a rule publishes goes out. *first: nothing written in its
 * container yet. */
static bool rewrite_item(rw_t *w, const char *key, const char *key_end, size_t index,
                         walk_t *below, uint64_t hits, bool allow, size_t depth, bool *first)
{
    const char *s = w->p;
    vtype_t t = peek_type(w);
    const rule_t *hit = NULL;
    bool kept = false;
    for (uint64_t left = hits; left; left &= left - 1) {
        int i = __builtin_ctzll(left); /* the set bits only, lowest (first listed) first */
        if (w->rules[i]->act == ACT_DROP)
            return leave_out(w, depth);
        if (w->rules[i]->act == ACT_KEEP)
            kept = true;
        else if (!hit)
            hit = w->rules[i];
    }
    if (!hit) { /* a replaced value is replaced whole: the rules inside it do not matter */
        uint64_t failed = misfits(w, below, t);
        if (failed) { /* fail closed: what a rule could not check is not published */
            note_unfit(w, w->rules[__builtin_ctzll(failed)], key, key_end, index, t);
            return leave_out(w, depth);
        }
    }
    if (allow && !hit && !kept && !(below->alive & w->publishing))
        return leave_out(w, depth);
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
    if (below->alive)
        return rewrite_value(w, below, allow && !kept, depth);
    if (!scan_value(w, depth, &t))
        return false;
    pb_buf_append(w->out, s, (size_t)(w->p - s));
    return true;
}

/* Where the rules of `walk` go for one member (key) or element (index) of a container: those
 * it ends (*hits) and those that go on below it. */
static void step(rw_t *w, const walk_t *walk, const char *key, const char *key_end, bool escaped,
                 size_t index, walk_t *below, uint64_t *hits)
{
    below->alive = 0;
    *hits = 0;
    for (uint64_t left = walk->alive; left; left &= left - 1) {
        int i = __builtin_ctzll(left);
        uint64_t bit = UINT64_C(1) << i;
        const rule_t *r = w->rules[i];
        size_t at = walk->next[i];
        const seg_t *seg = &r->segs[at];
        if (!key && (seg->kind == SEG_KEY || seg->kind == SEG_ANY_KEY)) {
            below->alive |= bit; /* a name into an array: into each of its elements */
            below->next[i] = (uint8_t)at;
            continue;
        }
        if (key ? !key_matches(w, r, at, key, key_end, escaped) : !index_matches(seg, index))
            continue;
        if (at + 1 == r->n_segs) {
            *hits |= bit;
        } else {
            below->alive |= bit;
            below->next[i] = (uint8_t)(at + 1);
        }
    }
}

/* An object or array at p (or any value, copied) whose members the rules of `walk` lead into. */
static bool rewrite_value(rw_t *w, const walk_t *walk, bool allow, size_t depth)
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
        walk_t below;
        uint64_t hits;
        step(w, walk, key, key_end, escaped, index, &below, &hits);
        if (!rewrite_item(w, key, key_end, index, &below, hits, allow, depth + 1, &first))
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
                            pb_mask_unfit_t *unfit, pb_error_t *why)
{
    *changed = false;
    if (unfit)
        *unfit = (pb_mask_unfit_t){0};
    if (!json)
        json = "";
    const rule_t *set[PB_MASK_MAX_RULES];
    bool allow;
    size_t n = collect(m, event_type, headers, set, &allow);
    rw_t w = {.start = json, .p = json, .end = json + len, .out = out, .rules = set, .m = m,
              .why = why, .unfit = unfit};
    size_t mark = out->len;
    walk_t root = {.alive = n == PB_MASK_MAX_RULES ? UINT64_MAX : (UINT64_C(1) << n) - 1};
    for (size_t i = 0; i < n; i++)
        if (set[i]->act != ACT_DROP)
            w.publishing |= UINT64_C(1) << i;
    skip_ws(&w);
    bool ok = true;
    if (n || allow) {
        /* the root cannot be dropped: a rule that cannot go into it fails the whole text */
        vtype_t t = peek_type(&w);
        uint64_t failed = 0;
        if (t != V_OBJ && t != V_ARR) { /* a scalar: valid JSON first, then what it is */
            const char *s = w.p;
            ok = scan_value(&w, 0, &t);
            w.p = s;
        }
        if (ok && !(allow && t != V_OBJ && t != V_ARR && t != V_NULL))
            failed = misfits(&w, &root, t);
        if (!ok) {
            /* not valid JSON: why says so */
        } else if (allow && t != V_OBJ && t != V_ARR && t != V_NULL) {
            pb_fail(why, PB_FATAL, "the payload is %s: relay.mask_allow_types publishes the "
                                   "fields of an object or array only",
                    type_name(t));
            ok = false;
        } else if (failed) {
            pb_fail(why, PB_FATAL, "rule \"%s\" cannot go into the %s, which is %s",
                    set[__builtin_ctzll(failed)]->text, headers ? "headers" : "payload",
                    type_name(t));
            ok = false;
        } else {
            ok = rewrite_value(&w, &root, allow, 0);
        }
    }
    if (ok && (n || allow)) {
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
    keep->unfit = (pb_mask_unfit_t){0};
    /* masked before it was set aside: an hmac rule applied again would hash the token */
    if (ev->masked || !pb_mask_applies(m, ev->event_type))
        return true;
    pb_error_t why;
    bool changed = false;
    pb_mask_unfit_t unfit;
    pb_buf_reset(&keep->payload);
    pb_buf_reset(&keep->headers);
    if (pb_mask_rewrite(m, ev->event_type, false, ev->payload, ev->payload_len, &keep->payload,
                        &changed, &keep->unfit, &why) != PB_OK) {
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
                        &changed, &unfit, &why) != PB_OK) {
        pb_result_setf(result, PB_OUT_REJECT, "headers cannot be masked by the [mask] rules of "
                                              "\"%s\": %s",
                       ev->event_type, why.msg);
        return false;
    }
    if (has_headers && unfit.n) {
        if (!keep->unfit.n)
            memcpy(keep->unfit.first, unfit.first, sizeof unfit.first);
        keep->unfit.n += unfit.n;
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
