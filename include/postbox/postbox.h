/**
 * @file postbox.h
 * @brief libpostbox: write events into the transactional outbox from C.
 *
 * An application calls postbox_enqueue() on its own libpq connection, inside the transaction
 * that changes its business rows. The event row commits or rolls back together with them; the
 * `postbox relay` daemon publishes it after the commit. The library never begins, commits or
 * rolls back a transaction for the caller.
 *
 * Thread safety: a PGconn must not be used by two threads at once (libpq's rule); different
 * connections may be used from different threads.
 */
#ifndef POSTBOX_POSTBOX_H
#define POSTBOX_POSTBOX_H

#include <libpq-fe.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Length of an event id in text form (uuid) including the terminating NUL. */
#define POSTBOX_EVENT_ID_SIZE 37

/** One event to enqueue. Strings are borrowed for the duration of the call. */
typedef struct postbox_event {
    const char *aggregate_type; /**< e.g. "order" (required) */
    const char *aggregate_id;   /**< e.g. "42": events of one aggregate keep their order (required) */
    const char *event_type;     /**< versioned, e.g. "order.paid.v1" (required) */
    const char *payload;        /**< JSON text (required) */
    const char *headers;        /**< JSON object text (trace/correlation ids), or NULL */
    const char *destination;    /**< routing override (routing key / subject), or NULL */
} postbox_event_t;

/**
 * @brief Enqueues one event in the caller's open transaction.
 *
 * @param conn      connection with a transaction in progress (BEGIN issued by the caller)
 * @param ev        the event
 * @param event_id  receives the event's id (uuid text) when not NULL
 * @param errbuf    receives a message on failure when not NULL
 * @returns 0 on success, -1 on failure (no transaction open, bad JSON, connection lost, ...).
 *          After a failure the transaction is aborted: the caller rolls back.
 */
int postbox_enqueue(PGconn *conn, const postbox_event_t *ev, char event_id[POSTBOX_EVENT_ID_SIZE],
                    char *errbuf, size_t errlen);

/**
 * @brief Enqueues n events with one statement, in order, in the caller's open transaction.
 *
 * @param event_ids receives n ids in the order of evs when not NULL
 * @returns 0 on success, -1 on failure (as postbox_enqueue).
 */
int postbox_enqueue_batch(PGconn *conn, const postbox_event_t *evs, size_t n,
                          char (*event_ids)[POSTBOX_EVENT_ID_SIZE], char *errbuf, size_t errlen);

/**
 * When an event may be published, and until when: unix times in microseconds, 0 for "no limit".
 * They are compared with the clocks of the database (the poll relay's claim) and of the relay
 * host (expiry, and the cdc relay's delay): keep the clocks in sync (NTP). Requires schema
 * version 15 (`postbox init`).
 */
typedef struct postbox_timing {
    /** Not published before this time (0: as soon as committed). The later events of the same
     *  aggregate wait behind it; other aggregates do not. */
    int64_t available_at_us;
    /** Not published from this time on (0: never): the relay moves the event to
     *  postbox.dead_letters with reason "expired" instead, and the later events of its aggregate
     *  go on. RabbitMQ also gets the lifetime left as the message's expiration. Must be later
     *  than available_at_us when both are set. */
    int64_t expires_at_us;
} postbox_timing_t;

/**
 * @brief postbox_enqueue() with a time to wait for and an expiry.
 *
 * @param timing  NULL: as postbox_enqueue()
 * @returns 0 on success, -1 on failure (as postbox_enqueue(); also when expires_at_us is not later
 *          than available_at_us).
 */
int postbox_enqueue_timed(PGconn *conn, const postbox_event_t *ev, const postbox_timing_t *timing,
                          char event_id[POSTBOX_EVENT_ID_SIZE], char *errbuf, size_t errlen);

/**
 * @brief postbox_enqueue_batch() with a time to wait for and an expiry per event.
 *
 * @param timings  n entries, timings[i] for evs[i]; NULL: as postbox_enqueue_batch()
 */
int postbox_enqueue_batch_timed(PGconn *conn, const postbox_event_t *evs,
                                const postbox_timing_t *timings, size_t n,
                                char (*event_ids)[POSTBOX_EVENT_ID_SIZE], char *errbuf,
                                size_t errlen);

/** Outcomes of postbox_inbox_process(). */
#define POSTBOX_INBOX_PROCESSED 0  /**< new message: the handler ran and its work is in the transaction */
#define POSTBOX_INBOX_DUPLICATE 1  /**< seen before by this consumer: the handler did not run */
#define POSTBOX_INBOX_FAILED (-1)  /**< the handler or the inbox write failed: see errbuf */

/**
 * @brief A handler: does the message's work on conn, inside the caller's transaction.
 * @returns 0 on success; non-zero on failure, with a message in errbuf.
 */
typedef int (*postbox_inbox_handler_fn)(PGconn *conn, void *arg, char *errbuf, size_t errlen);

/**
 * @brief Processes one received message exactly once in effect.
 *
 * Inside the caller's open transaction: a savepoint, the inbox row (consumer, message_id), and,
 * only if the row is new, the handler. When the handler fails, everything since the savepoint
 * is rolled back and the transaction stays usable for other messages. The caller commits and
 * only then acknowledges the message to its broker; a duplicate is acknowledged too.
 *
 * @param consumer     the consuming handler's name: dedup is per (consumer, message_id)
 * @param message_id   the broker's message id (e.g. the event id postbox relayed)
 * @param message_type recorded in the inbox, or NULL
 * @returns POSTBOX_INBOX_PROCESSED, POSTBOX_INBOX_DUPLICATE or POSTBOX_INBOX_FAILED.
 */
int postbox_inbox_process(PGconn *conn, const char *consumer, const char *message_id,
                          const char *message_type, postbox_inbox_handler_fn handler, void *arg,
                          char *errbuf, size_t errlen);

/** @brief The library version, e.g. "0.1.0". */
const char *postbox_version(void);

#ifdef __cplusplus
}
#endif

#endif
