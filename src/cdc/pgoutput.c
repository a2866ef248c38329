#include "cdc/pgoutput.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"

/* A cursor over the message; every read checks the remaining length. */
typedef struct reader {
    const unsigned char *p;
    size_t left;
    bool bad;
} reader_t;

static bool need(reader_t *r, size_t n)
{
    if (r->bad || r->left < n) {
        r->bad = true;
        return false;
    }
    return true;
}

static uint8_t get_u8(reader_t *r)
{
    if (!need(r, 1))
        return 0;
    uint8_t v = r->p[0];
    r->p += 1;
    r->left -= 1;
    return v;
}

static uint16_t get_u16(reader_t *r)
{
    if (!need(r, 2))
        return 0;
    uint16_t v = (uint16_t)((r->p[0] << 8) | r->p[1]);
    r->p += 2;
    r->left -= 2;
    return v;
}

static uint32_t get_u32(reader_t *r)
{
    if (!need(r, 4))
        return 0;
    uint32_t v = ((uint32_t)r->p[0] << 24) | ((uint32_t)r->p[1] << 16) | ((uint32_t)r->p[2] << 8) |
                 r->p[3];
    r->p += 4;
    r->left -= 4;
    return v;
}

uint64_t pb_pgo_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void pb_pgo_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static uint64_t get_u64(reader_t *r)
{
    if (!need(r, 8))
        return 0;
    uint64_t v = pb_pgo_get_u64(r->p);
    r->p += 8;
    r->left -= 8;
    return v;
}

/* A NUL-terminated string inside the buffer. */
static const char *get_str(reader_t *r)
{
    if (r->bad)
        return NULL;
    const unsigned char *nul = memchr(r->p, '\0', r->left);
    if (!nul) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)r->p;
    size_t n = (size_t)(nul - r->p) + 1;
    r->p += n;
    r->left -= n;
    return s;
}

static const char *get_bytes(reader_t *r, uint32_t n)
{
    if (!need(r, n))
        return NULL;
    const char *s = (const char *)r->p;
    r->p += n;
    r->left -= n;
    return s;
}

void pb_pgo_decoder_init(pb_pgo_decoder_t *dec)
{
    memset(dec, 0, sizeof *dec);
}

static void relation_clear(pb_pgo_relation_t *rel)
{
    free(rel->nspname);
    free(rel->relname);
    for (uint16_t i = 0; i < rel->ncols; i++)
        free(rel->colnames[i]);
    memset(rel, 0, sizeof *rel);
}

void pb_pgo_decoder_free(pb_pgo_decoder_t *dec)
{
    for (size_t i = 0; i < dec->n_relations; i++)
        relation_clear(&dec->relations[i]);
    free(dec->relations);
    memset(dec, 0, sizeof *dec);
}

const pb_pgo_relation_t *pb_pgo_relation_lookup(const pb_pgo_decoder_t *dec, uint32_t relid)
{
    for (size_t i = 0; i < dec->n_relations; i++)
        if (dec->relations[i].relid == relid)
            return &dec->relations[i];
    return NULL;
}

int pb_pgo_column(const pb_pgo_relation_t *rel, const char *name)
{
    for (uint16_t i = 0; i < rel->ncols; i++)
        if (strcmp(rel->colnames[i], name) == 0)
            return i;
    return -1;
}

static pb_status_t decode_relation(pb_pgo_decoder_t *dec, reader_t *r, pb_pgo_msg_t *out,
                                   pb_error_t *err)
{
    pb_pgo_relation_t rel = {0};
    rel.relid = get_u32(r);
    const char *nsp = get_str(r);
    const char *name = get_str(r);
    get_u8(r); /* replica identity */
    uint16_t ncols = get_u16(r);
    if (r->bad)
        return pb_fail(err, PB_FATAL, "pgoutput: truncated Relation message");
    if (ncols > PB_PGO_MAX_COLUMNS)
        return pb_fail(err, PB_FATAL, "pgoutput: relation %s.%s has %u columns (at most %d supported)",
                       nsp, name, ncols, PB_PGO_MAX_COLUMNS);
    rel.nspname = pb_strdup(nsp);
    rel.relname = pb_strdup(name);
    for (uint16_t i = 0; i < ncols; i++) {
        get_u8(r); /* flags */
        const char *col = get_str(r);
        get_u32(r); /* type oid */
        get_u32(r); /* typmod */
        if (r->bad) {
            relation_clear(&rel);
            return pb_fail(err, PB_FATAL, "pgoutput: truncated Relation message");
        }
        rel.colnames[i] = pb_strdup(col);
        rel.ncols = (uint16_t)(i + 1);
    }
    for (size_t i = 0; i < dec->n_relations; i++) {
        if (dec->relations[i].relid == rel.relid) {
            relation_clear(&dec->relations[i]);
            dec->relations[i] = rel;
            out->u.relation.relid = rel.relid;
            return PB_OK;
        }
    }
    dec->relations = pb_realloc(dec->relations, (dec->n_relations + 1) * sizeof *dec->relations);
    dec->relations[dec->n_relations++] = rel;
    out->u.relation.relid = rel.relid;
    return PB_OK;
}

static pb_status_t decode_tuple(reader_t *r, pb_pgo_msg_t *out, pb_error_t *err)
{
    uint16_t ncols = get_u16(r);
    if (ncols > PB_PGO_MAX_COLUMNS)
        return pb_fail(err, PB_FATAL, "pgoutput: tuple with %u columns", ncols);
    out->u.insert.ncols = ncols;
    for (uint16_t i = 0; i < ncols && !r->bad; i++) {
        pb_pgo_value_t *v = &out->u.insert.cols[i];
        uint8_t kind = get_u8(r);
        v->data = NULL;
        v->len = 0;
        switch (kind) {
        case 'n': /* NULL */
        case 'u': /* unchanged TOAST value: not in inserts */
            break;
        case 't':
        case 'b':
            v->len = get_u32(r);
            v->data = get_bytes(r, v->len);
            if (kind == 'b')
                return pb_fail(err, PB_FATAL, "pgoutput: binary column values are not supported");
            break;
        default:
            return pb_fail(err, PB_FATAL, "pgoutput: unknown tuple column kind 0x%02x", kind);
        }
    }
    if (r->bad)
        return pb_fail(err, PB_FATAL, "pgoutput: truncated tuple");
    return PB_OK;
}

/* The message types that carry an xid inside a stream block (protocol 2). */
static bool carries_stream_xid(uint8_t type)
{
    return type == 'R' || type == 'Y' || type == 'I' || type == 'U' || type == 'D' ||
           type == 'T' || type == 'M';
}

/* Stream Start / Stop / Commit / Abort: the bracket of a streamed transaction's blocks. */
static pb_status_t decode_stream(pb_pgo_decoder_t *dec, uint8_t type, reader_t *r,
                                 pb_pgo_msg_t *out, pb_error_t *err)
{
    const char *name = type == 'S' ? "Stream Start" : type == 'E' ? "Stream Stop"
                       : type == 'c' ? "Stream Commit" : "Stream Abort";
    if ((type == 'E') != dec->in_stream)
        return pb_fail(err, PB_FATAL, "pgoutput: %s %s a stream block", name,
                       dec->in_stream ? "inside" : "outside");
    switch (type) {
    case 'S':
        out->kind = PB_PGO_STREAM_START;
        out->u.stream_start.xid = get_u32(r);
        out->u.stream_start.first_segment = get_u8(r) == 1;
        break;
    case 'E':
        out->kind = PB_PGO_STREAM_STOP;
        break;
    case 'c':
        out->kind = PB_PGO_STREAM_COMMIT;
        out->u.stream_commit.xid = get_u32(r);
        get_u8(r); /* flags */
        out->u.stream_commit.commit_lsn = get_u64(r);
        out->u.stream_commit.end_lsn = get_u64(r);
        out->u.stream_commit.commit_time = (int64_t)get_u64(r);
        break;
    default:
        /* protocol 4 (parallel apply) appends the abort's LSN and time: not requested */
        out->kind = PB_PGO_STREAM_ABORT;
        out->u.stream_abort.xid = get_u32(r);
        out->u.stream_abort.subxid = get_u32(r);
        break;
    }
    if (r->bad)
        return pb_fail(err, PB_FATAL, "pgoutput: truncated %s message", name);
    if (type != 'E' && (type == 'S' ? out->u.stream_start.xid
                        : type == 'c' ? out->u.stream_commit.xid
                                      : out->u.stream_abort.xid) == 0)
        return pb_fail(err, PB_FATAL, "pgoutput: %s message with xid 0", name);
    if (type == 'A' && out->u.stream_abort.subxid == 0)
        return pb_fail(err, PB_FATAL, "pgoutput: Stream Abort message with subtransaction xid 0");
    dec->in_stream = type == 'S';
    return PB_OK;
}

pb_status_t pb_pgo_decode(pb_pgo_decoder_t *dec, const char *buf, size_t len, pb_pgo_msg_t *out,
                          pb_error_t *err)
{
    reader_t r = {(const unsigned char *)buf, len, false};
    uint8_t type = get_u8(&r);
    if (r.bad)
        return pb_fail(err, PB_FATAL, "pgoutput: empty message");
    out->xid = 0;
    if (dec->in_stream && carries_stream_xid(type)) {
        out->xid = get_u32(&r);
        if (r.bad)
            return pb_fail(err, PB_FATAL, "pgoutput: truncated '%c' message (no xid)", type);
        if (out->xid == 0)
            return pb_fail(err, PB_FATAL, "pgoutput: '%c' message in a stream block with xid 0",
                           type);
    }
    switch (type) {
    case 'B':
    case 'C':
        if (dec->in_stream)
            return pb_fail(err, PB_FATAL, "pgoutput: %s inside a stream block",
                           type == 'B' ? "Begin" : "Commit");
        if (type == 'B') {
            out->kind = PB_PGO_BEGIN;
            out->u.begin.final_lsn = get_u64(&r);
            out->u.begin.commit_time = (int64_t)get_u64(&r);
            out->u.begin.xid = get_u32(&r);
        } else {
            out->kind = PB_PGO_COMMIT;
            get_u8(&r); /* flags */
            out->u.commit.commit_lsn = get_u64(&r);
            out->u.commit.end_lsn = get_u64(&r);
            out->u.commit.commit_time = (int64_t)get_u64(&r);
        }
        break;
    case 'S':
    case 'E':
    case 'c':
    case 'A':
        return decode_stream(dec, type, &r, out, err);
    case 'R':
        out->kind = PB_PGO_RELATION;
        return decode_relation(dec, &r, out, err);
    case 'I': {
        out->kind = PB_PGO_INSERT;
        out->u.insert.relid = get_u32(&r);
        uint8_t marker = get_u8(&r);
        if (r.bad || marker != 'N')
            return pb_fail(err, PB_FATAL, "pgoutput: malformed Insert message");
        if (!pb_pgo_relation_lookup(dec, out->u.insert.relid))
            return pb_fail(err, PB_FATAL, "pgoutput: Insert for relation %u before its Relation message",
                           out->u.insert.relid);
        return decode_tuple(&r, out, err);
    }
    case 'M':
        out->kind = PB_PGO_MESSAGE;
        out->u.message.transactional = get_u8(&r) & 1;
        out->u.message.lsn = get_u64(&r);
        out->u.message.prefix = get_str(&r);
        out->u.message.len = get_u32(&r);
        out->u.message.content = get_bytes(&r, out->u.message.len);
        break;
    case 'O': /* Origin */
    case 'Y': /* Type */
    case 'U': /* Update */
    case 'D': /* Delete */
    case 'T': /* Truncate */
        out->kind = PB_PGO_OTHER;
        return PB_OK;
    default:
        return pb_fail(err, PB_FATAL, "pgoutput: unknown message type 0x%02x", type);
    }
    if (r.bad)
        return pb_fail(err, PB_FATAL, "pgoutput: truncated '%c' message", type);
    return PB_OK;
}
