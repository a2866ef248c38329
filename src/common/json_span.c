#include "common/json_span.h"

#include <stdint.h>
#include <string.h>

#include "common/bytes.h"

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

size_t pb_json_skip_space(const char *s, size_t len, size_t i)
{
    while (i < len && is_space(s[i]))
        i++;
    return i;
}

/* Whether w holds a byte a string scan must look at: '"', '\\' or a control character. */
static uint64_t string_special(uint64_t w)
{
    return pb_bytes_has(w, '"') | pb_bytes_has(w, '\\') | pb_bytes_below(w, 0x20);
}

/* The length of the string at s[0] == '"', closing quote included; 0 when unterminated. */
static size_t string_len(const char *s, size_t len)
{
    for (size_t i = 1; i < len;) {
        if (i + 8 <= len) {
            uint64_t f = string_special(pb_bytes_load(s + i));
            if (!f) {
                i += 8;
                continue;
            }
            i += pb_bytes_first(f); /* the first byte to look at */
        }
        if (s[i] == '\\')
            i += 2; /* the escaped character, whatever it is */
        else if (s[i] == '"')
            return i + 1;
        else if ((unsigned char)s[i] < 0x20)
            return 0;
        else
            i++;
    }
    return 0;
}

/* A number or literal: the run of characters up to a delimiter. */
static size_t scalar_len(const char *s, size_t len)
{
    size_t i = 0;
    while (i < len && !is_space(s[i]) && s[i] != ',' && s[i] != ']' && s[i] != '}' &&
           s[i] != ':' && s[i] != '"' && s[i] != '[' && s[i] != '{')
        i++;
    return i;
}

size_t pb_json_value_len(const char *s, size_t len)
{
    if (len == 0)
        return 0;
    if (s[0] == '"')
        return string_len(s, len);
    if (s[0] != '{' && s[0] != '[')
        return scalar_len(s, len);
    /* containers: one stack of the closing brackets expected */
    char closing[PB_JSON_MAX_DEPTH];
    size_t depth = 0;
    for (size_t i = 0; i < len;) {
        char c = s[i];
        if (c == '{' || c == '[') {
            if (depth == PB_JSON_MAX_DEPTH)
                return 0;
            closing[depth++] = c == '{' ? '}' : ']';
            i++;
        } else if (c == '}' || c == ']') {
            if (depth == 0 || closing[depth - 1] != c)
                return 0;
            i++;
            if (--depth == 0)
                return i;
        } else if (c == '"') {
            size_t n = string_len(s + i, len - i);
            if (n == 0)
                return 0;
            i += n;
        } else if (is_space(c) || c == ',' || c == ':') {
            i++;
        } else {
            size_t n = scalar_len(s + i, len - i);
            if (n == 0)
                return 0;
            i += n;
        }
    }
    return 0;
}

bool pb_json_member(const char *text, size_t len, const char *key, const char **val,
                    size_t *val_len)
{
    const char *v;
    size_t n;
    pb_json_members(text, len, &key, 1, &v, &n);
    if (!v)
        return false;
    *val = v;
    *val_len = n;
    return true;
}

bool pb_json_members(const char *text, size_t len, const char *const *keys, size_t n,
                     const char **vals, size_t *val_lens)
{
    size_t left = n;
    for (size_t k = 0; k < n; k++)
        vals[k] = NULL, val_lens[k] = 0;
    size_t i = pb_json_skip_space(text, len, 0);
    if (i >= len || text[i] != '{')
        return false;
    i = pb_json_skip_space(text, len, i + 1);
    while (left && i < len && text[i] == '"') {
        size_t s = string_len(text + i, len - i);
        if (s == 0)
            break;
        size_t key_at = i + 1, key_len = s - 2;
        i = pb_json_skip_space(text, len, i + s);
        if (i >= len || text[i] != ':')
            break;
        i = pb_json_skip_space(text, len, i + 1);
        size_t v = pb_json_value_len(text + i, len - i);
        if (v == 0)
            break;
        for (size_t k = 0; k < n; k++)
            if (!vals[k] && strlen(keys[k]) == key_len &&
                memcmp(text + key_at, keys[k], key_len) == 0) {
                vals[k] = text + i;
                val_lens[k] = v;
                left--;
                break;
            }
        i = pb_json_skip_space(text, len, i + v);
        if (i < len && text[i] == ',')
            i = pb_json_skip_space(text, len, i + 1);
    }
    return true;
}
