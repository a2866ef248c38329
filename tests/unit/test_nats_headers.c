/* Unit tests for the NATS header block (src/sink/nats_headers.c): the block's text, and what
 * each mode sets on a nats.c message (read back with nats.c's own getters). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink/nats_headers.h"

static int lib_open(void **state)
{
    (void)state;
    return nats_Open(-1) == NATS_OK ? 0 : -1; /* natsMsg_Destroy needs the library's collector */
}

static int lib_close(void **state)
{
    (void)state;
    nats_Close();
    return 0;
}

/* Three headers, lengths given: key and value need not end where their text does. */
static void fill(pb_nats_headers_t *h)
{
    pb_nats_headers_reset(h);
    pb_nats_headers_add(h, "Nats-Msg-Idxx", 11, "id-1", 4);
    pb_nats_headers_add(h, "ce-time", 7, "2026-12-03T08:00:00Z", 20);
    pb_nats_headers_add(h, "tenant", 6, "\"acme\" and more", 6);
}

static natsMsg *new_msg(void)
{
    natsMsg *m = NULL;
    assert_int_equal(natsMsg_Create(&m, "pb.test", NULL, "x", 1), NATS_OK);
    return m;
}

static int key_count(natsMsg *m)
{
    const char **keys = NULL;
    int n = 0;
    assert_int_equal(natsMsgHeader_Keys(m, &keys, &n), NATS_OK);
    free((void *)keys);
    return n;
}

static void block_text(void **state)
{
    (void)state;
    pb_nats_headers_t h = {0};
    fill(&h);
    assert_string_equal(h.block.data, "Nats-Msg-Id: id-1\r\nce-time: 2026-12-03T08:00:00Z\r\n"
                                      "tenant: \"acme\"\r\n");
    assert_int_equal(h.n, 3);
    /* a reset starts the next message's block from nothing */
    pb_nats_headers_reset(&h);
    pb_nats_headers_add(&h, "a", 1, "", 0);
    assert_string_equal(h.block.data, "a: \r\n");
    pb_nats_headers_free(&h);
}

/* EACH: every header on its own, as natsMsgHeader_Set per header would give. */
static void each_mode(void **state)
{
    (void)state;
    pb_nats_headers_t h = {0};
    fill(&h);
    char before[256];
    snprintf(before, sizeof before, "%s", h.block.data);
    natsMsg *m = new_msg();
    assert_int_equal(pb_nats_headers_apply(&h, m, PB_NATS_HDR_EACH), NATS_OK);
    assert_int_equal(key_count(m), 3);
    const char *v = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id", &v), NATS_OK);
    assert_string_equal(v, "id-1");
    assert_int_equal(natsMsgHeader_Get(m, "ce-time", &v), NATS_OK);
    assert_string_equal(v, "2026-12-03T08:00:00Z"); /* its ':' are the value's, not a key's end */
    assert_int_equal(natsMsgHeader_Get(m, "tenant", &v), NATS_OK);
    assert_string_equal(v, "\"acme\"");
    assert_string_equal(h.block.data, before); /* the NULs written for the calls are undone */
    natsMsg_Destroy(m);
    pb_nats_headers_free(&h);
}

/* PACKED: one header whose key is the block up to the last header's ": ". */
static void packed_mode(void **state)
{
    (void)state;
    pb_nats_headers_t h = {0};
    fill(&h);
    natsMsg *m = new_msg();
    assert_int_equal(pb_nats_headers_apply(&h, m, PB_NATS_HDR_PACKED), NATS_OK);
    assert_int_equal(key_count(m), 1);
    const char *v = NULL;
    assert_int_equal(natsMsgHeader_Get(m, "Nats-Msg-Id: id-1\r\nce-time: 2026-12-03T08:00:00Z\r\n"
                                          "tenant", &v), NATS_OK);
    assert_string_equal(v, "\"acme\"");
    assert_string_equal(h.block.data, "Nats-Msg-Id: id-1\r\nce-time: 2026-12-03T08:00:00Z\r\n"
                                      "tenant: \"acme\"\r\n");
    natsMsg_Destroy(m);

    /* one header: key and value as they are */
    pb_nats_headers_reset(&h);
    pb_nats_headers_add(&h, "k", 1, "v", 1);
    m = new_msg();
    assert_int_equal(pb_nats_headers_apply(&h, m, PB_NATS_HDR_PACKED), NATS_OK);
    assert_int_equal(natsMsgHeader_Get(m, "k", &v), NATS_OK);
    assert_string_equal(v, "v");
    natsMsg_Destroy(m);
    pb_nats_headers_free(&h);
}

/* No header: the message stays without any (nats.c then sends PUB, not HPUB). */
static void empty_block(void **state)
{
    (void)state;
    pb_nats_headers_t h = {0};
    pb_nats_headers_reset(&h);
    natsMsg *m = new_msg();
    assert_int_equal(pb_nats_headers_apply(&h, m, PB_NATS_HDR_PACKED), NATS_OK);
    assert_int_equal(pb_nats_headers_apply(&h, m, PB_NATS_HDR_EACH), NATS_OK);
    const char **keys = NULL;
    int n = -1;
    assert_int_equal(natsMsgHeader_Keys(m, &keys, &n), NATS_NOT_FOUND);
    natsMsg_Destroy(m);
    pb_nats_headers_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(block_text),
        cmocka_unit_test(each_mode),
        cmocka_unit_test(packed_mode),
        cmocka_unit_test(empty_block),
    };
    return cmocka_run_group_tests(tests, lib_open, lib_close);
}
