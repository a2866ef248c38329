#include "cdc/signature.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/stream.h"
#include "store/pg.h"

#define TAG "hmac-sha256:"
#define TAG_LEN (sizeof TAG - 1)
#define MAC_SIZE 32
#define HEX_LEN (2 * MAC_SIZE)

static int hex_value(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes exactly n bytes of lowercase hex; false on anything else. */
static bool unhex(const char *hex, size_t n, unsigned char *out)
{
    for (size_t i = 0; i < n; i++) {
        int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return true;
}

pb_status_t pb_emit_key_load(PGconn *conn, pb_emit_key_t *key, pb_error_t *err)
{
    PGresult *res = PQexec(conn, "SELECT encode(key, 'hex'), since_lsn FROM postbox.emit_key");
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read postbox.emit_key", err);
    if (st != PB_OK) {
        if (st == PB_FATAL && !pb_error_schema_missing(err))
            pb_fail(err, PB_FATAL,
                    "%s (the relay's role needs SELECT on postbox.emit_key to verify the events "
                    "of postbox.emit: see `postbox init --print-grants`)",
                    err->msg);
        return st;
    }
    bool ok = PQntuples(res) == 1 && PQgetlength(res, 0, 0) == 2 * PB_EMIT_KEY_SIZE &&
              unhex(PQgetvalue(res, 0, 0), PB_EMIT_KEY_SIZE, key->key) &&
              pb_lsn_parse(PQgetvalue(res, 0, 1), &key->since_lsn);
    PQclear(res);
    if (!ok)
        return pb_fail(err, PB_FATAL, "postbox.emit_key does not hold one 64-byte key (run "
                                      "`postbox init` on a schema whose key row was removed?)");
    return PB_OK;
}

static void mac_of(const pb_emit_key_t *key, const char *json, size_t len,
                   unsigned char mac[MAC_SIZE])
{
    unsigned int mac_len = MAC_SIZE;
    /* only fails on an out-of-memory in OpenSSL; a zero MAC then verifies nothing */
    if (!HMAC(EVP_sha256(), key->key, PB_EMIT_KEY_SIZE, (const unsigned char *)json, len, mac,
              &mac_len))
        memset(mac, 0, MAC_SIZE);
}

pb_emit_verdict_t pb_emit_verify(const pb_emit_key_t *key, uint64_t lsn, const char *content,
                                 size_t len, const char **json, size_t *json_len)
{
    if (len < TAG_LEN || memcmp(content, TAG, TAG_LEN) != 0) {
        *json = content;
        *json_len = len;
        return lsn < key->since_lsn ? PB_EMIT_LEGACY : PB_EMIT_UNSIGNED;
    }
    unsigned char claimed[MAC_SIZE], mac[MAC_SIZE];
    if (len < TAG_LEN + HEX_LEN + 1 || content[TAG_LEN + HEX_LEN] != ':' ||
        !unhex(content + TAG_LEN, MAC_SIZE, claimed))
        return PB_EMIT_FORGED;
    *json = content + TAG_LEN + HEX_LEN + 1;
    *json_len = len - (TAG_LEN + HEX_LEN + 1);
    mac_of(key, *json, *json_len, mac);
    return CRYPTO_memcmp(mac, claimed, MAC_SIZE) == 0 ? PB_EMIT_SIGNED : PB_EMIT_FORGED;
}

void pb_emit_sign(const pb_emit_key_t *key, const char *json, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    unsigned char mac[MAC_SIZE];
    mac_of(key, json, len, mac);
    memcpy(out, TAG, TAG_LEN);
    for (size_t i = 0; i < MAC_SIZE; i++) {
        out[TAG_LEN + 2 * i] = digits[mac[i] >> 4];
        out[TAG_LEN + 2 * i + 1] = digits[mac[i] & 15];
    }
    out[TAG_LEN + HEX_LEN] = ':';
    memcpy(out + TAG_LEN + HEX_LEN + 1, json, len);
}
