/* The consumer's hold-back: keeps each aggregate's messages in order whatever fails.
 *
 * A message whose handler failed is kept here (unacknowledged, a copy of it) until its retry is
 * due, and the later messages of its aggregate wait behind it, neither handled nor
 * acknowledged; a message ahead of the next expected sequence number of its aggregate waits for
 * the missing ones (or for consume.gap_timeout). Other aggregates go on. The order key is the
 * aggregate (headers aggregate_type and aggregate_id); a message without aggregate_id is its own
 * aggregate, so it is only retried after its backoff, as before.
 *
 * The consumer's loop with it, per batch:
 *   k = pb_hold_take(h, batch, flags, cap, now)            held messages whose aggregate may go on
 *   receive up to cap - k fresh messages into batch + k
 *   n = pb_hold_admit(h, batch, flags, k, n_fresh, now)    fresh ones of held aggregates stay here
 *   the inbox handles batch[0..n) and gives a verdict per message
 *   pb_hold_settle(h, batch, verdicts, n, now, out, &n_out)  what to settle; the rest held
 * The batch is sorted per aggregate by sequence number (then arrival), so each aggregate's
 * messages reach the inbox in order. Messages handed out by pb_hold_take stay owned by h: their
 * strings are valid until pb_hold_settle.
 *
 * Memory: what is held is bounded by the caller. In count (pb_hold_count against
 * consume.max_held): at the bound, fresh messages that would be held are given back to the
 * broker instead (redelivered later), except those that may fill an aggregate's gap, so that the
 * held ones can go on. In bytes (pb_hold_bytes against consume.max_held_bytes): at the bound the
 * caller takes no fresh messages until held ones go on, which keeps every aggregate's order
 * (a message given back can come again behind later ones of its aggregate).
 *
 * @thread loop: the consumer's thread only. */
#ifndef PB_CONSUME_HOLD_H
#define PB_CONSUME_HOLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "inbox/inbox.h"
#include "source/source.h"

typedef struct pb_hold pb_hold_t;

/* gap_timeout_ms: how long an aggregate waits for a missing sequence number before its held
 * messages go on without it (PB_INBOX_SKIP_GAP); 0: never wait. */
pb_hold_t *pb_hold_new(int64_t gap_timeout_ms);
void pb_hold_free(pb_hold_t *h);

/* Messages held now, and the bytes their copies take. */
size_t pb_hold_count(const pb_hold_t *h);
size_t pb_hold_bytes(const pb_hold_t *h);

/* Forgets every held message: the broker connection is gone and redelivers them. */
void pb_hold_clear(pb_hold_t *h);

/* Puts into out[0..) (at most cap) the held messages whose aggregate may go on now: a retry
 * that is due and what waits behind it, an aggregate whose missing message arrived or whose gap
 * timed out (its first message gets PB_INBOX_SKIP_GAP in flags). Returns how many. */
size_t pb_hold_take(pb_hold_t *h, pb_message_t *out, uint8_t *flags, size_t cap, int64_t now);

/* out[k..k+n) are fresh messages: those whose aggregate has messages held here are copied and
 * kept (they go on when their aggregate does), the others stay in the batch. With full (held
 * at the count bound), one that would be kept is not, unless it may be the sequence number its
 * aggregate waits for: its tag goes into back[*n_back] (room for n), for the caller to give
 * back to the broker. Then sorts out[0..) per aggregate by sequence number, then arrival.
 * Returns the batch's new length. */
size_t pb_hold_admit(pb_hold_t *h, pb_message_t *out, uint8_t *flags, size_t k, size_t n,
                     bool full, uint64_t *back, size_t *n_back);

/* After the inbox committed batch[0..n) with verdicts v: puts the messages to settle (done or
 * dead) in settled (room for n), keeps those to retry or to hold (copies of the fresh ones). */
void pb_hold_settle(pb_hold_t *h, const pb_message_t *batch, const pb_inbox_verdict_t *v,
                    size_t n, int64_t now, pb_settle_t *settled, size_t *n_settled);

/* Milliseconds until a held message may go on (0: now), at most max. */
int64_t pb_hold_wait_ms(const pb_hold_t *h, int64_t now, int64_t max);

#endif
