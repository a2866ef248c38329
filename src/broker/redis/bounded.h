/* Reading stream entries from Redis with bounded memory (hiredis 0.14.1, blocking contexts).
 *
 * hiredis keeps a reply whole: a bulk string waits in the reader's buffer until all of it has
 * arrived, then is copied into the reply (redisReader.maxbuf only frees an emptied buffer, it
 * bounds nothing). So an entry with a 64 MiB field costs 128 MiB before anyone can look at its
 * size, and an XREADGROUP of many such entries costs that many times over. Here the reply of an
 * entry-reading command (XREADGROUP, XRANGE, XCLAIM) is read off the socket through a filter
 * that sees each bulk string's length in its header, before its bytes, and passes on to
 * hiredis only what is kept:
 *   - of each entry, the first value of field "payload" up to limits.payload_max bytes, and its
 *     other field names and values up to limits.other_max bytes together; a name or value that
 *     does not fit arrives as an integer, its length in bytes, and is never held;
 *   - of each entry, the first PB_REDIS_FIELDS_KEPT names and values (the rest are read past);
 *   - entries while fewer than limits.max_entries were kept and their kept bytes are below
 *     limits.budget; a later entry is deferred: it arrives as [id, [], PB_REDIS_DEFERRED], its
 *     fields read past.
 * So an entry whose fields hold an integer was not kept whole: its size is the sum of the
 * lengths of its strings and of its integers. Ids and stream names above 64 KiB arrive as their
 * length too. Everything else passes unchanged, a reply without limits reached byte for byte.
 *
 * The bytes of hostile entries still cross the network (read in 16 KiB pieces and dropped);
 * what the consumer holds stays within about budget + payload_max + other_max per reply. The
 * server still builds each reply whole in its output buffer, as for any client.
 *
 * @thread one context is used by one thread. */
#ifndef PB_BROKER_REDIS_BOUNDED_H
#define PB_BROKER_REDIS_BOUNDED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "common/str.h"

#define PB_REDIS_FIELDS_KEPT 1024 /* field names and values of one entry (512 pairs) */
#define PB_REDIS_DEFERRED (-1)    /* the third element of a deferred entry */

/** What the reply holds. */
typedef enum pb_redis_shape {
    PB_REDIS_SHAPE_STREAMS, /* XREADGROUP / XREAD: [[stream, [entry, ...]], ...] or nil */
    PB_REDIS_SHAPE_ENTRIES, /* XRANGE / XCLAIM: [entry, ...] */
} pb_redis_shape_t;

typedef struct pb_redis_limits {
    uint64_t payload_max; /* bytes of an entry's payload value kept */
    uint64_t other_max;   /* bytes of an entry's other names and values kept, together */
    uint64_t budget;      /* an entry starting once the reply's kept bytes reach this is deferred;
                           * at least 1, so that the first entry is never deferred */
    uint64_t max_entries; /* entries kept (deferred ones not counted); later ones are deferred */
} pb_redis_limits_t;

/** The filter, for the reading function below and for tests. */
typedef struct pb_redis_filter pb_redis_filter_t;

/** @brief A filter for one reply of the given shape. Never NULL (aborts when out of memory). */
pb_redis_filter_t *pb_redis_filter_new(pb_redis_shape_t shape, const pb_redis_limits_t *lim);

void pb_redis_filter_free(pb_redis_filter_t *f);

/**
 * @brief Passes in[0..len) of the reply through the filter, appending what hiredis is to read
 * to out.
 * @returns the bytes of in taken: len, or fewer once the reply has ended (the rest belongs to
 *          the replies after it); -1 on a protocol error (the connection cannot go on).
 */
int64_t pb_redis_filter_feed(pb_redis_filter_t *f, const char *in, size_t len, pb_buf_t *out);

/** @brief Whether the whole reply has gone through. */
bool pb_redis_filter_done(const pb_redis_filter_t *f);

/** @brief Bytes of names and values kept so far (the entries' share of the budget). */
uint64_t pb_redis_filter_kept(const pb_redis_filter_t *f);

/**
 * @brief redisGetReply for the reply of an entry-reading command: writes what the context has
 * queued, then reads the next reply through the filter (see above). Replies before and after it
 * in a pipeline may be read with redisGetReply. *kept gets the bytes of names and values kept.
 * @returns REDIS_OK with *reply (freeReplyObject), or REDIS_ERR with c->err and c->errstr set
 *          as hiredis sets them (REDIS_ERR_IO with errno, REDIS_ERR_EOF, REDIS_ERR_PROTOCOL).
 */
int pb_redis_get_reply_bounded(redisContext *c, pb_redis_shape_t shape,
                               const pb_redis_limits_t *lim, redisReply **reply, uint64_t *kept);

#endif
