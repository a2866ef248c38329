/* The relay with the poll capture: src/relay/driver.c (step: next, precheck, send, overlap,
 * await, plan, settle), src/relay/capture_poll.c (claim ahead while a batch is out; settle), the
 * claim function postbox.claim (sql/019_claim_one_view.sql) and src/relay/holdback.c. */

/* postbox.claim: a pending row, not in flight (x), not parked behind a waiting row of its
 * aggregate with a smaller id */
#define WAITS_BEFORE(f,e) ((f) < (e) && agg_of[f] == agg_of[e] && os[f] == O_WAITING)
#define PARKED(e) (WAITS_BEFORE(0,e) || WAITS_BEFORE(1,e) || WAITS_BEFORE(2,e) || WAITS_BEFORE(3,e))
#define CLAIMS(e,x) (os[e] == O_PENDING && !PARKED(e) && !HAS(x,e))
#define CLAIM(x) ((CLAIMS(0,x) -> 1 : 0) | (CLAIMS(1,x) -> 2 : 0) | (CLAIMS(2,x) -> 4 : 0) | \
                  (CLAIMS(3,x) -> 8 : 0) | (CLAIMS(4,x) -> 16 : 0))

/* driver.c precheck: an event behind an unsettled failure of the batch before (behind, the
 * hold-back record hb: pb_holdback_blocks) or behind an earlier event of its aggregate in the
 * batch that is a retry (attempts > 0) is held_back: not sent, left pending */
inline precheck() {
    held_back = 0;
    e = 0;
    do
    :: e < n_events ->
        if
        :: HAS(cur, e) ->
            f = 0;
            do
            :: f < e ->
                if
                :: SAME_AGG(f, e) && HAS(cur, f) && attempts[f] > 0 -> held_back = held_back | BIT(e)
                :: SAME_AGG(f, e) && behind && HAS(hb, f) -> held_back = held_back | BIT(e)
                :: else -> skip
                fi;
                f++
            :: else -> break
            od
        :: else -> skip
        fi;
        e++
    :: else -> break
    od
}

/* driver.c plan + capture_poll.c poll_settle (outbox.c: one transaction): confirmed rows are
 * marked published; failed ones get attempts+1 and wait (waiting = true) or, at
 * relay.max_attempts, go to the dead letters; held_back ones are left pending. The hold-back record
 * keeps what was not published (holdback.c pb_holdback_record). */
inline settle() {
    e = 0;
    do
    :: e < n_events ->
        if
        :: HAS(cur, e) && HAS(ok, e) -> os[e] = O_PUBLISHED
        :: HAS(cur, e) && HAS(sent, e) && !HAS(ok, e) ->
            attempts[e]++;
            if
            :: attempts[e] >= RELAY_MAX_ATTEMPTS -> os[e] = O_DEAD
            :: else -> os[e] = O_WAITING
            fi
        :: else -> skip
        fi;
        e++
    :: else -> break
    od;
    hb = cur & ~ok;
    cur = 0; sent = 0; ok = 0; held_back = 0; e = 0; f = 0
}

inline batch_step() {
    d_step {
        if
        :: !behind -> hb = 0 /* pb_holdback_clear: nothing is unsettled */
        :: else -> skip
        fi;
        precheck();
        e = 0
    }
    /* send: pipelined in id order, one message at a time to the broker */
    do
    :: e < n_events && HAS(cur, e) && !HAS(held_back, e) ->
        CRASH_POINT(relay_crashes);
        atomic {
            publish(e, outcome);
            if
            :: outcome == P_CONFIRMED -> assert_publish_order(e); ok = ok | BIT(e)
            :: else -> skip
            fi;
            sent = sent | BIT(e);
            e++
        }
    :: e < n_events && !(HAS(cur, e) && !HAS(held_back, e)) -> e++
    :: else -> break
    od;
    /* overlap: the claim of the next batch while the broker confirms this one; it skips the
     * rows in flight and cannot see this batch's outcomes */
    atomic {
        ahead = CLAIM(cur);
        e = 0
    }
    CRASH_POINT(relay_crashes);
#ifdef MUTANT_SETTLE_BEFORE_CONFIRM
    d_step { ok = sent; settle() }
#else
    /* await: the outcomes are in (ok) */
    d_step { settle() }
#endif
}

proctype relay() {
    byte cur, ahead, sent, ok, held_back, hb, e, f;
    byte dead; /* assert_publish_order's: the poll capture dead-letters in its settle, never here */
    bool behind, outcome;
restart:
    skip;
    /* a crash or a lost database connection (driver.c reconnect_capture): nothing of the batch
     * in hand is settled, the hold-back is cleared, the rows stay pending */
    d_step {
        cur = 0; ahead = 0; sent = 0; ok = 0; held_back = 0; hb = 0; behind = false; e = 0; f = 0
    }
end_idle:
    do
    :: atomic { os[0] == O_WAITING -> os[0] = O_PENDING } /* next_attempt_at passed */
    :: atomic { os[1] == O_WAITING -> os[1] = O_PENDING }
    :: atomic { os[2] == O_WAITING -> os[2] = O_PENDING }
    :: atomic { os[3] == O_WAITING -> os[3] = O_PENDING }
    :: atomic { os[4] == O_WAITING -> os[4] = O_PENDING }
    :: atomic { ahead == 0 && CLAIM(0) != 0 -> cur = CLAIM(0); behind = false }
        batch_step()
    :: atomic { ahead != 0 -> cur = ahead; ahead = 0; behind = true }
        batch_step()
    :: ahead != 0 && MAY_FAULT(relay_crashes) -> /* with a batch claimed ahead */
        FAULT(relay_crashes); goto restart
    od
}
