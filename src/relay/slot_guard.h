/* The cdc relay's guard of its replication slot: the slot must be the one it confirmed on, and
 * its lag is watched against cdc.max_slot_lag (bytes) and cdc.max_slot_lag_age (how long it has
 * held WAL with outbox changes: relay/slot_age.h).
 *
 * Identity: the relay records the position it confirms in postbox.cdc_slot_positions
 * (store/slot_position.h) BEFORE it reports it to the server, so the genuine slot's
 * confirmed_flush_lsn is never past the record, across restarts and relay instances. A slot that
 * is missing, lost, or past the record (cdc/slot_check.h) stops the relay with an error saying
 * what to do, instead of streaming on from a point that skipped events. The record is written at
 * most once per PB_SLOT_RECORD_INTERVAL_MS, in a statement of its own on the capture's ordinary
 * connection: the server hears a position up to that much older than the relay could tell it,
 * which costs that much more WAL kept, never an event.
 *
 * @thread the driver's thread only. */
#ifndef PB_RELAY_SLOT_GUARD_H
#define PB_RELAY_SLOT_GUARD_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/log_limit.h"
#include "config/config.h"

#define PB_SLOT_RECORD_INTERVAL_MS 1000

typedef struct pb_slot_guard {
    const pb_config_t *cfg; /* borrowed: cdc.slot, cdc.max_slot_lag */
    uint64_t recorded;      /* the position in postbox.cdc_slot_positions */
    uint64_t wanted;        /* the highest position the relay may confirm */
    int64_t recorded_at;    /* monotonic ms of the last record written */
    bool have_record;       /* the last check found a recorded position */
    bool unchecked;         /* the role may not read the slot or the record: no guard */
    bool over_limit;        /* the last lag measured was over a limit (bytes or age) */
    int64_t lag;            /* the last lag measured: bytes, -1 before the first */
    int64_t age_ms;         /* and its age (slot_age.h) */
    bool slot_gone;         /* the last check found the slot missing, lost or replaced */
    pb_log_limit_t over_log;
} pb_slot_guard_t;

void pb_slot_guard_init(pb_slot_guard_t *g, const pb_config_t *cfg);

/* Before the stream opens (streaming false) and once it streams (true, the slot is then held by
 * this relay and cannot change under it): PB_FATAL, saying what happened and what to do, when the
 * slot is not the relay's own. Once streaming, a slot without a record has its position recorded.
 * Sets have_record: with a record the slot must not be created, even if it vanishes after the
 * check. A role that may not read pg_replication_slots or the record is warned about and goes
 * on unguarded (unchecked), as before the guard. conn must be free for a statement. */
pb_status_t pb_slot_guard_check(pb_slot_guard_t *g, PGconn *conn, bool streaming,
                                pb_error_t *err) PB_MUSTCHECK;

/* The relay may confirm lsn: *allowed is how far the server may be told, lsn once it is
 * recorded. Records it first when the last record is PB_SLOT_RECORD_INTERVAL_MS old (or at once
 * with force) and conn_free says conn may run a statement; otherwise the server hears the last
 * recorded position and a later call records. */
pb_status_t pb_slot_guard_allow(pb_slot_guard_t *g, PGconn *conn, bool conn_free, uint64_t lsn,
                                bool force, uint64_t *allowed, pb_error_t *err) PB_MUSTCHECK;

/* Every cdc.lag_interval: measures the lag (log line, metrics), takes age_ms as the age of the
 * oldest unconfirmed transaction with events (slot_age.h), warns while either is over its limit
 * (cdc.max_slot_lag, cdc.max_slot_lag_age), and checks the slot as pb_slot_guard_check does (a
 * slot invalidated under the relay). A failed query is logged, transient. Over a limit with
 * cdc.on_excess_lag = stop: PB_FATAL. conn must be free for a statement. */
pb_status_t pb_slot_guard_measure(pb_slot_guard_t *g, PGconn *conn, int64_t age_ms,
                                  pb_error_t *err) PB_MUSTCHECK;

/* Which limit the last measure found exceeded, and by how much ("slot lag 2.1 MB over
 * cdc.max_slot_lag 1 MB"), for the log line of a stop or a fallback. */
void pb_slot_guard_explain_over(const pb_slot_guard_t *g, char *buf, size_t n);

#endif
