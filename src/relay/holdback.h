/* Hold-back: the one piece of state that keeps an aggregate in order behind a failed event
 * across batches.
 *
 * The poll capture claims batch k+1 while batch k is still being published, the outcomes of
 * batch k-1 are being written beside the claim and those of batch k-2 may still be committing
 * (relay/capture_poll.c), so the claim cannot know which events of these batches failed. The
 * driver therefore remembers every event of the last PB_HOLDBACK_BATCHES batches that did not
 * publish cleanly (failed, rejected or itself held back), and holds back an event of the next
 * batch when an earlier event (smaller id) of its aggregate is among them. Once a batch's
 * outcomes are committed before a claim starts, that claim sets such events aside by itself
 * (store/outbox.h); a batch claimed after every outcome was committed clears the record. An
 * event earlier than every remembered event of its aggregate (a retried event claimed again) is
 * not held: holding it because later events of its aggregate were held would hold them all for
 * ever. */
#ifndef PB_RELAY_HOLDBACK_H
#define PB_RELAY_HOLDBACK_H

#include <stdbool.h>
#include <stddef.h>

#include "common/event.h"
#include "common/str.h"

#define PB_HOLDBACK_BATCHES 3

typedef struct pb_holdback {
    /* per batch remembered, per event: its id (an int64_t), then
     * "aggregate_type\0aggregate_id\0"; [newest] is the last batch recorded */
    pb_buf_t keys[PB_HOLDBACK_BATCHES];
    size_t n[PB_HOLDBACK_BATCHES];
    int newest;
} pb_holdback_t;

void pb_holdback_free(pb_holdback_t *h);

/* Forgets everything (the outcomes it held are committed). */
void pb_holdback_clear(pb_holdback_t *h);

/* Remembers the events of a batch whose outcome is not PB_OUT_PUBLISHED (nor PB_OUT_EXPIRED: an
 * expired event holds nothing back), in place of the oldest batch remembered. */
void pb_holdback_record(pb_holdback_t *h, const pb_event_t *events, const pb_result_t *results,
                        size_t n);

/* Whether an event of ev's aggregate with a smaller id is remembered. */
bool pb_holdback_blocks(const pb_holdback_t *h, const pb_event_t *ev);

#endif
