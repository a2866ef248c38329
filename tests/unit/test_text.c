/* Unit tests for texts cut to fit a buffer: pb_utf8_prefix, pb_text_copy, the JSON string
 * encoder and pb_result_set(f). Whatever they are given, what they produce is valid UTF-8 (what
 * PostgreSQL and a JSON log line accept) and a cut never splits a character. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "common/str.h"
#include "sink/sink.h"

/* 2, 3 and 4-byte characters */
#define E_ACUTE "\xc3\xa9"        /* é U+00E9 */
#define EURO "\xe2\x82\xac"       /* € U+20AC */
#define GRIN "\xf0\x9f\x98\x80"   /* 😀 U+1F600 */
#define MAX_CP "\xf4\x8f\xbf\xbf" /* U+10FFFF */

/* Strict UTF-8 check (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF). */
static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p;
        size_t len;
        unsigned cp, min;
        if (c < 0x80) {
            p++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        for (size_t i = 1; i < len; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        p += len;
    }
    return true;
}

/* ---- pb_utf8_prefix ---------------------------------------------------------------------- */

static void prefix_ascii_and_exact_fit(void **state)
{
    (void)state;
    assert_int_equal(pb_utf8_prefix("abc", 0), 0);
    assert_int_equal(pb_utf8_prefix("abc", 2), 2);
    assert_int_equal(pb_utf8_prefix("abc", 3), 3);     /* exact fit */
    assert_int_equal(pb_utf8_prefix("abc", 100), 3);   /* stops at the NUL */
    assert_int_equal(pb_utf8_prefix("", 10), 0);       /* empty */
    assert_int_equal(pb_utf8_prefix("a" EURO, 4), 4);  /* exact fit, ending with a character */
    assert_int_equal(pb_utf8_prefix("a" GRIN, 5), 5);
    assert_int_equal(pb_utf8_prefix(E_ACUTE EURO GRIN, 9), 9);
    assert_int_equal(pb_utf8_prefix(E_ACUTE EURO GRIN, 100), 9);
}

static void prefix_never_splits_a_character(void **state)
{
    (void)state;
    /* 2-byte */
    assert_int_equal(pb_utf8_prefix("a" E_ACUTE, 2), 1);
    assert_int_equal(pb_utf8_prefix(E_ACUTE, 1), 0);
    /* 3-byte: cut after its first or second byte */
    assert_int_equal(pb_utf8_prefix("a" EURO, 2), 1);
    assert_int_equal(pb_utf8_prefix("a" EURO, 3), 1);
    assert_int_equal(pb_utf8_prefix(EURO EURO, 5), 3);
    /* 4-byte: after its first, second or third byte */
    assert_int_equal(pb_utf8_prefix("a" GRIN, 2), 1);
    assert_int_equal(pb_utf8_prefix("a" GRIN, 3), 1);
    assert_int_equal(pb_utf8_prefix("a" GRIN, 4), 1);
    assert_int_equal(pb_utf8_prefix(MAX_CP, 3), 0);
    assert_int_equal(pb_utf8_prefix(MAX_CP, 4), 4);
    /* every cut of a mixed text ends on a boundary */
    const char *mixed = "x" E_ACUTE EURO GRIN "y" GRIN EURO E_ACUTE;
    size_t len = strlen(mixed);
    for (size_t n = 0; n <= len + 1; n++) {
        size_t k = pb_utf8_prefix(mixed, n);
        assert_true(k <= n && k <= len);
        assert_true(k + 3 >= (n < len ? n : len)); /* at most 3 bytes of a character dropped */
        assert_true(k == len || ((unsigned char)mixed[k] & 0xc0) != 0x80);
    }
}

static void prefix_counts_invalid_bytes_as_characters(void **state)
{
    (void)state;
    /* bytes that start no valid sequence are single characters (pb_text_copy replaces them) */
    assert_int_equal(pb_utf8_prefix("a\xff" "b", 2), 2);
    assert_int_equal(pb_utf8_prefix("a\xff" "b", 3), 3);
    assert_int_equal(pb_utf8_prefix("\x80\x80", 1), 1);         /* stray continuation bytes */
    assert_int_equal(pb_utf8_prefix("\xc0\xaf", 1), 1);         /* overlong '/' */
    assert_int_equal(pb_utf8_prefix("\xe0\x80\xaf", 2), 2);     /* overlong, 3 bytes */
    assert_int_equal(pb_utf8_prefix("\xed\xa0\x80", 1), 1);     /* surrogate U+D800 */
    assert_int_equal(pb_utf8_prefix("\xf4\x90\x80\x80", 2), 2); /* above U+10FFFF */
    /* a character cut short by the end of the string, before a valid one */
    assert_int_equal(pb_utf8_prefix("\xe2\x82" "a", 3), 3);
}

/* ---- pb_text_copy ------------------------------------------------------------------------ */

static void copy_cuts_on_boundaries(void **state)
{
    (void)state;
    char d[16];
    /* 2-byte character at the cut: "a" + "é" needs 4 bytes with the NUL */
    assert_int_equal(pb_text_copy(d, 3, "a" E_ACUTE), 1);
    assert_string_equal(d, "a");
    assert_int_equal(pb_text_copy(d, 4, "a" E_ACUTE), 3);
    assert_string_equal(d, "a" E_ACUTE); /* exact fit */
    /* 3-byte */
    assert_int_equal(pb_text_copy(d, 3, "a" EURO), 1);
    assert_int_equal(pb_text_copy(d, 4, "a" EURO), 1);
    assert_string_equal(d, "a");
    assert_int_equal(pb_text_copy(d, 5, "a" EURO), 4);
    assert_string_equal(d, "a" EURO);
    /* 4-byte */
    for (size_t n = 2; n <= 5; n++) {
        assert_int_equal(pb_text_copy(d, n, "a" GRIN), 1);
        assert_string_equal(d, "a");
    }
    assert_int_equal(pb_text_copy(d, 6, "a" GRIN), 5);
    assert_string_equal(d, "a" GRIN);
    /* every size of a mixed text: a valid prefix of it */
    const char *mixed = "x" E_ACUTE EURO GRIN "y" GRIN EURO E_ACUTE;
    for (size_t n = 1; n <= strlen(mixed) + 2; n++) {
        char buf[64];
        size_t k = pb_text_copy(buf, n, mixed);
        assert_true(k < n);
        assert_int_equal(strlen(buf), k);
        assert_true(valid_utf8(buf));
        assert_memory_equal(buf, mixed, k);
        assert_true(k + 4 >= (n - 1 < strlen(mixed) ? n - 1 : strlen(mixed)));
    }
}

static void copy_empty_null_and_zero_size(void **state)
{
    (void)state;
    char d[8] = "zzzzzzz";
    assert_int_equal(pb_text_copy(d, 0, "abc"), 0);
    assert_string_equal(d, "zzzzzzz"); /* untouched */
    assert_int_equal(pb_text_copy(d, 1, "abc"), 0);
    assert_string_equal(d, "");
    assert_int_equal(pb_text_copy(d, sizeof d, ""), 0);
    assert_string_equal(d, "");
    assert_int_equal(pb_text_copy(d, sizeof d, NULL), 0);
    assert_string_equal(d, "");
    assert_int_equal(pb_text_copy(d, sizeof d, "abcdefg"), 7); /* exact fit */
    assert_string_equal(d, "abcdefg");
    assert_int_equal(pb_text_copy(d, sizeof d, "abcdefgh"), 7);
    assert_string_equal(d, "abcdefg");
}

static void copy_replaces_invalid_bytes(void **state)
{
    (void)state;
    char d[32];
    pb_text_copy(d, sizeof d, "a\xff" "b");
    assert_string_equal(d, "a?b");
    pb_text_copy(d, sizeof d, "\xc0\xaf"); /* overlong */
    assert_string_equal(d, "??");
    pb_text_copy(d, sizeof d, "\xe0\x80\xaf"); /* overlong, 3 bytes */
    assert_string_equal(d, "???");
    pb_text_copy(d, sizeof d, "\xed\xa0\x80" "x"); /* surrogate */
    assert_string_equal(d, "???x");
    pb_text_copy(d, sizeof d, "\xf4\x90\x80\x80"); /* above U+10FFFF */
    assert_string_equal(d, "????");
    pb_text_copy(d, sizeof d, "\xf5\x80\x80\x80"); /* no such lead byte */
    assert_string_equal(d, "????");
    pb_text_copy(d, sizeof d, "a\xe2\x82"); /* a character cut short by the string's end */
    assert_string_equal(d, "a??");
    pb_text_copy(d, sizeof d, "\xe2\x82" "a" EURO);
    assert_string_equal(d, "??a" EURO);
    pb_text_copy(d, sizeof d, "latin1 caf\xe9!");
    assert_string_equal(d, "latin1 caf?!");
    assert_true(valid_utf8(d));
}

static void copy_replaces_control_characters(void **state)
{
    (void)state;
    char d[32];
    pb_text_copy(d, sizeof d, "a\nb\r\nc\td\x01" "e\x1b" "f\x7f");
    assert_string_equal(d, "a b  c\td?e?f\x7f");
}

/* A reason quoting a long multi-byte name, cut at every size around 240 bytes. */
static void copy_long_multibyte_reason(void **state)
{
    (void)state;
    char src[1024] = "header name \"xy";
    for (int i = 0; i < 200; i++)
        strcat(src, i % 3 == 0 ? EURO : i % 3 == 1 ? E_ACUTE : GRIN);
    for (size_t n = 230; n <= 250; n++) {
        char d[256];
        size_t k = pb_text_copy(d, n, src);
        assert_true(k < n && k + 4 >= n - 1);
        assert_true(valid_utf8(d));
        assert_memory_equal(d, src, k);
    }
}

/* ---- pb_buf_append_json_string ----------------------------------------------------------- */

static void json_string_is_valid_utf8(void **state)
{
    (void)state;
    pb_buf_t b = {0};
    pb_buf_append_json_string(&b, "q\"b\\n\n\x01" E_ACUTE EURO GRIN);
    assert_string_equal(b.data, "\"q\\\"b\\\\n\\n\\u0001" E_ACUTE EURO GRIN "\"");
    pb_buf_reset(&b);
    /* invalid bytes, an overlong form, a surrogate, a cut character: U+FFFD each */
    pb_buf_append_json_string(&b, "a\xff" "b\xc0\xaf" "c\xed\xa0\x80" "d\xe2\x82");
    assert_true(valid_utf8(b.data));
    assert_string_equal(b.data, "\"a\\ufffdb\\ufffd\\ufffdc\\ufffd\\ufffd\\ufffdd\\ufffd\\ufffd\"");
    json_error_t jerr;
    json_t *j = json_loads(b.data, JSON_DECODE_ANY, &jerr);
    assert_non_null(j);
    assert_true(json_is_string(j));
    json_decref(j);
    pb_buf_reset(&b);
    pb_buf_append_json_string(&b, "");
    assert_string_equal(b.data, "\"\"");
    pb_buf_free(&b);
}

/* ---- pb_result_set / pb_result_setf ------------------------------------------------------ */

static void result_reason_is_cut_on_a_boundary(void **state)
{
    (void)state;
    char name[400] = "xy";
    for (int i = 0; i < 100; i++)
        strcat(name, EURO);
    pb_result_t r;
    memset(&r, 0xff, sizeof r);
    pb_result_setf(&r, PB_OUT_REJECT, "header name \"%s\" longer than 255 bytes", name);
    assert_int_equal(r.outcome, PB_OUT_REJECT);
    assert_true(valid_utf8(r.error));
    assert_true(strlen(r.error) + 3 >= sizeof r.error - 1);
    assert_memory_equal(r.error, "header name \"xy" EURO, 18);
    /* a reason cut elsewhere already (snprintf with a precision): the half character goes */
    char cut[64];
    snprintf(cut, sizeof cut, "unroutable: %.14s", "z" E_ACUTE E_ACUTE E_ACUTE E_ACUTE E_ACUTE
                                                    E_ACUTE E_ACUTE E_ACUTE);
    pb_result_set(&r, PB_OUT_RETRY, cut);
    assert_int_equal(r.outcome, PB_OUT_RETRY);
    assert_true(valid_utf8(r.error));
    pb_result_set(&r, PB_OUT_PUBLISHED, NULL);
    assert_string_equal(r.error, "");
}

/* pb_parse_int64 reads only its span: the bytes after it (here more digits) are not part of it. */
static void int64_from_a_span(void **state)
{
    (void)state;
    int64_t v = -1;
    assert_true(pb_parse_int64("1234", 2, &v));
    assert_int_equal(v, 12);
    assert_true(pb_parse_int64("-7x", 2, &v));
    assert_int_equal(v, -7);
    assert_true(pb_parse_int64("+0", 2, &v));
    assert_int_equal(v, 0);
    assert_true(pb_parse_int64("9223372036854775807", 19, &v));
    assert_true(v == INT64_MAX);
    assert_true(pb_parse_int64("-9223372036854775808", 20, &v));
    assert_true(v == INT64_MIN);
    v = 5;
    assert_false(pb_parse_int64("9223372036854775808", 19, &v));
    assert_false(pb_parse_int64("-9223372036854775809", 20, &v));
    assert_false(pb_parse_int64("", 0, &v));
    assert_false(pb_parse_int64(NULL, 0, &v));
    assert_false(pb_parse_int64("-", 1, &v));
    assert_false(pb_parse_int64(" 1", 2, &v));
    assert_false(pb_parse_int64("1 ", 2, &v));
    assert_false(pb_parse_int64("1.5", 3, &v));
    assert_false(pb_parse_int64("1\0", 2, &v));
    assert_int_equal(v, 5); /* untouched on failure */
    /* every length from 1 to 19 digits, either sign, as printf writes them */
    uint64_t x = 88172645463325252u;
    for (int i = 0; i < 100000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int64_t want = (int64_t)(x >> (x % 63 + 1)) * ((x & 1) ? -1 : 1);
        char text[32];
        int len = snprintf(text, sizeof text, (x & 2) ? "%lld" : "%+lld", (long long)want);
        assert_true(pb_parse_int64(text, (size_t)len, &v));
        assert_true(v == want);
    }
}

/* pb_buf_put_int64 writes what printf's %lld does, the extremes included. */
static void int64_in_decimal(void **state)
{
    (void)state;
    const int64_t values[] = {0, 7, -1, 42, 1000000, INT64_MAX, INT64_MIN};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        pb_buf_t b = {0};
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)values[i]);
        pb_buf_puts(&b, "x");
        pb_buf_put_int64(&b, values[i]);
        assert_string_equal(b.data + 1, want);
        pb_buf_free(&b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(prefix_ascii_and_exact_fit),
        cmocka_unit_test(prefix_never_splits_a_character),
        cmocka_unit_test(prefix_counts_invalid_bytes_as_characters),
        cmocka_unit_test(copy_cuts_on_boundaries),
        cmocka_unit_test(copy_empty_null_and_zero_size),
        cmocka_unit_test(int64_from_a_span),
        cmocka_unit_test(int64_in_decimal),
        cmocka_unit_test(copy_replaces_invalid_bytes),
        cmocka_unit_test(copy_replaces_control_characters),
        cmocka_unit_test(copy_long_multibyte_reason),
        cmocka_unit_test(json_string_is_valid_utf8),
        cmocka_unit_test(result_reason_is_cut_on_a_boundary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
