#include "broker/amqp/queue_bound.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <amqp_framing.h>

#define MAX_ARGS 8

bool pb_amqp_arg_bounds_queue(const char *name)
{
    return strcmp(name, "x-message-ttl") == 0 || strcmp(name, "x-max-length") == 0 ||
           strcmp(name, "x-max-length-bytes") == 0;
}

/* Copies the text between p and the first quote at or after it; NULL when none or too long. */
static const char *quoted(const char *p, char *out, size_t n)
{
    const char *end = strchr(p, '\'');
    if (!end || (size_t)(end - p) >= n)
        return NULL;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return end + 1;
}

static bool is_flag(const char *name)
{
    return strcmp(name, "durable") == 0 || strcmp(name, "auto_delete") == 0 ||
           strcmp(name, "exclusive") == 0;
}

static bool parse_bool(const char *v, bool *out)
{
    if (strcmp(v, "true") == 0)
        *out = true;
    else if (strcmp(v, "false") == 0)
        *out = false;
    else
        return false;
    return true;
}

static bool parse_int(const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end)
        return false;
    *out = x;
    return true;
}

static bool typed_value(pb_amqp_inequivalent_t *o, const char *value, const char *type)
{
    static const struct {
        const char *type;
        amqp_field_value_kind_t kind;
    } ints[] = {{"signedint", AMQP_FIELD_KIND_I32}, {"long", AMQP_FIELD_KIND_I64},
                {"short", AMQP_FIELD_KIND_I16}, {"byte", AMQP_FIELD_KIND_I8}};
    if (strcmp(type, "longstr") == 0) {
        if (strlen(value) >= sizeof o->str)
            return false;
        o->kind = AMQP_FIELD_KIND_UTF8;
        strcpy(o->str, value);
        return true;
    }
    if (strcmp(type, "bool") == 0) {
        o->kind = AMQP_FIELD_KIND_BOOLEAN;
        return parse_bool(value, &o->flag);
    }
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (strcmp(type, ints[i].type) == 0) {
            o->kind = ints[i].kind;
            return parse_int(value, &o->num);
        }
    return false;
}

bool pb_amqp_parse_inequivalent(const char *text, pb_amqp_inequivalent_t *out)
{
    memset(out, 0, sizeof *out);
    const char *p = strstr(text, "inequivalent arg '");
    if (!p || !(p = quoted(p + strlen("inequivalent arg '"), out->name, sizeof out->name)))
        return false;
    const char *cur = strstr(p, " but current is ");
    if (!cur)
        return false;
    cur += strlen(" but current is ");
    char value[160], type[32];
    if (strncmp(cur, "the value '", 11) == 0) {
        /* the value may hold quotes: the type is after the last "' of type '" */
        const char *v = cur + 11, *t = NULL, *s = v;
        while ((s = strstr(s, "' of type '")) != NULL)
            t = s++;
        if (!t || (size_t)(t - v) >= sizeof value)
            return false;
        memcpy(value, v, (size_t)(t - v));
        value[t - v] = '\0';
        if (!quoted(t + strlen("' of type '"), type, sizeof type))
            return false;
        return !is_flag(out->name) && typed_value(out, value, type);
    }
    /* received 'X' but current is 'Y': a flag, or a string argument that was sent */
    if (*cur != '\'' || !quoted(cur + 1, value, sizeof value))
        return false;
    if (is_flag(out->name)) {
        out->kind = AMQP_FIELD_KIND_BOOLEAN;
        return parse_bool(value, &out->flag);
    }
    return typed_value(out, value, "longstr");
}

static amqp_table_entry_t entry(const pb_amqp_inequivalent_t *a)
{
    amqp_table_entry_t e = {.key = amqp_cstring_bytes(a->name)};
    e.value.kind = (uint8_t)a->kind;
    switch (a->kind) {
    case AMQP_FIELD_KIND_UTF8:
        e.value.value.bytes = amqp_cstring_bytes(a->str);
        break;
    case AMQP_FIELD_KIND_BOOLEAN:
        e.value.value.boolean = a->flag;
        break;
    case AMQP_FIELD_KIND_I8:
        e.value.value.i8 = (int8_t)a->num;
        break;
    case AMQP_FIELD_KIND_I16:
        e.value.value.i16 = (int16_t)a->num;
        break;
    case AMQP_FIELD_KIND_I32:
        e.value.value.i32 = (int32_t)a->num;
        break;
    default:
        e.value.value.i64 = a->num;
        break;
    }
    return e;
}

static void describe(const pb_amqp_inequivalent_t *a, char *buf, size_t n)
{
    if (a->kind == AMQP_FIELD_KIND_UTF8)
        snprintf(buf, n, "%s \"%s\"", a->name, a->str);
    else if (a->kind == AMQP_FIELD_KIND_BOOLEAN)
        snprintf(buf, n, "%s %s", a->name, a->flag ? "true" : "false");
    else
        snprintf(buf, n, "%s %lld", a->name, (long long)a->num);
}

pb_status_t pb_amqp_probe_queue_bound(pb_amqp_link_t *lk, const char *queue,
                                      pb_amqp_queue_bound_t *out, char *detail, size_t n,
                                      pb_error_t *err)
{
    pb_amqp_inequivalent_t named[MAX_ARGS];
    amqp_table_entry_t args[MAX_ARGS];
    int nargs = 0;
    bool durable = true, auto_delete = false;
    *out = PB_AMQP_QUEUE_BOUND_UNKNOWN;
    for (int round = 0; round <= MAX_ARGS + 2; round++) {
        amqp_table_t table = {.num_entries = nargs, .entries = args};
        if (amqp_queue_declare(lk->conn, PB_AMQP_LINK_CHANNEL, amqp_cstring_bytes(queue), 0,
                               durable, 0, auto_delete, table)) {
            *out = PB_AMQP_QUEUE_UNBOUNDED;
            snprintf(detail, n, "no x-message-ttl, x-max-length or x-max-length-bytes argument");
            return PB_OK;
        }
        char buf[400];
        unsigned code = pb_amqp_link_rpc_failed(lk, "probe queue", buf, sizeof buf);
        if (!code)
            return pb_fail(err, PB_TRANSIENT, "%s", buf);
        pb_status_t st = pb_amqp_link_channel_open(lk, err);
        if (st != PB_OK)
            return st;
        pb_amqp_inequivalent_t a;
        if (code != AMQP_PRECONDITION_FAILED || !pb_amqp_parse_inequivalent(buf, &a)) {
            snprintf(detail, n, "%s", buf);
            return PB_OK;
        }
        if (pb_amqp_arg_bounds_queue(a.name)) {
            *out = PB_AMQP_QUEUE_BOUNDED;
            describe(&a, detail, n);
            return PB_OK;
        }
        bool seen = false;
        for (int i = 0; i < nargs; i++)
            seen |= strcmp(named[i].name, a.name) == 0;
        if (strcmp(a.name, "durable") == 0 && durable != a.flag) {
            durable = a.flag;
        } else if (strcmp(a.name, "auto_delete") == 0 && auto_delete != a.flag) {
            auto_delete = a.flag;
        } else if (is_flag(a.name) || seen || nargs == MAX_ARGS) {
            snprintf(detail, n, "the broker's answers could not be followed: %s", buf);
            return PB_OK;
        } else {
            named[nargs] = a;
            args[nargs] = entry(&named[nargs]);
            nargs++;
        }
    }
    snprintf(detail, n, "the broker named more arguments than the probe follows");
    return PB_OK;
}
