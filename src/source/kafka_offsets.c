#include "source/kafka_offsets.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"

typedef struct entry {
    int64_t offset;
    uint64_t tag;
    bool acked;
    void *data; /* the caller's, until acknowledged */
} entry_t;

/* entries[head..n) are live, in offset (= tag) order; before head all is acknowledged. */
typedef struct part {
    char *topic;
    int32_t partition;
    entry_t *entries;
    size_t head, n, cap;
    int64_t commit_next; /* the offset after the acknowledged prefix */
    bool dirty;          /* commit_next moved since take_commits */
    bool at_end;
} part_t;

struct pb_kafka_offsets {
    void (*release)(void *data, void *arg);
    void *arg;
    part_t *parts;
    size_t nparts, cap_parts;
    uint64_t next_tag;
};

pb_kafka_offsets_t *pb_kafka_offsets_new(void (*release)(void *data, void *arg), void *arg)
{
    pb_kafka_offsets_t *t = pb_malloc(sizeof *t);
    memset(t, 0, sizeof *t);
    t->release = release;
    t->arg = arg;
    return t;
}

static part_t *find_part(const pb_kafka_offsets_t *t, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < t->nparts; i++)
        if (t->parts[i].partition == partition && strcmp(t->parts[i].topic, topic) == 0)
            return &t->parts[i];
    return NULL;
}

/* Releases the data of p's live records and empties it. */
static void release_live(pb_kafka_offsets_t *t, part_t *p)
{
    for (size_t j = p->head; j < p->n; j++)
        if (!p->entries[j].acked && t->release)
            t->release(p->entries[j].data, t->arg);
    p->head = p->n = 0;
}

void pb_kafka_offsets_assign(pb_kafka_offsets_t *t, const char *topic, int32_t partition)
{
    part_t *p = find_part(t, topic, partition);
    if (!p) {
        if (t->nparts == t->cap_parts) {
            t->cap_parts = t->cap_parts ? 2 * t->cap_parts : 16;
            t->parts = pb_realloc(t->parts, t->cap_parts * sizeof *t->parts);
        }
        p = &t->parts[t->nparts++];
        *p = (part_t){.topic = pb_strdup(topic), .partition = partition};
    }
    release_live(t, p);
    p->commit_next = -1;
    p->dirty = false;
    p->at_end = false;
}

size_t pb_kafka_offsets_revoke(pb_kafka_offsets_t *t, const char *topic, int32_t partition)
{
    part_t *p = find_part(t, topic, partition);
    if (!p)
        return 0;
    size_t open = 0;
    for (size_t j = p->head; j < p->n; j++)
        open += !p->entries[j].acked;
    release_live(t, p);
    free(p->topic);
    free(p->entries);
    *p = t->parts[--t->nparts];
    return open;
}

void pb_kafka_offsets_clear(pb_kafka_offsets_t *t)
{
    while (t->nparts)
        (void)pb_kafka_offsets_revoke(t, t->parts[t->nparts - 1].topic,
                                      t->parts[t->nparts - 1].partition);
}

void pb_kafka_offsets_free(pb_kafka_offsets_t *t)
{
    if (!t)
        return;
    pb_kafka_offsets_clear(t);
    free(t->parts);
    free(t);
}

uint64_t pb_kafka_offsets_record(pb_kafka_offsets_t *t, const char *topic, int32_t partition,
                                 int64_t offset, void *data)
{
    part_t *p = find_part(t, topic, partition);
    if (!p)
        return 0;
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 256;
        p->entries = pb_realloc(p->entries, p->cap * sizeof *p->entries);
    }
    uint64_t tag = ++t->next_tag;
    p->entries[p->n++] = (entry_t){.offset = offset, .tag = tag, .data = data};
    return tag;
}

/* The live record of tag, or NULL. */
static entry_t *find_entry(const pb_kafka_offsets_t *t, uint64_t tag, part_t **pp)
{
    for (size_t i = 0; i < t->nparts; i++) {
        part_t *p = &t->parts[i];
        if (p->head == p->n || tag < p->entries[p->head].tag || tag > p->entries[p->n - 1].tag)
            continue;
        size_t lo = p->head, hi = p->n; /* tags grow with the offsets */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (p->entries[mid].tag < tag)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < p->n && p->entries[lo].tag == tag) {
            *pp = p;
            return &p->entries[lo];
        }
    }
    return NULL;
}

void *pb_kafka_offsets_lookup(const pb_kafka_offsets_t *t, uint64_t tag)
{
    part_t *p;
    entry_t *e = find_entry(t, tag, &p);
    return e && !e->acked ? e->data : NULL;
}

/* Marks e acknowledged and releases its data. */
static void settle(pb_kafka_offsets_t *t, entry_t *e)
{
    e->acked = true;
    if (t->release)
        t->release(e->data, t->arg);
    e->data = NULL;
}

/* Pops p's acknowledged prefix; the offset after it becomes committable. */
static void advance(part_t *p)
{
    size_t h = p->head;
    while (h < p->n && p->entries[h].acked)
        h++;
    if (h == p->head)
        return;
    p->commit_next = p->entries[h - 1].offset + 1;
    p->dirty = true;
    if (h == p->n) { /* all acknowledged */
        p->head = p->n = 0;
    } else if (h > p->n / 2) { /* keep the array short: move the live part down */
        memmove(p->entries, p->entries + h, (p->n - h) * sizeof *p->entries);
        p->n -= h;
        p->head = 0;
    } else {
        p->head = h;
    }
}

bool pb_kafka_offsets_ack(pb_kafka_offsets_t *t, uint64_t tag)
{
    part_t *p;
    entry_t *e = find_entry(t, tag, &p);
    if (!e || e->acked)
        return false;
    settle(t, e);
    advance(p);
    return true;
}

void pb_kafka_offsets_ack_upto(pb_kafka_offsets_t *t, uint64_t tag)
{
    for (size_t i = 0; i < t->nparts; i++) {
        part_t *p = &t->parts[i];
        for (size_t j = p->head; j < p->n && p->entries[j].tag <= tag; j++)
            if (!p->entries[j].acked)
                settle(t, &p->entries[j]);
        advance(p);
    }
}

size_t pb_kafka_offsets_take_commits(pb_kafka_offsets_t *t,
                                     void (*commit)(const char *topic, int32_t partition,
                                                    int64_t next_offset, void *arg),
                                     void *arg)
{
    size_t k = 0;
    for (size_t i = 0; i < t->nparts; i++) {
        part_t *p = &t->parts[i];
        if (!p->dirty)
            continue;
        commit(p->topic, p->partition, p->commit_next, arg);
        p->dirty = false;
        k++;
    }
    return k;
}

void pb_kafka_offsets_set_at_end(pb_kafka_offsets_t *t, const char *topic, int32_t partition)
{
    part_t *p = find_part(t, topic, partition);
    if (p)
        p->at_end = true;
}

bool pb_kafka_offsets_all_at_end(const pb_kafka_offsets_t *t)
{
    for (size_t i = 0; i < t->nparts; i++)
        if (!t->parts[i].at_end)
            return false;
    return true;
}

bool pb_kafka_offsets_find(const pb_kafka_offsets_t *t, const char *topic, int32_t partition,
                           int64_t *commit_next)
{
    const part_t *p = find_part(t, topic, partition);
    *commit_next = p ? p->commit_next : -1;
    return p != NULL;
}

size_t pb_kafka_offsets_count(const pb_kafka_offsets_t *t)
{
    return t->nparts;
}

const char *pb_kafka_offsets_partition(const pb_kafka_offsets_t *t, size_t i, int32_t *partition)
{
    *partition = t->parts[i].partition;
    return t->parts[i].topic;
}
