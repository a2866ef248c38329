/* The online migration of an inbox holding rows to the partitioned layout (sql/025): while
 * postbox.inbox_legacy exists, a consumer's janitor moves its rows into the partitioned inbox one
 * batch at a time (each in its own transaction), and drops it once it is empty. */
#ifndef PB_STORE_INBOX_LEGACY_H
#define PB_STORE_INBOX_LEGACY_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

/* The mover's position: the last key moved (a keyset walk, so that no batch steps over the
 * rows moved before it) and the totals. Owns its strings. */
typedef struct pb_inbox_legacy {
    char *after_consumer; /* NULL: the next batch starts from the first key */
    char *after_id;
    uint64_t moved;       /* rows moved by this mover since it saw the legacy table */
    bool active;          /* postbox.inbox_legacy exists, as of the last step */
} pb_inbox_legacy_t;

typedef enum pb_inbox_legacy_outcome {
    PB_LEGACY_NONE,     /* no migration in progress */
    PB_LEGACY_MOVED,    /* a batch was moved: call again soon */
    PB_LEGACY_WAITING,  /* empty but not dropped yet (the inbox was busy): call again later */
    PB_LEGACY_FINISHED, /* this call dropped the emptied legacy table */
} pb_inbox_legacy_outcome_t;

/* One step: a batch of up to limit rows moved (one committed statement), or, when a pass from
 * the first key finds nothing, the end of the migration (under the inbox's lock, at most 500 ms
 * of waiting). */
pb_status_t pb_inbox_legacy_step(PGconn *conn, pb_inbox_legacy_t *mv, int limit,
                                 pb_inbox_legacy_outcome_t *out, pb_error_t *err) PB_MUSTCHECK;

/* Forgets the position (a new connection, a new migration). */
void pb_inbox_legacy_reset(pb_inbox_legacy_t *mv);

/* The rows left in postbox.inbox_legacy (an estimate past 100,000); -1 when no migration is in
 * progress (or the schema predates it). */
pb_status_t pb_inbox_legacy_rows(PGconn *conn, int64_t *rows, pb_error_t *err) PB_MUSTCHECK;

#endif
