/* The events of one streamed (still in progress) transaction, kept on disk until its Stream
 * Commit or Stream Abort (protocol 2, cdc/pgoutput.h), so that a transaction of millions of rows
 * costs the relay a file, not its memory.
 *
 * The file is created unlinked (O_TMPFILE, else mkstemp + unlink) in the configured directory:
 * it has no name, so it disappears with its descriptor, whether the relay frees it, restarts or
 * is killed; nothing is left to clean up. Memory: one stdio buffer (SPILL_BUFFER_BYTES) and one
 * entry per run of events of a (sub)transaction, whatever the number of events.
 *
 * Records hold what the relay publishes of an event (pb_event_t), in host byte order: the file
 * is read back only by the process that wrote it. @thread the relay's loop only. */
#ifndef PB_CDC_SPILL_H
#define PB_CDC_SPILL_H

#include <stdbool.h>
#include <stdint.h>

#include "cdc/events.h"
#include "common/err.h"

typedef struct pb_spill pb_spill_t;

/* A new empty spill file in dir (NULL or "": $TMPDIR, else /tmp) for the transaction top_xid.
 * PB_TRANSIENT (with the directory named) when it cannot be created. */
pb_status_t pb_spill_new(const char *dir, uint32_t top_xid, pb_spill_t **out,
                         pb_error_t *err) PB_MUSTCHECK;

/* Appends ev, a change of subtransaction subxid (top_xid for the transaction's own). */
pb_status_t pb_spill_write(pb_spill_t *sp, uint32_t subxid, const pb_event_t *ev,
                           pb_error_t *err) PB_MUSTCHECK;

/* A rolled-back subtransaction (ROLLBACK TO SAVEPOINT): drops its events and those of the
 * subtransactions written after its first one (they are its children: a backend runs one
 * subtransaction at a time), as PostgreSQL's own subscriber does. Nothing when it wrote none. */
pb_status_t pb_spill_drop_subxact(pb_spill_t *sp, uint32_t subxid, pb_error_t *err) PB_MUSTCHECK;

/* Ends the writing: from now on pb_spill_read returns the events from the first on. */
pb_status_t pb_spill_rewind(pb_spill_t *sp, pb_error_t *err) PB_MUSTCHECK;

/* The next event (*got false at the end); out owns its block (pb_cdc_event_free), commit_lsn 0. */
pb_status_t pb_spill_read(pb_spill_t *sp, pb_cdc_event_t *out, bool *got,
                          pb_error_t *err) PB_MUSTCHECK;

/* Events written and not dropped; bytes the file holds (for logs). */
uint64_t pb_spill_count(const pb_spill_t *sp);
uint64_t pb_spill_bytes(const pb_spill_t *sp);

/* Closes the file (which frees its disk space) and sp. Accepts NULL. */
void pb_spill_free(pb_spill_t *sp);

#endif
