/* The relay driver: the one loop for every capture and sink.
 *
 * get a batch from the capture -> check each event once -> publish the batch (the capture's
 * overlap work runs while the broker acknowledges it) -> decide per event: published, retry
 * with backoff, or dead letter after relay.max_attempts -> settle it through the capture.
 * Around it: reconnecting to PostgreSQL (the capture) and the broker (the sink) with backoff,
 * stop (the batch in flight is finished first) and drain, per-event metrics and logs.
 *
 * Order per aggregate: an event the sink can never take is rejected before anything is sent,
 * and the later events of its aggregate in the batch are held back; an event behind an
 * unsettled failure of the batch before is held back too (holdback.h).
 *
 * Expiry and delay (sql/016_expiry_delay.sql): an event past its expires_at when it would be sent
 * (first or in an in-place retry) is dead-lettered with reason "expired", never sent, and holds
 * nothing back; an event not due yet (its available_at to come, judged by the relay's clock when
 * the capture asks for it, or behind an event the capture set aside) is deferred, with every
 * later event of its aggregate in the batch, for the capture to keep until due. */
#ifndef PB_RELAY_DRIVER_H
#define PB_RELAY_DRIVER_H

#include <signal.h>

#include "common/err.h"
#include "config/config.h"
#include "relay/capture.h"
#include "relay/relay.h"
#include "sink/sink.h"

/* Runs cap -> snk (both borrowed, unconnected or connected) until *stop is set or, with
 * opts->drain, the capture is drained. PB_OK on a clean stop, PB_FATAL (err) on an error no retry
 * can fix. */
pb_status_t pb_driver_run(const pb_config_t *cfg, const pb_relay_opts_t *opts,
                          volatile sig_atomic_t *stop, pb_capture_t *cap, pb_sink_t *snk,
                          pb_error_t *err) PB_MUSTCHECK;

#endif
