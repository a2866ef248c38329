/* Unit tests for the signatures of postbox.emit's messages (cdc/signature.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "cdc/signature.h"

#define JSON "{\"event_id\": \"x\"}"
#define LONGER "{\"event_id\": \"longer\"}"

static unsigned char sample_bytes[PB_EMIT_KEY_SIZE];

/* The key 00 01 ... 3f, signing since LSN 1000; each test clears it. */
static pb_emit_key_t sample_key(void)
{
    pb_emit_key_t k = {0};
    for (int i = 0; i < PB_EMIT_KEY_SIZE; i++)
        sample_bytes[i] = (unsigned char)i;
    pb_emit_key_set(&k, sample_bytes, 1000);
    return k;
}

/* The MAC is HMAC-SHA-256 as the SQL side computes it; the expected value is from
 * `openssl dgst -sha256 -mac HMAC -macopt hexkey:000102...3f`. */
static void signs_with_hmac_sha256(void **state)
{
    (void)state;
    pb_emit_key_t k = sample_key();
    char out[12 + 64 + 1 + sizeof JSON];
    pb_emit_sign(&k, JSON, strlen(JSON), out);
    out[sizeof out - 1] = '\0';
    assert_string_equal(out, "hmac-sha256:7519389317f1772b603d421ecd85ef6fb6b8ae16381617713d1ec4e2"
                             "76fb30fd:" JSON);
    pb_emit_key_clear(&k);
}

static void verifies_and_returns_the_json(void **state)
{
    (void)state;
    pb_emit_key_t k = sample_key();
    char out[12 + 64 + 1 + sizeof JSON];
    pb_emit_sign(&k, JSON, strlen(JSON), out);
    const char *json = NULL;
    size_t len = 0;
    assert_int_equal(pb_emit_verify(&k, 5000, out, sizeof out - 1, &json, &len), PB_EMIT_SIGNED);
    assert_int_equal(len, strlen(JSON));
    assert_memory_equal(json, JSON, len);
    pb_emit_key_clear(&k);
}

/* One key checks message after message: each MAC starts from the key again, whatever the
 * message before it was (a forged one, a longer one) */
static void each_message_checked_on_its_own(void **state)
{
    (void)state;
    pb_emit_key_t k = sample_key();
    char first[12 + 64 + 1 + sizeof JSON], second[12 + 64 + 1 + sizeof LONGER];
    pb_emit_sign(&k, JSON, strlen(JSON), first);
    pb_emit_sign(&k, LONGER, strlen(LONGER), second);
    const char *json;
    size_t len;
    for (int round = 0; round < 3; round++) {
        assert_int_equal(pb_emit_verify(&k, 5000, second, sizeof second - 1, &json, &len),
                         PB_EMIT_SIGNED);
        first[sizeof first - 3] ^= 1;
        assert_int_equal(pb_emit_verify(&k, 5000, first, sizeof first - 1, &json, &len),
                         PB_EMIT_FORGED);
        first[sizeof first - 3] ^= 1;
        assert_int_equal(pb_emit_verify(&k, 5000, first, sizeof first - 1, &json, &len),
                         PB_EMIT_SIGNED);
    }
    /* set again: a new key replaces the old one */
    unsigned char other[PB_EMIT_KEY_SIZE] = {1};
    pb_emit_key_set(&k, other, 1000);
    assert_int_equal(pb_emit_verify(&k, 5000, first, sizeof first - 1, &json, &len),
                     PB_EMIT_FORGED);
    pb_emit_key_clear(&k);
    assert_null(k.mac);
}

static void refuses_tampering(void **state)
{
    (void)state;
    pb_emit_key_t k = sample_key();
    char out[12 + 64 + 1 + sizeof JSON];
    size_t n = sizeof out - 1;
    pb_emit_sign(&k, JSON, strlen(JSON), out);
    const char *json;
    size_t len;
    out[n - 3] ^= 1; /* the event changed, the signature kept */
    assert_int_equal(pb_emit_verify(&k, 5000, out, n, &json, &len), PB_EMIT_FORGED);
    out[n - 3] ^= 1;
    out[20] = out[20] == '0' ? '1' : '0'; /* the signature changed */
    assert_int_equal(pb_emit_verify(&k, 5000, out, n, &json, &len), PB_EMIT_FORGED);
    out[20] = 'G'; /* not hex */
    assert_int_equal(pb_emit_verify(&k, 5000, out, n, &json, &len), PB_EMIT_FORGED);
    /* truncated: no room for the signature and its colon */
    assert_int_equal(pb_emit_verify(&k, 5000, out, 40, &json, &len), PB_EMIT_FORGED);
    /* the right MAC under another key */
    pb_emit_sign(&k, JSON, strlen(JSON), out);
    sample_bytes[7] ^= 0x80;
    pb_emit_key_set(&k, sample_bytes, 1000);
    assert_int_equal(pb_emit_verify(&k, 5000, out, n, &json, &len), PB_EMIT_FORGED);
    pb_emit_key_clear(&k);
}

static void unsigned_only_before_the_key(void **state)
{
    (void)state;
    pb_emit_key_t k = sample_key();
    const char *json;
    size_t len;
    assert_int_equal(pb_emit_verify(&k, 999, JSON, strlen(JSON), &json, &len), PB_EMIT_LEGACY);
    assert_ptr_equal(json, JSON);
    assert_int_equal(pb_emit_verify(&k, 1000, JSON, strlen(JSON), &json, &len), PB_EMIT_UNSIGNED);
    assert_int_equal(pb_emit_verify(&k, 1000, "", 0, &json, &len), PB_EMIT_UNSIGNED);
    pb_emit_key_clear(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(signs_with_hmac_sha256),
        cmocka_unit_test(verifies_and_returns_the_json),
        cmocka_unit_test(each_message_checked_on_its_own),
        cmocka_unit_test(refuses_tampering),
        cmocka_unit_test(unsigned_only_before_the_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
