#include "common/str.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/redact.h"

pb_status_t pb_fail(pb_error_t *err, pb_status_t status, const char *fmt, ...)
{
    if (err) {
        char msg[sizeof err->msg], shown[sizeof err->msg]; /* an argument may be err->msg */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        pb_redact_secret(msg, shown, sizeof shown); /* error texts quote URLs and DSNs */
        pb_text_copy(err->msg, sizeof err->msg, shown);
        err->status = status;
        err->sqlstate[0] = '\0';
    }
    return status;
}

_Noreturn void pb_out_of_memory(void)
{
    fputs("postbox: out of memory\n", stderr);
    abort();
}

_Noreturn void pb_assert_fail(const char *cond, const char *file, int line, const char *func)
{
    fprintf(stderr, "postbox: assertion failed: %s (%s:%d, %s)\n", cond, file, line, func);
    fflush(stderr);
    abort();
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0 when it is not one. */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t min, cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, min = 0x80, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, min = 0x800, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, min = 0x10000, cp = c & 0x07;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

bool pb_utf8_valid(const void *s, size_t n)
{
    const unsigned char *p = s;
    for (size_t i = 0; i < n;) {
        /* ASCII, the common case, eight bytes at a time */
        uint64_t w;
        while (i + 8 <= n && (memcpy(&w, p + i, 8), (w & UINT64_C(0x8080808080808080)) == 0))
            i += 8;
        while (i < n && p[i] < 0x80)
            i++;
        if (i == n)
            break;
        size_t len = utf8_sequence(p + i, n - i);
        if (len == 0)
            return false;
        i += len;
    }
    return true;
}

size_t pb_utf8_prefix(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n && u[i]) {
        size_t len = utf8_sequence(u + i, strnlen((const char *)u + i, 4));
        if (len == 0)
            len = 1; /* an invalid byte counts as one character: pb_text_copy replaces it */
        if (i + len > n)
            break; /* a valid character that does not fit whole */
        i += len;
    }
    return i;
}

size_t pb_text_copy(char *dst, size_t dstsz, const char *src)
{
    if (!dstsz)
        return 0;
    const unsigned char *u = (const unsigned char *)(src ? src : "");
    size_t o = 0;
    while (*u) {
        if (*u >= 0x20 && *u < 0x80) { /* printable ASCII, most of every text: no decoding */
            if (o + 1 >= dstsz)
                break;
            dst[o++] = (char)*u++;
            continue;
        }
        size_t len = utf8_sequence(u, strnlen((const char *)u, 4));
        bool bad = len == 0 || (len == 1 && *u < 0x20 && *u != '\t');
        size_t out = bad ? 1 : len;
        if (o + out >= dstsz)
            break;
        if (bad)
            dst[o++] = *u == '\n' || *u == '\r' ? ' ' : '?';
        else
            for (size_t i = 0; i < len; i++)
                dst[o++] = (char)u[i];
        u += bad ? 1 : len;
    }
    dst[o] = '\0';
    return o;
}

size_t pb_text_escape(char *dst, size_t dstsz, const char *src)
{
    if (!dstsz)
        return 0;
    const unsigned char *u = (const unsigned char *)(src ? src : "");
    size_t o = 0;
    while (*u) {
        if (*u >= 0x20 && *u < 0x7f) { /* printable ASCII: as it is */
            if (o + 1 >= dstsz)
                break;
            dst[o++] = (char)*u++;
            continue;
        }
        size_t len = utf8_sequence(u, strnlen((const char *)u, 4));
        char esc[8] = "";
        if (*u == '\n' || *u == '\t')
            snprintf(esc, sizeof esc, "\\%c", *u == '\n' ? 'n' : 't');
        else if (len == 0 || *u < 0x20 || *u == 0x7f) /* invalid byte, C0 control, DEL */
            snprintf(esc, sizeof esc, "\\x%02x", *u);
        else if (len == 2 && u[0] == 0xc2 && u[1] < 0xa0) /* C1 control, U+0080..U+009F */
            snprintf(esc, sizeof esc, "\\u%04x", u[1]);
        size_t n = *esc ? strlen(esc) : len;
        if (o + n >= dstsz)
            break;
        memcpy(dst + o, *esc ? esc : (const char *)u, n);
        o += n;
        u += len ? len : 1;
    }
    dst[o] = '\0';
    return o;
}

void pb_errbuf_set(char *errbuf, size_t errlen, const char *fmt, ...)
{
    if (!errbuf || !errlen)
        return;
    char msg[1024], shown[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pb_redact_secret(msg, shown, sizeof shown);
    pb_text_copy(errbuf, errlen, shown);
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
    double ms = v * mult + 0.5;
    if (!(ms < 9.2e18)) /* beyond int64 (or NaN, infinity): no duration anyone means */
        return false;
    *out = (int64_t)ms;
    return true;
}

bool pb_parse_int64(const char *s, size_t n, int64_t *out)
{
    size_t i = 0;
    bool negative = false;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        negative = s[i++] == '-';
    if (i == n)
        return false;
    if (n - i <= 18) { /* 18 digits cannot overflow: no check per digit */
        uint64_t u = 0;
        for (; i < n; i++) {
            if (s[i] < '0' || s[i] > '9')
                return false;
            u = u * 10 + (uint64_t)(s[i] - '0');
        }
        *out = negative ? -(int64_t)u : (int64_t)u;
        return true;
    }
    /* accumulated as a negative number, whose range holds INT64_MIN */
    int64_t v = 0;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        int digit = s[i] - '0';
        if (v < (INT64_MIN + digit) / 10)
            return false;
        v = v * 10 - digit;
    }
    if (!negative && v == INT64_MIN)
        return false;
    *out = negative ? v : -v;
    return true;
}

void *pb_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        pb_out_of_memory();
    return p;
}

void *pb_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        pb_out_of_memory();
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

char *pb_buf_extend(pb_buf_t *b, size_t n)
{
    reserve(b, n);
    char *at = b->data + b->len;
    b->len += n;
    b->data[b->len] = '\0';
    return at;
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

void pb_buf_put_int64(pb_buf_t *b, int64_t v)
{
    char digits[24];
    size_t i = sizeof digits;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        digits[--i] = '-';
    pb_buf_append(b, digits + i, sizeof digits - i);
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
    /* JSON text must be UTF-8: a byte that does not start a valid sequence (a cut character, a
     * surrogate, an overlong form, Latin-1) is written as U+FFFD */
    pb_buf_putc(b, '"');
    const unsigned char *u = (const unsigned char *)(s ? s : "");
    const unsigned char *run = u;
    for (const unsigned char *p = u;;) {
        unsigned char c = *p;
        if (c >= 0x80) {
            size_t len = utf8_sequence(p, strnlen((const char *)p, 4));
            if (len) {
                p += len;
                continue;
            }
        } else if (c != '\0' && c != '"' && c != '\\' && c >= 0x20) {
            p++;
            continue;
        }
        pb_buf_append(b, (const char *)run, (size_t)(p - run));
        if (c == '\0')
            break;
        switch (c) {
        case '"': pb_buf_puts(b, "\\\""); break;
        case '\\': pb_buf_puts(b, "\\\\"); break;
        case '\n': pb_buf_puts(b, "\\n"); break;
        case '\r': pb_buf_puts(b, "\\r"); break;
        case '\t': pb_buf_puts(b, "\\t"); break;
        default:
            if (c >= 0x80)
                pb_buf_puts(b, "\\ufffd");
            else
                pb_buf_printf(b, "\\u%04x", c);
            break;
        }
        run = ++p;
    }
    pb_buf_putc(b, '"');
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

bool pb_has_control_char(const char *s)
{
    for (const unsigned char *u = (const unsigned char *)s; *u; u++)
        if (*u < 0x20 || *u == 0x7f)
            return true;
    return false;
}

bool pb_percent_decode(const char *s, size_t n, char **out)
{
    char *d = pb_malloc(n + 1);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            d[j++] = s[i];
            continue;
        }
        int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
        int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(d);
            return false;
        }
        d[j++] = (char)(hi * 16 + lo);
        i += 2;
    }
    d[j] = '\0';
    *out = d;
    return true;
}


bool pb_list_next(const char **p, const char **item, size_t *len)
{
    while (**p) {
        size_t n = strcspn(*p, ",");
        const char *a = *p, *b = *p + n;
        *p += n + ((*p)[n] == ',');
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if (b > a) {
            *item = a;
            *len = (size_t)(b - a);
            return true;
        }
    }
    return false;
}

pb_status_t pb_url_precheck(const char *url, const char *broker, const char *usage,
                            pb_error_t *err)
{
    if (!url || !*url)
        return pb_fail(err, PB_FATAL, "bad %s url \"\": empty (%s)", broker, usage);
    if (pb_has_control_char(url)) /* not quoted: the redaction works line by line */
        return pb_fail(err, PB_FATAL, "bad %s url: it holds a control character such as a "
                                      "newline or a tab (percent-encode it: %%0A, %%09)", broker);
    return PB_OK;
}
