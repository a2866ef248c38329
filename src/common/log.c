#include "common/log.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

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

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    size_t n = strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + n, sizeof ts - n, ".%03dZ", (int)(tv.tv_usec / 1000));

    if (!log_json) {
        char extra[1024];
        size_t e = 0;
        extra[0] = '\0';
        for (const pb_log_field_t *f = fields; f && f->key && e < sizeof extra; f++) {
            char v[512];
            if (f->kind == 2) {
                snprintf(v, sizeof v, "%.15g", f->num);
            } else if (f->str) {
                char red[512], clean[512];
                pb_redact_secret(f->str, red, sizeof red);
                pb_text_escape(clean, sizeof clean, red);
                text_value(v, sizeof v, clean);
            } else {
                text_value(v, sizeof v, NULL);
            }
            /* a field that does not fit whole is left out rather than cut */
            int w = snprintf(extra + e, sizeof extra - e, " %s=%s", f->key, v);
            if (w < 0 || (size_t)w >= sizeof extra - e) {
                extra[e] = '\0';
                break;
            }
            e += (size_t)w;
        }
        fprintf(stderr, "%s %-5s %s: %s%s\n", ts, level_names[level], fac, msg, extra);
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
