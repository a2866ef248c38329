/* A growable byte buffer, used to build array literals and JSON lines without per-item malloc. */
#ifndef PB_COMMON_STR_H
#define PB_COMMON_STR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

typedef struct pb_buf {
    char *data; /* NUL-terminated while len < cap */
    size_t len;
    size_t cap;
} pb_buf_t;

void pb_buf_reset(pb_buf_t *b); /* len = 0, keeps the memory */
void pb_buf_free(pb_buf_t *b);
void pb_buf_append(pb_buf_t *b, const char *s, size_t n);
/* n more bytes at the end, for the caller to write (one growth check for a record of several
 * parts); returns where they start. */
char *pb_buf_extend(pb_buf_t *b, size_t n);
void pb_buf_puts(pb_buf_t *b, const char *s);
void pb_buf_putc(pb_buf_t *b, char c);
void pb_buf_printf(pb_buf_t *b, const char *fmt, ...) PB_PRINTF(2, 3);
/* v in decimal: what pb_buf_printf(b, "%lld", v) writes, without formatting twice (per message). */
void pb_buf_put_int64(pb_buf_t *b, int64_t v);

/* Appends s as an element of a PostgreSQL array literal: "..." with \ and " escaped. */
void pb_buf_append_array_text(pb_buf_t *b, const char *s);

/* Appends s as a JSON string literal (quotes, escapes, control characters as \u00XX). */
void pb_buf_append_json_string(pb_buf_t *b, const char *s);

/* Parses a duration: "250ms", "5s", "2m" or "2min", "1h", "1d", or a bare number worth
 * bare_unit_ms milliseconds each. Fractions are allowed ("1.5s"), rounded to whole milliseconds.
 * Returns false (*out untouched) for a negative number, an unknown unit or trailing text. */
bool pb_parse_duration_ms(const char *s, double bare_unit_ms, int64_t *out);

/* Parses s[0..n) (not NUL-terminated: a value of the replication stream) as a whole decimal
 * integer: an optional sign, then digits only, fitting an int64. False (*out untouched) for an
 * empty span, any other byte, or a value out of range. Reads nothing past s + n. */
bool pb_parse_int64(const char *s, size_t n, int64_t *out);

/* True when s[0..n) is well-formed UTF-8 (no overlongs, surrogates or code points above
 * U+10FFFF). NUL bytes are valid. */
bool pb_utf8_valid(const void *s, size_t n);

/* The length of the longest prefix of s within n bytes (and before a NUL) that does not end
 * inside a UTF-8 character. */
size_t pb_utf8_prefix(const char *s, size_t n);

/* Copies src (NULL: "") into dst of dstsz bytes as text fit for PostgreSQL and a log line: cut
 * on a UTF-8 character boundary, invalid bytes and control characters other than tab replaced
 * (newlines by a space, the rest by '?'), always NUL-terminated. Returns the length written. */
size_t pb_text_copy(char *dst, size_t dstsz, const char *src);

/* Steps through a comma-separated list (an option such as "a, b,,c"): the next item without
 * its surrounding blanks into *item and *len, empty items skipped; *p advances past it. False at
 * the end of the list. */
bool pb_list_next(const char **p, const char **item, size_t *len);

/* The checks every broker URL starts with: broker ("amqp", "redis") names it in the error, usage
 * says what is expected. PB_FATAL for an empty URL or one holding a control character. */
pb_status_t pb_url_precheck(const char *url, const char *broker, const char *usage,
                            pb_error_t *err) PB_MUSTCHECK;

/* Whether s holds an ASCII control character (U+0000..U+001F, U+007F): never valid in a URL,
 * and a newline there would split it between lines of a message. */
bool pb_has_control_char(const char *s);

/* Percent-decodes s[0..n) (URL userinfo, host, path) into a new string (free it). False on a
 * malformed escape or an encoded NUL, which would silently cut the C string. */
bool pb_percent_decode(const char *s, size_t n, char **out);

/* Copies src (NULL: "") into dst of dstsz bytes as text safe to show on a terminal: control
 * characters (C0, DEL, C1) and invalid bytes are written as escapes (\n, \t, \x1b, \u009b)
 * so that no payload can move the cursor or rewrite a screen; never cut inside a character or
 * an escape, always NUL-terminated. Returns the length written. */
size_t pb_text_escape(char *dst, size_t dstsz, const char *src);

/* Ends the process: running out of memory is not recoverable in the relay. */
_Noreturn void pb_out_of_memory(void);

/* Allocation that aborts on failure: running out of memory is not recoverable in the relay. */
void *pb_malloc(size_t n);
void *pb_realloc(void *p, size_t n);
char *pb_strdup(const char *s);

#endif
