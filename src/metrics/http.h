/* The HTTP endpoint of the relay and the consumer (libmicrohttpd, its own thread):
 *   /metrics  the registry in the Prometheus text exposition format 0.0.4
 *   /healthz  200 "ok" while the process runs (liveness)
 *   /readyz   200 "ready" when connected to PostgreSQL and the broker and owning its work
 *             (pb_metrics_ready), else 503 with what is missing (readiness)
 * Anything else is 404; methods other than GET and HEAD are 405. Slow or idle clients cannot
 * keep the probes out: metrics/http_guard.h bounds each connection's time per request and makes
 * room for newcomers. */
#ifndef PB_METRICS_HTTP_H
#define PB_METRICS_HTTP_H

#include <stdbool.h>

#include "common/err.h"

typedef struct pb_http pb_http_t;

/* Listens on listen = "host:port" ("127.0.0.1:9187", "[::1]:9187"; ":9187" without a host is
 * loopback only, "0.0.0.0:9187" or "[::]:9187" every address). With a token (NULL or "": none),
 * /metrics and /readyz answer 401 unless the request carries "Authorization: Bearer <token>";
 * /healthz stays open. PB_FATAL when the address is malformed or cannot be bound (in use, no
 * permission). *out is owned by the caller: pb_http_free. */
pb_status_t pb_http_new(const char *listen, const char *token, pb_http_t **out,
                        pb_error_t *err) PB_MUSTCHECK;

/* Stops the server thread and frees it. Accepts NULL. */
void pb_http_free(pb_http_t *srv);

/* Splits "host:port" into host (empty when none is given) and port; false when malformed.
 * Exposed for the unit tests. */
bool pb_http_parse_listen(const char *listen, char *host, unsigned long hostsz, unsigned *port);

#endif
