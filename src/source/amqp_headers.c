/* AMQP field tables to JSON (see amqp_headers.h for the mapping). */
#include "source/amqp_headers.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jansson returns NULL only when malloc fails; like pb_malloc we do not try to go on. */
static json_t *must(json_t *j)
{
    if (!j)
        pb_out_of_memory();
    return j;
}

char *pb_amqp_hex_text(amqp_bytes_t b, char *dst)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = b.bytes;
    dst[0] = '\\';
    dst[1] = 'x';
    for (size_t i = 0; i < b.len; i++) {
        dst[2 + 2 * i] = digits[p[i] >> 4];
        dst[3 + 2 * i] = digits[p[i] & 0x0f];
    }
    dst[PB_AMQP_HEX_LEN(b.len)] = '\0';
    return dst;
}

/* "\x" followed by the bytes in lowercase hex (PostgreSQL's bytea text form). */
static json_t *hex_string(amqp_bytes_t b)
{
    size_t n = PB_AMQP_HEX_LEN(b.len);
    char *txt = malloc(n + 1);
    if (!txt)
        return must(NULL);
    pb_amqp_hex_text(b, txt);
    json_t *j = must(json_stringn_nocheck(txt, n));
    free(txt);
    return j;
}

static json_t *text_value(amqp_bytes_t b)
{
    if (b.len == 0)
        return must(json_string_nocheck(""));
    /* PostgreSQL refuses \u0000 in json/jsonb text: a NUL byte makes it binary too */
    if (memchr(b.bytes, '\0', b.len) || !pb_utf8_valid(b.bytes, b.len))
        return hex_string(b);
    return must(json_stringn_nocheck(b.bytes, b.len));
}

static json_t *u64_value(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return must(json_integer((json_int_t)v));
    char buf[24];
    int n = snprintf(buf, sizeof buf, "%" PRIu64, v);
    return must(json_stringn_nocheck(buf, (size_t)n));
}

static json_t *real_value(double d)
{
    if (!isfinite(d))
        return must(json_null());
    return must(json_real(d));
}

/* The exact decimal: value / 10^decimals. */
static json_t *decimal_value(amqp_decimal_t d)
{
    char digits[16];
    int nd = snprintf(digits, sizeof digits, "%" PRIu32, d.value);
    char out[16 + 256 + 4];
    size_t k = 0;
    size_t scale = d.decimals;
    if (scale == 0) {
        memcpy(out, digits, (size_t)nd);
        k = (size_t)nd;
    } else if ((size_t)nd > scale) {
        size_t whole = (size_t)nd - scale;
        memcpy(out, digits, whole);
        k = whole;
        out[k++] = '.';
        memcpy(out + k, digits + whole, scale);
        k += scale;
    } else {
        out[k++] = '0';
        out[k++] = '.';
        for (size_t i = (size_t)nd; i < scale; i++)
            out[k++] = '0';
        memcpy(out + k, digits, (size_t)nd);
        k += (size_t)nd;
    }
    return must(json_stringn_nocheck(out, k));
}

static json_t *table_json(const amqp_table_t *t, int depth);

static json_t *value_json(const amqp_field_value_t *v, int depth)
{
    switch (v->kind) {
    case AMQP_FIELD_KIND_BOOLEAN: return must(json_boolean(v->value.boolean));
    case AMQP_FIELD_KIND_I8: return must(json_integer(v->value.i8));
    case AMQP_FIELD_KIND_U8: return must(json_integer(v->value.u8));
    case AMQP_FIELD_KIND_I16: return must(json_integer(v->value.i16));
    case AMQP_FIELD_KIND_U16: return must(json_integer(v->value.u16));
    case AMQP_FIELD_KIND_I32: return must(json_integer(v->value.i32));
    case AMQP_FIELD_KIND_U32: return must(json_integer(v->value.u32));
    case AMQP_FIELD_KIND_I64: return must(json_integer(v->value.i64));
    case AMQP_FIELD_KIND_U64: return u64_value(v->value.u64);
    case AMQP_FIELD_KIND_TIMESTAMP: return u64_value(v->value.u64);
    case AMQP_FIELD_KIND_F32: return real_value((double)v->value.f32);
    case AMQP_FIELD_KIND_F64: return real_value(v->value.f64);
    case AMQP_FIELD_KIND_DECIMAL: return decimal_value(v->value.decimal);
    case AMQP_FIELD_KIND_UTF8: return text_value(v->value.bytes);
    case AMQP_FIELD_KIND_BYTES: return hex_string(v->value.bytes);
    case AMQP_FIELD_KIND_TABLE: return table_json(&v->value.table, depth + 1);
    case AMQP_FIELD_KIND_ARRAY: {
        if (depth + 1 > PB_AMQP_JSON_MAX_DEPTH)
            return must(json_null());
        json_t *arr = must(json_array());
        for (int i = 0; i < v->value.array.num_entries; i++) {
            if (json_array_append_new(arr, value_json(&v->value.array.entries[i], depth + 1)) != 0)
                return must(NULL);
        }
        return arr;
    }
    case AMQP_FIELD_KIND_VOID:
    default: return must(json_null());
    }
}

static json_t *table_json(const amqp_table_t *t, int depth)
{
    if (depth > PB_AMQP_JSON_MAX_DEPTH)
        return must(json_null());
    json_t *obj = must(json_object());
    for (int i = 0; t && i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len && (memchr(e->key.bytes, '\0', e->key.len) ||
                           !pb_utf8_valid(e->key.bytes, e->key.len)))
            continue; /* not representable in jsonb */
        /* "" is a legal key; jansson wants a non-NULL pointer even for length 0 */
        const char *key = e->key.len ? (const char *)e->key.bytes : "";
        if (json_object_setn_new_nocheck(obj, key, e->key.len, value_json(&e->value, depth)) != 0)
            return must(NULL);
    }
    return obj;
}

json_t *pb_amqp_value_to_json(const amqp_field_value_t *v)
{
    return value_json(v, 0);
}

json_t *pb_amqp_table_to_json(const amqp_table_t *t)
{
    return table_json(t, 0);
}

static int append_cb(const char *buffer, size_t size, void *data)
{
    pb_buf_append(data, buffer, size);
    return 0;
}

const char *pb_amqp_headers_json(const amqp_table_t *t, pb_buf_t *out)
{
    pb_buf_reset(out);
    if (!t || t->num_entries == 0) {
        pb_buf_append(out, "{}", 2);
        return out->data;
    }
    json_t *obj = table_json(t, 0);
    int rc = json_dump_callback(obj, append_cb, out, JSON_COMPACT | JSON_ENCODE_ANY);
    json_decref(obj);
    if (rc != 0)
        (void)must(NULL); /* only on allocation failure: aborts */
    if (out->len == 0)
        pb_buf_append(out, "{}", 2);
    return out->data;
}

const amqp_field_value_t *pb_amqp_table_find(const amqp_table_t *t, const char *key)
{
    if (!t || !key)
        return NULL;
    size_t klen = strlen(key);
    const amqp_field_value_t *found = NULL;
    for (int i = 0; i < t->num_entries; i++) {
        const amqp_table_entry_t *e = &t->entries[i];
        if (e->key.len == klen && (klen == 0 || memcmp(e->key.bytes, key, klen) == 0))
            found = &e->value;
    }
    return found;
}

bool pb_amqp_field_text(const amqp_field_value_t *v, bool integers, char *buf, size_t bufsz,
                        const char **text, size_t *len)
{
    if (!v)
        return false;
    int n = -1;
    switch (v->kind) {
    case AMQP_FIELD_KIND_UTF8:
        if (v->value.bytes.len == 0 || memchr(v->value.bytes.bytes, '\0', v->value.bytes.len) ||
            !pb_utf8_valid(v->value.bytes.bytes, v->value.bytes.len))
            return false;
        *text = v->value.bytes.bytes;
        *len = v->value.bytes.len;
        return true;
    case AMQP_FIELD_KIND_I8: n = integers ? snprintf(buf, bufsz, "%d", v->value.i8) : -1; break;
    case AMQP_FIELD_KIND_U8: n = integers ? snprintf(buf, bufsz, "%u", v->value.u8) : -1; break;
    case AMQP_FIELD_KIND_I16: n = integers ? snprintf(buf, bufsz, "%d", v->value.i16) : -1; break;
    case AMQP_FIELD_KIND_U16: n = integers ? snprintf(buf, bufsz, "%u", v->value.u16) : -1; break;
    case AMQP_FIELD_KIND_I32:
        n = integers ? snprintf(buf, bufsz, "%" PRId32, v->value.i32) : -1;
        break;
    case AMQP_FIELD_KIND_U32:
        n = integers ? snprintf(buf, bufsz, "%" PRIu32, v->value.u32) : -1;
        break;
    case AMQP_FIELD_KIND_I64:
        n = integers ? snprintf(buf, bufsz, "%" PRId64, v->value.i64) : -1;
        break;
    case AMQP_FIELD_KIND_U64:
        n = integers ? snprintf(buf, bufsz, "%" PRIu64, v->value.u64) : -1;
        break;
    default: return false;
    }
    if (n <= 0 || (size_t)n >= bufsz)
        return false;
    *text = buf;
    *len = (size_t)n;
    return true;
}
