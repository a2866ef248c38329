/* Signatures of the logical messages written by postbox.emit() (sql/007_signed_emit.sql): the
 * content is 'hmac-sha256:' <64 hex digits> ':' <event JSON>, the MAC keyed with the row of
 * postbox.emit_key. pg_logical_emit_message() is executable by every role unless revoked, so the
 * relay publishes a message only when its MAC verifies: a role that cannot read the key cannot
 * write an event the relay accepts. */
#ifndef PB_CDC_SIGNATURE_H
#define PB_CDC_SIGNATURE_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/hmac.h"

#define PB_EMIT_KEY_SIZE 64

typedef struct pb_emit_key {
    pb_hmac_t *mac;     /* the key, made ready for the MACs; NULL until set */
    uint64_t since_lsn; /* messages before it predate signing (schema version < 7) */
} pb_emit_key_t;

/* Reads postbox.emit_key into key (zeroed, or set before: replaced). PB_FATAL naming the grant
 * when the role may not read it. */
pb_status_t pb_emit_key_load(PGconn *conn, pb_emit_key_t *key, pb_error_t *err) PB_MUSTCHECK;

/* Sets key (zeroed, or set before: replaced) to bytes, signing since since_lsn. */
void pb_emit_key_set(pb_emit_key_t *key, const unsigned char bytes[PB_EMIT_KEY_SIZE],
                     uint64_t since_lsn);

/* Frees what pb_emit_key_set made; key is zeroed again. */
void pb_emit_key_clear(pb_emit_key_t *key);

typedef enum pb_emit_verdict {
    PB_EMIT_SIGNED,   /* the MAC verifies */
    PB_EMIT_LEGACY,   /* unsigned, written before the key existed: accepted */
    PB_EMIT_UNSIGNED, /* unsigned, written after: not by postbox.emit */
    PB_EMIT_FORGED,   /* a signature that does not verify */
} pb_emit_verdict_t;

/* Checks content of the message at lsn. For SIGNED and LEGACY, *json and *json_len are the
 * event's JSON text within content. */
pb_emit_verdict_t pb_emit_verify(const pb_emit_key_t *key, uint64_t lsn, const char *content,
                                 size_t len, const char **json, size_t *json_len);

/* The content postbox.emit() writes for json (for tests): out needs 12 + 64 + 1 + len bytes. */
void pb_emit_sign(const pb_emit_key_t *key, const char *json, size_t len, char *out);

#endif
