#include "inbox/disorder.h"

#include <stdio.h>

#include "common/log.h"

#define FAC "inbox"

const char *pb_disorder_reason(pb_seq_disorder_t why)
{
    return why == PB_DISORDER_GAP_SKIPPED ? "gap_skipped" : "late";
}

static uint64_t mix(uint64_t h, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        h = (h ^ *p) * 1099511628211ull;
    return (h ^ 0x1f) * 1099511628211ull;
}

void pb_disorder_log(pb_disorder_t *d, const char *consumer, const pb_message_t *m,
                     pb_seq_disorder_t why, int64_t base, int64_t now_ms)
{
    uint64_t key = mix(mix(14695981039346656037ull + (uint64_t)why, m->aggregate_type),
                       m->aggregate_id);
    key |= 1; /* never 0, the empty slot */
    size_t s = (size_t)(key >> 32) % PB_DISORDER_SLOTS;
    if (d->slot[s].key == key && now_ms - d->slot[s].at_ms < PB_DISORDER_LOG_EVERY_MS) {
        d->slot[s].quiet++;
        return;
    }
    uint64_t quiet = d->slot[s].key == key ? d->slot[s].quiet : 0;
    d->slot[s].key = key;
    d->slot[s].at_ms = now_ms;
    d->slot[s].quiet = 0;
    const char *reason = pb_disorder_reason(why);
    char text[256];
    if (why == PB_DISORDER_LATE)
        snprintf(text, sizeof text, "its number is at or below %lld, handled already (delivered "
                                    "late, a producer whose numbering restarted, or a number "
                                    "forged before it)", (long long)base);
    else
        snprintf(text, sizeof text, "handled without the missing numbers before it "
                                    "(consume.gap_timeout; highest handled before: %lld)",
                 (long long)base);
    log_warn_f(FAC,
               PB_FIELDS(PB_LF_STR("consumer", consumer),
                         PB_LF_STR("message_id", m->message_id),
                         PB_LF_STR("aggregate_type", m->aggregate_type),
                         PB_LF_STR("aggregate_id", m->aggregate_id),
                         PB_LF_STR("reason", reason)),
               "message %s of aggregate %s/%s handled out of order (%s, sequence %lld): %s; "
               "%llu more of this aggregate since the last such line",
               m->message_id ? m->message_id : "(no id)",
               m->aggregate_type ? m->aggregate_type : "", m->aggregate_id,
               reason, (long long)m->sequence, text, (unsigned long long)quiet);
}
