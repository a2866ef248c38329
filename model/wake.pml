/* The wake-up of schema version 27 as a Promela model (spin): producers NOTIFY only while a relay
 * holds or asks for the sleep lock; a relay with nothing to claim asks for it, claims once more
 * when it is granted, sleeps with it, and lets go of it when it claims events again.
 *   producer: sql/027_wake_when_asleep.sql postbox.notify_outbox (the statement trigger's try of
 *             the shared lock) and PostgreSQL's commit order: the commit is visible
 *             (ProcArrayEndTransaction) before the transaction's locks go (ResourceOwnerRelease)
 *   relay:    src/relay/capture_poll.c poll_next (claim; release when it claimed events) and
 *             poll_wait (ask, grant, withdraw, sleep), src/relay/sleep_lock.c
 * The poll interval is left out (as if endless): the property is that no committed event waits
 * for it. Each relay owns the events of its shard (event e: shard e % NRELAY) and LISTENs from
 * its start. Checked by model/check (-DNRELAY=1 and 2; mutants must give counterexamples).
 *
 * Property (quiescence, when nothing can move: every producer committed, every relay sleeps):
 * every committed event was claimed by its shard's relay. */

#ifndef NRELAY
#define NRELAY 1
#endif
#define NPROD 3             /* producer transactions, one event each (event e = producer e) */
#define NONE 255
#define BIT(r) (1 << (r))

/* the advisory lock (hashtext('postbox.relay.asleep'), 0) */
byte shared = 0;            /* producers holding it in shared mode (until their transaction ends) */
byte excl = NONE;           /* the relay holding it in exclusive mode */
byte asking = 0;            /* relays whose exclusive request waits (PostgreSQL's waitMask) */

bool visible[NPROD];        /* committed: a claim sees it */
bool claimed[NPROD];
byte notes[NRELAY];         /* NOTIFYs queued for the relay's session (LISTEN from its start) */
byte n_done = 0;            /* producers whose transaction ended */

#define AWAKE 0
#define ASKED 1
#define HELD  2

proctype producer(byte e) {
    bool holds = false, notify = false;
    /* INSERT; the statement trigger tries the shared lock: a relay holds or asks for it -> NOTIFY */
    atomic {
        if
        :: excl == NONE && asking == 0 -> shared++; holds = true
        :: else -> notify = true
        fi
    }
#ifdef MUTANT_RELEASE_BEFORE_COMMIT
    /* the lock let go before the commit is visible (a session lock released in the trigger) */
    atomic { if :: holds -> shared--; holds = false :: else -> skip fi }
#endif
    /* COMMIT: visible, the NOTIFY queued for every listener */
    atomic {
        visible[e] = true;
        if
        :: notify ->
            byte r = 0;
            do
            :: r < NRELAY -> notes[r]++; r++
            :: else -> break
            od
        :: else -> skip
        fi
    }
    /* then the transaction's locks go */
    atomic { if :: holds -> shared-- :: else -> skip fi; n_done++ }
}

/* the relay's claim of its shard's visible events; found: it claimed some */
#define SHARD_CLAIMABLE(r, e) ((e) % NRELAY == (r) && visible[e] && !claimed[e])

proctype relay(byte r) {
    byte state = AWAKE, e;
    bool found;
claim:
    atomic {
        found = false;
        e = 0;
        do
        :: e < NPROD -> if :: SHARD_CLAIMABLE(r, e) -> claimed[e] = true; found = true :: else -> skip fi; e++
        :: else -> break
        od;
        /* poll_next: awake again, producers may stop notifying */
        if :: found && state == HELD -> excl = NONE; state = AWAKE :: else -> skip fi
    }
    if :: found -> goto claim :: else -> skip fi;
    /* poll_wait: nothing to claim */
    atomic {
        if
        :: notes[r] > 0 -> notes[r] = 0; goto claim /* woken already */
        :: else -> skip
        fi;
        if
        :: state == AWAKE ->
#ifdef MUTANT_TRY_ASK
            /* asks without waiting: when refused, sleeps without the lock */
            if :: excl == NONE && shared == 0 -> excl = r; state = HELD :: else -> goto end_sleep fi
#else
            asking = asking | BIT(r); state = ASKED
#endif
        :: else -> skip
        fi
    }
end_sleep:
    do
    :: atomic { notes[r] > 0 ->
        notes[r] = 0;
        /* woken before the grant: withdraws (a grant that came first stays) */
        if :: state == ASKED -> asking = asking & ~BIT(r); state = AWAKE :: else -> skip fi;
        goto claim }
    :: atomic { state == ASKED && shared == 0 && excl == NONE ->
        /* granted */
        asking = asking & ~BIT(r); excl = r; state = HELD;
#if NRELAY > 1 && !defined(MUTANT_NO_GRANT_NOTIFY)
        /* the relays that asked before this grant waited for the same producers: they are done
         * now, but those relays are not granted while this one sleeps; a NOTIFY makes them claim */
        e = 0;
        do
        :: e < NRELAY -> notes[e]++; e++
        :: else -> break
        od;
#endif
#ifndef MUTANT_NO_CLAIM_AFTER_GRANT
        goto claim
#else
        skip
#endif
        }
    od
}

proctype quiescence() {
    byte e = 0;
    timeout ->
    d_step {
        assert(n_done == NPROD);
        do
        :: e < NPROD -> assert(!visible[e] || claimed[e]); e++
        :: else -> break
        od
    }
}

init {
    atomic {
        byte i = 0;
        do
        :: i < NRELAY -> run relay(i); i++
        :: else -> break
        od;
        i = 0;
        do
        :: i < NPROD -> run producer(i); i++
        :: else -> break
        od;
        run quiescence()
    }
}
