/* The cdc relay's record of how far it confirmed on its replication slot
 * (postbox.cdc_slot_positions, sql/015_cdc_slot_position.sql), read together with the slot's own
 * row in pg_replication_slots so that the two are compared as of one moment. */
#ifndef PB_STORE_SLOT_POSITION_H
#define PB_STORE_SLOT_POSITION_H

#include <libpq-fe.h>
#include <stdint.h>

#include "cdc/slot_check.h"
#include "common/err.h"

/* The slot's state, the recorded position, and the slot's lag (bytes between the server's
 * current WAL position and the slot's confirmed position; -1 when unknown). */
pb_status_t pb_slot_position_load(PGconn *conn, const char *slot_name, pb_slot_state_t *slot,
                                  pb_slot_record_t *rec, int64_t *lag_bytes,
                                  pb_error_t *err) PB_MUSTCHECK;

/* Records lsn as the relay's confirmed position on slot_name (one committed statement). */
pb_status_t pb_slot_position_record(PGconn *conn, const char *slot_name, uint64_t lsn,
                                    pb_error_t *err) PB_MUSTCHECK;

/* Without a relay to ask (`postbox status`, `postbox check`), the age of cdc.max_slot_lag_age
 * is judged by the oldest outbox row still pending that the relay of slot_name has not set aside:
 * with cdc.mark_published the relay marks a row before it confirms its transaction, so the slot
 * holds WAL from at least that row's transaction (its created_at: the transaction's start, a
 * little before its commit). *age_ms in milliseconds, -1 when no row is pending. Meaningless
 * without cdc.mark_published or with cdc.delete_after_insert (no rows). */
pb_status_t pb_slot_unrelayed_age(PGconn *conn, const char *slot_name, int64_t *age_ms,
                                  pb_error_t *err) PB_MUSTCHECK;

/* Forgets the record (`postbox cdc drop-slot`): the next start creates the slot afresh. */
pb_status_t pb_slot_position_forget(PGconn *conn, const char *slot_name,
                                    pb_error_t *err) PB_MUSTCHECK;

#endif
