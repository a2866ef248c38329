#include "source/kafka_offsets.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "source/tags.h"

/* One assigned partition: its messages handed out and not acknowledged, in the order handed
 * out (tags rise with it), each with its offset (value) and the caller's data (item). */
typedef struct part {
    char *topic;
    int32_t partition;
    pb_tags_t live;
    int64_t last_offset; /* of the last message handed out (-1: none) */
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
    for (pb_tag_entry_t *e = pb_tags_first(&p->live); e; e = pb_tags_next(&p->live, e))
        if (t->release)
            t->release(e->item, t->arg);
    pb_tags_clear(&p->live);
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
    p->last_offset = -1;
    p->commit_next = -1;
    p->dirty = false;
    p->at_end = false;
}

size_t pb_kafka_offsets_revoke(pb_kafka_offsets_t *t, const char *topic, int32_t partition)
{
    part_t *p = find_part(t, topic, partition);
    if (!p)
        return 0;
    size_t open = p->live.live;
    release_live(t, p);
    free(p->topic);
    pb_tags_free(&p->live);
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
    uint64_t tag = ++t->next_tag;
    pb_tags_add_tagged(&p->live, tag, data, (uint64_t)offset, 0);
    p->last_offset = offset;
    return tag;
}

/* The live record of tag, or NULL. */
static pb_tag_entry_t *find_entry(const pb_kafka_offsets_t *t, uint64_t tag, part_t **pp)
{
    for (size_t i = 0; i < t->nparts; i++) {
        part_t *p = &t->parts[i];
        if (tag < pb_tags_low(&p->live) || tag > pb_tags_high(&p->live))
            continue;
        pb_tag_entry_t *e = pb_tags_find(&p->live, tag);
        if (e) {
            *pp = p;
            return e;
        }
    }
    return NULL;
}

void *pb_kafka_offsets_lookup(const pb_kafka_offsets_t *t, uint64_t tag)
{
    part_t *p;
    pb_tag_entry_t *e = find_entry(t, tag, &p);
    return e ? e->item : NULL;
}

/* Acknowledges e: releases its data, and moves the committable offset when e was the oldest
 * message not acknowledged (to the offset after the prefix now acknowledged: the next live
 * one's, or after the last handed out). */
static void settle(pb_kafka_offsets_t *t, part_t *p, pb_tag_entry_t *e)
{
    bool oldest = e == pb_tags_first(&p->live);
    if (t->release)
        t->release(e->item, t->arg);
    pb_tags_settle(&p->live, e);
    if (!oldest)
        return;
    pb_tag_entry_t *next = pb_tags_first(&p->live);
    p->commit_next = next ? (int64_t)next->value : p->last_offset + 1;
    p->dirty = true;
}

bool pb_kafka_offsets_ack(pb_kafka_offsets_t *t, uint64_t tag)
{
    part_t *p;
    pb_tag_entry_t *e = find_entry(t, tag, &p);
    if (!e)
        return false;
    settle(t, p, e);
    return true;
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
