#include "common/hmac.h"

#include <limits.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/err.h"

static void to_hex(const unsigned char md[32], char hex[PB_HMAC_HEX_SIZE])
{
    static const char digits[] = "0123456789abcdef"; /* snprintf per byte cost more than the MAC */
    for (unsigned i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
}

void pb_hmac_sha256_hex(const unsigned char *key, size_t key_len, const void *data, size_t len,
                        char hex[PB_HMAC_HEX_SIZE])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    static const unsigned char empty;
    PB_ASSERT(key_len <= INT_MAX); /* HMAC() takes it as int */
    const unsigned char *done =
        HMAC(EVP_sha256(), key, (int)key_len, len ? data : &empty, len, md, &md_len);
    PB_ASSERT(done && md_len == 32);
    to_hex(md, hex);
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
