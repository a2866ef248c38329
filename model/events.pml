/* The events of the bounded run and the bounds of the model.
 *
 *   txn 0: commits   e0  aggregate A, sequence 1
 *   txn 1: commits   e1  aggregate A, sequence 2   (one transaction, two aggregates)
 *                    e2  aggregate B, sequence 1
 *   txn 2: rolls back e3 aggregate A (its number 3 is rolled back with it)
 *   txn 3: commits   e4  aggregate A, sequence 3   (LARGE only: number 3 taken again)
 *
 * Numbers come from postbox.next_sequence (sql/009_aggregate_sequence.sql): the row lock
 * serialises the producers of one aggregate, so its committed events are numbered 1..n in commit
 * order and outbox id order agrees with it; the cdc stream (commit order) reads them in index
 * order too. */

#define MAXEV 5
#define NAGG  2
#define AGG_A 0
#define AGG_B 1

/* fault budgets: each can be set with -D (model/check --large uses the LARGE set) */
#ifdef LARGE
#define NTXN 4
#define DEFAULT_BUDGET 2
#else
#define NTXN 3
#define DEFAULT_BUDGET 1
#endif
#ifndef FAULTS
#define FAULTS (2 * DEFAULT_BUDGET) /* faults of any kind in one run, on top of each kind's own */
#endif
#ifndef RELAY_CRASHES
#define RELAY_CRASHES DEFAULT_BUDGET
#endif
#ifndef CONSUMER_DROPS
#define CONSUMER_DROPS DEFAULT_BUDGET
#endif
#ifndef CONN_LOSSES
#define CONN_LOSSES DEFAULT_BUDGET
#endif
#ifndef BROKER_DUPS
#define BROKER_DUPS DEFAULT_BUDGET
#endif
#ifndef BROKER_NACKS
#define BROKER_NACKS DEFAULT_BUDGET
#endif
#ifndef BROKER_UNCONFIRMED
#define BROKER_UNCONFIRMED DEFAULT_BUDGET
#endif
#ifndef HANDLER_FAILURES
#define HANDLER_FAILURES DEFAULT_BUDGET
#endif
#ifndef PURGES
#define PURGES DEFAULT_BUDGET
#endif

#define RELAY_MAX_ATTEMPTS   2 /* relay.max_attempts */
#define CONSUME_MAX_ATTEMPTS 2 /* consume.max_attempts */

hidden byte agg_of[MAXEV];
hidden byte seq_of[MAXEV];   /* aggregate_sequence (0: rolled back, never numbered) */
hidden byte txn_of[MAXEV];
hidden byte txn_last[MAXEV]; /* the last event of its transaction (its end LSN) */
hidden byte n_events;        /* events 0..n_events-1 exist in this configuration */

/* the consumer's subscription (FILTERED: bound by event type, leaving out event 0's type) */
#ifdef FILTERED
#define SUBSCRIBED(e) ((e) != 0)
#define TAKES_EVERY_EVENT false
#else
#define SUBSCRIBED(e) true
#define TAKES_EVERY_EVENT true
#endif

#define BIT(e)   (1 << (e))
#define HAS(m,e) ((((m) >> (e)) & 1) == 1)
#define SAME_AGG(f,e) (agg_of[f] == agg_of[e])

inline events_init() {
    agg_of[0] = AGG_A; seq_of[0] = 1; txn_of[0] = 0; txn_last[0] = 1;
    agg_of[1] = AGG_A; seq_of[1] = 2; txn_of[1] = 1; txn_last[1] = 0;
    agg_of[2] = AGG_B; seq_of[2] = 1; txn_of[2] = 1; txn_last[2] = 1;
    agg_of[3] = AGG_A; seq_of[3] = 0; txn_of[3] = 2; txn_last[3] = 1;
    agg_of[4] = AGG_A; seq_of[4] = 3; txn_of[4] = 3; txn_last[4] = 1;
#ifdef LARGE
    n_events = 5
#else
    n_events = 4
#endif
}
