/* The poll relay's "asleep" lock (sql/027_wake_when_asleep.sql): producers NOTIFY only while a
 * relay holds it or asks for it.
 *
 * A relay with nothing to claim asks for the advisory lock (hashtext('postbox.relay.asleep'), 0)
 * in exclusive mode without waiting for the answer (it keeps listening for NOTIFYs meanwhile).
 * Producers that did not NOTIFY hold the lock in shared mode until their commit is visible, so
 * the grant comes after every event committed without a NOTIFY: the relay claims once more after
 * the grant and may then sleep until a NOTIFY or its poll interval. It lets go of the lock when
 * it claims events again (producers then stop notifying), or withdraws its request when woken
 * before the grant. With several relays, the one granted NOTIFYs for those that asked with it
 * (capture_poll.c on_granted; model/wake.pml).
 *
 * The lock is taken on the session given to ask (the poll capture's settle session, idle while
 * the relay sleeps); the session must not be used for anything else while a request is out.
 * @thread the driver's thread only. */
#ifndef PB_RELAY_SLEEP_LOCK_H
#define PB_RELAY_SLEEP_LOCK_H

#include <libpq-fe.h>
#include <stdbool.h>

#include "common/err.h"

typedef enum pb_sleep_state {
    PB_SLEEP_AWAKE,  /* neither held nor asked for: producers do not NOTIFY */
    PB_SLEEP_ASKED,  /* requested, no answer yet: producers NOTIFY */
    PB_SLEEP_HELD,   /* granted: producers NOTIFY */
} pb_sleep_state_t;

typedef struct pb_sleep_lock {
    PGconn *conn; /* borrowed: the session of the request and of the lock */
    pb_sleep_state_t state;
} pb_sleep_lock_t;

/* Sends the request on conn (idle, outside pipeline mode). AWAKE -> ASKED. */
pb_status_t pb_sleep_lock_ask(pb_sleep_lock_t *sl, PGconn *conn, pb_error_t *err) PB_MUSTCHECK;

/* Reads what arrived on the session without waiting: ASKED -> HELD once granted. */
pb_status_t pb_sleep_lock_poll(pb_sleep_lock_t *sl, pb_error_t *err) PB_MUSTCHECK;

/* Cancels a request still out and reads its answer: ASKED -> AWAKE, or HELD when the grant came
 * first. Other states unchanged. */
pb_status_t pb_sleep_lock_withdraw(pb_sleep_lock_t *sl, pb_error_t *err) PB_MUSTCHECK;

/* Lets go of a held lock (one round trip): HELD -> AWAKE. */
pb_status_t pb_sleep_lock_release(pb_sleep_lock_t *sl, pb_error_t *err) PB_MUSTCHECK;

/* The session is gone (it took the lock and the request with it): -> AWAKE. */
void pb_sleep_lock_reset(pb_sleep_lock_t *sl);

#endif
