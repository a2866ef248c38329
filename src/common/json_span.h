/* The raw text of JSON values, found without decoding them: a payload passes through byte for
 * byte, with numbers as PostgreSQL wrote them (jsonb keeps 0.1, 1.50 and integers of any size,
 * which a decode into doubles and int64 would change or refuse). The scan checks the structure
 * (strings, escapes, nesting) but not the grammar of numbers and literals: the text comes from
 * PostgreSQL's jsonb output, and the consumer of a span decodes what it needs. */
#ifndef PB_COMMON_JSON_SPAN_H
#define PB_COMMON_JSON_SPAN_H

#include <stdbool.h>
#include <stddef.h>

/* The length of the JSON value at the start of s[0..len) (no leading white space), or 0 when
 * it is not a complete value. Nesting deeper than PB_JSON_MAX_DEPTH is refused. */
#define PB_JSON_MAX_DEPTH 512
size_t pb_json_value_len(const char *s, size_t len);

/* The first index from i on in s[0..len) that is not JSON white space (len when none). */
size_t pb_json_skip_space(const char *s, size_t len, size_t i);

/* The raw text of member `key` of the top-level object text[0..len): *val and *val_len. False
 * when text is not an object, is malformed before the member, or has no such key. Keys are
 * compared as written (an escaped key matches only its escaped form). */
bool pb_json_member(const char *text, size_t len, const char *key, const char **val,
                    size_t *val_len);

/* pb_json_member for n keys in one pass over text: vals[i] and val_lens[i] as it would give for
 * keys[i], or NULL and 0 where it would return false. For many keys of one object, whose values
 * (a payload) would otherwise be walked once per key. False when text is not an object. */
bool pb_json_members(const char *text, size_t len, const char *const *keys, size_t n,
                     const char **vals, size_t *val_lens);

#endif
