/* One-dimensional arrays as binary parameters (format 1): the server takes each element by its
 * length instead of scanning and unquoting an array literal, which is most of what a batch's
 * unnest() costs it per row. */
#ifndef PB_STORE_PG_ARRAY_H
#define PB_STORE_PG_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "common/str.h"

/* The element types postbox sends (pg_type OIDs, fixed in every PostgreSQL). */
#define PB_PG_OID_INT8 20u
#define PB_PG_OID_TEXT 25u

/* An array being written into a pb_buf_t; it holds offsets, so the buffer may grow (and move)
 * while other arrays are written after it. */
typedef struct pb_pg_array {
    size_t start;  /* where its bytes begin in the buffer */
    size_t end;    /* set by pb_pg_array_end */
    uint32_t count;
    uint32_t elem_oid;
    int has_null;
} pb_pg_array_t;

void pb_pg_array_begin(pb_pg_array_t *a, pb_buf_t *b, uint32_t elem_oid);
/* s NULL: a NULL element. Only for arrays of PB_PG_OID_TEXT. */
void pb_pg_array_text(pb_pg_array_t *a, pb_buf_t *b, const char *s);
void pb_pg_array_int8(pb_pg_array_t *a, pb_buf_t *b, int64_t v);
void pb_pg_array_null(pb_pg_array_t *a, pb_buf_t *b);
/* Writes the element count and null flag into the header. */
void pb_pg_array_end(pb_pg_array_t *a, pb_buf_t *b);

/* The parameter value and its length, once every array of the buffer is ended (the buffer must
 * not grow after this). */
static inline const char *pb_pg_array_value(const pb_pg_array_t *a, const pb_buf_t *b)
{
    return b->data + a->start;
}
static inline int pb_pg_array_length(const pb_pg_array_t *a)
{
    return (int)(a->end - a->start);
}

#endif
