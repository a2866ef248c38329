/* The dead letters: postbox.dead_letters (events the relay gave up on) and postbox.inbox_dead
 * (messages a consumer gave up on).
 *
 * Writing: the events of a batch to postbox.dead_letters from their contents, when there is no
 * claimed outbox row to move (cdc capture: the row may be deleted already, or never existed for
 * postbox.emit events).
 *
 * Reading and repairing (`postbox dlq`): a filter of ANDed conditions selects dead letters of
 * either table; list, drop, and replay work on what it selects, each in one statement. */
#ifndef PB_STORE_DEAD_LETTERS_H
#define PB_STORE_DEAD_LETTERS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "common/event.h"
#include "common/str.h"

/* Inserts n events in one statement, evs[i] having given up after attempts[i] with reasons[i];
 * deletes the outbox row of each that still has one (id > 0). */
pb_status_t pb_dead_letter_events(PGconn *conn, const pb_event_t *const *evs, const int *attempts,
                                  const char *const *reasons, size_t n,
                                  pb_error_t *err) PB_MUSTCHECK;

typedef enum pb_dlq_table {
    PB_DLQ_OUTBOX = 0, /* postbox.dead_letters */
    PB_DLQ_INBOX,      /* postbox.inbox_dead */
} pb_dlq_table_t;

const char *pb_dlq_table_name(pb_dlq_table_t table); /* "postbox.dead_letters" | ... */

typedef enum pb_dlq_field {
    PB_DLQ_ID,             /* the dead letter's id */
    PB_DLQ_TYPE,           /* event type (outbox) or message type (inbox) */
    PB_DLQ_AGGREGATE_TYPE, /* aggregate_type (inbox: the aggregate_type header) */
    PB_DLQ_AGGREGATE_ID,   /* aggregate_id (inbox: the aggregate_id header) */
    PB_DLQ_CONSUMER,       /* inbox only */
    PB_DLQ_SINCE,          /* dead_at >= a timestamp, or >= now() - an age */
    PB_DLQ_UNTIL,          /* dead_at < the same */
} pb_dlq_field_t;

#define PB_DLQ_MAX_CONDS 10

typedef struct pb_dlq_cond {
    pb_dlq_field_t field;
    char *value; /* owned: the text compared; for an age, milliseconds */
    bool age;    /* SINCE/UNTIL: value is an age in ms, not a timestamp */
} pb_dlq_cond_t;

typedef struct pb_dlq_filter {
    pb_dlq_cond_t cond[PB_DLQ_MAX_CONDS];
    int n; /* no condition: every dead letter */
} pb_dlq_filter_t;

/* Adds a condition (the value is copied). False when the filter is full. */
bool pb_dlq_filter_add(pb_dlq_filter_t *f, pb_dlq_field_t field, const char *value);
/* SINCE/UNTIL an age (dead_at compared with now() - age_ms). False when the filter is full. */
bool pb_dlq_filter_add_age(pb_dlq_filter_t *f, pb_dlq_field_t field, int64_t age_ms);
void pb_dlq_filter_free(pb_dlq_filter_t *f);

/* The matching dead letters, newest first, at most limit. Columns, in this order:
 *   outbox: id, event_id, event_type, aggregate_type, aggregate_id, [outbox_id, destination,
 *           payload, headers, last_error, created_at, available_at, expires_at,] dead_at,
 *           attempts, reason
 *   inbox:  id, consumer, message_id, message_type, [exchange, routing_key, headers, body,]
 *           dead_at, attempts, error
 * the bracketed ones only with detail; times as UTC text ("2024-01-31T12:00:00Z"), an inbox body
 * as escaped bytea text. The caller clears *out (NULL on failure). */
pb_status_t pb_dlq_list(PGconn *conn, pb_dlq_table_t table, const pb_dlq_filter_t *f, bool detail,
                        int64_t limit, PGresult **out, pb_error_t *err) PB_MUSTCHECK;

/* Deletes the matching dead letters; *rows: how many. */
pb_status_t pb_dlq_drop(PGconn *conn, pb_dlq_table_t table, const pb_dlq_filter_t *f,
                        int64_t *rows, pb_error_t *err) PB_MUSTCHECK;

/* Moves the matching outbox dead letters back into postbox.outbox, in one statement, attempts
 * reset: same event_id, new ids in their original order (published after what is pending now).
 * *rows: how many. */
pb_status_t pb_dlq_replay_outbox(PGconn *conn, const pb_dlq_filter_t *f, int64_t *rows,
                                 pb_error_t *err) PB_MUSTCHECK;

/* Inbox replay, in three steps: read the messages, release them, forget the republished ones.
 *
 * pb_dlq_inbox_read: the matching inbox dead letters that have a message id, in id order, as
 * binary results (the body byte for byte, text columns as their bytes): id (text), message_id,
 * message_type ('' when none), routing_key, headers (json text), body, dead_at (unix
 * microseconds, as text). The caller clears *out. */
pb_status_t pb_dlq_inbox_read(PGconn *conn, const pb_dlq_filter_t *f, PGresult **out,
                              pb_error_t *err) PB_MUSTCHECK;

/* Deletes the inbox row (while unprocessed) and the failure record of every matching message,
 * so that the consumer takes its redelivery for a new message rather than a duplicate. */
pb_status_t pb_dlq_inbox_release(PGconn *conn, const pb_dlq_filter_t *f,
                                 pb_error_t *err) PB_MUSTCHECK;

/* Deletes the inbox dead letters whose ids are listed ("{3,4,9}"). */
pb_status_t pb_dlq_inbox_forget(PGconn *conn, const char *ids, pb_error_t *err) PB_MUSTCHECK;

#endif
