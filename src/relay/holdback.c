#include "relay/holdback.h"

#include <stdint.h>
#include <string.h>

void pb_holdback_free(pb_holdback_t *h)
{
    for (int g = 0; g < PB_HOLDBACK_BATCHES; g++) {
        pb_buf_free(&h->keys[g]);
        h->n[g] = 0;
    }
}

void pb_holdback_clear(pb_holdback_t *h)
{
    for (int g = 0; g < PB_HOLDBACK_BATCHES; g++) {
        pb_buf_reset(&h->keys[g]);
        h->n[g] = 0;
    }
}

void pb_holdback_record(pb_holdback_t *h, const pb_event_t *events, const pb_result_t *results,
                        size_t n)
{
    int g = (h->newest + 1) % PB_HOLDBACK_BATCHES;
    h->newest = g;
    pb_buf_reset(&h->keys[g]);
    h->n[g] = 0;
    for (size_t i = 0; i < n; i++) {
        /* an expired event is never published: the later events of its aggregate need not
         * wait for it */
        if (results[i].outcome == PB_OUT_PUBLISHED || results[i].outcome == PB_OUT_EXPIRED)
            continue;
        const pb_event_t *ev = &events[i];
        int64_t id = ev->id;
        pb_buf_append(&h->keys[g], (const char *)&id, sizeof id);
        pb_buf_append(&h->keys[g], ev->aggregate_type, strlen(ev->aggregate_type) + 1);
        pb_buf_append(&h->keys[g], ev->aggregate_id, strlen(ev->aggregate_id) + 1);
        h->n[g]++;
    }
}

bool pb_holdback_blocks(const pb_holdback_t *h, const pb_event_t *ev)
{
    for (int g = 0; g < PB_HOLDBACK_BATCHES; g++) {
        const char *p = h->keys[g].data;
        for (size_t i = 0; i < h->n[g]; i++) {
            int64_t id;
            memcpy(&id, p, sizeof id);
            const char *type = p + sizeof id, *agg = type + strlen(type) + 1;
            if (id < ev->id && strcmp(type, ev->aggregate_type) == 0 &&
                strcmp(agg, ev->aggregate_id) == 0)
                return true;
            p = agg + strlen(agg) + 1;
        }
    }
    return false;
}
