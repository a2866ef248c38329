/* The delivery-tag table of a source: the messages handed to the consumer and not settled yet,
 * by tag. A source gives each delivery a tag from here (increasing, never reused, also not
 * across reconnects), finds it again when the consumer acknowledges or gives it back, and walks
 * the outstanding ones (in tag order) for upkeep or after a lost connection. An entry holds the
 * source's own handle of the delivery (a natsMsg, a Redis entry id, a Kafka offset).
 *
 * @thread loop: the consumer's thread only. */
#ifndef PB_SOURCE_TAGS_H
#define PB_SOURCE_TAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pb_tag_entry {
    uint64_t tag;
    void *item;     /* the source's handle; NULL once settled */
    int64_t at_ms;  /* delivery, or last upkeep (e.g. "in progress") */
    uint64_t value; /* a number of the source's own (e.g. an offset) */
} pb_tag_entry_t;

typedef struct pb_tags {
    pb_tag_entry_t *ent; /* [head, len): tags increasing */
    size_t head, len, cap;
    size_t live;         /* entries with item != NULL */
    uint64_t next_tag;
} pb_tags_t;

/* A new entry for item (not NULL); returns its tag. */
uint64_t pb_tags_add(pb_tags_t *t, void *item, uint64_t value, int64_t now_ms);

/* The same with a tag of the caller's, above every tag in t (several tables sharing one
 * numbering, e.g. one per Kafka partition). */
void pb_tags_add_tagged(pb_tags_t *t, uint64_t tag, void *item, uint64_t value, int64_t now_ms);

/* The lowest and highest tag ever added and not cleared (0 when empty): a quick range test
 * before pb_tags_find across several tables. */
uint64_t pb_tags_low(const pb_tags_t *t);
uint64_t pb_tags_high(const pb_tags_t *t);

/* The live entry of tag, or NULL (settled already, or never handed out). */
pb_tag_entry_t *pb_tags_find(pb_tags_t *t, uint64_t tag);

/* Marks e settled (its item is the caller's to release); entries do not move, so a walk with
 * pb_tags_next may go on from e. */
void pb_tags_settle(pb_tags_t *t, pb_tag_entry_t *e);

/* The first live entry (lowest tag), or NULL; and the next live one after e. */
pb_tag_entry_t *pb_tags_first(const pb_tags_t *t);
pb_tag_entry_t *pb_tags_next(const pb_tags_t *t, const pb_tag_entry_t *e);

/* Forgets every entry (their items are the caller's to release first); tags go on rising. */
void pb_tags_clear(pb_tags_t *t);

void pb_tags_free(pb_tags_t *t);

#endif
