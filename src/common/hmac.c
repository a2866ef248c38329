#include "common/hmac.h"

#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/err.h"
#include "common/str.h"

static void to_hex(const unsigned char md[32], char hex[PB_HMAC_HEX_SIZE])
{
    static const char digits[] = "0123456789abcdef"; /* snprintf per byte cost more than the MAC */
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
}

struct pb_hmac {
    EVP_MAC *mac;
    EVP_MAC_CTX *ctx; /* keyed: each MAC starts again from the key's pads */
};

pb_hmac_t *pb_hmac_new(const unsigned char *key, size_t key_len)
{
    pb_hmac_t *h = pb_malloc(sizeof *h);
    h->mac = EVP_MAC_fetch(NULL, OSSL_MAC_NAME_HMAC, NULL);
    h->ctx = h->mac ? EVP_MAC_CTX_new(h->mac) : NULL;
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    bool ok = h->ctx && EVP_MAC_init(h->ctx, key, key_len, params) == 1;
    /* libcrypto without HMAC or SHA-256, or out of memory: nothing postbox could go on with */
    PB_ASSERT(ok);
    return h;
}

void pb_hmac_hex(pb_hmac_t *h, const void *data, size_t len, char hex[PB_HMAC_HEX_SIZE])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    size_t md_len = 0;
    static const unsigned char empty;
    /* a NULL key: the one set by pb_hmac_new */
    int ok = EVP_MAC_init(h->ctx, NULL, 0, NULL) == 1 &&
             EVP_MAC_update(h->ctx, len ? data : &empty, len) == 1 &&
             EVP_MAC_final(h->ctx, md, &md_len, sizeof md) == 1;
    PB_ASSERT(ok && md_len == 32);
    to_hex(md, hex);
}

void pb_hmac_free(pb_hmac_t *h)
{
    if (!h)
        return;
    EVP_MAC_CTX_free(h->ctx);
    EVP_MAC_free(h->mac);
    free(h);
}

void pb_sha256_hex(const void *data, size_t len, char hex[PB_HMAC_HEX_SIZE])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    static const unsigned char empty;
    int ok = EVP_Digest(len ? data : &empty, len, md, &md_len, EVP_sha256(), NULL);
    PB_ASSERT(ok == 1 && md_len == 32);
    to_hex(md, hex);
}
