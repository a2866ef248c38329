/* How long the cdc relay's slot has held WAL with outbox changes (cdc.max_slot_lag_age).
 *
 * The age is measured from the commit time of the oldest transaction that carried events and
 * that the relay has read from the stream but not yet confirmed: the server keeps the WAL from
 * that transaction on for the relay. A stream that carries no events (an idle outbox on a busy
 * database) has no age, however much WAL other tables write: the relay confirms the server's WAL
 * end then. The relay knows only what it has read: a relay that is not running, or that has not
 * reached a transaction yet, cannot age it (`postbox status` and `postbox check` judge the oldest
 * outbox row not yet relayed instead; see README "WAL guard").
 *
 * The transactions are kept in read order, one entry each (a large transaction is one entry),
 * as many as the relay holds unconfirmed: its batch, the read-ahead and the marks queued.
 * @thread the driver's thread only. */
#ifndef PB_RELAY_SLOT_AGE_H
#define PB_RELAY_SLOT_AGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pb_slot_age_txn {
    uint64_t commit_lsn; /* its commit record: let go once the slot's position passes it */
    int64_t commit_us;   /* unix microseconds, by the server's clock */
} pb_slot_age_txn_t;

typedef struct pb_slot_age {
    pb_slot_age_txn_t *txns; /* a ring of cap entries: head is the oldest */
    size_t head, n, cap;
} pb_slot_age_t;

void pb_slot_age_init(pb_slot_age_t *a);
void pb_slot_age_free(pb_slot_age_t *a);

/* An event of the transaction committed at commit_lsn (pgoutput commit_time: microseconds since
 * 2000-01-01) was read; a transaction is noted once, at its first event, and not again when a
 * stream opened anew sends it again. */
void pb_slot_age_note(pb_slot_age_t *a, uint64_t commit_lsn, int64_t pg_commit_time);

/* The slot's confirmed position is now confirmed_lsn: the transactions it passed are let go. */
void pb_slot_age_confirmed(pb_slot_age_t *a, uint64_t confirmed_lsn);

/* Milliseconds from the oldest unconfirmed transaction's commit to now_us (unix microseconds);
 * 0 when none is held (or the server's clock is ahead). */
int64_t pb_slot_age_ms(const pb_slot_age_t *a, int64_t now_us);

#endif
