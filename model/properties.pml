/* The check of a run's end. (Crashes: CRASH_POINT in postbox.pml, placed after every step of
 * the relay and the consumer that leaves something in hand. A broker crash shows as its two
 * effects: unconfirmed publishes, broker.pml, and a consumer whose connection drops.)
 *
 * quiescence: when nothing else can move (timeout: the relay and the consumer idle, the budgets
 * spent), every committed event is settled by the relay, nothing waits at the broker or in the
 * consumer (no consumer waits for ever), and each committed event the subscription takes and the
 * relay published had its effect exactly once, or went to inbox_dead with a reason. */

proctype quiescence() {
    byte e;
    timeout ->
    d_step {
        e = 0;
        do
        :: e < n_events ->
            assert(!rolled_back[e] || effects[e] == 0);
            assert(!committed[e] || os[e] == O_PUBLISHED || os[e] == O_DEAD);
            assert(queued[e] == 0 && unacked[e] == 0 && held[e] == 0);
            assert(!(committed[e] && SUBSCRIBED(e) && os[e] == O_PUBLISHED) ||
                   effects[e] + inbox_dead[e] == 1);
            assert(effects[e] <= 1);
            e++
        :: else -> break
        od
#ifdef CAPTURE_CDC
        ;
        assert(confirmed_lsn == n_events)
#endif
    }
}
