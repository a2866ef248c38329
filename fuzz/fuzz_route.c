/* libFuzzer target: routing templates (src/common/route.c) and the NATS subject rules the
 * rendered destination meets in the nats sink (src/broker/nats/conn.c: a subject is valid, a
 * stream's subject pattern matches it). The input is the template, then
 * after a NUL byte the event's fields (aggregate_type, aggregate_id, event_type, event_id,
 * destination) separated by newlines; the first byte chooses the output buffer's size. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/nats/conn.h"
#include "common/route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t outsz = 1 + data[0] % 300;
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    const char *tmpl = text;
    char *fields = text + strlen(text);
    const char *f[5] = {"", "", "", "", NULL};
    if (fields < text + size - 1) {
        fields++;
        for (int i = 0; i < 5 && fields; i++) {
            f[i] = fields;
            char *nl = strchr(fields, '\n');
            if (nl)
                *nl++ = '\0';
            fields = nl;
        }
    }
    pb_event_t ev = {.aggregate_type = f[0], .aggregate_id = f[1], .event_type = f[2],
                     .event_id = f[3], .destination = f[4] && *f[4] ? f[4] : NULL};
    pb_error_t err;
    (void)pb_route_check_template(tmpl, &err);
    char *out = malloc(outsz); /* exact size, so ASan sees a write past it */
    bool fits = pb_route_render(tmpl, &ev, out, outsz);
    if (!memchr(out, '\0', outsz))
        abort(); /* always terminated */
    if (ev.destination && fits && strcmp(out, ev.destination) != 0)
        abort(); /* a row's destination replaces the template */
    if (pb_nats_subject_valid(out)) {
        if (!pb_nats_subject_matches(out, out) || !pb_nats_subject_matches(">", out))
            abort(); /* a valid subject matches itself and ">" */
    }
    (void)pb_nats_subject_matches(tmpl, out);
    free(out);
    free(text);
    return 0;
}
