/* Decoder for PostgreSQL's pgoutput logical replication messages (protocol version 1, or 2 with
 * streaming of in-progress transactions; text values), the payload of each XLogData ('w')
 * message of the replication stream.
 *
 * Protocol 2 streaming: a large transaction still in progress arrives in blocks, each between a
 * Stream Start ('S': xid, first-segment flag) and a Stream Stop ('E'); blocks of different
 * transactions may alternate, and whole (non-streamed) transactions come between blocks. Inside
 * a block every Relation, Type, Insert, Update, Delete, Truncate and Message carries the xid of
 * the (sub)transaction it belongs to right after its type byte; outside a block it does not.
 * A streamed transaction ends, in commit order, with Stream Commit ('c') or Stream Abort ('A':
 * xid and the aborted subtransaction's xid, equal to xid when the whole transaction aborted).
 *
 * Pure functions over a byte buffer: no I/O, no allocation except the relation cache. Every
 * read is bounds-checked; a truncated or unknown message is an error, never a crash. */
#ifndef PB_CDC_PGOUTPUT_H
#define PB_CDC_PGOUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define PB_PGO_MAX_COLUMNS 64

typedef enum pb_pgo_kind {
    PB_PGO_BEGIN,
    PB_PGO_COMMIT,
    PB_PGO_RELATION,
    PB_PGO_INSERT,
    PB_PGO_MESSAGE,
    PB_PGO_STREAM_START,
    PB_PGO_STREAM_STOP,
    PB_PGO_STREAM_COMMIT,
    PB_PGO_STREAM_ABORT,
    PB_PGO_OTHER, /* known but not needed here (Origin, Type, Update, Delete, Truncate) */
} pb_pgo_kind_t;

/* One column value of a tuple: text bytes (not NUL-terminated) or NULL. */
typedef struct pb_pgo_value {
    const char *data; /* points into the message buffer; NULL for SQL NULL / unchanged TOAST */
    uint32_t len;
} pb_pgo_value_t;

typedef struct pb_pgo_msg {
    pb_pgo_kind_t kind;
    /* inside a stream block: the (sub)transaction of a Relation, Type, Insert, Update, Delete,
     * Truncate or Message; 0 outside (0 is never a valid xid) */
    uint32_t xid;
    union {
        struct {
            uint64_t final_lsn;
            int64_t commit_time; /* microseconds since 2000-01-01 */
            uint32_t xid;
        } begin;
        struct {
            uint64_t commit_lsn;
            uint64_t end_lsn; /* what to confirm once the transaction is handled */
            int64_t commit_time;
        } commit;
        struct {
            uint32_t relid;
        } relation; /* the decoder caches it; see pb_pgo_relation_lookup */
        struct {
            uint32_t relid;
            uint16_t ncols;
            pb_pgo_value_t cols[PB_PGO_MAX_COLUMNS];
        } insert;
        struct {
            bool transactional;
            uint64_t lsn;
            const char *prefix; /* NUL-terminated, in the buffer */
            const char *content;
            uint32_t len;
        } message;
        struct {
            uint32_t xid;
            bool first_segment; /* the transaction's first block */
        } stream_start;
        struct {
            uint32_t xid;
            uint64_t commit_lsn;
            uint64_t end_lsn; /* what to confirm once the transaction is handled */
            int64_t commit_time;
        } stream_commit;
        struct {
            uint32_t xid;    /* the top-level transaction */
            uint32_t subxid; /* the aborted (sub)transaction: xid when all of it aborted */
        } stream_abort;
    } u;
} pb_pgo_msg_t;

/* A cached Relation message: names of its columns in wire order. */
typedef struct pb_pgo_relation {
    uint32_t relid;
    char *nspname;
    char *relname;
    uint16_t ncols;
    char *colnames[PB_PGO_MAX_COLUMNS];
} pb_pgo_relation_t;

typedef struct pb_pgo_decoder {
    pb_pgo_relation_t *relations;
    size_t n_relations;
    bool in_stream; /* between Stream Start and Stream Stop: changes carry an xid */
} pb_pgo_decoder_t;

void pb_pgo_decoder_init(pb_pgo_decoder_t *dec);
void pb_pgo_decoder_free(pb_pgo_decoder_t *dec);

/* Decodes one pgoutput message. Relation messages update the decoder's cache (a new one for
 * the same relid replaces the old: the table may have been altered). Pointers in *out point
 * into buf. An Insert for a relation never described is an error, and so are a Stream Start
 * inside a block, a Stream Stop outside one, and a Begin, Commit, Stream Commit or Stream Abort
 * inside one. */
pb_status_t pb_pgo_decode(pb_pgo_decoder_t *dec, const char *buf, size_t len, pb_pgo_msg_t *out,
                          pb_error_t *err) PB_MUSTCHECK;

const pb_pgo_relation_t *pb_pgo_relation_lookup(const pb_pgo_decoder_t *dec, uint32_t relid);

/* Column index of name in rel, or -1. */
int pb_pgo_column(const pb_pgo_relation_t *rel, const char *name);

/* Big-endian helpers shared with the stream code. */
uint64_t pb_pgo_get_u64(const unsigned char *p);
void pb_pgo_put_u64(unsigned char *p, uint64_t v);

#endif
