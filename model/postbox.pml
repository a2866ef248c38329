/* postbox's delivery protocol as a Promela model (spin): producer transactions, the outbox, the
 * relay (poll or cdc capture), a faulty broker, the consumer's inbox transaction with its
 * hold-back and gap rules, and the retention purge, with crashes at every step.
 * model/README.md maps every state and rule here to the function of the code it stands for.
 *
 * Configurations (-D): CAPTURE_CDC (else the poll capture), FILTERED (the consumer's
 * subscription leaves out the type of event 0, so it never waits for gaps), LARGE (one more
 * committed transaction and bigger fault budgets). Mutants (-D MUTANT_...): see mutants.pml. */

#include "events.pml"
#include "mutants.pml"

/* ---- the outbox (postbox.outbox rows), per event ---------------------------------------------- */
#define O_NONE      0 /* not committed (yet, or rolled back): invisible to every reader */
#define O_PENDING   1 /* published_at IS NULL AND NOT waiting: claimable */
#define O_WAITING   2 /* waiting = true: failed, waits for next_attempt_at (its aggregate parks) */
#define O_PUBLISHED 3 /* published_at set (or the row deleted on publish) */
#define O_DEAD      4 /* moved to postbox.dead_letters */
byte os[MAXEV];
byte attempts[MAXEV];     /* outbox.attempts */
bool committed[MAXEV];
bool rolled_back[MAXEV];
byte n_committed_txns;    /* the producer's transactions committed (or rolled back) so far */

/* ---- the broker: copies in the consumer's queue, per event ------------------------------------ */
byte queued[MAXEV];       /* ready for delivery */
byte unacked[MAXEV];      /* delivered to the consumer, not acknowledged (redelivered on a drop) */

/* ---- the consumer's database: postbox.inbox, inbox_dead, inbox_sequences ---------------------- */
bool inbox_row[MAXEV];    /* (consumer, message_id) row */
bool inbox_dead[MAXEV];   /* moved to postbox.inbox_dead with a reason (acknowledged) */
bool purged_seq[MAXEV];   /* the row was purged, its number folded into inbox_sequences.purged */
byte seq_last[NAGG];      /* inbox_sequences: the highest number handled */
byte c_attempts[MAXEV];   /* inbox_failures: handler failures so far */

/* ---- the consumer's memory (hold.c): lost on a crash ------------------------------------------ */
byte held[MAXEV];         /* held copies (unacknowledged) */
bool held_retry[MAXEV];   /* its handler failed: retried when its backoff is over */
byte waiting_for[NAGG];   /* the number the aggregate waits for (0: none) */
bool agg_ready[NAGG];     /* may go on at the next take */

/* ---- observations for the properties (not part of the protocol) ------------------------------- */
byte effects[MAXEV];      /* committed handler effects */
byte handled_upto[NAGG];  /* highest number with an effect or a dead letter, per aggregate */
hidden byte n_late;              /* postbox_consumer_out_of_order_total{reason="late"} */
hidden byte n_gap_skipped;       /* {reason="gap_skipped"} */
hidden byte n_batch_reorder;     /* a nack inside a pipelined batch that a later event of its aggregate
                           * passed (README "Order per aggregate": the documented exception) */

/* ---- fault budgets (finite state space) and the crash signals --------------------------------- */
byte faults = FAULTS; /* all kinds together */
#define MAY_FAULT(budget) (budget > 0 && faults > 0)
#define FAULT(budget) budget--; faults--
byte relay_crashes   = RELAY_CRASHES;
byte consumer_drops  = CONSUMER_DROPS;  /* consumer crash or lost broker connection */
byte conn_losses     = CONN_LOSSES;     /* consumer's PostgreSQL connection lost mid-transaction */
byte broker_dups     = BROKER_DUPS;     /* the broker stores a message twice */
byte broker_nacks    = BROKER_NACKS;    /* nack or return (unroutable with mandatory) */
byte broker_unconfirmed = BROKER_UNCONFIRMED; /* connection or broker lost before the confirm */
byte handler_failures = HANDLER_FAILURES;
byte purges          = PURGES;
/* A crash can come between any two steps of a process: each step that leaves something in hand
 * is followed by a crash point, where the process may restart (while the budget lasts). */
#define CRASH_POINT(budget) if :: MAY_FAULT(budget) -> FAULT(budget); goto restart :: skip fi

#include "producer.pml"
#include "broker.pml"
#include "relay_common.pml"
#ifdef CAPTURE_CDC
#include "relay_cdc.pml"
#else
#include "relay_poll.pml"
#endif
#include "consumer.pml"
#include "janitor.pml"
#include "properties.pml"

init {
    d_step { events_init() }
    atomic {
        run producer();
        run relay();
        run consumer();
        run janitor();
        run quiescence()
    }
}
