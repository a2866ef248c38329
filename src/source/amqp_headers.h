/* AMQP field tables (message headers) as JSON, and header values as text.
 *
 * Pure functions on rabbitmq-c's decoded amqp_table_t: no connection, no logging, so they are
 * unit-tested without a broker (tests/unit/test_amqp_headers.c).
 *
 * Mapping of AMQP 0-9-1 field values (rabbitmq-c 0.11 kinds) to JSON:
 *   longstr 'S'              string when it is valid UTF-8 without NUL bytes; otherwise the
 *                            bytes in hex with a "\x" prefix, the PostgreSQL bytea text form:
 *                            "\x80ff" (jsonb refuses \u0000: the output always fits the
 *                            inbox's jsonb column)
 *   byte array 'x'           always the "\x<hex>" form
 *   integers b B s u I i l L number; a uint64 above INT64_MAX (no JSON integer in jansson) is a
 *                            string of its decimal digits
 *   boolean 't'              true / false
 *   float 'f', double 'd'    number with 17 significant digits (exact; a float 0.1f shows as
 *                            0.10000000149011612); NaN and infinities, which JSON lacks, are null
 *   decimal 'D'              string of the exact decimal value: {2, 12345} -> "123.45"
 *   timestamp 'T'            number (seconds since the epoch, as sent)
 *   table 'F'                object (nested), array 'A' -> array
 *   void 'V'                 null
 *   unknown kinds            null
 * Keys that are not valid UTF-8 or contain NUL bytes are skipped; with duplicate keys the last
 * one wins. Tables and arrays nested deeper than PB_AMQP_JSON_MAX_DEPTH levels become null.
 *
 * @thread any (no shared state). */
#ifndef PB_SOURCE_AMQP_HEADERS_H
#define PB_SOURCE_AMQP_HEADERS_H

#include <stdbool.h>
#include <stddef.h>

#include <amqp.h>
#include <jansson.h>

#include "common/str.h"

#define PB_AMQP_JSON_MAX_DEPTH 32

/** Length of pb_amqp_hex_text's text for n bytes (without the NUL). */
#define PB_AMQP_HEX_LEN(n) (2 + 2 * (n))

/**
 * @brief Writes b as "\x" and its bytes in lowercase hex (PostgreSQL's bytea text form, the
 * "\x<hex>" form above) into dst, which must hold PB_AMQP_HEX_LEN(b.len) + 1 bytes.
 * @returns dst, NUL-terminated.
 */
char *pb_amqp_hex_text(amqp_bytes_t b, char *dst);

/**
 * @brief Converts one field value to JSON with the mapping above.
 * @returns a new reference (never NULL: allocation failure aborts, as pb_malloc does).
 */
json_t *pb_amqp_value_to_json(const amqp_field_value_t *v);

/**
 * @brief Converts a table to a JSON object with the mapping above.
 * @returns a new reference (never NULL); an empty table gives an empty object.
 */
json_t *pb_amqp_table_to_json(const amqp_table_t *t);

/**
 * @brief Appends the compact JSON object text of t to out (out is reset first): "{}" for an
 * empty table, else e.g. {"aggregate_type":"order","n":3}. Keys keep the table's order.
 * @returns out->data (NUL-terminated, owned by out).
 */
const char *pb_amqp_headers_json(const amqp_table_t *t, pb_buf_t *out);

/**
 * @brief The value of the last entry named key (exact bytes), or NULL. t may be NULL.
 * @returns a pointer into t.
 */
const amqp_field_value_t *pb_amqp_table_find(const amqp_table_t *t, const char *key);

/**
 * @brief A header value as an identifier text: a longstr that is valid UTF-8, non-empty and
 * without NUL bytes (pointed to, not copied), or, when integers is true, an integer of any
 * width in decimal (written into buf, which needs 21 bytes).
 * @returns true and sets *text and *len (not NUL-terminated when it points into v), false for any
 *          other value (v may be NULL).
 */
bool pb_amqp_field_text(const amqp_field_value_t *v, bool integers, char *buf, size_t bufsz,
                        const char **text, size_t *len);

#endif
