/* The OTLP/HTTP exporter of the relay's spans: JSON POSTed to <relay.otlp_endpoint>/v1/traces.
 *
 * Best effort, and never in the relay's way: the relay's loop drives it without blocking
 * (pb_otlp_poll runs libcurl's multi interface for whatever is ready now and returns); one
 * request is in flight at a time, bounded by relay.otlp_timeout, and never retried (its spans
 * are counted as failed); spans waiting meanwhile are held as JSON up to relay.otlp_max_pending
 * bytes, and what does not fit is dropped and counted. A collector that is down costs one
 * warning, not one per batch. @thread the relay's loop only (libcurl may resolve a host name on
 * a thread of its own; an address as host needs none). */
#ifndef PB_OTLP_EXPORTER_H
#define PB_OTLP_EXPORTER_H

#include "common/err.h"
#include "config/config.h"
#include "otlp/span.h"

typedef struct pb_otlp pb_otlp_t;

/* Checks relay.otlp_endpoint: empty (off), or an http:// or https:// URL with a host and no
 * query or fragment (the base of /v1/traces). PB_FATAL with a message naming the problem. */
pb_status_t pb_otlp_check_endpoint(const char *endpoint, pb_error_t *err) PB_MUSTCHECK;

/* The exporter of cfg (borrowed, outlives it), or *out = NULL when relay.otlp_endpoint is empty.
 * PB_FATAL when libcurl cannot be set up. */
pb_status_t pb_otlp_new(const pb_config_t *cfg, pb_otlp_t **out, pb_error_t *err) PB_MUSTCHECK;

/* Queues one span (its texts are read now, not kept); dropped and counted when the spans
 * waiting would then exceed relay.otlp_max_pending. Accepts a NULL exporter (off). */
void pb_otlp_add(pb_otlp_t *otlp, const pb_otlp_span_t *span);

/* Moves the export on by what can be done without waiting: a finished request is accounted
 * for, and the spans waiting go out in the next one. Accepts NULL. */
void pb_otlp_poll(pb_otlp_t *otlp);

/* At stop: waits at most relay.otlp_timeout for the spans queued to go out; what is still
 * waiting then is dropped and counted. Accepts NULL. */
void pb_otlp_flush(pb_otlp_t *otlp);

/* Frees the exporter (a request in flight is abandoned). Accepts NULL. */
void pb_otlp_free(pb_otlp_t *otlp);

#endif
