/* Unit tests for the replication slot check (cdc/slot_check.c): a slot that is missing, lost or
 * past the position postbox recorded is never streamed on; the first start and a slot made
 * before the record existed are. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>

#include "cdc/slot_check.h"

#define LSN(hi, lo) (((uint64_t)(hi) << 32) | (lo))

static const pb_slot_record_t recorded = {true, LSN(1, 0x5000)};
static const pb_slot_record_t none = {false, 0};

static void first_start_and_adoption_stream(void **state)
{
    (void)state;
    pb_slot_state_t missing = {0};
    assert_int_equal(pb_slot_judge(&missing, &none), PB_SLOT_NEW);
    pb_slot_state_t slot = {true, false, LSN(1, 0x100), LSN(1, 0x9000)};
    assert_int_equal(pb_slot_judge(&slot, &none), PB_SLOT_ADOPT);
    assert_false(pb_slot_verdict_fatal(PB_SLOT_NEW));
    assert_false(pb_slot_verdict_fatal(PB_SLOT_ADOPT));
}

/* The genuine slot is at or behind the record: the relay records before it reports. */
static void own_slot_at_or_behind_the_record(void **state)
{
    (void)state;
    pb_slot_state_t at = {true, false, LSN(1, 0x4000), LSN(1, 0x5000)};
    assert_int_equal(pb_slot_judge(&at, &recorded), PB_SLOT_OURS);
    pb_slot_state_t behind = {true, false, LSN(0, 0xffff0000), LSN(1, 0x10)};
    assert_int_equal(pb_slot_judge(&behind, &recorded), PB_SLOT_OURS);
    assert_false(pb_slot_verdict_fatal(PB_SLOT_OURS));
}

static void missing_slot_with_a_record_stops(void **state)
{
    (void)state;
    pb_slot_state_t missing = {0};
    assert_int_equal(pb_slot_judge(&missing, &recorded), PB_SLOT_MISSING);
    assert_true(pb_slot_verdict_fatal(PB_SLOT_MISSING));
    char msg[512];
    pb_slot_explain(PB_SLOT_MISSING, "orders", &missing, &recorded, msg, sizeof msg);
    assert_non_null(strstr(msg, "\"orders\""));
    assert_non_null(strstr(msg, "1/5000"));
    assert_non_null(strstr(msg, "gone"));
    assert_non_null(strstr(msg, "--capture poll"));
    assert_non_null(strstr(msg, "postbox cdc drop-slot"));
}

/* Lost wins over everything else, with or without a record (the slot cannot be streamed). */
static void lost_slot_stops(void **state)
{
    (void)state;
    pb_slot_state_t lost = {true, true, 0, LSN(1, 0x4000)};
    assert_int_equal(pb_slot_judge(&lost, &recorded), PB_SLOT_LOST);
    assert_int_equal(pb_slot_judge(&lost, &none), PB_SLOT_LOST);
    assert_true(pb_slot_verdict_fatal(PB_SLOT_LOST));
    char msg[512];
    pb_slot_explain(PB_SLOT_LOST, "orders", &lost, &recorded, msg, sizeof msg);
    assert_non_null(strstr(msg, "wal_status = lost"));
    assert_non_null(strstr(msg, "max_slot_wal_keep_size"));
    pb_slot_explain(PB_SLOT_LOST, "orders", &lost, &none, msg, sizeof msg);
    assert_non_null(strstr(msg, "its last position"));
}

/* A slot created again starts at the WAL position of its creation: past the record. So does a
 * slot advanced by hand (pg_replication_slot_advance). */
static void slot_past_the_record_stops(void **state)
{
    (void)state;
    pb_slot_state_t recreated = {true, false, LSN(1, 0x8000), LSN(1, 0x8100)};
    assert_int_equal(pb_slot_judge(&recreated, &recorded), PB_SLOT_REPLACED);
    pb_slot_state_t one_past = {true, false, LSN(1, 0x4000), LSN(1, 0x5001)};
    assert_int_equal(pb_slot_judge(&one_past, &recorded), PB_SLOT_REPLACED);
    pb_slot_state_t restart_past = {true, false, LSN(1, 0x5001), LSN(1, 0x5000)};
    assert_int_equal(pb_slot_judge(&restart_past, &recorded), PB_SLOT_REPLACED);
    assert_true(pb_slot_verdict_fatal(PB_SLOT_REPLACED));
    char msg[512];
    pb_slot_explain(PB_SLOT_REPLACED, "orders", &recreated, &recorded, msg, sizeof msg);
    assert_non_null(strstr(msg, "confirmed 1/8100"));
    assert_non_null(strstr(msg, "last position 1/5000"));
    assert_non_null(strstr(msg, "created again"));
}

/* The explanation fits the error record (512 bytes) whole, with the longest slot name. */
static void explanations_fit_the_error_record(void **state)
{
    (void)state;
    char name[64];
    memset(name, 'x', 63);
    name[63] = '\0';
    pb_slot_state_t slot = {true, false, LSN(0xffffffff, 0xffffffff), LSN(0xffffffff, 0xffffffff)};
    pb_slot_record_t rec = {true, LSN(0xffffffff, 0xfffffff0)};
    pb_slot_verdict_t fatal[] = {PB_SLOT_MISSING, PB_SLOT_LOST, PB_SLOT_REPLACED};
    for (size_t i = 0; i < 3; i++) {
        char msg[1024];
        pb_slot_explain(fatal[i], name, &slot, &rec, msg, sizeof msg);
        assert_true(strlen(msg) < 511);
        assert_non_null(strstr(msg, "start the cdc relay again"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_start_and_adoption_stream),
        cmocka_unit_test(own_slot_at_or_behind_the_record),
        cmocka_unit_test(missing_slot_with_a_record_stops),
        cmocka_unit_test(lost_slot_stops),
        cmocka_unit_test(slot_past_the_record_stops),
        cmocka_unit_test(explanations_fit_the_error_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
