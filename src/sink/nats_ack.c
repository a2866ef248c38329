/* JetStream PubAck replies. The relay reads one per event, so the two shapes nats-server
 * writes for a stored message are recognised first, without decoding: a run of bytes that
 * matches them exactly is one well-formed JSON object with unique keys. Everything else (an
 * error, a domain, keys a later server adds, any escape or non-ASCII byte) goes through
 * jansson, the project's JSON library, which gives the same result for the common shapes. */
#include "sink/nats_ack.h"

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/json_span.h"

static void invalid(pb_puback_t *ack, const char *why)
{
    ack->kind = PB_PUBACK_INVALID;
    snprintf(ack->text, sizeof ack->text, "%s", why);
}

/* An optional integer member of obj that must fit an int: *out = 0 when absent. */
static bool int_member(const json_t *obj, const char *key, int *out)
{
    const json_t *v = json_object_get(obj, key);
    *out = 0;
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < INT_MIN || json_integer_value(v) > INT_MAX)
        return false;
    *out = (int)json_integer_value(v);
    return true;
}

static void parse_error(const json_t *e, pb_puback_t *ack)
{
    if (!json_is_object(e)) {
        invalid(ack, "\"error\" is not an object");
        return;
    }
    if (!int_member(e, "code", &ack->code) || !int_member(e, "err_code", &ack->err_code)) {
        invalid(ack, "\"error\" has a code that is not a small integer");
        return;
    }
    const json_t *d = json_object_get(e, "description");
    if (d && !json_is_string(d)) {
        invalid(ack, "\"error\" has a description that is not a string");
        return;
    }
    ack->kind = PB_PUBACK_ERROR;
    snprintf(ack->text, sizeof ack->text, "%s", d ? json_string_value(d) : "no description");
}

/* The cursor of the common-shape recogniser over data[0..len). */
typedef struct shape {
    const char *p, *end;
} shape_t;

static void skip_ws(shape_t *c)
{
    c->p += pb_json_skip_space(c->p, (size_t)(c->end - c->p), 0);
}

/* Optional white space, then exactly lit. */
static bool expect(shape_t *c, const char *lit)
{
    skip_ws(c);
    size_t n = strlen(lit);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
        return false;
    c->p += n;
    return true;
}

/* A non-empty string of printable ASCII without quote or backslash. */
static bool plain_string(shape_t *c)
{
    if (!expect(c, "\""))
        return false;
    const char *start = c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p < 0x20 || *c->p > 0x7e || *c->p == '\\')
            return false;
        c->p++;
    }
    if (c->p == c->end || c->p == start)
        return false;
    c->p++;
    return true;
}

/* A JSON integer without sign, leading zero or exponent, at most INT64_MAX. */
static bool plain_uint(shape_t *c, uint64_t *out)
{
    skip_ws(c);
    const char *start = c->p;
    uint64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        unsigned d = (unsigned)(*c->p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
        c->p++;
    }
    size_t n = (size_t)(c->p - start);
    if (n == 0 || (n > 1 && *start == '0'))
        return false;
    *out = v;
    return true;
}

/* {"stream":S,"seq":N} or {"stream":S,"seq":N,"duplicate":true|false}, any white space
 * between tokens: true and *ack filled when data is exactly one of them. */
static bool common_shape(const char *data, size_t len, pb_puback_t *ack)
{
    shape_t c = {data, data + len};
    uint64_t seq;
    bool dup = false;
    if (!expect(&c, "{") || !expect(&c, "\"stream\"") || !expect(&c, ":") ||
        !plain_string(&c) || !expect(&c, ",") || !expect(&c, "\"seq\"") || !expect(&c, ":") ||
        !plain_uint(&c, &seq))
        return false;
    if (expect(&c, ",")) {
        if (!expect(&c, "\"duplicate\"") || !expect(&c, ":"))
            return false;
        if (expect(&c, "true"))
            dup = true;
        else if (!expect(&c, "false"))
            return false;
    }
    if (!expect(&c, "}"))
        return false;
    skip_ws(&c);
    if (c.p != c.end)
        return false;
    ack->kind = dup ? PB_PUBACK_DUPLICATE : PB_PUBACK_STORED;
    ack->seq = seq;
    return true;
}

void pb_nats_puback_parse(const char *data, size_t len, pb_puback_t *ack)
{
    memset(ack, 0, sizeof *ack);
    if (!data || len == 0) {
        invalid(ack, "empty reply");
        return;
    }
    if (common_shape(data, len, ack))
        return;
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        ack->kind = PB_PUBACK_INVALID;
        snprintf(ack->text, sizeof ack->text, "not JSON: %.140s", jerr.text);
        return;
    }
    if (!json_is_object(root)) {
        invalid(ack, "not a JSON object");
    } else if (json_object_get(root, "error")) {
        parse_error(json_object_get(root, "error"), ack);
    } else {
        const json_t *stream = json_object_get(root, "stream");
        const json_t *seq = json_object_get(root, "seq");
        const json_t *dup = json_object_get(root, "duplicate");
        if (!json_is_string(stream) || json_string_length(stream) == 0)
            invalid(ack, "no stream name");
        else if (!json_is_integer(seq) || json_integer_value(seq) < 0)
            invalid(ack, "no sequence number");
        else if (dup && !json_is_boolean(dup))
            invalid(ack, "\"duplicate\" is not a boolean");
        else {
            ack->kind = json_is_true(dup) ? PB_PUBACK_DUPLICATE : PB_PUBACK_STORED;
            ack->seq = (uint64_t)json_integer_value(seq);
        }
    }
    json_decref(root);
}
