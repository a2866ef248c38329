#include "common/route.h"

#include <stdio.h>
#include <string.h>

typedef struct placeholder {
    const char *name;
    size_t len;
} placeholder_t;

static const placeholder_t placeholders[] = {
    {"aggregate_type", 14}, {"aggregate_id", 12}, {"event_type", 10}, {"event_id", 8},
};

static const char *field(const pb_event_t *ev, size_t idx)
{
    switch (idx) {
    case 0: return ev->aggregate_type;
    case 1: return ev->aggregate_id;
    case 2: return ev->event_type;
    default: return ev->event_id;
    }
}

/* Index of the placeholder that starts at p (just after '{'), or -1. */
static int match(const char *p)
{
    for (size_t i = 0; i < sizeof placeholders / sizeof placeholders[0]; i++) {
        if (strncmp(p, placeholders[i].name, placeholders[i].len) == 0 &&
            p[placeholders[i].len] == '}')
            return (int)i;
    }
    return -1;
}

pb_status_t pb_route_check_template(const char *tmpl, pb_error_t *err)
{
    if (!tmpl || !*tmpl)
        return pb_fail(err, PB_FATAL, "routing template is empty");
    for (const char *p = tmpl; *p; p++) {
        if (*p == '}')
            return pb_fail(err, PB_FATAL, "routing template \"%s\": unexpected '}' at offset %d",
                           tmpl, (int)(p - tmpl));
        if (*p != '{')
            continue;
        int i = match(p + 1);
        if (i < 0)
            return pb_fail(err, PB_FATAL,
                           "routing template \"%s\": unknown placeholder at offset %d (known: "
                           "{aggregate_type} {aggregate_id} {event_type} {event_id})",
                           tmpl, (int)(p - tmpl));
        p += placeholders[i].len + 1;
    }
    return PB_OK;
}

bool pb_route_render(const char *tmpl, const pb_event_t *ev, char *out, size_t outsz)
{
    if (ev->destination && *ev->destination)
        tmpl = NULL;
    size_t n = 0;
    bool fits = true;
#define PUT(s, len)                                                                                \
    do {                                                                                           \
        size_t l_ = (len);                                                                         \
        if (n + l_ >= outsz) {                                                                     \
            l_ = n < outsz ? outsz - 1 - n : 0;                                                    \
            fits = false;                                                                          \
        }                                                                                          \
        memcpy(out + n, (s), l_);                                                                  \
        n += l_;                                                                                   \
    } while (0)
    if (!tmpl) {
        PUT(ev->destination, strlen(ev->destination));
    } else {
        for (const char *p = tmpl; *p && fits; p++) {
            int i = *p == '{' ? match(p + 1) : -1;
            if (i < 0) {
                PUT(p, 1);
                continue;
            }
            const char *v = field(ev, (size_t)i);
            PUT(v, strlen(v));
            p += placeholders[i].len + 1;
        }
    }
#undef PUT
    if (outsz)
        out[n < outsz ? n : outsz - 1] = '\0';
    return fits;
}
