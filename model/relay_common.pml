/* What both captures share: the relay's promise on publish order (README "Guarantees", "Order
 * per aggregate"), checked when the broker takes an event. The caller's locals: cur (the batch),
 * sent (sent so far in it), ok (confirmed in it), dead (dead-lettered in it, cdc), f (scratch). */

/* README "Order per aggregate": when the broker takes e, every earlier event of its aggregate is
 * published or dead-lettered, or went out before it in the same pipelined batch */
inline assert_publish_order(e) {
    f = 0;
    do
    :: f < e ->
        assert(!(committed[f] && SAME_AGG(f, e)) || os[f] == O_PUBLISHED || os[f] == O_DEAD ||
               (HAS(cur, f) && HAS(sent, f)));
        if
        :: committed[f] && SAME_AGG(f, e) && HAS(cur, f) && HAS(sent, f) && !HAS(ok | dead, f) &&
           os[f] != O_PUBLISHED && os[f] != O_DEAD ->
            n_batch_reorder++ /* the documented exception: counted, and the consumer's gap rules
                               * restore the order */
        :: else -> skip
        fi;
        f++
    :: else -> break
    od
}

