#include "cdc/slot_check.h"

#include <stdio.h>

#include "cdc/stream.h"

pb_slot_verdict_t pb_slot_judge(const pb_slot_state_t *slot, const pb_slot_record_t *rec)
{
    if (!slot->exists)
        return rec->exists ? PB_SLOT_MISSING : PB_SLOT_NEW;
    if (slot->lost)
        return PB_SLOT_LOST;
    if (!rec->exists)
        return PB_SLOT_ADOPT;
    /* the relay records a position before it reports it, so the genuine slot never confirms
     * past the record; a new slot starts where the WAL was at its creation */
    if (slot->confirmed_lsn > rec->confirmed_lsn || slot->restart_lsn > rec->confirmed_lsn)
        return PB_SLOT_REPLACED;
    return PB_SLOT_OURS;
}

bool pb_slot_verdict_fatal(pb_slot_verdict_t v)
{
    return v == PB_SLOT_MISSING || v == PB_SLOT_LOST || v == PB_SLOT_REPLACED;
}

/* The way back, the same for every fatal verdict: the rows still pending in the outbox are
 * relayed by the poll capture; postbox.emit's events were only in the lost WAL. */
#define RECOVERY                                                                                   \
    "; nothing was skipped, but events after %s may be missing from the slot: relay the pending "  \
    "outbox rows with `postbox relay --capture poll --drain` (postbox.emit events are lost), "     \
    "then `postbox cdc drop-slot` and start the cdc relay again"

void pb_slot_explain(pb_slot_verdict_t v, const char *slot_name, const pb_slot_state_t *slot,
                     const pb_slot_record_t *rec, char *out, size_t outsz)
{
    char recorded[32], confirmed[32], restart[32];
    pb_lsn_format(rec->confirmed_lsn, recorded, sizeof recorded);
    pb_lsn_format(slot->confirmed_lsn, confirmed, sizeof confirmed);
    pb_lsn_format(slot->restart_lsn, restart, sizeof restart);
    switch (v) {
    case PB_SLOT_MISSING:
        snprintf(out, outsz,
                 "replication slot \"%s\" is gone (dropped, or a failover) although the relay "
                 "confirmed up to %s on it" RECOVERY,
                 slot_name, recorded, recorded);
        break;
    case PB_SLOT_LOST:
        snprintf(out, outsz,
                 "replication slot \"%s\" is lost (wal_status = lost: max_slot_wal_keep_size "
                 "removed its WAL) at the relay's position %s" RECOVERY,
                 slot_name, rec->exists ? recorded : "its last position",
                 rec->exists ? recorded : "its last position");
        break;
    case PB_SLOT_REPLACED:
        snprintf(out, outsz,
                 "replication slot \"%s\" is past the relay's last position %s (confirmed %s, "
                 "restart %s): created again or advanced by hand" RECOVERY,
                 slot_name, recorded, confirmed, restart, recorded);
        break;
    default:
        snprintf(out, outsz, "replication slot \"%s\" is the relay's own", slot_name);
        break;
    }
}
