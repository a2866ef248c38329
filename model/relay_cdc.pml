/* The relay with the cdc capture: src/relay/capture_cdc.c (cdc_next cuts a batch from the
 * stream, cdc_settle marks the rows and dead letters, finish_mark/confirm confirm the LSN),
 * src/cdc/stream.c (pb_cdc_stream_confirm: the flush LSN sent to the server) and the driver's
 * in-place retries (driver.c prepare_retry: the stream cannot leave a failed event behind).
 *
 * The slot's confirmed position (confirmed_lsn) is the server's: a restarted relay streams again
 * every transaction after it. Positions here are event indexes at transaction ends (commit
 * order = index order, events.pml). A batch is one transaction. */

byte confirmed_lsn; /* pg_replication_slots.confirmed_flush_lsn, as "events before this index" */

/* the confirmed LSN never passes an event that is neither published (broker-confirmed and
 * marked) nor dead-lettered */
inline assert_lsn_safe() {
    f = 0;
    do
    :: f < confirmed_lsn ->
        assert(!committed[f] || os[f] == O_PUBLISHED || os[f] == O_DEAD);
        f++
    :: else -> break
    od
}

/* prepare_retry: every undecided event is tried again, but the first undecided one of each
 * aggregate only (the later ones are held_back behind it, sent in a later round) */
inline prepare_round() {
    held_back = 0;
    e = 0;
    do
    :: e < n_events ->
        if
        :: HAS(cur, e) && !HAS(ok, e) && !HAS(dead, e) ->
            f = 0;
            do
            :: f < e ->
                if
                :: SAME_AGG(f, e) && HAS(cur, f) && !HAS(ok, f) && !HAS(dead, f) ->
                    held_back = held_back | BIT(e)
                :: else -> skip
                fi;
                f++
            :: else -> break
            od
        :: else -> skip
        fi;
        e++
    :: else -> break
    od;
    e = 0
}

proctype relay() {
    byte pos, cur, sent, ok, dead, held_back, e, f;
    byte att[MAXEV]; /* in-place attempts: in the relay's memory only */
    bool outcome;
restart:
    skip;
    /* the stream starts again at the slot's confirmed position */
    d_step {
        pos = confirmed_lsn; cur = 0; sent = 0; ok = 0; dead = 0; held_back = 0; e = 0; f = 0;
        att[0] = 0; att[1] = 0; att[2] = 0; att[3] = 0; att[4] = 0
    }
    {
end_idle:
        do
        :: atomic {
            /* the next transaction on the stream, once it has ended (pgoutput sends committed
             * transactions only: a rolled-back one is never seen) */
            pos < n_events && txn_of[pos] < n_committed_txns ->
            cur = 0;
            do
            :: pos < n_events && txn_last[pos] == 0 ->
                if :: committed[pos] -> cur = cur | BIT(pos) :: else -> skip fi;
                pos++
            :: pos < n_events && txn_last[pos] == 1 ->
                if :: committed[pos] -> cur = cur | BIT(pos) :: else -> skip fi;
                pos++;
                break
            od;
#ifdef MUTANT_CONFIRM_LSN_ON_RECEIVE
            confirmed_lsn = pos;
            assert_lsn_safe();
#endif
            sent = 0; ok = 0; dead = 0; held_back = 0; e = 0
           }
            /* rounds until every event is published or dead-lettered */
            do
            :: d_step { (cur & ~(ok | dead)) != 0 -> prepare_round() }
                do
                :: e < n_events && HAS(cur, e) && !HAS(ok | dead | held_back, e) ->
                    CRASH_POINT(relay_crashes);
                    atomic {
                        publish(e, outcome);
                        if
                        :: outcome == P_CONFIRMED -> assert_publish_order(e); ok = ok | BIT(e)
                        :: else ->
                            att[e]++;
                            if
                            :: att[e] >= RELAY_MAX_ATTEMPTS -> dead = dead | BIT(e)
                            :: else -> skip
                            fi
                        fi;
                        sent = sent | BIT(e);
                        e++
                    }
                :: e < n_events && !(HAS(cur, e) && !HAS(ok | dead | held_back, e)) -> e++
                :: else -> break
                od
            :: else -> break
            od;
            CRASH_POINT(relay_crashes);
            /* cdc_settle: dead letters written, rows marked published, then the LSN confirmed */
            atomic {
                e = 0;
                do
                :: e < n_events ->
                    if
                    :: HAS(ok, e) -> os[e] = O_PUBLISHED
                    :: HAS(dead, e) -> os[e] = O_DEAD
                    :: else -> skip
                    fi;
                    e++
                :: else -> break
                od;
                if
                :: pos > confirmed_lsn -> confirmed_lsn = pos
                :: else -> skip
                fi;
                assert_lsn_safe();
                cur = 0; sent = 0; ok = 0; dead = 0; held_back = 0; e = 0; f = 0
            }
        od
    }
}
