/* Destination (routing key / subject / topic) of an event: the row's destination when set,
 * otherwise a template with {aggregate_type}, {aggregate_id}, {event_type} and {event_id}. */
#ifndef PB_COMMON_ROUTE_H
#define PB_COMMON_ROUTE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/event.h"

/* Checks a template: braces balanced and only known placeholders. */
pb_status_t pb_route_check_template(const char *tmpl, pb_error_t *err) PB_MUSTCHECK;

/* Renders into out; returns false when the result does not fit (out is then truncated). */
bool pb_route_render(const char *tmpl, const pb_event_t *ev, char *out, size_t outsz);

#endif
