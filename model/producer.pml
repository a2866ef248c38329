/* Producer transactions: the business rows and the outbox rows commit together, or neither does
 * (postbox.enqueue in the caller's transaction). A rolled-back transaction leaves no row any
 * reader can see: not the poll claim (MVCC), not the cdc stream (pgoutput sends committed
 * transactions only). */

proctype producer() {
    byte e;
    do
    :: n_committed_txns < NTXN ->
        d_step {
            e = 0;
            do
            :: e < n_events ->
                if
                :: txn_of[e] == n_committed_txns && seq_of[e] > 0 ->
                    committed[e] = true; os[e] = O_PENDING
                :: txn_of[e] == n_committed_txns && seq_of[e] == 0 ->
                    rolled_back[e] = true
                :: else -> skip
                fi;
                e++
            :: else -> break
            od;
            n_committed_txns++;
            e = 0
        }
    :: else -> break
    od
}
