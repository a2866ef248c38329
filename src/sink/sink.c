#include "sink/sink.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/bytes.h"
#include "common/str.h"
#include "sink/cloudevents.h"

/* Every sink: its name in relay.sink and its constructor. */
static const struct {
    const char *name;
    pb_sink_new_fn make;
} sinks[] = {
    {"amqp", pb_sink_amqp_new},
    {"nats", pb_sink_nats_new},
    {"redis", pb_sink_redis_new},
    {"kafka", pb_sink_kafka_new},
    {"stdout", pb_sink_stdout_new},
};

pb_status_t pb_sink_new(const pb_config_t *cfg, pb_sink_t **out, pb_error_t *err)
{
    *out = NULL;
    for (size_t i = 0; i < sizeof sinks / sizeof sinks[0]; i++)
        if (strcmp(cfg->relay_sink, sinks[i].name) == 0)
            return sinks[i].make(cfg, out, err);
    return pb_fail(err, PB_FATAL, "relay.sink: unknown sink \"%s\"", cfg->relay_sink);
}

/* Whether JSON headers text holds anything: "{}", the most common, skips the parser. */
static bool headers_present(const char *json)
{
    if (!json)
        return false;
    const char *p = json + strspn(json, " \t\r\n");
    if (*p != '{')
        return *p != '\0';
    p++;
    p += strspn(p, " \t\r\n");
    return *p != '}';
}

static bool json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The end of the JSON string starting at s[i] == '"' in the text s of len bytes (s[len] is
 * its NUL) when it holds no escape and no control character (its bytes are then its value): the
 * index past its closing quote, else 0. */
static size_t plain_string_end(const char *s, size_t len, size_t i)
{
    size_t j = i + 1;
    for (; j + 8 <= len; j += 8) {
        uint64_t w = pb_bytes_load(s + j);
        uint64_t f = pb_bytes_has(w, '"') | pb_bytes_has(w, '\\') | pb_bytes_below(w, 0x20);
        if (f) {
            j += pb_bytes_first(f);
            break;
        }
    }
    for (;; j++) {
        unsigned char c = (unsigned char)s[j];
        if (c == '"')
            return j + 1;
        if (c == '\\' || c < 0x20) /* an escape, a control character, the end of the text */
            return 0;
    }
}

#define FLAT_MAX 32 /* members read in place at most; more go through the parser */

/* The number of members of the object text when each is a plain string (plain_string_end),
 * no name repeats (jansson keeps the last of a repeated name; PostgreSQL's jsonb never writes
 * one) and there are at most FLAT_MAX; else 0: then the parser decides. */
static unsigned flat_members(const char *s)
{
    size_t len = strlen(s), i = 0, kpos[FLAT_MAX], klen[FLAT_MAX];
    unsigned n = 0;
    while (json_space(s[i]))
        i++;
    if (s[i++] != '{')
        return 0;
    for (;;) {
        while (json_space(s[i]))
            i++;
        size_t k = i;
        if (s[i] != '"' || !(i = plain_string_end(s, len, i)) || n == FLAT_MAX)
            return 0;
        kpos[n] = k + 1;
        klen[n] = i - k - 2;
        for (unsigned j = 0; j < n; j++)
            if (klen[j] == klen[n] && memcmp(s + kpos[j], s + kpos[n], klen[n]) == 0)
                return 0;
        while (json_space(s[i]))
            i++;
        if (s[i++] != ':')
            return 0;
        while (json_space(s[i]))
            i++;
        if (s[i] != '"' || !(i = plain_string_end(s, len, i)))
            return 0;
        n++;
        while (json_space(s[i]))
            i++;
        if (s[i] == '}')
            break;
        if (s[i++] != ',')
            return 0;
    }
    for (i++; json_space(s[i]); i++)
        ;
    /* jansson refuses text that is not UTF-8, and so does this path */
    return s[i] == '\0' && pb_utf8_valid(s, i) ? n : 0;
}

bool pb_sink_prepare(pb_sink_t *snk, pb_event_t *ev, pb_result_t *result)
{
    PB_ASSERT(ev->header_obj == NULL); /* once per event */
    ev->flat_headers = 0;
    if (headers_present(ev->headers) && !(ev->flat_headers = flat_members(ev->headers))) {
        /* anything but an object of plain strings (traceparent, correlation ids: the usual
         * headers) goes through the parser */
        json_error_t jerr;
        json_t *root = json_loads(ev->headers, JSON_DECODE_ANY, &jerr);
        if (!root) {
            pb_result_setf(result, PB_OUT_REJECT, "headers are not valid JSON: %s", jerr.text);
            return false;
        }
        if (!json_is_object(root) && !json_is_null(root)) {
            json_decref(root);
            pb_result_set(result, PB_OUT_REJECT, "headers must be a JSON object");
            return false;
        }
        if (json_is_object(root) && json_object_size(root) > 0)
            ev->header_obj = root;
        else
            json_decref(root);
    }
    if (snk->ce && !pb_ce_check_event(ev, result))
        return false;
    return !snk->ops->check || snk->ops->check(snk, ev, result);
}

void pb_sink_release(pb_event_t *ev)
{
    json_decref(ev->header_obj);
    ev->header_obj = NULL;
    ev->flat_headers = 0;
}

void pb_header_iter_init(pb_header_iter_t *it, const pb_event_t *ev)
{
    it->ev = ev;
    it->pos = 0;
    it->jit = ev->header_obj ? json_object_iter(ev->header_obj) : NULL;
}

bool pb_header_next(pb_header_iter_t *it, pb_header_t *h)
{
    const pb_event_t *ev = it->ev;
    if (ev->flat_headers) { /* checked by flat_members: spans of plain strings */
        const char *s = ev->headers;
        size_t i = it->pos;
        while (s[i] && s[i] != '"')
            i++; /* past '{', ',', ':' and blanks */
        if (!s[i])
            return false;
        /* plain strings: each ends at the next quote */
        const char *kend = strchr(s + i + 1, '"');
        h->key = s + i + 1;
        h->klen = (size_t)(kend - h->key);
        const char *v = strchr(kend + 1, '"');
        const char *vend = strchr(v + 1, '"');
        h->val = v + 1;
        h->vlen = (size_t)(vend - h->val);
        h->json = NULL;
        it->pos = (size_t)(vend + 1 - s);
        return true;
    }
    if (!it->jit)
        return false;
    json_t *v = json_object_iter_value(it->jit);
    h->key = json_object_iter_key(it->jit);
    h->klen = strlen(h->key);
    h->json = v;
    h->val = json_is_string(v) ? json_string_value(v) : NULL;
    h->vlen = json_is_string(v) ? json_string_length(v) : 0;
    it->jit = json_object_iter_next(ev->header_obj, it->jit);
    return true;
}

size_t pb_header_count(const pb_event_t *ev)
{
    return ev->flat_headers ? ev->flat_headers
                            : ev->header_obj ? json_object_size(ev->header_obj) : 0;
}

bool pb_header_string(const pb_event_t *ev, const char *key, const char **val, size_t *len)
{
    if (ev->header_obj) {
        json_t *v = json_object_get(ev->header_obj, key);
        if (!json_is_string(v))
            return false;
        *val = json_string_value(v);
        *len = json_string_length(v);
        return true;
    }
    pb_header_iter_t it;
    pb_header_t h;
    for (pb_header_iter_init(&it, ev); pb_header_next(&it, &h);) {
        if (pb_header_is(&h, key)) {
            *val = h.val;
            *len = h.vlen;
            return true;
        }
    }
    return false;
}

pb_status_t pb_sink_publish(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    pb_status_t st = snk->ops->send(snk, b, err);
    return st == PB_OK ? snk->ops->await(snk, b, err) : st;
}

void pb_result_set(pb_result_t *r, pb_outcome_t outcome, const char *reason)
{
    r->outcome = outcome;
    r->duplicate = false;
    pb_text_copy(r->error, sizeof r->error, reason);
}

void pb_result_setf(pb_result_t *r, pb_outcome_t outcome, const char *fmt, ...)
{
    char msg[1024]; /* longer than r->error, so the cut happens in pb_text_copy */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->outcome = outcome;
    r->duplicate = false;
    pb_text_copy(r->error, sizeof r->error, msg);
}
