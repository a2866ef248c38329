#include "relay/shadow_rules.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/route.h"
#include "common/str.h"

static const char SPACES[] = " \t\r\n";

/* The word starting at w: its length; *next is the word after it, or NULL after the last. */
static size_t word_at(const char *w, const char **next)
{
    size_t len = strcspn(w, ".");
    *next = w[len] == '.' ? w + len + 1 : NULL;
    return len;
}

/* p and s point at a word of the pattern and of the type; NULL: no words left. */
static bool match_words(const char *p, const char *s)
{
    if (!p)
        return !s;
    const char *p_next, *s_next;
    size_t plen = word_at(p, &p_next);
    if (plen == 1 && *p == '#') {
        if (!p_next)
            return true;
        /* "#" takes zero words, then one more at a time */
        for (;;) {
            if (match_words(p_next, s))
                return true;
            if (!s)
                return false;
            word_at(s, &s_next);
            s = s_next;
        }
    }
    if (!s)
        return false;
    size_t slen = word_at(s, &s_next);
    bool same = (plen == 1 && *p == '*') || (plen == slen && strncasecmp(p, s, plen) == 0);
    return same && match_words(p_next, s_next);
}

bool pb_shadow_pattern_matches(const char *pattern, const char *event_type)
{
    return pattern && event_type && match_words(pattern, event_type);
}

const pb_shadow_rule_t *pb_shadow_rule_for(const pb_shadow_rules_t *rs, const char *event_type)
{
    for (size_t i = 0; rs && i < rs->n; i++)
        if (pb_shadow_pattern_matches(rs->rules[i].pattern, event_type))
            return &rs->rules[i];
    return NULL;
}

bool pb_shadow_render(const pb_shadow_rule_t *rule, const pb_event_t *ev, char *out,
                      size_t outsz)
{
    pb_event_t plain = *ev;
    plain.destination = NULL; /* the row's override is for the normal destination */
    return pb_route_render(rule->destination, &plain, out, outsz);
}

void pb_shadow_rules_free(pb_shadow_rules_t *rs)
{
    if (!rs)
        return;
    for (size_t i = 0; i < rs->n; i++) {
        free(rs->rules[i].pattern);
        free(rs->rules[i].destination);
    }
    free(rs->rules);
    rs->rules = NULL;
    rs->n = 0;
}

/* A pattern: words of anything but spaces, "*" and "#" only as whole words. */
static pb_status_t check_pattern(const char *pattern, const char *rule, pb_error_t *err)
{
    for (const char *w = pattern; w;) {
        const char *next;
        size_t len = word_at(w, &next);
        if (len == 0)
            return pb_fail(err, PB_FATAL,
                           "relay.shadow rule \"%s\": pattern \"%s\" has an empty word", rule,
                           pattern);
        if (len > 1 && (memchr(w, '*', len) || memchr(w, '#', len)))
            return pb_fail(err, PB_FATAL,
                           "relay.shadow rule \"%s\": in pattern \"%s\", * and # stand only as "
                           "whole words (order.* or order.#, not order*)",
                           rule, pattern);
        w = next;
    }
    return PB_OK;
}

/* Splits one rule "PATTERN MODE DESTINATION" (rule is trimmed and NUL-terminated). */
static pb_status_t parse_rule(char *rule, pb_shadow_rule_t *out, pb_error_t *err)
{
    char shown[200];
    pb_text_escape(shown, sizeof shown, rule);
    char *words[4] = {0};
    int n = 0;
    for (char *p = rule; *p && n < 4;) {
        size_t len = strcspn(p, SPACES);
        words[n++] = p;
        p += len;
        if (*p)
            *p++ = '\0';
        p += strspn(p, SPACES);
    }
    if (n != 3)
        return pb_fail(err, PB_FATAL,
                       "relay.shadow rule \"%s\": expected PATTERN also|only DESTINATION, e.g. "
                       "\"order.# only shadow.{event_type}\"",
                       shown);
    pb_status_t st = check_pattern(words[0], shown, err);
    if (st != PB_OK)
        return st;
    if (strcmp(words[1], "also") != 0 && strcmp(words[1], "only") != 0)
        return pb_fail(err, PB_FATAL,
                       "relay.shadow rule \"%s\": mode \"%s\" is neither also (both "
                       "destinations) nor only (the shadow one instead)",
                       shown, words[1]);
    pb_error_t why;
    if (pb_route_check_template(words[2], &why) != PB_OK)
        return pb_fail(err, PB_FATAL, "relay.shadow rule \"%s\": destination: %s", shown, why.msg);
    out->pattern = pb_strdup(words[0]);
    out->mode = strcmp(words[1], "only") == 0 ? PB_SHADOW_ONLY : PB_SHADOW_ALSO;
    out->destination = pb_strdup(words[2]);
    return PB_OK;
}

pb_status_t pb_shadow_rules_parse(const char *text, pb_shadow_rules_t *out, pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    const char *p = text ? text : "", *item;
    size_t len;
    while (pb_list_next(&p, &item, &len)) {
        char *rule = pb_malloc(len + 1);
        memcpy(rule, item, len);
        rule[len] = '\0';
        out->rules = pb_realloc(out->rules, (out->n + 1) * sizeof *out->rules);
        memset(&out->rules[out->n], 0, sizeof out->rules[out->n]);
        pb_status_t st = parse_rule(rule, &out->rules[out->n], err);
        free(rule);
        if (st != PB_OK) {
            pb_shadow_rules_free(out);
            return st;
        }
        out->n++;
    }
    return PB_OK;
}

pb_status_t pb_shadow_rules_check(const char *text, pb_error_t *err)
{
    pb_shadow_rules_t rs;
    pb_status_t st = pb_shadow_rules_parse(text, &rs, err);
    pb_shadow_rules_free(&rs);
    return st;
}
