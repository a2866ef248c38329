/* libFuzzer target: AMQP message headers (src/source/amqp_headers.c). The input is a field
 * table as it arrives on the wire; rabbitmq-c's own decoder (amqp_decode_table, what the source
 * gets from the broker) turns it into an amqp_table_t, then every function of amqp_headers.c
 * runs on it. The headers JSON must always be one valid JSON object (it goes into jsonb). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <amqp.h>
#include <jansson.h>

#include "source/amqp_headers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a field table is a 32-bit length and its entries: the wire format without the length */
    uint8_t *wire = malloc(size + 4);
    wire[0] = (uint8_t)(size >> 24);
    wire[1] = (uint8_t)(size >> 16);
    wire[2] = (uint8_t)(size >> 8);
    wire[3] = (uint8_t)size;
    memcpy(wire + 4, data, size);
    amqp_pool_t pool;
    init_amqp_pool(&pool, 4096);
    amqp_table_t t;
    size_t offset = 0;
    amqp_bytes_t encoded = {.len = size + 4, .bytes = wire};
    if (amqp_decode_table(encoded, &pool, &t, &offset) == AMQP_STATUS_OK) {
        pb_buf_t out = {0};
        const char *text = pb_amqp_headers_json(&t, &out);
        json_error_t jerr;
        json_t *back = json_loads(text, 0, &jerr);
        if (!back || !json_is_object(back))
            abort(); /* the headers text must be a JSON object */
        json_decref(back);
        json_decref(pb_amqp_table_to_json(&t));
        for (int i = 0; i < t.num_entries; i++) {
            char buf[32];
            const char *v;
            size_t len;
            (void)pb_amqp_field_text(&t.entries[i].value, i % 2 == 0, buf, sizeof buf, &v, &len);
            if (t.entries[i].key.len < 64) {
                char key[64];
                memcpy(key, t.entries[i].key.bytes, t.entries[i].key.len);
                key[t.entries[i].key.len] = '\0';
                (void)pb_amqp_table_find(&t, key);
            }
        }
        (void)pb_amqp_table_find(&t, "message_id");
        pb_buf_free(&out);
    }
    empty_amqp_pool(&pool);
    free(wire);
    return 0;
}
