/* Unit tests for pb_pg_array: the bytes of a binary array parameter, as the server's array_recv
 * reads them (header of five big-endian 32-bit integers, then length-prefixed elements). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "store/pg_array.h"

static uint32_t u32_at(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static void text_array_with_null(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    pb_buf_puts(&b, "prefix"); /* an array need not start the buffer */
    pb_pg_array_t a;
    pb_pg_array_begin(&a, &b, PB_PG_OID_TEXT);
    pb_pg_array_text(&a, &b, "ab");
    pb_pg_array_text(&a, &b, NULL);
    pb_pg_array_text(&a, &b, "");
    pb_pg_array_text(&a, &b, "q\"\\,{}"); /* no quoting in binary form */
    pb_pg_array_end(&a, &b);
    const char *p = pb_pg_array_value(&a, &b);
    assert_ptr_equal(p, b.data + 6);
    assert_int_equal(pb_pg_array_length(&a), 20 + (4 + 2) + 4 + 4 + (4 + 6));
    assert_int_equal(u32_at(p), 1);               /* dimensions */
    assert_int_equal(u32_at(p + 4), 1);           /* has a NULL */
    assert_int_equal(u32_at(p + 8), 25);          /* text */
    assert_int_equal(u32_at(p + 12), 4);          /* elements */
    assert_int_equal(u32_at(p + 16), 1);          /* lower bound */
    assert_int_equal(u32_at(p + 20), 2);
    assert_memory_equal(p + 24, "ab", 2);
    assert_int_equal(u32_at(p + 26), UINT32_MAX); /* NULL: length -1, no bytes */
    assert_int_equal(u32_at(p + 30), 0);
    assert_int_equal(u32_at(p + 34), 6);
    assert_memory_equal(p + 38, "q\"\\,{}", 6);
    pb_buf_free(&b);
}

static void int8_arrays_side_by_side(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    pb_pg_array_t first, second;
    pb_pg_array_begin(&first, &b, PB_PG_OID_INT8);
    pb_pg_array_int8(&first, &b, -2);
    pb_pg_array_int8(&first, &b, INT64_C(0x0102030405060708));
    pb_pg_array_end(&first, &b);
    pb_pg_array_begin(&second, &b, PB_PG_OID_INT8);
    for (int i = 0; i < 1000; i++) /* the buffer grows and moves: offsets keep both right */
        pb_pg_array_int8(&second, &b, i);
    pb_pg_array_end(&second, &b);
    const char *p = pb_pg_array_value(&first, &b);
    assert_int_equal(u32_at(p + 4), 0); /* no NULL */
    assert_int_equal(u32_at(p + 8), 20);
    assert_int_equal(u32_at(p + 12), 2);
    assert_int_equal(u32_at(p + 20), 8);
    assert_int_equal(u32_at(p + 24), UINT32_MAX);
    assert_int_equal(u32_at(p + 28), UINT32_MAX - 1); /* -2, two's complement */
    assert_int_equal(u32_at(p + 36), 0x01020304);
    assert_int_equal(u32_at(p + 40), 0x05060708);
    assert_int_equal(pb_pg_array_length(&first), 20 + 2 * 12);
    const char *q = pb_pg_array_value(&second, &b);
    assert_ptr_equal(q, p + pb_pg_array_length(&first));
    assert_int_equal(u32_at(q + 12), 1000);
    assert_int_equal(u32_at(q + 20 + 999 * 12 + 8), 999);
    assert_int_equal(pb_pg_array_length(&second), 20 + 1000 * 12);
    pb_buf_free(&b);
}

static void empty_array(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    pb_pg_array_t a;
    pb_pg_array_begin(&a, &b, PB_PG_OID_TEXT);
    pb_pg_array_end(&a, &b);
    assert_int_equal(pb_pg_array_length(&a), 20);
    assert_int_equal(u32_at(pb_pg_array_value(&a, &b) + 12), 0);
    pb_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_array_with_null),
        cmocka_unit_test(int8_arrays_side_by_side),
        cmocka_unit_test(empty_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
