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
    bool ok = PQntuples(res) == 1 && PQgetlength(res, 0, 0) == PB_EMIT_KEY_SIZE &&
              pb_lsn_parse(PQgetvalue(res, 0, 1), &key->since_lsn);
    if (ok)
        memcpy(key->key, PQgetvalue(res, 0, 0), PB_EMIT_KEY_SIZE);
    PQclear(res);
    if (!ok)
        return pb_fail(err, PB_FATAL, "postbox.emit_key does not hold one 64-byte key (was its "
                                      "row changed?)");
    return PB_OK;
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
    pb_hmac_sha256_hex(key->key, PB_EMIT_KEY_SIZE, *json, *json_len, mac);
    /* lowercase hex both (postbox.emit writes encode(..., 'hex')); constant time */
    return CRYPTO_memcmp(mac, content + TAG_LEN, HEX_LEN) == 0 ? PB_EMIT_SIGNED : PB_EMIT_FORGED;
}

void pb_emit_sign(const pb_emit_key_t *key, const char *json, size_t len, char *out)
{
    char mac[PB_HMAC_HEX_SIZE];
    pb_hmac_sha256_hex(key->key, PB_EMIT_KEY_SIZE, json, len, mac);
    memcpy(out, TAG, TAG_LEN);
    memcpy(out + TAG_LEN, mac, HEX_LEN);
    out[TAG_LEN + HEX_LEN] = ':';
    memcpy(out + TAG_LEN + HEX_LEN + 1, json, len);
}
