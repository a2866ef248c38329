/* libFuzzer target: the JetStream PubAck parser (src/sink/nats_ack.c) on any reply bytes. A
 * reply read as stored or duplicate must read the same through jansson (the parser recognises
 * the common shapes without it). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sink/nats_ack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* jansson's reading of a stored reply agrees with ack */
static void check_with_jansson(const uint8_t *data, size_t size, const pb_puback_t *ack)
{
    json_t *root = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(root) || json_object_get(root, "error"))
        abort();
    const json_t *stream = json_object_get(root, "stream");
    const json_t *seq = json_object_get(root, "seq");
    const json_t *dup = json_object_get(root, "duplicate");
    if (!json_is_string(stream) || json_string_length(stream) == 0 || !json_is_integer(seq) ||
        json_integer_value(seq) < 0 || (uint64_t)json_integer_value(seq) != ack->seq ||
        (dup && !json_is_boolean(dup)) ||
        json_is_true(dup) != (ack->kind == PB_PUBACK_DUPLICATE))
        abort();
    json_decref(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pb_puback_t ack;
    memset(&ack, 0x5a, sizeof ack); /* nothing may be left over from before */
    pb_nats_puback_parse((const char *)data, size, &ack);
    if (ack.kind > PB_PUBACK_INVALID || !memchr(ack.text, '\0', sizeof ack.text))
        abort();
    if ((ack.kind == PB_PUBACK_STORED || ack.kind == PB_PUBACK_DUPLICATE) &&
        (ack.seq > INT64_MAX || ack.text[0]))
        abort();
    if (ack.kind == PB_PUBACK_STORED || ack.kind == PB_PUBACK_DUPLICATE)
        check_with_jansson(data, size, &ack);
    if (ack.kind == PB_PUBACK_INVALID && !ack.text[0])
        abort(); /* an invalid reply always says why */
    return 0;
}
