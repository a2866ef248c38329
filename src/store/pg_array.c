/* The binary array format read by the server's array_recv: a header of five 32-bit big-endian
 * integers (dimensions = 1, has-null flag, element type, length, lower bound = 1), then each
 * element as a 32-bit length (-1 for NULL) and its bytes in the element type's binary form. */
#include "store/pg_array.h"

#include <string.h>

enum { FLAGS_AT = 4, COUNT_AT = 12 }; /* header offsets */

static void put_u32(pb_buf_t *b, uint32_t v)
{
    char be[4] = {(char)(v >> 24), (char)(v >> 16), (char)(v >> 8), (char)v};
    pb_buf_append(b, be, sizeof be);
}

static void patch_u32(pb_buf_t *b, size_t at, uint32_t v)
{
    unsigned char *p = (unsigned char *)b->data + at;
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

void pb_pg_array_begin(pb_pg_array_t *a, pb_buf_t *b, uint32_t elem_oid)
{
    *a = (pb_pg_array_t){.start = b->len, .elem_oid = elem_oid};
    put_u32(b, 1);        /* dimensions */
    put_u32(b, 0);        /* has nulls: patched at the end */
    put_u32(b, elem_oid);
    put_u32(b, 0);        /* length: patched at the end */
    put_u32(b, 1);        /* lower bound */
}

void pb_pg_array_text(pb_pg_array_t *a, pb_buf_t *b, const char *s)
{
    if (!s) {
        pb_pg_array_null(a, b);
        return;
    }
    size_t n = strlen(s);
    put_u32(b, (uint32_t)n);
    pb_buf_append(b, s, n);
    a->count++;
}

void pb_pg_array_int8(pb_pg_array_t *a, pb_buf_t *b, int64_t v)
{
    uint64_t u = (uint64_t)v;
    put_u32(b, 8);
    put_u32(b, (uint32_t)(u >> 32));
    put_u32(b, (uint32_t)u);
    a->count++;
}

void pb_pg_array_null(pb_pg_array_t *a, pb_buf_t *b)
{
    put_u32(b, UINT32_MAX); /* -1 */
    a->has_null = 1;
    a->count++;
}

void pb_pg_array_end(pb_pg_array_t *a, pb_buf_t *b)
{
    patch_u32(b, a->start + FLAGS_AT, a->has_null ? 1u : 0u);
    patch_u32(b, a->start + COUNT_AT, a->count);
    a->end = b->len;
}
