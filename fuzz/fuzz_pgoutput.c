/* libFuzzer target: the pgoutput decoder (src/cdc/pgoutput.c) and the event builders of
 * src/cdc/events.c. The input is a sequence of messages, each a 16-bit big-endian length and
 * that many bytes (the last one takes what is left), decoded in order with one decoder, so a
 * Relation message describes the Inserts after it, as on the stream. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdc/events.h"
#include "cdc/pgoutput.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Decodes one message from its own exact-size copy (so ASan sees a read past its end). */
static void one(pb_pgo_decoder_t *dec, const uint8_t *p, size_t len)
{
    char *buf = malloc(len ? len : 1);
    memcpy(buf, p, len);
    pb_pgo_msg_t m;
    pb_error_t err;
    if (pb_pgo_decode(dec, buf, len, &m, &err) != PB_OK) {
        free(buf);
        return;
    }
    pb_cdc_event_t e;
    if (m.kind == PB_PGO_RELATION) {
        const pb_pgo_relation_t *rel = pb_pgo_relation_lookup(dec, m.u.relation.relid);
        if (!rel || rel->ncols > PB_PGO_MAX_COLUMNS)
            abort(); /* a decoded Relation is in the cache */
        pb_cdc_outbox_map_t map;
        (void)pb_cdc_outbox_map(rel, &map, &err);
    } else if (m.kind == PB_PGO_INSERT) {
        const pb_pgo_relation_t *rel = pb_pgo_relation_lookup(dec, m.u.insert.relid);
        pb_cdc_outbox_map_t map;
        if (!rel)
            abort(); /* an Insert of an unknown relation is an error, never decoded */
        if (m.u.insert.ncols > PB_PGO_MAX_COLUMNS)
            abort();
        if (pb_cdc_outbox_map(rel, &map, &err) == PB_OK &&
            pb_cdc_event_from_insert(&map, &m, &e, &err) == PB_OK)
            pb_cdc_event_free(&e);
    } else if (m.kind == PB_PGO_MESSAGE) {
        if (pb_cdc_event_from_message(m.u.message.content, m.u.message.len, &e, &err) == PB_OK)
            pb_cdc_event_free(&e);
    }
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    while (size >= 2) {
        size_t len = (size_t)data[0] << 8 | data[1];
        data += 2;
        size -= 2;
        if (len > size)
            len = size;
        one(&dec, data, len);
        data += len;
        size -= len;
    }
    pb_pgo_decoder_free(&dec);
    return 0;
}
