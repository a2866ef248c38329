#include "common/log.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "common/str.h"

pb_log_level_t pb_log_threshold = PB_LOG_INFO;
static bool log_json;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

bool pb_log_set_level(const char *name)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(name, level_names[i]) == 0) {
            pb_log_threshold = (pb_log_level_t)i;
            return true;
        }
    }
    return false;
}

bool pb_log_set_format(const char *name)
{
    if (strcmp(name, "json") == 0)
        log_json = true;
    else if (strcmp(name, "text") == 0)
        log_json = false;
    else
        return false;
    return true;
}

/* Text-format value: bare when it has no space, quote or '=', else quoted with \" escapes.
 * v is valid UTF-8 (see vlog); a cut falls between two characters. */
static void text_value(char *out, size_t outsz, const char *v)
{
    if (!v) {
        snprintf(out, outsz, "-");
        return;
    }
    if (*v && !strpbrk(v, " \t\"=\n")) {
        pb_text_copy(out, outsz, v);
        return;
    }
    size_t o = 0;
    if (o + 1 < outsz)
        out[o++] = '"';
    for (const char *p = v; *p;) {
        size_t len = 1;
        while ((p[len] & 0xC0) == 0x80)
            len++;
        bool esc = *p == '"' || *p == '\\';
        if (o + esc + len + 2 > outsz) /* room for the closing quote and the NUL */
            break;
        if (esc)
            out[o++] = '\\';
        for (size_t i = 0; i < len; i++)
            out[o++] = p[i] == '\n' ? ' ' : p[i];
        p += len;
    }
    if (o + 1 < outsz)
        out[o++] = '"';
    out[o] = '\0';
}

/* "2026-12-01T10:00:00.123Z" into ts (at least 25 bytes). The part up to the seconds is
 * formatted once per second and thread: a relay at debug level writes a record per event. */
static void timestamp(char *ts)
{
    static _Thread_local time_t cached_sec = (time_t)-1;
    static _Thread_local char cached[24];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != cached_sec) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        if (strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm) == 0)
            cached[0] = '\0';
        cached_sec = tv.tv_sec;
    }
    size_t n = strlen(cached);
    memcpy(ts, cached, n);
    int ms = (int)(tv.tv_usec / 1000);
    ts[n++] = '.';
    ts[n++] = (char)('0' + ms / 100);
    ts[n++] = (char)('0' + ms / 10 % 10);
    ts[n++] = (char)('0' + ms % 10);
    ts[n++] = 'Z';
    ts[n] = '\0';
}

/* A field's number in a text record: an integer as such, else three decimals without trailing
 * zeros (12.346, 0.5); very large values and NaN in %g. */
static void format_number(char *out, size_t outsz, double v)
{
    if (!(v > -1e12 && v < 1e12)) {
        snprintf(out, outsz, "%.15g", v);
        return;
    }
    long long milli = llround(v * 1000.0);
    bool neg = milli < 0;
    unsigned long long m = (unsigned long long)(neg ? -milli : milli);
    unsigned frac = (unsigned)(m % 1000);
    int w = snprintf(out, outsz, "%s%llu", neg ? "-" : "", m / 1000);
    if (frac == 0 || w < 0 || (size_t)w + 5 > outsz)
        return;
    char digits[5] = {'.', (char)('0' + frac / 100), (char)('0' + frac / 10 % 10),
                      (char)('0' + frac % 10), '\0'};
    for (int i = 3; digits[i] == '0'; i--)
        digits[i] = '\0';
    memcpy(out + w, digits, sizeof digits);
}

/* Appends len bytes of s to line (size sz, one byte kept for the newline). */
static void line_put(char *line, size_t sz, size_t *n, const char *s, size_t len)
{
    if (*n + len > sz - 1)
        len = sz - 1 - *n;
    memcpy(line + *n, s, len);
    *n += len;
}

/* Writes a record to stderr whole (a log line is never left half written by a signal). */
static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(STDERR_FILENO, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* nowhere to report that stderr is gone */
        p += w;
        n -= (size_t)w;
    }
}

static void vlog(pb_log_level_t level, const char *fac, const pb_log_field_t *fields,
                 const char *fmt, va_list ap) PB_PRINTF(4, 0);
static void vlog(pb_log_level_t level, const char *fac, const pb_log_field_t *fields,
                 const char *fmt, va_list ap)
{
    char raw[4096], shown[4096], msg[2048];
    vsnprintf(raw, sizeof raw, fmt, ap);
    /* no secret in any record, whichever message quotes a URL or DSN */
    pb_redact_secret(raw, shown, sizeof shown);
    /* one record, one line: libpq and broker messages carry newlines of their own */
    for (char *p = shown; *p; p++)
        if (*p == '\t' || *p == '\n' || *p == '\r')
            *p = ' ';
    /* valid UTF-8 (a text cut elsewhere may end inside a character; JSON needs UTF-8); text
     * records go to terminals: control characters from payloads are escaped there */
    size_t len = log_json ? pb_text_copy(msg, sizeof msg, shown)
                          : pb_text_escape(msg, sizeof msg, shown);
    while (len && msg[len - 1] == ' ')
        msg[--len] = '\0';

    char ts[40];
    timestamp(ts);

    if (!log_json) {
        /* one write per record: the line is put together here (no stdio on the hot path) */
        char line[4096];
        size_t n = 0;
        line_put(line, sizeof line, &n, ts, strlen(ts));
        line_put(line, sizeof line, &n, " ", 1);
        const char *lv = level_names[level];
        line_put(line, sizeof line, &n, lv, strlen(lv));
        line_put(line, sizeof line, &n, "     ", 5 - (strlen(lv) < 5 ? strlen(lv) : 5) + 1);
        line_put(line, sizeof line, &n, fac, strlen(fac));
        line_put(line, sizeof line, &n, ": ", 2);
        line_put(line, sizeof line, &n, msg, len);
        size_t fields_room = n + 1024 < sizeof line - 1 ? n + 1024 : sizeof line - 1;
        for (const pb_log_field_t *f = fields; f && f->key; f++) {
            char v[512];
            if (f->kind == 2) {
                format_number(v, sizeof v, f->num);
            } else if (f->str) {
                char red[512], clean[512];
                pb_redact_secret(f->str, red, sizeof red);
                pb_text_escape(clean, sizeof clean, red);
                text_value(v, sizeof v, clean);
            } else {
                text_value(v, sizeof v, NULL);
            }
            /* a field that does not fit whole is left out rather than cut */
            size_t klen = strlen(f->key), vlen = strlen(v);
            if (n + 2 + klen + vlen > fields_room)
                break;
            line_put(line, sizeof line, &n, " ", 1);
            line_put(line, sizeof line, &n, f->key, klen);
            line_put(line, sizeof line, &n, "=", 1);
            line_put(line, sizeof line, &n, v, vlen);
        }
        line[n++] = '\n';
        write_all(line, n);
        return;
    }
    json_t *obj = json_pack("{s:s, s:s, s:s, s:s}", "time", ts, "level", level_names[level],
                            "component", fac, "msg", msg);
    for (const pb_log_field_t *f = fields; obj && f && f->key; f++) {
        json_t *v;
        if (f->kind == 2)
            v = f->num == (double)(long long)f->num ? json_integer((json_int_t)f->num)
                                                     : json_real(f->num);
        else if (f->str) {
            char red[1024], clean[1024]; /* jansson takes only UTF-8 */
            pb_redact_secret(f->str, red, sizeof red);
            pb_text_copy(clean, sizeof clean, red);
            v = json_string(clean);
        } else {
            v = json_null();
        }
        json_object_set_new(obj, f->key, v ? v : json_string("(unprintable)"));
    }
    char *line = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (line)
        fprintf(stderr, "%s\n", line);
    else /* the message was not valid UTF-8: keep it readable rather than lose it */
        fprintf(stderr, "{\"time\":\"%s\",\"level\":\"%s\",\"component\":\"%s\",\"msg\":\"(unprintable)\"}\n",
                ts, level_names[level], fac);
    free(line);
    json_decref(obj);
}

void pb_log_write(pb_log_level_t level, const char *fac, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fac, NULL, fmt, ap);
    va_end(ap);
}

void pb_log_write_fields(pb_log_level_t level, const char *fac, const pb_log_field_t *fields,
                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fac, fields, fmt, ap);
    va_end(ap);
}
