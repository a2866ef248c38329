/* The metrics registry: counters, gauges and histograms of the relay and the consumer, rendered
 * in the Prometheus text exposition format (0.0.4) by the HTTP endpoint (metrics/http.h).
 *
 * One registry per process (a module-level singleton: the relay and the consumer are separate
 * processes). Every function is thread-safe (@locks one registry mutex, held only for a lookup
 * and an addition, never across I/O): the relay's loop, its worker thread, the sampler thread and
 * the HTTP server thread all use it. Label values are copied; callers keep ownership of theirs.
 * Every name is prefixed postbox_. Before pb_metrics_init the recording functions still work
 * (they are cheap, and the figures are simply never exposed). */
#ifndef PB_METRICS_METRICS_H
#define PB_METRICS_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/str.h"

/* Distinct label sets kept per labelled metric; further ones are added to a series whose label
 * values are "other", so a producer inventing event types cannot exhaust memory. */
#define PB_METRICS_MAX_SERIES 2000

/* Sets the process information (postbox_info{component,version}) and the start time.
 * component: "relay" or "consume". */
void pb_metrics_init(const char *component);

/* Drops every series and resets every value (tests). */
void pb_metrics_reset(void);

/* --- relay: one call per event outcome, from the loop thread ----------------------------- */

/* The broker confirmed the event; latency_s = confirm time - created_at. Also sets the last
 * successful publish timestamp. */
void pb_metrics_published(const char *sink, const char *event_type, double latency_s);
/* A publish attempt failed (a retry follows, or, with dead, the event went to dead_letters). */
void pb_metrics_publish_failed(const char *sink, const char *event_type, bool dead);
/* The event expired before it could be published and went to dead_letters (reason "expired"):
 * counted in postbox_expired_total and postbox_dead_letters_total, not as a failed publish. */
void pb_metrics_expired(const char *sink, const char *event_type);
/* Events (relay) or messages (consume) handled in one batch. */
void pb_metrics_batch(size_t n);

/* Spans of the OTLP export (relay.otlp_endpoint), as deltas: exported (the collector took
 * them), failed (their request failed) and dropped (no room while waiting, or left at stop).
 * The first call makes the three counters show. */
void pb_metrics_otlp_spans(size_t exported, size_t failed, size_t dropped);

/* --- connection state (/readyz) ---------------------------------------------------------- */

/* database: connected to PostgreSQL; broker: connected to the broker; owner: owns its work
 * (relay: holds the relay lock; consume: consuming). /readyz answers 200 only when all three. */
void pb_metrics_set_state(bool database, bool broker, bool owner);
bool pb_metrics_ready(void);

/* --- sampled by the relay's sampler (metrics/sampler.h) ---------------------------------- */

/* backlog: pending rows (exact: counted; else an upper bound, see sampler.c);
 * oldest_age_s: age of the oldest pending event, 0 when none; dead_letters: rows in
 * postbox.dead_letters; took_s: how long the sample queries took. */
void pb_metrics_set_outbox(int64_t backlog, bool exact, double oldest_age_s, int64_t dead_letters,
                           double took_s);

/* delayed: pending outbox events that are not due yet (their available_at, or that of an
 * earlier event of their aggregate, is still to come); cdc_deferred: events the cdc relay set
 * aside in postbox.cdc_deferred. Sampled with the outbox figures. */
void pb_metrics_set_delayed(int64_t delayed, int64_t cdc_deferred);

/* Bytes of WAL between the server's current position and the slot's confirmed flush position.
 * Set by the cdc capture. */
void pb_metrics_set_slot_lag(const char *slot, int64_t bytes);
/* How long the slot has held WAL with outbox changes the relay has not confirmed
 * (relay/slot_age.h). Set by the cdc capture. */
void pb_metrics_set_slot_lag_age(const char *slot, int64_t age_ms);
/* Whether the lag is over cdc.max_slot_lag or its age over cdc.max_slot_lag_age (set only when a
 * limit is configured). */
void pb_metrics_set_slot_lag_over(const char *slot, bool over);
/* Whether the cdc relay is in its poll fallback (relay/capture_fallback.c). */
void pb_metrics_set_cdc_fallback(const char *slot, bool active);
/* A logical message of the cdc relay's prefix dropped because postbox.emit did not sign it. */
void pb_metrics_cdc_rejected(const char *slot);

/* Redis Streams, sampled every metrics.sample_interval by the redis sink (length of the streams
 * it writes) and the redis source (its streams and its group). */
void pb_metrics_set_redis_stream(const char *stream, int64_t length);
void pb_metrics_set_redis_group(const char *stream, const char *group, int64_t pending,
                                int64_t lag, double oldest_idle_s);

/* A RabbitMQ queue, sampled every metrics.sample_interval by the amqp source: messages ready
 * for delivery and consumers (a passive queue.declare; unacknowledged messages are not counted,
 * AMQP 0-9-1 does not tell them). */
void pb_metrics_set_amqp_queue(const char *queue, int64_t messages, int64_t consumers);

/* --- consume ----------------------------------------------------------------------------- */

/* Adds one batch's figures of a consumer (deltas, not totals). */
void pb_metrics_inbox(const char *consumer, uint64_t processed, uint64_t duplicates,
                      uint64_t failures, uint64_t dead);

/* Messages handled out of their aggregate's order; reason: "late" or "gap_skipped". */
void pb_metrics_out_of_order(const char *consumer, const char *reason, uint64_t n);

/* --- purge --------------------------------------------------------------------------------- */

/* Rows deleted by retention; table: "outbox" or "inbox". */
void pb_metrics_purged(const char *table, uint64_t rows);

/* --- broker clients ------------------------------------------------------------------------ */

/* One error the broker client reported: broker "kafka", kind e.g. "msg_timed_out". */
void pb_metrics_broker_error(const char *broker, const char *kind);
/* Messages the broker client sent again by itself (Kafka: the idempotent producer's retries). */
void pb_metrics_broker_retries(const char *broker, uint64_t n);
/* Messages between a consumer's position and the end of a partition (Kafka's consumer lag). */
void pb_metrics_set_consumer_lag(const char *topic, int32_t partition, int64_t lag);

/* --- exposition ---------------------------------------------------------------------------- */

/* Appends every metric in the text exposition format 0.0.4 to out. */
void pb_metrics_render(pb_buf_t *out);

/* Content-Type of the exposition. */
#define PB_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
