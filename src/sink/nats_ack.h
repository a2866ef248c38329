/* JetStream PubAck replies: the relay gets one per event.
 *
 * The shapes nats-server sends (2.9; later versions add keys, which are skipped):
 *   {"stream":"S","seq":N}                                    stored
 *   {"stream":"S","seq":N,"duplicate":true}                   already stored (same Nats-Msg-Id)
 *   {"error":{"code":C,"err_code":E,"description":"..."}}     refused
 * with "domain":"D" when the account has a JetStream domain. The text must be one well-formed
 * JSON object (jansson); anything else is PB_PUBACK_INVALID with the reason, never a guess.
 *
 * @thread any (no state) */
#ifndef PB_SINK_NATS_ACK_H
#define PB_SINK_NATS_ACK_H

#include <stddef.h>
#include <stdint.h>

typedef enum pb_puback_kind {
    PB_PUBACK_STORED,    /* stream and seq, no error */
    PB_PUBACK_DUPLICATE, /* stored before: "duplicate":true */
    PB_PUBACK_ERROR,     /* an "error" object: code, err_code, text = its description */
    PB_PUBACK_INVALID,   /* not a PubAck: text says why */
} pb_puback_kind_t;

typedef struct pb_puback {
    pb_puback_kind_t kind;
    uint64_t seq;   /* STORED, DUPLICATE: the message's stream sequence (up to INT64_MAX) */
    int code;       /* ERROR: status ("503"); 0 when absent */
    int err_code;   /* ERROR: JetStream error code ("10077"); 0 when absent */
    char text[160]; /* ERROR: description (cut to fit); INVALID: what is wrong; else empty */
} pb_puback_t;

/** @brief Parses the len bytes at data (need not be NUL-terminated) into *ack. */
void pb_nats_puback_parse(const char *data, size_t len, pb_puback_t *ack);

#endif
