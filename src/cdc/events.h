/* Turning decoded change data into events: an inserted postbox.outbox row (columns found by
 * name in the Relation message, so added or reordered columns do not matter) or a logical
 * message written by postbox.emit(). Each event owns one block holding all its strings. */
#ifndef PB_CDC_EVENTS_H
#define PB_CDC_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cdc/pgoutput.h"
#include "common/err.h"
#include "common/event.h"

typedef struct pb_cdc_event {
    pb_event_t ev;  /* strings point into block */
    char *block;
    uint64_t commit_lsn; /* LSN of its transaction's commit record (the Begin's final LSN):
                          * the transaction is behind the slot's confirmed position once that
                          * passed it */
} pb_cdc_event_t;

/* Column positions of postbox.outbox in a Relation message, -1 when absent. */
typedef struct pb_cdc_outbox_map {
    uint32_t relid;
    int id, event_id, aggregate_type, aggregate_id, event_type, payload, headers, destination,
        created_at, attempts, sequence, available_at, expires_at;
} pb_cdc_outbox_map_t;

/* Builds the map; PB_FATAL naming the missing column when a required one is absent. */
pb_status_t pb_cdc_outbox_map(const pb_pgo_relation_t *rel, pb_cdc_outbox_map_t *map,
                              pb_error_t *err) PB_MUSTCHECK;

pb_status_t pb_cdc_event_from_insert(const pb_cdc_outbox_map_t *map, const pb_pgo_msg_t *ins,
                                     pb_cdc_event_t *out, pb_error_t *err) PB_MUSTCHECK;

/* content: the JSON object written by postbox.emit(). The payload and headers keep the text of
 * the message (numbers as PostgreSQL wrote them); the other members are decoded (available_at_us
 * and expires_at_us, schema version 16, when present). */
pb_status_t pb_cdc_event_from_message(const char *content, size_t len, pb_cdc_event_t *out,
                                      pb_error_t *err) PB_MUSTCHECK;

/* The strings of an event, in this order: event_id, aggregate_type, aggregate_id, event_type,
 * payload, headers, destination (the last two may be NULL). get copies the pointers out of ev,
 * set into it (payload_len: the payload's length). */
#define PB_CDC_EVENT_STRINGS 7
void pb_cdc_event_get_strings(const pb_event_t *ev, const char *strs[PB_CDC_EVENT_STRINGS]);
void pb_cdc_event_set_strings(pb_event_t *ev, const char *const strs[PB_CDC_EVENT_STRINGS],
                              size_t payload_len);

void pb_cdc_event_free(pb_cdc_event_t *e);

/* "2026-11-30 11:03:34.123456+00" (timestamptz text output, ISO) -> unix microseconds. */
bool pb_parse_timestamptz(const char *s, size_t len, int64_t *us);

#endif
