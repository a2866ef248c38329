/* The relay's side of postbox.outbox: claim a batch of due events, settle their outcomes.
 *
 * A claim reads a batch of rows (without row locks: the caller owns their shards and names its
 * batch in flight); the settle writes every outcome with one set-based statement per kind, in
 * one transaction. A batch whose settle never ran or failed is simply claimed again: at least
 * once, never lost. */
#ifndef PB_STORE_OUTBOX_H
#define PB_STORE_OUTBOX_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/event.h"
#include "common/str.h"

/* The rows (alias a) whose ids $1 names, as pb_outbox_ids_literal wrote it: dense ids as an
 * int8multirange, whose bounds let the planner walk the primary key once from the first id to
 * the last while the containment test keeps the ids named (DELETE of 1,000 consecutive ids: 2.0-
 * 2.5 ms of backend CPU, against 3.5-4.0 for `= ANY(bigint[])`, which parses every id and
 * descends the index once per id); sparse ids as a bigint[], since walking the key over the rows
 * between them would cost more. */
#define PB_OUTBOX_IDS_IN_RANGES(a)                                                              \
    a ".id >= lower($1::int8multirange) AND " a ".id < upper($1::int8multirange) "             \
    "AND $1::int8multirange @> " a ".id"
#define PB_OUTBOX_IDS_IN_ARRAY(a) a ".id = ANY($1::bigint[])"

/* Common table expressions that move the outbox rows (alias o) matching ids, one of the two
 * predicates above, to postbox.outbox_published, stamped now(); `kept` yields the ids moved.
 * The rows go through the DELETE's RETURNING, so exactly the rows deleted are kept, even when
 * another session changed or deleted some of them meanwhile (a copy read from the table would
 * see the statement's snapshot instead). Marking a row published in place costs about six times
 * this (see sql/004_published_history.sql). */
#define PB_OUTBOX_MOVE_PUBLISHED_CTES(ids)                                                      \
    PB_OUTBOX_MOVE_CTES_(ids, "moved v", "v.payload", "v.headers")

/* The same, storing instead of a row's payload and headers the masked texts that the arrays
 * $ip (bigint ids), $pp and $hp (text; NULL headers: none) give for its id, when they name it
 * (relay.mask_stored, the cdc capture: its rows are moved after they were published, and only
 * the relay holds what it published). */
#define PB_OUTBOX_MOVE_PUBLISHED_MASKED_CTES(ids, ip, pp, hp)                                   \
    PB_OUTBOX_MOVE_CTES_(ids,                                                                   \
        "moved v LEFT JOIN (SELECT DISTINCT ON (id) * FROM unnest(" ip "::bigint[], "           \
        pp "::text[], " hp "::text[]) AS x(id, payload, headers)) x ON x.id = v.id",            \
        "CASE WHEN x.id IS NULL THEN v.payload ELSE x.payload::jsonb END",                     \
        "CASE WHEN x.id IS NULL THEN v.headers ELSE coalesce(x.headers::jsonb, '{}') END")

#define PB_OUTBOX_MOVE_CTES_(ids, from, payload, headers)                                      \
    "moved AS (DELETE FROM postbox.outbox o WHERE " ids " RETURNING o.*), "                     \
    "kept AS (INSERT INTO postbox.outbox_published (id, event_id, aggregate_type, "             \
    "    aggregate_id, event_type, payload, headers, destination, created_at, published_at, "   \
    "    attempts, last_error, sequence) "                                                      \
    "  SELECT v.id, v.event_id, v.aggregate_type, v.aggregate_id, v.event_type, " payload ", "  \
    headers ", v.destination, v.created_at, now(), v.attempts, v.last_error, v.sequence "      \
    "  FROM " from " RETURNING id) "


/* relay.mask_stored: the masked texts of events to be stored, by outbox row id, as the array
 * literals $ids, $payloads, $headers of a settle statement; count: how many. */
typedef struct pb_masked_texts {
    pb_buf_t ids, payloads, headers;
    size_t count;
} pb_masked_texts_t;

/* Opens the literals, empty: call before the first add (and to reuse t). */
void pb_masked_texts_reset(pb_masked_texts_t *t);
void pb_masked_texts_free(pb_masked_texts_t *t);
/* Adds the texts of outbox row id (headers NULL: none). */
void pb_masked_texts_add(pb_masked_texts_t *t, int64_t id, const char *payload, const char *headers);
/* Closes the literals, after the last add. */
void pb_masked_texts_end(pb_masked_texts_t *t);

typedef struct pb_outbox {
    PGconn *conn;           /* borrowed */
    bool delete_on_publish; /* on_publish = delete */
    PGresult *batch;        /* rows of the claimed batch; events[] point into it */
    pb_event_t *events;
    size_t n_events;
    size_t n_parked;        /* claimed rows the claim set aside (behind a waiting event) */
    size_t cap_events;
    /* literals for the settle statements, reused from batch to batch: the published ids from
     * pb_outbox_ids_literal (published_sparse: an array, else a multirange), the others arrays */
    int64_t *published;     /* the published ids (room for cap_published) */
    size_t cap_published;
    bool published_sparse;
    size_t n_published, n_retried, n_dead; /* what the literals built hold */
    pb_buf_t published_ids, retry_ids, retry_errors, retry_delays, dead_ids, dead_reasons,
        dead_tried;
    /* relay.mask_stored: the masked texts of the events stored now (pb_event_t.store_masked),
     * written over their outbox rows first in the settle, so that the moves store them */
    pb_masked_texts_t masked;
    char limit_text[16], shards_text[16];
} pb_outbox_t;

/* What settle needs to know about one failed event besides its outcome. */
typedef struct pb_settle_plan {
    int64_t retry_delay_ms; /* for RETRY */
    bool dead;              /* RETRY that exhausted its attempts, or REJECT */
    const char *reason;     /* dead letter reason (RETRY: last error, REJECT: result error) */
} pb_settle_plan_t;

typedef struct pb_settle_counts {
    size_t published;
    size_t retried;
    size_t dead;
    size_t untried;
} pb_settle_counts_t;

/* Whether the settle moves an event with this outcome to the history or the dead letters. */
bool pb_settle_stores(const pb_result_t *result, const pb_settle_plan_t *plan);

void pb_outbox_init(pb_outbox_t *ob, PGconn *conn, bool delete_on_publish);
/* Frees the batch and buffers (not the connection). */
void pb_outbox_free(pb_outbox_t *ob);

/* Prepares the statements; call after every (re)connect. */
pb_status_t pb_outbox_prepare(pb_outbox_t *ob, pb_error_t *err) PB_MUSTCHECK;

/* The relay's statements run in libpq pipeline mode (PQenterPipelineMode), so that the settle
 * of one batch and the claim of the next each travel in one round trip while the broker
 * confirms the batch between them (relay/capture_poll.c). Each send queues its statements; the
 * caller frames them in transactions and sync points (store/pg.h); the matching read, called
 * in the same order, takes their results. No row is locked by a claim.
 *
 * pb_outbox_send_claim queues the wake of up to limit waiting events whose retry time has come
 * (no UPDATE runs when none is due), then the claim of the next limit events in id order that do not wait for a retry and whose ids
 * are not in in_flight (a multirange literal from pb_outbox_id_ranges: the caller's batch still
 * being published); with shards > 1 only events of the shards listed in owned (an int[] literal
 * such as "{0,3}"). Claimed events behind an earlier waiting event of their aggregate are parked
 * by the claim itself (they wait too, until the same time) instead of returned. The work is
 * bounded by limit, not by the number of pending or waiting events. */
pb_status_t pb_outbox_send_claim(pb_outbox_t *ob, int limit, int shards, const char *owned,
                                 const char *in_flight, pb_error_t *err) PB_MUSTCHECK;

/* Reads what pb_outbox_send_claim queued: ob->events / n_events hold the batch (possibly empty),
 * n_parked counts the events it set aside. */
pb_status_t pb_outbox_read_claim(pb_outbox_t *ob, pb_error_t *err) PB_MUSTCHECK;

/* Creates the index that bounds a claim of some shards for relay.shards = shards (and drops
 * those of other counts), outside pipeline mode and any transaction (`postbox init`). It is
 * built concurrently, so it waits for the transactions open in the database. */
pb_status_t pb_outbox_ensure_shard_index(PGconn *conn, int shards, pb_error_t *err) PB_MUSTCHECK;

/* Queues the statements that write the outcomes pb_outbox_build_arrays put into ob (published
 * rows moved or deleted, retries, dead letters), to run in one transaction. Nothing is queued
 * when there is nothing to write; pb_outbox_read_settle then reads nothing. */
pb_status_t pb_outbox_send_settle(pb_outbox_t *ob, pb_error_t *err) PB_MUSTCHECK;

/* Reads what pb_outbox_send_settle queued. */
pb_status_t pb_outbox_read_settle(pb_outbox_t *ob, pb_error_t *err) PB_MUSTCHECK;

/* Frees the claimed rows (after pb_outbox_build_arrays, which copies what settle needs). */
void pb_outbox_release_batch(pb_outbox_t *ob);

/* Writes the int8multirange literal of the ids given (sorted in place), one range per run of
 * consecutive ids: "{[1,1000],[1500,1500]}"; "{}" when n is 0. A run that ends at INT64_MAX is
 * written unbounded, "[x,)": PostgreSQL cannot store [x,INT64_MAX] (its canonical form overflows),
 * and no id lies above it. */
void pb_outbox_id_ranges(int64_t *ids, size_t n, pb_buf_t *out);

/* Writes the literal that names the given ids (sorted in place; "{}" for none) for $1 of
 * PB_OUTBOX_IDS_IN_RANGES or PB_OUTBOX_IDS_IN_ARRAY, and returns true when it is the array: when
 * the ids are spread over more than twice their number of ids (relays sharing the outbox by
 * shards, marks retried beside new ones), or reach INT64_MAX, which a range cannot bound. */
bool pb_outbox_ids_literal(int64_t *ids, size_t n, pb_buf_t *out);

/* cdc: prepares the statements of pb_outbox_send_mark_relayed on a new connection. */
pb_status_t pb_outbox_prepare_mark_relayed(PGconn *conn, pb_error_t *err) PB_MUSTCHECK;

/* cdc: sends (without waiting; the caller reads the result with PQgetResult) the statement that
 * moves the relayed rows ids[0..n) (sorted in place; literal is scratch) to the history and
 * returns one row, one bigint: how many of them are in the history now (fewer than the distinct
 * ids: pb_outbox_find_published tells which). The rows that masked (NULL, or closed and empty:
 * none) names are stored with its texts. */
pb_status_t pb_outbox_send_mark_relayed(PGconn *conn, int64_t *ids, size_t n, pb_buf_t *literal,
                                        const pb_masked_texts_t *masked,
                                        pb_error_t *err) PB_MUSTCHECK;

/* cdc: the ids among ids[0..n) (sorted in place; literal is scratch) that are in the history,
 * as rows of one bigint column in *out (the caller clears it). */
pb_status_t pb_outbox_find_published(PGconn *conn, int64_t *ids, size_t n, pb_buf_t *literal,
                                     PGresult **out, pb_error_t *err) PB_MUSTCHECK;

/* Rows still pending that are due or failed before (not those whose available_at, or an
 * earlier event's of their aggregate, is still to come: `relay --drain` leaves them). */
pb_status_t pb_outbox_pending(pb_outbox_t *ob, int64_t *count, pb_error_t *err) PB_MUSTCHECK;

/* Builds the literals for pb_outbox_send_settle from the batch's events and their outcomes
 * (copied: results and plans may be reused afterwards). */
void pb_outbox_build_arrays(pb_outbox_t *ob, const pb_result_t *results,
                            const pb_settle_plan_t *plans, pb_settle_counts_t *counts);

#endif
