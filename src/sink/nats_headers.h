/* The header block of one NATS message, written by the sink into a buffer of its own and handed
 * to nats.c in one call.
 *
 * Why: nats.c 3.4.1 keeps a message's headers in a hash of the message's own. natsMsgHeader_Set
 * copies the key and the value and makes a hash entry (four allocations a header; the hash grows
 * at 5, 9 and 17 entries); publishing walks the hash to encode it; natsMsg_Destroy frees it all
 * on nats.c's collector thread, whose frees then contend with the loop's mallocs. With the
 * envelope on (CloudEvents + trace context) a message has 18 headers instead of 6, and malloc and
 * free were a quarter of the relay's CPU (bench/README.md, relay-envelope).
 *
 * The block "K1: v1\r\n...Kn: vn\r\n" is written once per event. PB_NATS_HDR_PACKED hands it to
 * nats.c as ONE header: key "K1: v1\r\n...Kn", value "vn". nats.c writes a header as key ": "
 * value CRLF and changes only line breaks in values, never the key, so the bytes on the wire are
 * those of the n headers set one by one (in this order instead of its hash's: a header block is
 * a map). Its API does not promise that, so the sink checks it against the server at connect
 * (pb_nats_headers_probe): a packed block must come back as its n headers, or the sink sets them
 * one by one (PB_NATS_HDR_EACH), as before.
 *
 * Keys must be printable ASCII without ':' or blanks and values free of CR, LF and NUL: the
 * caller checks (a NATS header cannot hold them anyway).
 *
 * @thread the owner's (no shared state) */
#ifndef PB_SINK_NATS_HEADERS_H
#define PB_SINK_NATS_HEADERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "common/str.h"

typedef enum pb_nats_hdr_mode {
    PB_NATS_HDR_EACH,   /* natsMsgHeader_Set per header (what nats.c documents) */
    PB_NATS_HDR_PACKED, /* the whole block as one header: see above */
} pb_nats_hdr_mode_t;

typedef struct pb_nats_headers {
    pb_buf_t block;  /* "K1: v1\r\n...Kn: vn\r\n" */
    size_t last_sep; /* offset of the last header's ": " in block */
    size_t n;        /* headers in block */
} pb_nats_headers_t;

/** @brief Empties the block (keeps its memory) for the next message. */
void pb_nats_headers_reset(pb_nats_headers_t *h);

/** @brief Appends the header key: value (lengths given; neither need be NUL-terminated). */
void pb_nats_headers_add(pb_nats_headers_t *h, const char *key, size_t klen, const char *val,
                         size_t vlen);

/** @brief Sets the block's headers on m (a message without headers) the mode's way.
 * The block is unchanged afterwards (it is written to and restored during the call).
 * @returns nats.c's status: NATS_OK, or the failed natsMsgHeader_Set's. */
natsStatus pb_nats_headers_apply(pb_nats_headers_t *h, natsMsg *m, pb_nats_hdr_mode_t mode);

/** @brief Whether nats.c sends a packed block as its headers, byte for byte: publishes one
 * packed message on core NATS to `subject` (a fresh inbox subject nobody else uses) through a
 * subscription of its own and reads the headers back, waiting at most timeout_ms.
 * @returns true when every header came back separate and unchanged; false with why (n bytes)
 * otherwise (a library that rejects or rewrites the key, no reply in time, no permission). */
bool pb_nats_headers_probe(natsConnection *nc, const char *subject, int64_t timeout_ms, char *why,
                           size_t n);

/** @brief Frees the block's memory (h may be reused after a reset). */
void pb_nats_headers_free(pb_nats_headers_t *h);

#endif
