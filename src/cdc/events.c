#include "cdc/events.h"

#include <limits.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/json_span.h"
#include "common/str.h"

pb_status_t pb_cdc_outbox_map(const pb_pgo_relation_t *rel, pb_cdc_outbox_map_t *map,
                              pb_error_t *err)
{
    map->relid = rel->relid;
    map->id = pb_pgo_column(rel, "id");
    map->event_id = pb_pgo_column(rel, "event_id");
    map->aggregate_type = pb_pgo_column(rel, "aggregate_type");
    map->aggregate_id = pb_pgo_column(rel, "aggregate_id");
    map->event_type = pb_pgo_column(rel, "event_type");
    map->payload = pb_pgo_column(rel, "payload");
    map->headers = pb_pgo_column(rel, "headers");
    map->destination = pb_pgo_column(rel, "destination");
    map->created_at = pb_pgo_column(rel, "created_at");
    map->attempts = pb_pgo_column(rel, "attempts");
    map->sequence = pb_pgo_column(rel, "sequence"); /* schema version 8 on */
    map->available_at = pb_pgo_column(rel, "available_at"); /* schema version 16 on */
    map->expires_at = pb_pgo_column(rel, "expires_at");
    const char *missing = map->id < 0               ? "id"
                          : map->event_id < 0       ? "event_id"
                          : map->aggregate_type < 0 ? "aggregate_type"
                          : map->aggregate_id < 0   ? "aggregate_id"
                          : map->event_type < 0     ? "event_type"
                          : map->payload < 0        ? "payload"
                                                    : NULL;
    if (missing)
        return pb_fail(err, PB_FATAL, "%s.%s has no column \"%s\": cannot read events from it",
                       rel->nspname, rel->relname, missing);
    return PB_OK;
}

/* n decimal digits at *p into *out, advancing *p; false when one is not a digit. */
static bool take_digits(const char **p, const char *end, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (*p >= end || **p < '0' || **p > '9')
            return false;
        v = v * 10 + (**p - '0');
    }
    *out = v;
    return true;
}

static bool take_char(const char **p, const char *end, char c)
{
    if (*p >= end || **p != c)
        return false;
    (*p)++;
    return true;
}

/* Days from 1970-01-01 to the proleptic Gregorian date y-m-d (eras of 400 years). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* PostgreSQL's text form of a timestamptz, "YYYY-MM-DD HH:MI:SS[.ffffff]+HH[:MI[:SS]]", parsed
 * by hand: the cdc relay reads one per event. */
bool pb_parse_timestamptz(const char *s, size_t len, int64_t *us)
{
    const char *p = s, *end = s + len;
    int y, mo, d, h, mi, sec;
    if (!take_digits(&p, end, 4, &y) || !take_char(&p, end, '-') ||
        !take_digits(&p, end, 2, &mo) || !take_char(&p, end, '-') ||
        !take_digits(&p, end, 2, &d) || !take_char(&p, end, ' ') ||
        !take_digits(&p, end, 2, &h) || !take_char(&p, end, ':') ||
        !take_digits(&p, end, 2, &mi) || !take_char(&p, end, ':') ||
        !take_digits(&p, end, 2, &sec))
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 24 || mi > 59 || sec > 60)
        return false;
    int64_t frac = 0;
    if (take_char(&p, end, '.')) {
        int digits = 0;
        for (; p < end && *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 6)
                frac = frac * 10 + (*p - '0');
        if (digits == 0)
            return false;
        for (; digits < 6; digits++)
            frac *= 10;
    }
    int sign = 0, oh = 0, om = 0, os = 0;
    if (p < end && (*p == '+' || *p == '-')) {
        sign = *p++ == '-' ? -1 : 1;
        if (!take_digits(&p, end, 2, &oh))
            return false;
        if (take_char(&p, end, ':') && !take_digits(&p, end, 2, &om))
            return false;
        if (take_char(&p, end, ':') && !take_digits(&p, end, 2, &os))
            return false;
    }
    if (p != end)
        return false;
    int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec -
                sign * (oh * 3600 + om * 60 + os);
    *us = t * 1000000 + frac;
    return true;
}

/* Copies the listed strings into one block; *dst[i] receive pointers into it. */
static char *pack(size_t n, const char *const *src, const size_t *lens, const char **dst)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += (src[i] ? lens[i] + 1 : 0);
    char *block = pb_malloc(total ? total : 1);
    char *p = block;
    for (size_t i = 0; i < n; i++) {
        if (!src[i]) {
            dst[i] = NULL;
            continue;
        }
        memcpy(p, src[i], lens[i]);
        p[lens[i]] = '\0';
        dst[i] = p;
        p += lens[i] + 1;
    }
    return block;
}

/* Fills out (zeroed first) from n >= 7 strings: event_id, aggregate_type, aggregate_id, event_type,
 * payload, headers, destination, then any extra ones. They are copied into out->block; dst[i]
 * receives the copy of src[i] (NULL for a NULL one). */
static void pack_event(pb_cdc_event_t *out, size_t n, const char *const *src, const size_t *lens,
                       const char **dst)
{
    memset(out, 0, sizeof *out);
    out->block = pack(n, src, lens, dst);
    pb_cdc_event_set_strings(&out->ev, dst, lens[4]);
}

void pb_cdc_event_get_strings(const pb_event_t *ev, const char *strs[PB_CDC_EVENT_STRINGS])
{
    strs[0] = ev->event_id;
    strs[1] = ev->aggregate_type;
    strs[2] = ev->aggregate_id;
    strs[3] = ev->event_type;
    strs[4] = ev->payload;
    strs[5] = ev->headers;
    strs[6] = ev->destination;
}

void pb_cdc_event_set_strings(pb_event_t *ev, const char *const strs[PB_CDC_EVENT_STRINGS],
                              size_t payload_len)
{
    ev->event_id = strs[0];
    ev->aggregate_type = strs[1];
    ev->aggregate_id = strs[2];
    ev->event_type = strs[3];
    ev->payload = strs[4];
    ev->payload_len = payload_len;
    ev->headers = strs[5];
    ev->destination = strs[6];
}

pb_status_t pb_cdc_event_from_insert(const pb_cdc_outbox_map_t *map, const pb_pgo_msg_t *ins,
                                     pb_cdc_event_t *out, pb_error_t *err)
{
    const pb_pgo_value_t *c = ins->u.insert.cols;
    int ncols = ins->u.insert.ncols;
    int idx[8] = {map->event_id, map->aggregate_type, map->aggregate_id, map->event_type,
                  map->payload, map->headers, map->destination, map->id};
    const char *src[8];
    size_t lens[8];
    for (int i = 0; i < 8; i++) {
        bool present = idx[i] >= 0 && idx[i] < ncols && c[idx[i]].data;
        src[i] = present ? c[idx[i]].data : NULL;
        lens[i] = present ? c[idx[i]].len : 0;
        if (i < 5 && !present)
            return pb_fail(err, PB_FATAL, "outbox row without a value in a required column");
    }
    const char *dst[8];
    pack_event(out, 8, src, lens, dst);
    pb_event_t *ev = &out->ev;
    int64_t v;
    ev->id = pb_parse_int64(src[7], lens[7], &v) ? v : 0;
    int64_t *times[3] = {&ev->created_at_us, &ev->available_at_us, &ev->expires_at_us};
    int time_cols[3] = {map->created_at, map->available_at, map->expires_at};
    for (int i = 0; i < 3; i++) {
        int k = time_cols[i];
        int64_t us;
        if (k >= 0 && k < ncols && c[k].data && pb_parse_timestamptz(c[k].data, c[k].len, &us))
            *times[i] = us;
    }
    pb_event_fix_times(ev);
    /* the values point into the message, unterminated: parsed within their length only */
    if (map->attempts >= 0 && map->attempts < ncols && c[map->attempts].data &&
        pb_parse_int64(c[map->attempts].data, c[map->attempts].len, &v) && v >= 0 && v <= INT_MAX)
        ev->attempts = (int)v;
    if (map->sequence >= 0 && map->sequence < ncols && c[map->sequence].data &&
        pb_parse_int64(c[map->sequence].data, c[map->sequence].len, &v) && v > 0)
        ev->sequence = v;
    return PB_OK;
}

/* A member's raw value as a decoded string (escapes resolved; malloc'd), or NULL when it is
 * absent, null, not a string or holds a NUL. */
static char *member_string(const char *v, size_t n)
{
    if (!v || v[0] != '"')
        return NULL;
    json_error_t jerr;
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &jerr);
    char *out = NULL;
    if (json_is_string(j) && strlen(json_string_value(j)) == json_string_length(j))
        out = pb_strdup(json_string_value(j));
    json_decref(j);
    return out;
}

/* A member's raw value as an int64, or 0 when it is absent or not an integer that fits. */
static int64_t member_int(const char *v, size_t n)
{
    int64_t x;
    return v && pb_parse_int64(v, n, &x) ? x : 0;
}

/* The members of an emitted message, found in one pass (the payload walked once, not once per
 * member). */
enum {
    M_EVENT_ID,
    M_AGGREGATE_TYPE,
    M_AGGREGATE_ID,
    M_EVENT_TYPE,
    M_DESTINATION,
    M_PAYLOAD,
    M_HEADERS,
    M_CREATED_AT,
    M_SEQUENCE,
    M_AVAILABLE_AT,
    M_EXPIRES_AT,
    M_COUNT
};
static const char *const message_members[M_COUNT] = {
    "event_id", "aggregate_type", "aggregate_id", "event_type",      "destination",  "payload",
    "headers",  "created_at_us",  "sequence",     "available_at_us", "expires_at_us"};

/* The strings are decoded; the payload and the headers are passed on as the message holds
 * them (common/json_span.h), as the outbox's columns are. */
pb_status_t pb_cdc_event_from_message(const char *content, size_t len, pb_cdc_event_t *out,
                                      pb_error_t *err)
{
    const char *v[M_COUNT];
    size_t n[M_COUNT];
    pb_json_members(content, len, message_members, M_COUNT, v, n);
    char *fields[5] = {member_string(v[M_EVENT_ID], n[M_EVENT_ID]),
                       member_string(v[M_AGGREGATE_TYPE], n[M_AGGREGATE_TYPE]),
                       member_string(v[M_AGGREGATE_ID], n[M_AGGREGATE_ID]),
                       member_string(v[M_EVENT_TYPE], n[M_EVENT_TYPE]),
                       member_string(v[M_DESTINATION], n[M_DESTINATION])};
    if (!fields[0] || !fields[1] || !fields[2] || !fields[3] || !v[M_PAYLOAD]) {
        for (int i = 0; i < 5; i++)
            free(fields[i]);
        return pb_fail(err, PB_FATAL, "logical message is not a postbox event: it lacks "
                                      "event_id, aggregate_type, aggregate_id, event_type or "
                                      "payload, or is not a JSON object");
    }
    const char *headers = v[M_HEADERS];
    size_t headers_len = n[M_HEADERS];
    if (!headers || headers[0] != '{')
        headers = NULL, headers_len = 0;
    const char *src[7] = {fields[0], fields[1], fields[2], fields[3],
                          v[M_PAYLOAD], headers, fields[4]};
    size_t lens[7] = {strlen(fields[0]), strlen(fields[1]), strlen(fields[2]), strlen(fields[3]),
                      n[M_PAYLOAD], headers_len, fields[4] ? strlen(fields[4]) : 0};
    const char *dst[7];
    pack_event(out, 7, src, lens, dst);
    pb_event_t *ev = &out->ev;
    ev->created_at_us = member_int(v[M_CREATED_AT], n[M_CREATED_AT]);
    int64_t sequence = member_int(v[M_SEQUENCE], n[M_SEQUENCE]);
    ev->sequence = sequence > 0 ? sequence : 0;
    ev->available_at_us = member_int(v[M_AVAILABLE_AT], n[M_AVAILABLE_AT]);
    ev->expires_at_us = member_int(v[M_EXPIRES_AT], n[M_EXPIRES_AT]);
    pb_event_fix_times(ev);
    for (int i = 0; i < 5; i++)
        free(fields[i]);
    return PB_OK;
}

void pb_cdc_event_free(pb_cdc_event_t *e)
{
    if (!e)
        return;
    free(e->block);
    e->block = NULL;
}
