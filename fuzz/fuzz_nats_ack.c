/* libFuzzer target: the JetStream PubAck parser (src/sink/nats_ack.c) on any reply bytes. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sink/nats_ack.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    if (ack.kind == PB_PUBACK_INVALID && !ack.text[0])
        abort(); /* an invalid reply always says why */
    return 0;
}
