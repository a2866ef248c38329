/* HMAC-SHA-256 and SHA-256 (OpenSSL's libcrypto), for what postbox signs, pseudonymises or
 * shortens: the messages of postbox.emit (cdc/signature.h), the hmac rules of payload masking
 * (relay/mask.h), the inbox keys of ids too long for an index (inbox/screen.h). */
#ifndef PB_COMMON_HMAC_H
#define PB_COMMON_HMAC_H

#include <stddef.h>

#define PB_HMAC_HEX_SIZE 65 /* 64 lowercase hex digits and a NUL */

/* An HMAC-SHA-256 key made ready once for many MACs under it (the relay checks every message of
 * postbox.emit, and masks every hmac value, with one key): OpenSSL's one-shot HMAC() looks the
 * algorithm up and hashes the key into its pads at every call, which costs more than the MAC of
 * a small message. */
typedef struct pb_hmac pb_hmac_t;

pb_hmac_t *pb_hmac_new(const unsigned char *key, size_t key_len);
/* hex = HMAC-SHA-256(h's key, data) in lowercase hex. */
void pb_hmac_hex(pb_hmac_t *h, const void *data, size_t len, char hex[PB_HMAC_HEX_SIZE]);
/* Frees h (NULL: nothing); libcrypto wipes the key's pads. */
void pb_hmac_free(pb_hmac_t *h);

/* hex = SHA-256(data) in lowercase hex. */
void pb_sha256_hex(const void *data, size_t len, char hex[PB_HMAC_HEX_SIZE]);

#endif
