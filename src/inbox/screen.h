/* What of a message PostgreSQL can take, before the inbox writes it: any message, however
 * hostile, either reaches its handler or postbox.inbox_dead with a reason, and never fails a
 * statement that would stop the consumer.
 *
 *   message id, aggregate_type, aggregate_id: longer than PB_INBOX_KEY_MAX bytes (an index entry
 *       holds about 2.7 KB) or not UTF-8: replaced by "sha256:" and the hex digest of the bytes,
 *       so the message is still told apart, deduplicated and ordered;
 *   type, headers, body: not UTF-8 (or a NUL byte in the body): refused, with the reason;
 *   routing key, exchange: not UTF-8: the invalid bytes replaced (they are only metadata).
 *
 * @thread one lane's: each inbox has its own. */
#ifndef PB_INBOX_SCREEN_H
#define PB_INBOX_SCREEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/hmac.h"
#include "common/str.h"
#include "source/source.h"

#define PB_INBOX_KEY_MAX 512
#define PB_INBOX_DIGEST_PREFIX "sha256:"

typedef struct pb_screen {
    pb_message_t *safe; /* per message: the message as the inbox writes it */
    char (*why)[256];   /* per message: why it is refused, "" if it is not */
    char *keys;         /* per message: three digests' room (id, aggregate type, aggregate id) */
    pb_buf_t texts;     /* replaced routing keys and exchanges of the batch */
    size_t cap;
} pb_screen_t;

#define PB_SCREEN_DIGEST_SIZE (sizeof PB_INBOX_DIGEST_PREFIX - 1 + PB_HMAC_HEX_SIZE)

/* Fills sc->safe[0..n) and sc->why[0..n) from msgs; the safe copies point into msgs and sc, valid
 * until the next call. body_max: consume.max_message_size. */
void pb_screen_batch(pb_screen_t *sc, const pb_message_t *msgs, size_t n, int64_t body_max);

void pb_screen_free(pb_screen_t *sc);

#endif
