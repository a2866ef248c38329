/* Messages handled out of their aggregate's order: a warning per aggregate and reason at most
 * once a minute, so that a producer whose numbering restarted does not flood the log with one
 * line per event. The memory is fixed: a table of recent (aggregate, reason) pairs where a
 * newer pair takes an older one's slot (at worst a pair is logged again sooner).
 *
 * @thread one lane's: each inbox has its own. */
#ifndef PB_INBOX_DISORDER_H
#define PB_INBOX_DISORDER_H

#include <stdint.h>

#include "inbox/sequence.h"
#include "source/source.h"

#define PB_DISORDER_SLOTS 1024
#define PB_DISORDER_LOG_EVERY_MS 60000

typedef struct pb_disorder {
    struct {
        uint64_t key;   /* hash of (aggregate, reason); 0: empty */
        int64_t at_ms;  /* when it was last logged */
        uint64_t quiet; /* handled out of order since, not logged */
    } slot[PB_DISORDER_SLOTS];
} pb_disorder_t;

/* The reason's label: "late" or "gap_skipped". */
const char *pb_disorder_reason(pb_seq_disorder_t why);

/* Logs m (handled out of order, why; base: its aggregate's highest number handled before) at
 * warn unless its aggregate was logged for the same reason within the last minute. */
void pb_disorder_log(pb_disorder_t *d, const char *consumer, const pb_message_t *m,
                     pb_seq_disorder_t why, int64_t base, int64_t now_ms);

#endif
