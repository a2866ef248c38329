/* The streamed transactions in progress on one replication connection (protocol 2, streaming
 * on; cdc/pgoutput.h): which are open, which one the current stream block belongs to, and the
 * spill file (cdc/spill.h) of each that has events for the relay, created at its first event.
 *
 * A transaction's events are never published before its Stream Commit: then it leaves the set
 * and its spill file is read back (in commit order, as the commits come). A Stream Abort of the
 * transaction drops it with its file; of a subtransaction, drops that subtransaction's events.
 * On reconnect the set is cleared: the server streams every unconfirmed transaction again from
 * its first block. @thread the relay's loop only. */
#ifndef PB_CDC_STREAMED_H
#define PB_CDC_STREAMED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cdc/spill.h"
#include "common/err.h"
#include "common/event.h"

typedef struct pb_streamed_txn {
    uint32_t xid;
    pb_spill_t *spill; /* NULL until its first event */
} pb_streamed_txn_t;

typedef struct pb_streamed {
    const char *dir;          /* borrowed: cdc.spill_dir */
    pb_streamed_txn_t *txns;  /* open transactions, in the order of their first block */
    size_t n, cap;
    uint32_t block_xid;       /* the transaction of the current stream block; 0 between blocks */
} pb_streamed_t;

void pb_streamed_init(pb_streamed_t *set, const char *dir);

/* Stream Start. A first block of an open transaction, or a later block of one never started,
 * is a protocol error (PB_FATAL). */
pb_status_t pb_streamed_start(pb_streamed_t *set, uint32_t xid, bool first_segment,
                              pb_error_t *err) PB_MUSTCHECK;

/* Stream Stop. */
void pb_streamed_stop(pb_streamed_t *set);

/* An event of the current block, from (sub)transaction subxid, goes to its transaction's file. */
pb_status_t pb_streamed_add(pb_streamed_t *set, uint32_t subxid, const pb_event_t *ev,
                            pb_error_t *err) PB_MUSTCHECK;

/* Stream Abort: subxid == xid drops the transaction, else the subtransaction's events. An
 * unknown xid holds nothing of ours: nothing to drop. */
pb_status_t pb_streamed_abort(pb_streamed_t *set, uint32_t xid, uint32_t subxid,
                              pb_error_t *err) PB_MUSTCHECK;

/* Stream Commit: the transaction leaves the set; *replay receives its spill file, rewound for
 * reading (NULL: it had no events for the relay). An unknown xid is a protocol error. */
pb_status_t pb_streamed_commit(pb_streamed_t *set, uint32_t xid, pb_spill_t **replay,
                               pb_error_t *err) PB_MUSTCHECK;

/* Drops every open transaction and its file (reconnect, close). */
void pb_streamed_clear(pb_streamed_t *set);

/* Frees the set's own memory too. */
void pb_streamed_free(pb_streamed_t *set);

#endif
