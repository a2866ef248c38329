#include "source/tags.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"

static void compact(pb_tags_t *t)
{
    while (t->head < t->len && !t->ent[t->head].item)
        t->head++;
    if (t->head == t->len) {
        t->head = t->len = 0;
    } else if (t->head > t->cap / 2) {
        memmove(t->ent, t->ent + t->head, (t->len - t->head) * sizeof *t->ent);
        t->len -= t->head;
        t->head = 0;
    }
}

void pb_tags_add_tagged(pb_tags_t *t, uint64_t tag, void *item, uint64_t value, int64_t now_ms)
{
    if (t->len == t->cap) {
        compact(t);
        if (t->len == t->cap) {
            t->cap = t->cap ? t->cap * 2 : 1024;
            t->ent = pb_realloc(t->ent, t->cap * sizeof *t->ent);
        }
    }
    t->ent[t->len++] = (pb_tag_entry_t){tag, item, now_ms, value};
    t->live++;
    if (tag > t->next_tag)
        t->next_tag = tag;
}

uint64_t pb_tags_add(pb_tags_t *t, void *item, uint64_t value, int64_t now_ms)
{
    uint64_t tag = t->next_tag + 1;
    pb_tags_add_tagged(t, tag, item, value, now_ms);
    return tag;
}

uint64_t pb_tags_low(const pb_tags_t *t)
{
    return t->head < t->len ? t->ent[t->head].tag : 0;
}

uint64_t pb_tags_high(const pb_tags_t *t)
{
    return t->head < t->len ? t->ent[t->len - 1].tag : 0;
}

pb_tag_entry_t *pb_tags_find(pb_tags_t *t, uint64_t tag)
{
    size_t lo = t->head, hi = t->len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->ent[mid].tag < tag)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < t->len && t->ent[lo].tag == tag && t->ent[lo].item)
        return &t->ent[lo];
    return NULL;
}

void pb_tags_settle(pb_tags_t *t, pb_tag_entry_t *e)
{
    if (!e->item)
        return;
    e->item = NULL;
    t->live--;
    /* only the front moves on: entries keep their place (a caller may be walking them), the
     * next pb_tags_add reclaims the room */
    while (t->head < t->len && !t->ent[t->head].item)
        t->head++;
    if (t->head == t->len)
        t->head = t->len = 0;
}

pb_tag_entry_t *pb_tags_first(const pb_tags_t *t)
{
    for (size_t i = t->head; i < t->len; i++)
        if (t->ent[i].item)
            return &t->ent[i];
    return NULL;
}

pb_tag_entry_t *pb_tags_next(const pb_tags_t *t, const pb_tag_entry_t *e)
{
    for (size_t i = (size_t)(e - t->ent) + 1; i < t->len; i++)
        if (t->ent[i].item)
            return &t->ent[i];
    return NULL;
}

void pb_tags_clear(pb_tags_t *t)
{
    t->head = t->len = t->live = 0;
}

void pb_tags_free(pb_tags_t *t)
{
    free(t->ent);
    memset(t, 0, sizeof *t);
}
