/* The consumer: src/consume/driver.c (consume_batch: take held, receive, handle, settle),
 * src/consume/hold.c (pb_hold_take, pb_hold_admit, pb_hold_settle, gap_expired),
 * src/consume/subscription.c (pb_subscription_waits_for_gaps), src/inbox/inbox.c
 * (pb_inbox_handle, handle_in_tx: inbox row + handler in one transaction, hold_behind),
 * src/inbox/sequence.c (pb_inbox_seq_check, pb_inbox_seq_purged, pb_inbox_seq_store). One
 * consumer, one lane. */

/* consume.wait_for_gaps = auto: wait only when the subscription takes every event */
#ifdef MUTANT_FILTERED_WAITS
#define WAITS_FOR_GAPS true
#else
#define WAITS_FOR_GAPS TAKES_EVERY_EVENT
#endif

/* pb_inbox_seq_check's classes and the verdicts of handle_in_tx (ST_*, PB_INBOX_*) */
#define C_LATE  1
#define C_NEXT  2
#define C_EARLY 3
#define V_NONE  0
#define V_DONE  1 /* handler ran, committed: acknowledged */
#define V_DUP   2 /* the inbox row (or the purge's fold) says handled: acknowledged */
#define V_DEAD  3 /* moved to inbox_dead with a reason: acknowledged */
#define V_EARLY 4 /* ST_EARLY: held, waits for the missing number */
#define V_HELD  5 /* ST_HELD: behind a failure of its aggregate in the batch */
#define V_RETRY 6 /* handler failed: held, retried after its backoff */
#define D_NONE  0
#define D_LATE  1 /* PB_DISORDER_LATE */
#define D_GAP   2 /* PB_DISORDER_GAP_SKIPPED */

#define HELD_OF(e,g)  (held[e] > 0 && agg_of[e] == (g))
#define HELD_IN(g)    (HELD_OF(0,g) || HELD_OF(1,g) || HELD_OF(2,g) || HELD_OF(3,g) || HELD_OF(4,g))
#define RETRY_OF(e,g) (held_retry[e] && HELD_OF(e,g))
#define RETRY_IN(g)   (RETRY_OF(0,g) || RETRY_OF(1,g) || RETRY_OF(2,g) || RETRY_OF(3,g) || RETRY_OF(4,g))
#define SETTLES(v)    ((v) == V_DONE || (v) == V_DUP || (v) == V_DEAD)

/* pb_hold_take: every held message of aggregate g goes into the batch; with skip (the gap
 * waited for consume.gap_timeout) the first one carries PB_INBOX_SKIP_GAP */
inline take(g, give_up_gap) {
    e = 0;
    do
    :: e < n_events ->
        if
        :: agg_of[e] == g -> inb[e] = inb[e] + held[e]; held[e] = 0; held_retry[e] = false
        :: else -> skip
        fi;
        e++
    :: else -> break
    od;
    skip_gap[g] = give_up_gap;
    agg_ready[g] = false;
    e = 0
}

/* a fresh delivery; pb_hold_admit: behind held messages of its aggregate it is held too (and
 * the aggregate may go on if it may fill the awaited gap), else it goes into the batch */
inline receive(x) {
    atomic {
        queued[x] > 0 ->
        queued[x]--;
        unacked[x]++;
        g = agg_of[x];
        if
        :: HELD_IN(g) ->
            if
            :: waiting_for[g] == 0 || seq_of[x] <= waiting_for[g] -> agg_ready[g] = true
            :: else -> skip
            fi;
            held[x]++
        :: else -> inb[x]++
        fi
    }
}

/* handle_in_tx, the part before COMMIT: classify by number (pb_inbox_seq_check), decide by the
 * inbox row (claim_batch; the purge's fold: pb_inbox_seq_purged), run the handlers (which may
 * fail: settle_failure), hold the later ones of a failed aggregate (hold_behind). Nothing of it
 * is visible before the commit. */
inline handle() {
    g = 0;
    do
    :: g < NAGG ->
        base = seq_last[g];
        expected = base + 1;
        first = true;
        failed = false;
        e = 0;
        do
        :: e < n_events ->
            if
            :: agg_of[e] == g && inb[e] > 0 ->
                s = seq_of[e];
                dis[e] = D_NONE;
                if
                :: skip_gap[g] && first && s > expected -> expected = s; dis[e] = D_GAP
                :: else -> skip
                fi;
                first = false;
                if
                :: s <= base -> cls = C_LATE; dis[e] = D_LATE
                :: else ->
                    if
                    :: s == expected || !WAITS_FOR_GAPS -> cls = C_NEXT; expected = s + 1
                    :: else ->
                        if
                        :: s < expected -> cls = C_NEXT
                        :: else -> cls = C_EARLY; exp_of[e] = expected
                        fi
                    fi
                fi;
                if
                :: cls == C_EARLY -> verdict[e] = V_EARLY
                :: else ->
                    if
                    :: inbox_row[e] || inbox_dead[e] -> verdict[e] = V_DUP
                    :: else ->
                        if
                        :: cls == C_LATE && purged_seq[e] -> verdict[e] = V_DUP
#ifdef MUTANT_LATE_AS_DUPLICATE
                        :: cls == C_LATE && !purged_seq[e] -> verdict[e] = V_DUP
#endif
                        :: else ->
                            if
                            :: failed -> verdict[e] = V_HELD
                            :: else ->
                                if
                                :: verdict[e] = V_DONE
                                :: MAY_FAULT(handler_failures) ->
                                    FAULT(handler_failures);
                                    failed = true;
                                    if
                                    :: c_attempts[e] + 1 >= CONSUME_MAX_ATTEMPTS -> verdict[e] = V_DEAD
                                    :: else -> verdict[e] = V_RETRY
                                    fi
                                fi
                            fi
                        fi
                    fi
                fi
            :: else -> skip
            fi;
            e++
        :: else -> break
        od;
        g++
    :: else -> break
    od;
    e = 0; g = 0
}

/* waits only for a number the subscription can receive (DESIGN "Consumer ordering rules") */
inline assert_receivable(g, x) {
    f = 0;
    do
    :: f < n_events ->
        assert(!(agg_of[f] == g && seq_of[f] == x && committed[f]) || SUBSCRIBED(f));
        f++
    :: else -> break
    od
}

/* COMMIT: inbox rows, handler effects, dead letters, failures, inbox_sequences, together */
inline commit() {
    e = 0;
    do
    :: e < n_events ->
        g = agg_of[e];
        s = seq_of[e];
        if
        :: inb[e] > 0 && verdict[e] == V_DONE ->
            assert(committed[e] && !rolled_back[e]); /* no rolled-back event has an effect */
            assert(effects[e] == 0);                 /* no effect twice */
            /* an effect below the aggregate's highest handled number is counted late; with a
             * subscription that takes every event, effects follow the numbers unless counted */
            assert(s > handled_upto[g] || dis[e] == D_LATE);
            assert(!WAITS_FOR_GAPS || s == handled_upto[g] + 1 || dis[e] != D_NONE);
            effects[e]++;
            inbox_row[e] = true;
            if
            :: dis[e] == D_LATE -> n_late++
            :: dis[e] == D_GAP -> n_gap_skipped++
            :: else -> skip
            fi
        :: inb[e] > 0 && verdict[e] == V_DEAD -> inbox_dead[e] = true; c_attempts[e]++
        :: inb[e] > 0 && verdict[e] == V_RETRY -> c_attempts[e]++
        :: else -> skip
        fi;
        if
        :: inb[e] > 0 && (verdict[e] == V_DONE || verdict[e] == V_DEAD) && s > handled_upto[g] ->
            handled_upto[g] = s
        :: else -> skip
        fi;
        if
        :: inb[e] > 0 && SETTLES(verdict[e]) && s > seq_last[g] -> seq_last[g] = s
        :: else -> skip
        fi;
        e++
    :: else -> break
    od;
    e = 0; g = 0; s = 0
}

/* the source's settle (ack) of what is done: after the commit (driver.c settle_batch) */
inline ack_settled() {
    e = 0;
    do
    :: e < n_events ->
        if
        :: inb[e] > 0 && SETTLES(verdict[e]) -> unacked[e] = unacked[e] - inb[e]
        :: else -> skip
        fi;
        e++
    :: else -> break
    od;
    e = 0
}

/* pb_hold_settle: what is not settled is held (a retry after its backoff); an aggregate with an
 * early message waits for the number it expects, else it may go on */
inline hold_settle() {
    e = 0;
    do
    :: e < n_events ->
        if
        :: inb[e] > 0 && !SETTLES(verdict[e]) ->
            held[e] = held[e] + inb[e];
            held_retry[e] = verdict[e] == V_RETRY
        :: else -> skip
        fi;
        e++
    :: else -> break
    od;
    g = 0;
    do
    :: g < NAGG ->
        expected = 0;
        touched = false;
        e = 0;
        do
        :: e < n_events ->
            if
            :: agg_of[e] == g && inb[e] > 0 ->
                touched = true;
                if
                :: verdict[e] == V_EARLY && exp_of[e] > expected -> expected = exp_of[e]
                :: else -> skip
                fi
            :: else -> skip
            fi;
            e++
        :: else -> break
        od;
        if
        :: touched && expected > 0 ->
            assert_receivable(g, expected);
            waiting_for[g] = expected;
            agg_ready[g] = false
        :: touched && expected == 0 ->
            waiting_for[g] = 0;
            agg_ready[g] = HELD_IN(g) && !RETRY_IN(g)
        :: else -> skip
        fi;
        g++
    :: else -> break
    od;
    clear_batch()
}

inline clear_batch() {
    e = 0;
    do
    :: e < n_events -> inb[e] = 0; verdict[e] = V_NONE; dis[e] = D_NONE; exp_of[e] = 0; e++
    :: else -> break
    od;
    skip_gap[0] = false; skip_gap[1] = false;
    e = 0; f = 0; g = 0; s = 0; base = 0; expected = 0; cls = 0;
    first = false; failed = false; touched = false
}

#define UNACKED_ANY (unacked[0] + unacked[1] + unacked[2] + unacked[3] + unacked[4] > 0)
#define BATCH_EMPTY (inb[0] == 0 && inb[1] == 0 && inb[2] == 0 && inb[3] == 0 && inb[4] == 0)

#ifdef MUTANT_ACK_BEFORE_COMMIT
#define ACKED_BEFORE_COMMIT(v) SETTLES(v)
#else
#define ACKED_BEFORE_COMMIT(v) false
#endif

/* one batch: handle, COMMIT (or the connection is lost: rolled back, the messages held for a
 * retry: driver.c consume_batch, PB_TRANSIENT), then settle and acknowledge; a crash may come
 * between any two steps */
inline handle_batch() {
    CRASH_POINT(consumer_drops);
    atomic { handle() }
    CRASH_POINT(consumer_drops);
#ifdef MUTANT_ACK_BEFORE_COMMIT
    d_step { ack_settled() }
    CRASH_POINT(consumer_drops);
#endif
    if
    :: d_step { commit() }
        CRASH_POINT(consumer_drops);
#ifndef MUTANT_ACK_BEFORE_COMMIT
        d_step { ack_settled(); hold_settle() }
#else
        d_step { hold_settle() }
#endif
    :: atomic {
        MAY_FAULT(conn_losses) ->
        FAULT(conn_losses);
        e = 0;
        do
        :: e < n_events ->
            if
            :: inb[e] > 0 && !ACKED_BEFORE_COMMIT(verdict[e]) ->
                held[e] = held[e] + inb[e]; held_retry[e] = true
            :: else -> skip
            fi;
            e++
        :: else -> break
        od;
        clear_batch()
       }
    fi
}

proctype consumer() {
    byte inb[MAXEV];     /* copies in the batch in hand */
    byte verdict[MAXEV];
    byte dis[MAXEV];
    byte exp_of[MAXEV];
    bool skip_gap[NAGG];
    byte e, f, g, s, base, expected, cls;
    bool first, failed, touched;
restart:
    skip;
    /* a crash or a lost broker connection (driver.c drop_source): everything unacknowledged,
     * held or in the batch, goes back to the broker; what was held in memory is gone */
    d_step {
        e = 0;
        do
        :: e < n_events ->
            queued[e] = queued[e] + unacked[e];
            unacked[e] = 0; held[e] = 0; held_retry[e] = false;
            e++
        :: else -> break
        od;
        waiting_for[0] = 0; waiting_for[1] = 0; agg_ready[0] = false; agg_ready[1] = false;
        clear_batch()
    }
    {
end_idle:
        do
        :: atomic { HELD_IN(AGG_A) && (agg_ready[AGG_A] || RETRY_IN(AGG_A)) -> take(AGG_A, false) }
            handle_batch()
        :: atomic { HELD_IN(AGG_B) && (agg_ready[AGG_B] || RETRY_IN(AGG_B)) -> take(AGG_B, false) }
            handle_batch()
        /* gap_expired: consume.gap_timeout passed (any time: the model has no clock) */
        :: atomic { HELD_IN(AGG_A) && waiting_for[AGG_A] > 0 && !agg_ready[AGG_A] && !RETRY_IN(AGG_A) ->
                    take(AGG_A, true) }
            handle_batch()
        :: atomic { HELD_IN(AGG_B) && waiting_for[AGG_B] > 0 && !agg_ready[AGG_B] && !RETRY_IN(AGG_B) ->
                    take(AGG_B, true) }
            handle_batch()
        :: receive(0); if :: BATCH_EMPTY -> skip :: else -> handle_batch() fi
        :: receive(1); if :: BATCH_EMPTY -> skip :: else -> handle_batch() fi
        :: receive(2); if :: BATCH_EMPTY -> skip :: else -> handle_batch() fi
        :: receive(3); if :: BATCH_EMPTY -> skip :: else -> handle_batch() fi
        :: receive(4); if :: BATCH_EMPTY -> skip :: else -> handle_batch() fi
        :: MAY_FAULT(consumer_drops) && UNACKED_ANY -> /* holding messages */
            FAULT(consumer_drops); goto restart
        od
    }
}
