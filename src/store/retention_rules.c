#include "store/retention_rules.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>

/* s[0..n) without the blanks around it */
static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* The LIKE pattern of one rule's PATTERN: the text as is, '*' at the end only as "any rest". */
static void put_like(pb_buf_t *like, const char *p, size_t n)
{
    bool prefix = n && p[n - 1] == '*';
    char pattern[512];
    size_t k = 0;
    for (size_t i = 0; i < n - (prefix ? 1 : 0); i++) {
        if (p[i] == '%' || p[i] == '_' || p[i] == '\\')
            pattern[k++] = '\\'; /* LIKE's default escape */
        pattern[k++] = p[i];
    }
    if (prefix)
        pattern[k++] = '%';
    pattern[k] = '\0';
    pb_buf_append_array_text(like, pattern);
}

static pb_status_t rule_error(const char *option, const char *rule, size_t n, const char *why,
                              pb_error_t *err)
{
    return pb_fail(err, PB_FATAL, "%s: rule \"%.*s\": %s (expected PATTERN=AGE, PATTERN an event "
                   "type, a prefix ending in * or *, AGE a duration such as 90d, 0 to keep)",
                   option, (int)(n > 120 ? 120 : n), rule, why);
}

pb_status_t pb_retention_rules_parse(const char *option, const char *spec,
                                     pb_retention_rules_t *rules, pb_error_t *err)
{
    memset(rules, 0, sizeof *rules);
    pb_buf_puts(&rules->like, "{");
    pb_buf_puts(&rules->ages, "{");
    const char *s = spec;
    size_t blank = strspn(spec, " \t");
    for (bool more = spec[blank] != '\0'; more;) {
        const char *end = strchr(s, ',');
        size_t n = end ? (size_t)(end - s) : strlen(s);
        const char *rule = s;
        trim(&rule, &n);
        more = end != NULL;
        s = end ? end + 1 : s + n;
        if (n == 0) {
            pb_fail(err, PB_FATAL, "%s: an empty rule (two commas, or a comma at an end)", option);
            goto fail;
        }
        const char *eq = memchr(rule, '=', n);
        if (!eq) {
            rule_error(option, rule, n, "no '='", err);
            goto fail;
        }
        const char *pat = rule, *age = eq + 1;
        size_t np = (size_t)(eq - rule), na = n - np - 1;
        trim(&pat, &np);
        trim(&age, &na);
        if (np == 0 || np > 200) {
            rule_error(option, rule, n, np ? "the pattern is longer than 200 bytes" : "no pattern",
                       err);
            goto fail;
        }
        const char *star = memchr(pat, '*', np);
        if (star && star != pat + np - 1) {
            rule_error(option, rule, n, "'*' may only end the pattern", err);
            goto fail;
        }
        for (size_t i = 0; i < np; i++)
            if (isspace((unsigned char)pat[i]) || iscntrl((unsigned char)pat[i])) {
                rule_error(option, rule, n, "the pattern holds a blank or control character", err);
                goto fail;
            }
        char agebuf[64];
        int64_t ms;
        if (na == 0 || na >= sizeof agebuf) {
            rule_error(option, rule, n, "no age", err);
            goto fail;
        }
        memcpy(agebuf, age, na);
        agebuf[na] = '\0';
        if (!pb_parse_duration_ms(agebuf, 1.0, &ms)) {
            rule_error(option, rule, n, "the age is not a duration", err);
            goto fail;
        }
        if (rules->n == PB_RETENTION_RULES_MAX) {
            pb_fail(err, PB_FATAL, "%s: more than %d rules", option, PB_RETENTION_RULES_MAX);
            goto fail;
        }
        if (rules->n) {
            pb_buf_putc(&rules->like, ',');
            pb_buf_putc(&rules->ages, ',');
        }
        put_like(&rules->like, pat, np);
        pb_buf_put_int64(&rules->ages, ms);
        rules->n++;
    }
    pb_buf_putc(&rules->like, '}');
    pb_buf_putc(&rules->ages, '}');
    return PB_OK;
fail:
    pb_retention_rules_free(rules);
    return PB_FATAL;
}

void pb_retention_rules_free(pb_retention_rules_t *rules)
{
    pb_buf_free(&rules->like);
    pb_buf_free(&rules->ages);
    memset(rules, 0, sizeof *rules);
}
