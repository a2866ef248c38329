/* What a Kafka source may commit: the messages it handed out, per assigned partition in offset
 * order, and which of them the consumer acknowledged. Kafka keeps one position per partition,
 * so a partition is committable only up to its lowest offset not acknowledged yet: a message
 * the consumer still holds is never skipped by a commit, whatever was acknowledged after it.
 *
 * Each message gets a tag (1, 2, ... in hand-out order, never reused) and carries the caller's
 * data (its decoded copy), released through the callback once the message is acknowledged or
 * its partition is revoked. Pure bookkeeping: no librdkafka call, no I/O.
 *
 * @thread loop: the source's thread only. */
#ifndef PB_SOURCE_KAFKA_OFFSETS_H
#define PB_SOURCE_KAFKA_OFFSETS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pb_kafka_offsets pb_kafka_offsets_t;

/* release(data, arg) is called once for the data of every record that goes. */
pb_kafka_offsets_t *pb_kafka_offsets_new(void (*release)(void *data, void *arg), void *arg);
/* Releases every record. Accepts NULL. */
void pb_kafka_offsets_free(pb_kafka_offsets_t *t);

/* Starts tracking topic/partition afresh (an assignment): earlier records of it go. */
void pb_kafka_offsets_assign(pb_kafka_offsets_t *t, const char *topic, int32_t partition);
/* Stops tracking it (revoked or lost); returns how many of its messages were not acknowledged
 * (they are the next owner's now). 0 for a partition not tracked. */
size_t pb_kafka_offsets_revoke(pb_kafka_offsets_t *t, const char *topic, int32_t partition);
/* Forgets every partition. */
void pb_kafka_offsets_clear(pb_kafka_offsets_t *t);

/* Records a message handed out; returns its tag, or 0 when its partition is not tracked
 * (fetched before a revoke): then data is not taken. A partition's offsets grow, unless the
 * client rewound it (an offset reset): records keep their order of arrival, and the commit then
 * follows the rewound offsets, which only reads messages again. */
uint64_t pb_kafka_offsets_record(pb_kafka_offsets_t *t, const char *topic, int32_t partition,
                                 int64_t offset, void *data);

/* The data of a message not acknowledged yet, or NULL (unknown, acknowledged, revoked). */
void *pb_kafka_offsets_lookup(const pb_kafka_offsets_t *t, uint64_t tag);

/* Acknowledges tag; false when it is unknown (acknowledged already, or its partition was
 * revoked meanwhile). */
bool pb_kafka_offsets_ack(pb_kafka_offsets_t *t, uint64_t tag);

/* Calls commit(topic, partition, next_offset, arg) for every partition whose committable
 * offset moved since the last call (next_offset: the offset after its acknowledged prefix, the
 * one Kafka stores), and forgets that it moved. Returns how many. */
size_t pb_kafka_offsets_take_commits(pb_kafka_offsets_t *t,
                                     void (*commit)(const char *topic, int32_t partition,
                                                    int64_t next_offset, void *arg),
                                     void *arg);

/* Partition end (EOF) bookkeeping for catching up: mark one read to its end; whether every
 * tracked partition was (true when none is tracked). An assignment clears the mark. */
void pb_kafka_offsets_set_at_end(pb_kafka_offsets_t *t, const char *topic, int32_t partition);
bool pb_kafka_offsets_all_at_end(const pb_kafka_offsets_t *t);

/* Whether topic/partition is tracked (assigned here); *commit_next gets the offset after its
 * acknowledged prefix, committed or not, or -1 when nothing was acknowledged since the
 * assignment. */
bool pb_kafka_offsets_find(const pb_kafka_offsets_t *t, const char *topic, int32_t partition,
                           int64_t *commit_next);

/* The tracked partitions, i in 0..count-1 (for lag sampling). */
size_t pb_kafka_offsets_count(const pb_kafka_offsets_t *t);
const char *pb_kafka_offsets_partition(const pb_kafka_offsets_t *t, size_t i, int32_t *partition);

#endif
