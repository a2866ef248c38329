/* Is the replication slot still the one the relay confirmed on? A pure decision, from the slot's
 * row in pg_replication_slots and the position postbox recorded (postbox.cdc_slot_positions,
 * store/slot_position.h), so that it is tested without a server.
 *
 * A slot that was dropped, invalidated (wal_status = 'lost') or dropped and created again under
 * the same name has skipped every change between the recorded position and its new start: the
 * relay must stop and say so, never stream on from the new position. */
#ifndef PB_CDC_SLOT_CHECK_H
#define PB_CDC_SLOT_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The slot as pg_replication_slots shows it (LSNs 0 when NULL). */
typedef struct pb_slot_state {
    bool exists;
    bool lost; /* wal_status = 'lost': the WAL it needs is gone */
    uint64_t restart_lsn;
    uint64_t confirmed_lsn;
} pb_slot_state_t;

/* The position postbox last recorded for the slot. */
typedef struct pb_slot_record {
    bool exists;
    uint64_t confirmed_lsn;
} pb_slot_record_t;

typedef enum pb_slot_verdict {
    PB_SLOT_OURS,     /* not past the recorded position: stream on */
    PB_SLOT_NEW,      /* neither slot nor record: the first start, the slot may be created */
    PB_SLOT_ADOPT,    /* a slot and no record (made before postbox recorded positions, or by
                       * hand before the first start): record its position and stream */
    PB_SLOT_MISSING,  /* a record and no slot: dropped, or the server failed over */
    PB_SLOT_LOST,     /* invalidated (max_slot_wal_keep_size) */
    PB_SLOT_REPLACED, /* past the recorded position: created again, or advanced by someone */
} pb_slot_verdict_t;

pb_slot_verdict_t pb_slot_judge(const pb_slot_state_t *slot, const pb_slot_record_t *rec);

/* Whether the relay must stop (events may have been skipped). */
bool pb_slot_verdict_fatal(pb_slot_verdict_t v);

/* For a fatal verdict: what happened to the slot and what to do, naming the slot and the LSNs,
 * into out[outsz]. */
void pb_slot_explain(pb_slot_verdict_t v, const char *slot_name, const pb_slot_state_t *slot,
                     const pb_slot_record_t *rec, char *out, size_t outsz);

#endif
