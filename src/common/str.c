#include "common/str.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

pb_status_t pb_fail(pb_error_t *err, pb_status_t status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return status;
}

void pb_errbuf_set(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (!errbuf || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, errlen, fmt, ap);
    va_end(ap);
    for (char *p = errbuf; *p; p++)
        if (*p == '\n')
            *p = ' ';
}

bool pb_parse_duration_ms(const char *s, double bare_unit_ms, int64_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0)
        return false;
    double mult;
    if (*end == '\0')
        mult = bare_unit_ms;
    else if (strcmp(end, "ms") == 0)
        mult = 1;
    else if (strcmp(end, "s") == 0)
        mult = 1000;
    else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0)
        mult = 60000;
    else if (strcmp(end, "h") == 0)
        mult = 3600000;
    else if (strcmp(end, "d") == 0)
        mult = 86400000;
    else
        return false;
    *out = (int64_t)(v * mult + 0.5);
    return true;
}

void *pb_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fputs("postbox: out of memory\n", stderr);
        abort();
    }
    return p;
}

void *pb_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fputs("postbox: out of memory\n", stderr);
        abort();
    }
    return q;
}

char *pb_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = pb_malloc(n);
    memcpy(d, s, n);
    return d;
}

static void reserve(pb_buf_t *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->data = pb_realloc(b->data, cap);
    b->cap = cap;
}

void pb_buf_reset(pb_buf_t *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void pb_buf_free(pb_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void pb_buf_append(pb_buf_t *b, const char *s, size_t n)
{
    reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void pb_buf_puts(pb_buf_t *b, const char *s)
{
    pb_buf_append(b, s, strlen(s));
}

void pb_buf_putc(pb_buf_t *b, char c)
{
    pb_buf_append(b, &c, 1);
}

void pb_buf_printf(pb_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n <= 0)
        return;
    reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void pb_buf_append_array_text(pb_buf_t *b, const char *s)
{
    pb_buf_putc(b, '"');
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\')
            pb_buf_putc(b, '\\');
        pb_buf_putc(b, *p);
    }
    pb_buf_putc(b, '"');
}

void pb_buf_append_json_string(pb_buf_t *b, const char *s)
{
    pb_buf_putc(b, '"');
    const char *run = s;
    for (const char *p = s;; p++) {
        unsigned char c = (unsigned char)*p;
        if (c != '\0' && c != '"' && c != '\\' && c >= 0x20)
            continue;
        pb_buf_append(b, run, (size_t)(p - run));
        if (c == '\0')
            break;
        switch (c) {
        case '"': pb_buf_puts(b, "\\\""); break;
        case '\\': pb_buf_puts(b, "\\\\"); break;
        case '\n': pb_buf_puts(b, "\\n"); break;
        case '\r': pb_buf_puts(b, "\\r"); break;
        case '\t': pb_buf_puts(b, "\\t"); break;
        default: pb_buf_printf(b, "\\u%04x", c); break;
        }
        run = p + 1;
    }
    pb_buf_putc(b, '"');
}
