#include "shadow/compare.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/str.h"

/* ---- messages ------------------------------------------------------------------------------ */

pb_shadow_msg_t *pb_shadow_msgs_add(pb_shadow_msgs_t *ms, const void *body, size_t len)
{
    if (ms->n == ms->cap) {
        ms->cap = ms->cap ? 2 * ms->cap : 64;
        ms->items = pb_realloc(ms->items, ms->cap * sizeof *ms->items);
    }
    pb_shadow_msg_t *m = &ms->items[ms->n++];
    memset(m, 0, sizeof *m);
    m->body = pb_malloc(len + 1);
    if (len)
        memcpy(m->body, body, len);
    m->body[len] = '\0';
    m->body_len = len;
    return m;
}

void pb_shadow_msg_set_attr(pb_shadow_msg_t *m, const char *name, const char *value, size_t len)
{
    m->attrs = pb_realloc(m->attrs, (m->n_attrs + 1) * sizeof *m->attrs);
    pb_shadow_attr_t *a = &m->attrs[m->n_attrs++];
    a->name = pb_strdup(name);
    a->value = pb_malloc(len + 1);
    if (len)
        memcpy(a->value, value, len);
    a->value[len] = '\0';
}

void pb_shadow_msgs_free(pb_shadow_msgs_t *ms)
{
    if (!ms)
        return;
    for (size_t i = 0; i < ms->n; i++) {
        pb_shadow_msg_t *m = &ms->items[i];
        for (size_t k = 0; k < m->n_attrs; k++) {
            free(m->attrs[k].name);
            free(m->attrs[k].value);
        }
        free(m->attrs);
        free(m->body);
        json_decref(m->body_json);
    }
    free(ms->items);
    memset(ms, 0, sizeof *ms);
}

/* ---- specs --------------------------------------------------------------------------------- */

static const char HEADER_PREFIX[] = "header:";

pb_status_t pb_shadow_spec_parse(const char *text, const char *what, pb_shadow_spec_t *out,
                                 pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    size_t plen = sizeof HEADER_PREFIX - 1;
    if (strcmp(text, "body") == 0) {
        out->kind = PB_SPEC_BODY;
        out->arg = pb_strdup("");
    } else if (text[0] == '/') {
        for (const char *t = strchr(text, '~'); t; t = strchr(t + 1, '~'))
            if (t[1] != '0' && t[1] != '1')
                return pb_fail(err, PB_FATAL, "%s \"%s\": in a JSON pointer ~ is followed by 0 "
                                              "or 1 (RFC 6901)", what, text);
        out->kind = PB_SPEC_POINTER;
        out->arg = pb_strdup(text);
    } else if (strncmp(text, HEADER_PREFIX, plen) == 0 && text[plen]) {
        out->kind = PB_SPEC_HEADER;
        out->arg = pb_strdup(text + plen);
    } else {
        return pb_fail(err, PB_FATAL, "%s \"%s\": expected body, a JSON pointer such as /order/id, "
                                      "or header:NAME", what, text);
    }
    out->text = pb_strdup(text);
    return PB_OK;
}

static void spec_free(pb_shadow_spec_t *s)
{
    free(s->text);
    free(s->arg);
    memset(s, 0, sizeof *s);
}

void pb_shadow_opts_free(pb_shadow_opts_t *opts)
{
    spec_free(&opts->key_legacy);
    spec_free(&opts->key_ours);
    for (size_t i = 0; i < opts->n_fields; i++) {
        spec_free(&opts->fields[i].legacy);
        spec_free(&opts->fields[i].ours);
    }
    free(opts->fields);
    opts->fields = NULL;
    opts->n_fields = 0;
}

pb_status_t pb_shadow_fields_parse(const char *text, pb_shadow_opts_t *opts, pb_error_t *err)
{
    const char *p = text && *text ? text : "body", *item;
    size_t len;
    while (pb_list_next(&p, &item, &len)) {
        char *spec = pb_malloc(len + 1);
        memcpy(spec, item, len);
        spec[len] = '\0';
        char *eq = strchr(spec, '=');
        if (eq)
            *eq = '\0';
        pb_shadow_field_t f;
        pb_status_t st = pb_shadow_spec_parse(spec, "--fields", &f.legacy, err);
        if (st == PB_OK && (st = pb_shadow_spec_parse(eq ? eq + 1 : spec, "--fields", &f.ours,
                                                      err)) != PB_OK)
            spec_free(&f.legacy);
        free(spec);
        if (st != PB_OK)
            return st;
        opts->fields = pb_realloc(opts->fields, (opts->n_fields + 1) * sizeof *opts->fields);
        opts->fields[opts->n_fields++] = f;
    }
    if (opts->n_fields == 0)
        return pb_fail(err, PB_FATAL, "--fields \"%s\": no field named", text);
    return PB_OK;
}

/* ---- values -------------------------------------------------------------------------------- */

static json_t *body_json(pb_shadow_msg_t *m)
{
    if (!m->body_parsed) {
        m->body_parsed = true;
        m->body_json = json_loadb(m->body, m->body_len, JSON_DECODE_ANY, NULL);
    }
    return m->body_json;
}

/* The RFC 6901 pointer p resolved in doc (borrowed), or NULL. */
static json_t *resolve_pointer(json_t *doc, const char *p)
{
    json_t *at = doc;
    char token[1024];
    while (at && *p == '/') {
        p++;
        size_t n = 0;
        for (; *p && *p != '/'; p++) {
            char c = *p;
            if (c == '~') {
                c = p[1] == '1' ? '/' : '~';
                p++;
            }
            if (n + 1 >= sizeof token)
                return NULL;
            token[n++] = c;
        }
        token[n] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, token);
        } else if (json_is_array(at)) {
            char *end;
            errno = 0;
            unsigned long long idx = strtoull(token, &end, 10);
            bool number = n > 0 && *end == '\0' && !errno && (token[0] != '0' || n == 1);
            at = number && idx < json_array_size(at) ? json_array_get(at, (size_t)idx) : NULL;
        } else {
            return NULL;
        }
    }
    return at;
}

json_t *pb_shadow_value(pb_shadow_msg_t *m, const pb_shadow_spec_t *spec)
{
    switch (spec->kind) {
    case PB_SPEC_HEADER:
        for (size_t i = 0; i < m->n_attrs; i++)
            if (strcmp(m->attrs[i].name, spec->arg) == 0) {
                const char *v = m->attrs[i].value;
                json_t *s = json_string(v); /* NULL when not UTF-8: then the bytes as they are */
                return s ? s : json_stringn_nocheck(v, strlen(v));
            }
        return NULL;
    case PB_SPEC_BODY: {
        json_t *doc = body_json(m);
        return doc ? json_incref(doc) : json_stringn_nocheck(m->body, strlen(m->body));
    }
    case PB_SPEC_POINTER:
        return json_incref(resolve_pointer(body_json(m), spec->arg));
    }
    return NULL;
}

/* A scalar's text as a header would carry it: false for strings, objects, arrays and null. */
static bool scalar_text(const json_t *v, char *buf, size_t n)
{
    if (json_is_true(v) || json_is_false(v)) {
        snprintf(buf, n, "%s", json_is_true(v) ? "true" : "false");
        return true;
    }
    if (json_is_integer(v)) {
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
        return true;
    }
    if (json_is_real(v)) {
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        if (!t)
            return false;
        snprintf(buf, n, "%s", t);
        free(t);
        return true;
    }
    return false;
}

/* Whether a text stands for the number or boolean v ("42" for 42, "10.50" for 10.5). */
static bool text_means(const char *s, const json_t *v)
{
    char buf[64];
    if (json_is_number(v)) {
        char *end;
        errno = 0;
        double d = strtod(s, &end);
        return *s && *end == '\0' && !errno && d == json_number_value(v);
    }
    return scalar_text(v, buf, sizeof buf) && strcmp(buf, s) == 0;
}

bool pb_shadow_values_equal(json_t *a, json_t *b)
{
    if (!a || !b)
        return a == b;
    if (json_is_integer(a) && json_is_integer(b))
        return json_integer_value(a) == json_integer_value(b);
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_is_string(a) && !json_is_string(b))
        return text_means(json_string_value(a), b);
    if (json_is_string(b) && !json_is_string(a))
        return text_means(json_string_value(b), a);
    if (json_typeof(a) != json_typeof(b))
        return false;
    switch (json_typeof(a)) {
    case JSON_OBJECT: {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *v;
        json_object_foreach(a, k, v) {
            json_t *w = json_object_get(b, k);
            if (!w || !pb_shadow_values_equal(v, w))
                return false;
        }
        return true;
    }
    case JSON_ARRAY:
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!pb_shadow_values_equal(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    default:
        return json_equal(a, b);
    }
}

/* ---- matching ------------------------------------------------------------------------------ */

typedef struct keyed {
    char *key; /* NULL: the message has no key */
    size_t index;
} keyed_t;

static char *key_text(pb_shadow_msg_t *m, const pb_shadow_spec_t *spec)
{
    json_t *v = pb_shadow_value(m, spec);
    if (!v)
        return NULL;
    char *text = json_is_string(v) ? pb_strdup(json_string_value(v))
                                   : json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(v);
    return text;
}

static int by_key(const void *x, const void *y)
{
    const keyed_t *a = x, *b = y;
    int c = strcmp(a->key, b->key);
    return c ? c : (a->index > b->index) - (a->index < b->index);
}

static pb_shadow_diff_t *add_diff(pb_shadow_report_t *rep, pb_shadow_diff_kind_t kind,
                                  const char *key)
{
    rep->diffs = pb_realloc(rep->diffs, (rep->n_diffs + 1) * sizeof *rep->diffs);
    pb_shadow_diff_t *d = &rep->diffs[rep->n_diffs++];
    memset(d, 0, sizeof *d);
    d->kind = kind;
    d->key = key ? pb_strdup(key) : NULL;
    return d;
}

/* The keyed messages of one side sorted by key, the first read first among equals, one per key
 * (*n_out of them; *dups gets the repeats); the unkeyed ones are reported. */
static keyed_t *index_side(pb_shadow_msgs_t *ms, const pb_shadow_spec_t *spec, bool legacy,
                           pb_shadow_report_t *rep, size_t *n_out, size_t *dups)
{
    keyed_t *all = pb_malloc((ms->n ? ms->n : 1) * sizeof *all);
    size_t n = 0;
    for (size_t i = 0; i < ms->n; i++) {
        char *key = key_text(&ms->items[i], spec);
        if (!key) {
            pb_shadow_diff_t *d = add_diff(rep, PB_DIFF_UNKEYED, NULL);
            d->in_legacy = legacy;
            d->position = i + 1;
            rep->unkeyed++;
            continue;
        }
        all[n++] = (keyed_t){key, i};
    }
    qsort(all, n, sizeof *all, by_key);
    /* keep the first of each key */
    size_t kept = 0;
    *dups = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept && strcmp(all[kept - 1].key, all[i].key) == 0) {
            free(all[i].key);
            (*dups)++;
            continue;
        }
        all[kept++] = all[i];
    }
    *n_out = kept;
    return all;
}

static void compare_pair(const pb_shadow_opts_t *opts, const char *key, pb_shadow_msg_t *l,
                         pb_shadow_msg_t *o, pb_shadow_report_t *rep)
{
    pb_shadow_diff_t *d = NULL;
    for (size_t f = 0; f < opts->n_fields; f++) {
        json_t *lv = pb_shadow_value(l, &opts->fields[f].legacy);
        json_t *ov = pb_shadow_value(o, &opts->fields[f].ours);
        if (pb_shadow_values_equal(lv, ov)) {
            json_decref(lv);
            json_decref(ov);
            continue;
        }
        if (!d) {
            d = add_diff(rep, PB_DIFF_DIFFERS, key);
            d->fields = pb_malloc(opts->n_fields * sizeof *d->fields);
            rep->differing++;
        }
        d->fields[d->n_fields++] = (pb_shadow_field_diff_t){&opts->fields[f], lv, ov};
    }
    if (!d)
        rep->equal++;
}

void pb_shadow_compare(const pb_shadow_opts_t *opts, pb_shadow_msgs_t *legacy,
                       pb_shadow_msgs_t *ours, pb_shadow_report_t *rep)
{
    memset(rep, 0, sizeof *rep);
    rep->legacy = legacy->n;
    rep->ours = ours->n;
    size_t nl, no;
    keyed_t *l = index_side(legacy, &opts->key_legacy, true, rep, &nl, &rep->duplicates_legacy);
    keyed_t *o = index_side(ours, &opts->key_ours, false, rep, &no, &rep->duplicates_ours);
    size_t n_unkeyed = rep->n_diffs; /* reported last */
    size_t i = 0, j = 0;
    while (i < nl || j < no) {
        int c = i == nl ? 1 : j == no ? -1 : strcmp(l[i].key, o[j].key);
        if (c < 0) {
            add_diff(rep, PB_DIFF_MISSING, l[i++].key);
            rep->missing++;
        } else if (c > 0) {
            add_diff(rep, PB_DIFF_EXTRA, o[j++].key);
            rep->extra++;
        } else {
            compare_pair(opts, l[i].key, &legacy->items[l[i].index], &ours->items[o[j].index],
                         rep);
            i++;
            j++;
        }
    }
    /* the unkeyed ones after the others */
    if (n_unkeyed) {
        pb_shadow_diff_t *tmp = pb_malloc(n_unkeyed * sizeof *tmp);
        memcpy(tmp, rep->diffs, n_unkeyed * sizeof *tmp);
        memmove(rep->diffs, rep->diffs + n_unkeyed, (rep->n_diffs - n_unkeyed) * sizeof *tmp);
        memcpy(rep->diffs + rep->n_diffs - n_unkeyed, tmp, n_unkeyed * sizeof *tmp);
        free(tmp);
    }
    for (size_t k = 0; k < nl; k++)
        free(l[k].key);
    for (size_t k = 0; k < no; k++)
        free(o[k].key);
    free(l);
    free(o);
}

void pb_shadow_report_free(pb_shadow_report_t *rep)
{
    if (!rep)
        return;
    for (size_t i = 0; i < rep->n_diffs; i++) {
        pb_shadow_diff_t *d = &rep->diffs[i];
        for (size_t f = 0; f < d->n_fields; f++) {
            json_decref(d->fields[f].legacy);
            json_decref(d->fields[f].ours);
        }
        free(d->fields);
        free(d->key);
    }
    free(rep->diffs);
    memset(rep, 0, sizeof *rep);
}

bool pb_shadow_report_equal(const pb_shadow_report_t *rep)
{
    return rep->missing == 0 && rep->extra == 0 && rep->differing == 0 && rep->unkeyed == 0;
}

/* ---- output -------------------------------------------------------------------------------- */

/* A field's name in reports: the spec, or LEGACY=OURS when the sides name it differently. */
static void field_label(const pb_shadow_field_t *f, char *buf, size_t n)
{
    if (strcmp(f->legacy.text, f->ours.text) == 0)
        snprintf(buf, n, "%s", f->legacy.text);
    else
        snprintf(buf, n, "%s=%s", f->legacy.text, f->ours.text);
}

/* A value for a report line: compact JSON, cut to a readable length; "absent" for none. */
static void value_text(const json_t *v, char *buf, size_t n)
{
    if (!v) {
        snprintf(buf, n, "absent");
        return;
    }
    char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    char cut[300];
    pb_text_copy(cut, sizeof cut, t ? t : "?");
    if (t && strlen(t) >= sizeof cut)
        snprintf(cut + sizeof cut - 4, 4, "...");
    free(t);
    pb_text_escape(buf, n, cut);
}

void pb_shadow_report_write_text(const pb_shadow_report_t *rep, FILE *out)
{
    for (size_t i = 0; i < rep->n_diffs; i++) {
        const pb_shadow_diff_t *d = &rep->diffs[i];
        char key[300];
        pb_text_escape(key, sizeof key, d->key ? d->key : "");
        switch (d->kind) {
        case PB_DIFF_MISSING:
            fprintf(out, "missing   %s: in legacy, not in ours\n", key);
            break;
        case PB_DIFF_EXTRA:
            fprintf(out, "extra     %s: in ours, not in legacy\n", key);
            break;
        case PB_DIFF_UNKEYED:
            fprintf(out, "unkeyed   %s message %zu has no key: cannot be matched\n",
                    d->in_legacy ? "legacy" : "ours", d->position);
            break;
        case PB_DIFF_DIFFERS:
            fprintf(out, "differs   %s:", key);
            for (size_t f = 0; f < d->n_fields; f++) {
                char label[200], lv[700], ov[700];
                field_label(d->fields[f].field, label, sizeof label);
                value_text(d->fields[f].legacy, lv, sizeof lv);
                value_text(d->fields[f].ours, ov, sizeof ov);
                fprintf(out, "%s %s legacy %s, ours %s", f ? ";" : "", label, lv, ov);
            }
            fputc('\n', out);
            break;
        }
    }
    fprintf(out,
            "summary: legacy %zu, ours %zu, equal %zu, missing %zu, extra %zu, differing %zu, "
            "unkeyed %zu (duplicates not compared: legacy %zu, ours %zu): %s\n",
            rep->legacy, rep->ours, rep->equal, rep->missing, rep->extra, rep->differing,
            rep->unkeyed, rep->duplicates_legacy, rep->duplicates_ours,
            pb_shadow_report_equal(rep) ? "equal" : "different");
}

static const char *kind_name(pb_shadow_diff_kind_t k)
{
    switch (k) {
    case PB_DIFF_MISSING: return "missing";
    case PB_DIFF_EXTRA: return "extra";
    case PB_DIFF_DIFFERS: return "differs";
    default: return "unkeyed";
    }
}

void pb_shadow_report_write_json(const pb_shadow_report_t *rep, const char *legacy_source,
                                 const char *ours_source, FILE *out)
{
    json_t *o = json_object();
    json_object_set_new(o, "legacy", json_pack("{s:s, s:I, s:I}", "source", legacy_source,
                                                "messages", (json_int_t)rep->legacy, "duplicates",
                                                (json_int_t)rep->duplicates_legacy));
    json_object_set_new(o, "ours", json_pack("{s:s, s:I, s:I}", "source", ours_source,
                                             "messages", (json_int_t)rep->ours, "duplicates",
                                             (json_int_t)rep->duplicates_ours));
    json_object_set_new(o, "equal", json_integer((json_int_t)rep->equal));
    json_object_set_new(o, "missing", json_integer((json_int_t)rep->missing));
    json_object_set_new(o, "extra", json_integer((json_int_t)rep->extra));
    json_object_set_new(o, "differing", json_integer((json_int_t)rep->differing));
    json_object_set_new(o, "unkeyed", json_integer((json_int_t)rep->unkeyed));
    json_object_set_new(o, "same", json_boolean(pb_shadow_report_equal(rep)));
    json_t *diffs = json_array();
    for (size_t i = 0; i < rep->n_diffs; i++) {
        const pb_shadow_diff_t *d = &rep->diffs[i];
        json_t *e = json_pack("{s:s}", "kind", kind_name(d->kind));
        if (d->key)
            json_object_set_new(e, "key", json_stringn_nocheck(d->key, strlen(d->key)));
        if (d->kind == PB_DIFF_UNKEYED) {
            json_object_set_new(e, "side", json_string(d->in_legacy ? "legacy" : "ours"));
            json_object_set_new(e, "position", json_integer((json_int_t)d->position));
        }
        if (d->n_fields) {
            json_t *fields = json_array();
            for (size_t f = 0; f < d->n_fields; f++) {
                char label[200];
                field_label(d->fields[f].field, label, sizeof label);
                json_t *l = d->fields[f].legacy, *w = d->fields[f].ours;
                json_array_append_new(fields, json_pack("{s:s, s:O?, s:O?}", "field", label,
                                                        "legacy", l, "ours", w));
            }
            json_object_set_new(e, "fields", fields);
        }
        json_array_append_new(diffs, e);
    }
    json_object_set_new(o, "differences", diffs);
    char *text = json_dumps(o, JSON_COMPACT);
    if (text)
        fprintf(out, "%s\n", text);
    free(text);
    json_decref(o);
}
