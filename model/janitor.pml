/* The retention purge (src/janitor/janitor.c, `postbox purge`, src/store/purge.c): deletes a
 * handled inbox row and folds its aggregate_sequence into postbox.inbox_sequences.purged
 * (sql/012_inbox_purged.sql). Any handled row may go, at any time: the model has no clock, so
 * a copy can come back after its row was purged. The fold's timestamp test (no later than
 * purged_before plus an hour) holds for such a copy: it was stamped before the row was written. */

inline purge(x) {
    atomic { MAY_FAULT(purges) && inbox_row[x]  -> FAULT(purges); inbox_row[x] = false; purged_seq[x] = true }
}

proctype janitor() {
end_idle:
    do
    :: purge(0)
    :: purge(1)
    :: purge(2)
    :: purge(3)
    :: purge(4)
    od
}
