/* The cdc relay's poll fallback in the database (postbox.cdc_fallback, sql/022_cdc_fallback.sql):
 * whether a slot is given up, giving it up, the rows a new slot does not carry, and ending it.
 * relay/capture_fallback.c decides when; this file only speaks SQL. */
#ifndef PB_STORE_CDC_FALLBACK_H
#define PB_STORE_CDC_FALLBACK_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Whether slot is given up (in its poll fallback). */
pb_status_t pb_cdc_fallback_active(PGconn *conn, const char *slot, bool *active,
                                   pb_error_t *err) PB_MUSTCHECK;

/* Gives slot up, in one transaction: the fallback row (with reason; kept if there), the slot's
 * recorded position forgotten (a new slot is not "replaced"), and the outbox rows the cdc relay
 * set aside in postbox.cdc_deferred handed back to the outbox (they are parked there until due,
 * which the poll claim honours); the events of postbox.emit set aside stay, for the new slot's
 * relay. *kept_emit gets their number. Then pb_cdc_fallback_drop_slot. */
pb_status_t pb_cdc_fallback_enter(PGconn *conn, const char *slot, const char *reason,
                                  int64_t *kept_emit, pb_error_t *err) PB_MUSTCHECK;

/* Drops slot if it exists. PB_TRANSIENT while a walsender still holds it (ours lets go a moment
 * after the stream closes; another relay's does not). */
pb_status_t pb_cdc_fallback_drop_slot(PGconn *conn, const char *slot, pb_error_t *err) PB_MUSTCHECK;

/* In the snapshot exported with a new slot: the ids of the outbox rows pending then (*ids,
 * *n, malloc'd), which the poll capture must publish before the stream takes over, and whether
 * one of them is not due yet (*delayed): the stream would never carry it, and the return waits. */
pb_status_t pb_cdc_fallback_pending_in(PGconn *conn, const char *snapshot, int64_t **ids,
                                       size_t *n, bool *delayed, pb_error_t *err) PB_MUSTCHECK;

/* How many of ids[0..n) are still in the outbox unpublished (published rows move out, or are
 * deleted, or marked). */
pb_status_t pb_cdc_fallback_left(PGconn *conn, const int64_t *ids, size_t n, int64_t *left,
                                 pb_error_t *err) PB_MUSTCHECK;

/* Ends the fallback of slot: the relay streams from the new slot from now on. */
pb_status_t pb_cdc_fallback_leave(PGconn *conn, const char *slot, pb_error_t *err) PB_MUSTCHECK;

#endif
