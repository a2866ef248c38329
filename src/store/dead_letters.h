/* Writing single events to postbox.dead_letters when there is no claimed outbox row to move
 * (cdc capture: the row may be deleted already, or never existed for postbox.emit events). */
#ifndef PB_STORE_DEAD_LETTERS_H
#define PB_STORE_DEAD_LETTERS_H

#include <libpq-fe.h>

#include "common/err.h"
#include "common/event.h"

/* Inserts the event with the reason; deletes its outbox row if it still exists (id > 0). */
pb_status_t pb_dead_letter_event(PGconn *conn, const pb_event_t *ev, int attempts,
                                 const char *reason, pb_error_t *err) PB_MUSTCHECK;

#endif
