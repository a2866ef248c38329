#include "cdc/signature.h"

#include <openssl/crypto.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/stream.h"
#include "common/hmac.h"
#include "store/pg.h"

#define TAG "hmac-sha256:"
#define TAG_LEN (sizeof TAG - 1)
#define HEX_LEN (PB_HMAC_HEX_SIZE - 1)

pb_status_t pb_emit_key_load(PGconn *conn, pb_emit_key_t *key, pb_error_t *err)
{
    /* binary results: the key's bytes as they are */
    PGresult *res = PQexecParams(conn, "SELECT key, since_lsn::text FROM postbox.emit_key", 0,
                                 NULL, NULL, NULL, NULL, 1);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "read postbox.emit_key", err);
    if (st != PB_OK) {
        if (st == PB_FATAL && !pb_error_schema_missing(err))
            pb_fail(err, PB_FATAL,
                    "%s (the relay's role needs SELECT on postbox.emit_key to verify the events "
                    "of postbox.emit: see `postbox init --print-grants`)",
                    err->msg);
        return st;
    }
    uint64_t since_lsn;
    bool ok = PQntuples(res) == 1 && PQgetlength(res, 0, 0) == PB_EMIT_KEY_SIZE &&
              pb_lsn_parse(PQgetvalue(res, 0, 1), &since_lsn);
    if (ok)
        pb_emit_key_set(key, (const unsigned char *)PQgetvalue(res, 0, 0), since_lsn);
    PQclear(res);
    if (!ok)
        return pb_fail(err, PB_FATAL, "postbox.emit_key does not hold one 64-byte key (was its "
                                      "row changed?)");
    return PB_OK;
}

void pb_emit_key_set(pb_emit_key_t *key, const unsigned char bytes[PB_EMIT_KEY_SIZE],
                     uint64_t since_lsn)
{
    pb_emit_key_clear(key);
    key->mac = pb_hmac_new(bytes, PB_EMIT_KEY_SIZE);
    key->since_lsn = since_lsn;
}

void pb_emit_key_clear(pb_emit_key_t *key)
{
    pb_hmac_free(key->mac);
    key->mac = NULL;
    key->since_lsn = 0;
}

pb_emit_verdict_t pb_emit_verify(const pb_emit_key_t *key, uint64_t lsn, const char *content,
                                 size_t len, const char **json, size_t *json_len)
{
    if (len < TAG_LEN || memcmp(content, TAG, TAG_LEN) != 0) {
        *json = content;
        *json_len = len;
        return lsn < key->since_lsn ? PB_EMIT_LEGACY : PB_EMIT_UNSIGNED;
    }
    if (len < TAG_LEN + HEX_LEN + 1 || content[TAG_LEN + HEX_LEN] != ':')
        return PB_EMIT_FORGED;
    *json = content + TAG_LEN + HEX_LEN + 1;
    *json_len = len - (TAG_LEN + HEX_LEN + 1);
    char mac[PB_HMAC_HEX_SIZE];
    pb_hmac_hex(key->mac, *json, *json_len, mac);
    /* lowercase hex both (postbox.emit writes encode(..., 'hex')); constant time */
    return CRYPTO_memcmp(mac, content + TAG_LEN, HEX_LEN) == 0 ? PB_EMIT_SIGNED : PB_EMIT_FORGED;
}

void pb_emit_sign(const pb_emit_key_t *key, const char *json, size_t len, char *out)
{
    char mac[PB_HMAC_HEX_SIZE];
    pb_hmac_hex(key->mac, json, len, mac);
    memcpy(out, TAG, TAG_LEN);
    memcpy(out + TAG_LEN, mac, HEX_LEN);
    out[TAG_LEN + HEX_LEN] = ':';
    memcpy(out + TAG_LEN + HEX_LEN + 1, json, len);
}
