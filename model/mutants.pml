/* Variants with a known bug, each selected by -D; model/check runs each and expects a
 * counterexample:
 *   MUTANT_SETTLE_BEFORE_CONFIRM   poll: the batch is marked published before the broker's
 *                                  confirms are in (a nacked or lost message is never retried)
 *   MUTANT_ACK_BEFORE_COMMIT       the consumer acknowledges before its transaction commits
 *   MUTANT_CONFIRM_LSN_ON_RECEIVE  cdc: the LSN is confirmed when the stream hands the
 *                                  transaction over, before the broker confirmed it
 *   MUTANT_LATE_AS_DUPLICATE       a message at or below the highest handled number is taken for
 *                                  a duplicate (the consumer's first ordering rules)
 *   MUTANT_FILTERED_WAITS          a filtered subscription waits for gaps (for a number it never
 *                                  receives) */
