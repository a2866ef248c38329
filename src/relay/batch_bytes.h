/* relay.batch_bytes: how many events the poll capture's next claim asks for, so that a batch of
 * large events does not hold batch_size of them in memory at once.
 *
 * A claim cannot know the sizes of the rows it is about to read, so the first claim asks for a
 * few (PB_FIRST_CLAIM) and every later one for as many as relay.batch_bytes holds at the average
 * payload size of the batch before, between 1 and relay.batch_size. Small events reach
 * batch_size from the second claim on; a change of sizes is followed one batch late, so a batch
 * may overshoot by the ratio of the new size to the old (an outbox mixing 1 kB and 1 MB events
 * still holds at most batch_bytes times that ratio).
 * The cdc capture needs none of this: it sees each event's size as it reads it, and closes its
 * batch once batch_bytes are in (capture_cdc.c). */
#ifndef PB_RELAY_BATCH_BYTES_H
#define PB_RELAY_BATCH_BYTES_H

#include <stddef.h>
#include <stdint.h>

#define PB_FIRST_CLAIM 64

/* The limit of the first claim. batch_bytes 0: no bound (batch_size). */
int pb_claim_limit_first(int batch_size, int64_t batch_bytes);

/* The limit of the next claim after a claim that read n events of `bytes` payload bytes in
 * all; with n 0 (nothing found) the limit stays `current`. */
int pb_claim_limit_next(int batch_size, int64_t batch_bytes, int current, size_t n, size_t bytes);

#endif
