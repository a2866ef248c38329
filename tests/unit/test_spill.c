/* Unit tests for the spill files of streamed transactions (cdc/spill.h) and the set of open
 * streamed transactions (cdc/streamed.h): what is written comes back in order, field for field;
 * a rolled-back subtransaction's events (and its children's) are gone; an aborted transaction
 * leaves nothing; protocol errors are named. Files go to a directory of the test's own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdc/spill.h"
#include "cdc/streamed.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/pb-test-spill.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

/* Files visible in dir: none ever, the spill files have no name. */
static int files_in_dir(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static int remove_dir(void **state)
{
    (void)state;
    return rmdir(dir);
}

/* Event number i: its id, a payload naming it, NULL headers for odd ones. */
static pb_event_t event(int64_t i, char *payload, size_t size)
{
    snprintf(payload, size, "{\"i\": %lld}", (long long)i);
    pb_event_t ev = {0};
    ev.id = i;
    ev.event_id = "6f1c2a9e-0000-4000-8000-000000000042";
    ev.aggregate_type = "order";
    ev.aggregate_id = i % 2 ? "a-odd" : "a-even";
    ev.event_type = "order.paid.v1";
    ev.payload = payload;
    ev.payload_len = strlen(payload);
    ev.headers = i % 2 ? NULL : "{\"trace\": \"t\"}";
    ev.destination = i == 3 ? "elsewhere" : NULL;
    ev.created_at_us = 1000 + i;
    ev.sequence = i;
    ev.available_at_us = i == 5 ? 99 : 0;
    ev.expires_at_us = i == 6 ? 77 : 0;
    return ev;
}

static void write_ids(pb_spill_t *sp, uint32_t subxid, int64_t from, int64_t to)
{
    pb_error_t err;
    char payload[64];
    for (int64_t i = from; i <= to; i++) {
        pb_event_t ev = event(i, payload, sizeof payload);
        assert_int_equal(pb_spill_write(sp, subxid, &ev, &err), PB_OK);
    }
}

/* Reads every event back, checking each against event(id); returns their ids in ids[]. */
static size_t read_all(pb_spill_t *sp, int64_t *ids, size_t cap)
{
    pb_error_t err;
    size_t n = 0;
    for (;;) {
        pb_cdc_event_t e;
        bool got;
        assert_int_equal(pb_spill_read(sp, &e, &got, &err), PB_OK);
        if (!got)
            return n;
        char payload[64];
        pb_event_t want = event(e.ev.id, payload, sizeof payload);
        assert_string_equal(e.ev.event_id, want.event_id);
        assert_string_equal(e.ev.aggregate_id, want.aggregate_id);
        assert_string_equal(e.ev.event_type, want.event_type);
        assert_int_equal(e.ev.payload_len, want.payload_len);
        assert_string_equal(e.ev.payload, want.payload);
        if (want.headers)
            assert_string_equal(e.ev.headers, want.headers);
        else
            assert_null(e.ev.headers);
        if (want.destination)
            assert_string_equal(e.ev.destination, want.destination);
        else
            assert_null(e.ev.destination);
        assert_true(e.ev.created_at_us == want.created_at_us);
        assert_true(e.ev.sequence == want.sequence);
        assert_true(e.ev.available_at_us == want.available_at_us);
        assert_true(e.ev.expires_at_us == want.expires_at_us);
        assert_true(n < cap);
        ids[n++] = e.ev.id;
        pb_cdc_event_free(&e);
    }
}

static void writes_and_reads_back(void **state)
{
    (void)state;
    pb_error_t err;
    pb_spill_t *sp;
    assert_int_equal(pb_spill_new(dir, 500, &sp, &err), PB_OK);
    assert_int_equal(files_in_dir(), 0);
    write_ids(sp, 500, 1, 2000);
    assert_true(pb_spill_count(sp) == 2000);
    assert_int_equal(pb_spill_rewind(sp, &err), PB_OK);
    static int64_t ids[2000];
    assert_int_equal(read_all(sp, ids, 2000), 2000);
    for (int64_t i = 0; i < 2000; i++)
        assert_true(ids[i] == i + 1);
    pb_spill_free(sp);
    pb_spill_free(NULL);
}

/* top 500: 1-3 own; savepoint 501: 4-5, released; own 6; savepoint 502: 7-8, with child 503: 9,
 * back in 502: 10; ROLLBACK TO 502 (aborts 503, then 502); own 11-12; savepoint 504: 13,
 * rolled back; 505 aborted without events here. Left: 1-6, 11-12. */
static void drops_rolled_back_subtransactions(void **state)
{
    (void)state;
    pb_error_t err;
    pb_spill_t *sp;
    assert_int_equal(pb_spill_new(dir, 500, &sp, &err), PB_OK);
    write_ids(sp, 500, 1, 3);
    write_ids(sp, 501, 4, 5);
    write_ids(sp, 500, 6, 6);
    write_ids(sp, 502, 7, 8);
    write_ids(sp, 503, 9, 9);
    write_ids(sp, 502, 10, 10);
    assert_int_equal(pb_spill_drop_subxact(sp, 503, &err), PB_OK);
    assert_int_equal(pb_spill_drop_subxact(sp, 502, &err), PB_OK);
    assert_true(pb_spill_count(sp) == 6);
    write_ids(sp, 500, 11, 12);
    write_ids(sp, 504, 13, 13);
    assert_int_equal(pb_spill_drop_subxact(sp, 504, &err), PB_OK);
    assert_int_equal(pb_spill_drop_subxact(sp, 505, &err), PB_OK);
    /* 501 was released into the transaction before: not dropped by a later abort's scan */
    assert_int_equal(pb_spill_drop_subxact(sp, 501, &err), PB_OK);
    assert_true(pb_spill_count(sp) == 8);
    assert_int_equal(pb_spill_rewind(sp, &err), PB_OK);
    int64_t ids[16];
    assert_int_equal(read_all(sp, ids, 16), 8);
    int64_t want[] = {1, 2, 3, 4, 5, 6, 11, 12};
    for (int i = 0; i < 8; i++)
        assert_true(ids[i] == want[i]);
    pb_spill_free(sp);
}

static void an_unusable_directory_is_named(void **state)
{
    (void)state;
    pb_error_t err;
    pb_spill_t *sp;
    assert_int_equal(pb_spill_new("/nonexistent/postbox-spill", 77, &sp, &err), PB_TRANSIENT);
    assert_null(sp);
    assert_non_null(strstr(err.msg, "/nonexistent/postbox-spill"));
    assert_non_null(strstr(err.msg, "cdc.spill_dir"));
}

static void tracks_interleaved_transactions(void **state)
{
    (void)state;
    pb_error_t err;
    pb_streamed_t set;
    pb_streamed_init(&set, dir);
    char payload[64];
    pb_event_t ev;
    /* 10 and 20 alternate; 30 aborts; 40 has no events for us */
    assert_int_equal(pb_streamed_start(&set, 10, true, &err), PB_OK);
    for (int64_t i = 1; i <= 3; i++) {
        ev = event(i, payload, sizeof payload);
        assert_int_equal(pb_streamed_add(&set, 10, &ev, &err), PB_OK);
    }
    pb_streamed_stop(&set);
    assert_int_equal(pb_streamed_start(&set, 20, true, &err), PB_OK);
    ev = event(100, payload, sizeof payload);
    assert_int_equal(pb_streamed_add(&set, 21, &ev, &err), PB_OK);
    pb_streamed_stop(&set);
    assert_int_equal(pb_streamed_start(&set, 30, true, &err), PB_OK);
    ev = event(300, payload, sizeof payload);
    assert_int_equal(pb_streamed_add(&set, 30, &ev, &err), PB_OK);
    pb_streamed_stop(&set);
    assert_int_equal(pb_streamed_start(&set, 40, true, &err), PB_OK);
    pb_streamed_stop(&set);
    assert_int_equal(pb_streamed_start(&set, 10, false, &err), PB_OK);
    ev = event(4, payload, sizeof payload);
    assert_int_equal(pb_streamed_add(&set, 10, &ev, &err), PB_OK);
    pb_streamed_stop(&set);
    /* protocol errors */
    assert_int_equal(pb_streamed_start(&set, 10, true, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "transaction 10"));
    assert_int_equal(pb_streamed_start(&set, 99, false, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "first block never came"));
    pb_streamed_stop(&set);
    assert_int_equal(pb_streamed_add(&set, 10, &ev, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "outside a stream block"));
    pb_spill_t *replay;
    assert_int_equal(pb_streamed_commit(&set, 98, &replay, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "never streamed"));
    /* 21 is rolled back, then 30 aborts, an unknown one aborts (nothing to do) */
    assert_int_equal(pb_streamed_abort(&set, 20, 21, &err), PB_OK);
    assert_int_equal(pb_streamed_abort(&set, 30, 30, &err), PB_OK);
    assert_int_equal(pb_streamed_abort(&set, 31, 31, &err), PB_OK);
    assert_int_equal(pb_streamed_commit(&set, 30, &replay, &err), PB_FATAL);
    /* commits */
    assert_int_equal(pb_streamed_commit(&set, 40, &replay, &err), PB_OK);
    assert_null(replay);
    assert_int_equal(pb_streamed_commit(&set, 10, &replay, &err), PB_OK);
    assert_non_null(replay);
    int64_t ids[8];
    assert_int_equal(read_all(replay, ids, 8), 4);
    for (int i = 0; i < 4; i++)
        assert_true(ids[i] == i + 1);
    pb_spill_free(replay);
    assert_int_equal(pb_streamed_commit(&set, 20, &replay, &err), PB_OK);
    assert_non_null(replay);
    assert_int_equal(read_all(replay, ids, 8), 0);
    pb_spill_free(replay);
    assert_int_equal(set.n, 0);
    /* a reconnect drops what is open */
    assert_int_equal(pb_streamed_start(&set, 50, true, &err), PB_OK);
    assert_int_equal(pb_streamed_add(&set, 50, &ev, &err), PB_OK);
    pb_streamed_clear(&set);
    assert_int_equal(set.n, 0);
    assert_int_equal(set.block_xid, 0);
    assert_int_equal(pb_streamed_start(&set, 50, true, &err), PB_OK);
    pb_streamed_free(&set);
    assert_int_equal(files_in_dir(), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(writes_and_reads_back),
        cmocka_unit_test(drops_rolled_back_subtransactions),
        cmocka_unit_test(an_unusable_directory_is_named),
        cmocka_unit_test(tracks_interleaved_transactions),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
