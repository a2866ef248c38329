#include "source/envelope.h"

#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "otlp/traceparent.h"

/* The strings of a batch live in env->text, which may move while it grows: each message's
 * values are kept as offsets and turned into pointers once the batch is done. */
enum { V_ID, V_TYPE, V_TRACEPARENT, V_TRACESTATE, V_COUNT };
#define NO_VALUE SIZE_MAX

void pb_envelope_init(pb_envelope_t *env, const pb_config_t *cfg)
{
    memset(env, 0, sizeof *env);
    const char *source = cfg->consume_source;
    if (strcmp(source, "amqp") == 0) {
        env->prefixes[env->n_prefixes++] = "cloudEvents_";
        env->prefixes[env->n_prefixes++] = "cloudEvents:";
        const char *own = cfg->amqp_cloudevents_prefix;
        if (*own && strcmp(own, "cloudEvents_") != 0 && strcmp(own, "cloudEvents:") != 0)
            env->prefixes[env->n_prefixes++] = own;
    } else if (strcmp(source, "nats") == 0) {
        env->prefixes[env->n_prefixes++] = "ce-";
        env->percent_encoded = true;
    } else {
        env->prefixes[env->n_prefixes++] = "ce_"; /* kafka's binding, redis's fields */
    }
}

void pb_envelope_free(pb_envelope_t *env)
{
    pb_buf_free(&env->text);
}

/* Whether the headers text may hold anything of ours: most messages skip the parse. */
static bool worth_parsing(const pb_envelope_t *env, const char *headers)
{
    if (!headers || headers[0] != '{' || headers[1] == '}')
        return false;
    if (strstr(headers, "\"traceparent\""))
        return true;
    for (size_t p = 0; p < env->n_prefixes; p++) {
        char quoted[40];
        size_t len = strlen(env->prefixes[p]);
        if (len + 2 > sizeof quoted)
            continue;
        quoted[0] = '"';
        memcpy(quoted + 1, env->prefixes[p], len + 1);
        if (strstr(headers, quoted))
            return true;
    }
    return false;
}

/* A header's string value: NULL when absent, not a string, or the "\x<hex>" form in which the
 * sources write bytes that are not UTF-8. */
static const char *string_of(json_t *obj, const char *key, size_t *len)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_string(v))
        return NULL;
    const char *s = json_string_value(v);
    *len = json_string_length(v);
    if (*len >= 2 && s[0] == '\\' && s[1] == 'x')
        return NULL;
    return s;
}

/* Appends the value of CloudEvents attribute attr, decoded, to env->text (with its NUL);
 * returns its offset, or NO_VALUE when the headers do not hold it (or not as text). */
static size_t put_attribute(pb_envelope_t *env, json_t *obj, const char *attr)
{
    for (size_t p = 0; p < env->n_prefixes; p++) {
        char key[64];
        snprintf(key, sizeof key, "%s%s", env->prefixes[p], attr);
        size_t len;
        const char *s = string_of(obj, key, &len);
        if (!s || len == 0)
            continue;
        size_t at = env->text.len;
        if (!env->percent_encoded) {
            pb_buf_append(&env->text, s, len);
        } else {
            char *decoded;
            if (!pb_percent_decode(s, len, &decoded))
                continue; /* malformed: as if absent */
            pb_buf_puts(&env->text, decoded);
            free(decoded);
        }
        pb_buf_putc(&env->text, '\0');
        return at;
    }
    return NO_VALUE;
}

static size_t put_plain(pb_envelope_t *env, const char *s, size_t len)
{
    size_t at = env->text.len;
    pb_buf_append(&env->text, s, len);
    pb_buf_putc(&env->text, '\0');
    return at;
}

/* The trace context: the plain headers (what postbox's relay sends), else the attributes. */
static void put_trace(pb_envelope_t *env, json_t *obj, size_t *off)
{
    size_t len;
    const char *tp = string_of(obj, "traceparent", &len);
    pb_trace_context_t ctx;
    if (tp && pb_traceparent_parse(tp, len, &ctx)) {
        off[V_TRACEPARENT] = put_plain(env, tp, len);
        const char *ts = string_of(obj, "tracestate", &len);
        if (ts && pb_tracestate_valid(ts, len))
            off[V_TRACESTATE] = put_plain(env, ts, len);
        return;
    }
    size_t at = put_attribute(env, obj, "traceparent");
    if (at == NO_VALUE)
        return;
    const char *v = env->text.data + at;
    if (!pb_traceparent_parse(v, strlen(v), &ctx)) {
        env->text.len = at; /* not a traceparent: dropped */
        return;
    }
    off[V_TRACEPARENT] = at;
    at = put_attribute(env, obj, "tracestate");
    if (at == NO_VALUE)
        return;
    v = env->text.data + at;
    if (pb_tracestate_valid(v, strlen(v)))
        off[V_TRACESTATE] = at;
    else
        env->text.len = at;
}

/* The values msg lacks, as offsets into env->text (NO_VALUE: keep the message's own). */
static void read_headers(pb_envelope_t *env, pb_message_t *m, size_t *off)
{
    for (int v = 0; v < V_COUNT; v++)
        off[v] = NO_VALUE;
    if (!worth_parsing(env, m->headers))
        return;
    json_t *obj = json_loads(m->headers, 0, NULL);
    if (!json_is_object(obj)) {
        json_decref(obj);
        return;
    }
    if (!m->message_id || !*m->message_id)
        off[V_ID] = put_attribute(env, obj, "id");
    if (!m->type || !*m->type)
        off[V_TYPE] = put_attribute(env, obj, "type");
    if (m->sequence == 0) {
        size_t at = put_attribute(env, obj, "aggregatesequence");
        if (at != NO_VALUE) {
            const char *v = env->text.data + at;
            m->sequence = pb_source_sequence(v, strlen(v));
            env->text.len = at; /* the number is all it is needed for */
        }
    }
    put_trace(env, obj, off);
    json_decref(obj);
}

void pb_envelope_fill(pb_envelope_t *env, pb_message_t *msgs, size_t n)
{
    pb_buf_reset(&env->text);
    size_t *offs = pb_malloc((n ? n : 1) * V_COUNT * sizeof *offs);
    for (size_t i = 0; i < n; i++)
        read_headers(env, &msgs[i], offs + i * V_COUNT);
    for (size_t i = 0; i < n; i++) {
        const size_t *off = offs + i * V_COUNT;
        const char *base = env->text.data;
        if (off[V_ID] != NO_VALUE)
            msgs[i].message_id = base + off[V_ID];
        if (off[V_TYPE] != NO_VALUE)
            msgs[i].type = base + off[V_TYPE];
        msgs[i].traceparent = off[V_TRACEPARENT] != NO_VALUE ? base + off[V_TRACEPARENT] : NULL;
        msgs[i].tracestate = off[V_TRACESTATE] != NO_VALUE ? base + off[V_TRACESTATE] : NULL;
    }
    free(offs);
}
