/* libFuzzer target: an event's JSON headers as pb_sink_prepare keeps them (src/sink/sink.c) and
 * the CloudEvents attributes made from them (src/sink/cloudevents.c). The input is the headers
 * text, then after a NUL byte aggregate_type, aggregate_id and event_type separated by newlines.
 * Checked: headers read in place (flat) are exactly what jansson parses from the same text, in
 * the same order; every attribute value is readable one past its end; a NATS value holds only
 * what its binding allows (printable ASCII without space and '"', '%' only as %XY); the subject
 * is aggregate_type/aggregate_id. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "config/config.h"
#include "sink/cloudevents.h"
#include "sink/sink.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const pb_sink_ops_t ops = {.name = "fuzz"};

static bool hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
}

static void check_nats_value(const pb_ce_attr_t *a)
{
    for (size_t i = 0; i < a->len; i++) {
        unsigned char c = (unsigned char)a->value[i];
        if (c <= 0x20 || c >= 0x7f || c == '"')
            abort();
        if (c == '%' && (i + 2 >= a->len || !hex(a->value[i + 1]) || !hex(a->value[i + 2])))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pb_config_t cfg;
    static pb_ce_t *nats, *kafka;
    if (!nats) {
        pb_error_t err;
        pb_config_init(&cfg);
        if (pb_ce_new(&cfg, PB_CE_NATS, NULL, &nats, &err) != PB_OK ||
            pb_ce_new(&cfg, PB_CE_KAFKA, NULL, &kafka, &err) != PB_OK)
            abort();
    }
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    const char *f[3] = {"order", "42", "order.paid.v1"};
    char *rest = text + strlen(text);
    if (rest < text + size) {
        rest++;
        for (int i = 0; i < 3 && rest; i++) {
            f[i] = rest;
            char *nl = strchr(rest, '\n');
            if (nl)
                *nl++ = '\0';
            rest = nl;
        }
    }
    pb_event_t ev = {.event_id = "0b6b1d54-3c8f-4d8e-9a57-6a3f1a0e2b11", .aggregate_type = f[0],
                     .aggregate_id = f[1], .event_type = f[2], .headers = text, .payload = "{}",
                     .payload_len = 2, .created_at_us = 1767323045678901, .sequence = 3};
    pb_sink_t snk = {.ops = &ops, .ce = nats};
    pb_result_t res = {0};
    if (pb_sink_prepare(&snk, &ev, &res)) {
        if (ev.flat_headers) { /* the same as the parser's */
            json_t *root = json_loads(text, JSON_DECODE_ANY, NULL);
            if (!json_is_object(root) || json_object_size(root) != ev.flat_headers ||
                pb_header_count(&ev) != ev.flat_headers)
                abort();
            void *jit = json_object_iter(root);
            pb_header_iter_t it;
            pb_header_t h;
            size_t n = 0;
            for (pb_header_iter_init(&it, &ev); pb_header_next(&it, &h); n++) {
                const char *key = json_object_iter_key(jit);
                json_t *v = json_object_iter_value(jit);
                if (strlen(key) != h.klen || memcmp(key, h.key, h.klen) != 0 || !h.val ||
                    !json_is_string(v) || json_string_length(v) != h.vlen ||
                    memcmp(json_string_value(v), h.val, h.vlen) != 0)
                    abort();
                jit = json_object_iter_next(root, jit);
            }
            if (n != ev.flat_headers || jit)
                abort();
            json_decref(root);
        }
        pb_ce_attr_t a[PB_CE_NATTRS];
        size_t na = pb_ce_attrs(nats, &ev, a);
        for (size_t i = 0; i < na; i++) {
            (void)a[i].value[a[i].len];
            check_nats_value(&a[i]);
        }
        na = pb_ce_attrs(kafka, &ev, a);
        for (size_t i = 0; i < na; i++) {
            (void)a[i].value[a[i].len];
            if (strcmp(a[i].name, "ce_subject") == 0) {
                size_t tl = strlen(f[0]);
                if (a[i].len != tl + 1 + strlen(f[1]) || memcmp(a[i].value, f[0], tl) != 0 ||
                    a[i].value[tl] != '/' || memcmp(a[i].value + tl + 1, f[1], strlen(f[1])) != 0)
                    abort();
            }
        }
    }
    pb_sink_release(&ev);
    free(text);
    return 0;
}
