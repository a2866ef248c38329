/* The word-at-a-time byte tests (common/bytes.h) and the scans built on them, each against the
 * byte-by-byte loop it replaces: JSON strings (common/json_span.c, the sinks' flat headers),
 * CloudEvents' control-character check and the NATS binding's percent-encoding. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bytes.h"
#include "common/json_span.h"
#include "common/str.h"
#include "sink/cloudevents.h"
#include "sink/sink.h"

static uint64_t rng = 88172645463325252u;

static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* ---- the word tests ----------------------------------------------------------------------- */

/* Checks every test on the eight bytes b: whether one flags, and the first byte it flags. */
static void check_word(const unsigned char b[8])
{
    static const unsigned below[] = {1, 0x20, 0x21, 0x80};
    static const unsigned char has[] = {'"', '\\', '%', 0x7f, 0xc2, 0x00, 0xff};
    uint64_t w = pb_bytes_load(b);
    for (size_t t = 0; t < sizeof below / sizeof below[0]; t++) {
        int first = -1;
        for (int k = 7; k >= 0; k--)
            if (b[k] < below[t])
                first = k;
        uint64_t f = pb_bytes_below(w, below[t]);
        assert_int_equal(f != 0, first >= 0);
        if (f)
            assert_int_equal(pb_bytes_first(f), first);
    }
    for (size_t t = 0; t < sizeof has / sizeof has[0]; t++) {
        int first = -1;
        for (int k = 7; k >= 0; k--)
            if (b[k] == has[t])
                first = k;
        uint64_t f = pb_bytes_has(w, has[t]);
        assert_int_equal(f != 0, first >= 0);
        if (f)
            assert_int_equal(pb_bytes_first(f), first);
    }
    int first = -1;
    for (int k = 7; k >= 0; k--)
        if (b[k] >= 0x80)
            first = k;
    assert_int_equal(pb_bytes_high(w) != 0, first >= 0);
    /* or-ed tests: the first byte any of them flags */
    first = -1;
    for (int k = 7; k >= 0; k--)
        if (b[k] == '"' || b[k] == '\\' || b[k] < 0x20)
            first = k;
    uint64_t f = pb_bytes_has(w, '"') | pb_bytes_has(w, '\\') | pb_bytes_below(w, 0x20);
    assert_int_equal(f != 0, first >= 0);
    if (f)
        assert_int_equal(pb_bytes_first(f), first);
}

static void word_tests_are_exact(void **state)
{
    (void)state;
    static const unsigned char backgrounds[] = {'a', 0x00, 0x1f, 0x20, 0x7f, 0x80, 0xc2, 0xff};
    unsigned char b[8];
    /* one byte of every value at every position, on uniform backgrounds */
    for (size_t g = 0; g < sizeof backgrounds; g++)
        for (int pos = 0; pos < 8; pos++)
            for (int v = 0; v < 256; v++) {
                memset(b, backgrounds[g], 8);
                b[pos] = (unsigned char)v;
                check_word(b);
            }
    /* random words whose bytes come from near the tests' edges */
    static const unsigned char edge[] = {0x00, 0x01, 0x1f, 0x20, 0x21, 0x22, 0x25, 0x5c,
                                         0x7e, 0x7f, 0x80, 0x81, 0xc1, 0xc2, 0xc3, 0xff, 'a'};
    for (int i = 0; i < 200000; i++) {
        uint64_t r = next_random();
        for (int k = 0; k < 8; k++)
            b[k] = (r >> (8 * k) & 1) ? edge[(r >> (8 * k + 1)) % sizeof edge]
                                       : (unsigned char)(r >> (8 * k));
        check_word(b);
    }
}

/* ---- the scans ---------------------------------------------------------------------------- */

/* A random text of n bytes (no NUL) from an alphabet that hits every scan's special bytes. */
static void random_text(char *out, size_t n, bool quotes)
{
    static const unsigned char alpha[] = {'a', 'b', '0', ' ', '"', '\\', '%', 0x01, 0x1f,
                                          0x7f, 0xc2, 0x85, 0x9f, 0xa0, 0xc3, 0xa9, 0xe2, 0x82,
                                          0xac, '~', '-'};
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next_random();
        unsigned char c = (r & 3) ? 'a' + (unsigned char)(r >> 2) % 26 : alpha[(r >> 2) % sizeof alpha];
        if (!quotes && c == '"')
            c = 'q';
        out[i] = (char)c;
    }
    out[n] = '\0';
}

/* The byte loop json_span's string scan replaced: s[0] == '"'. */
static size_t ref_string_len(const char *s, size_t len)
{
    for (size_t i = 1; i < len; i++) {
        if (s[i] == '\\')
            i++;
        else if (s[i] == '"')
            return i + 1;
        else if ((unsigned char)s[i] < 0x20)
            return 0;
    }
    return 0;
}

static bool ref_has_control(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len; i++) {
        if (p[i] < 0x20 || p[i] == 0x7f)
            return true;
        if (p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
            return true;
    }
    return false;
}

static void ref_nats_encode(char *out, const char *s, size_t len)
{
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '%')
            k += (size_t)sprintf(out + k, "%%%02X", c);
        else
            out[k++] = (char)c;
    }
    out[k] = '\0';
}

/* Each text sits at the very end of its own allocation, so a scan reading past it is caught by
 * AddressSanitizer in the sanitizer build. */
static void scans_match_byte_loops(void **state)
{
    (void)state;
    pb_buf_t enc = {0};
    for (int i = 0; i < 100000; i++) {
        size_t n = (size_t)(next_random() % 41);
        char text[64], want[256];
        random_text(text, n, true);

        /* a JSON string: '"' + text, closed or not */
        char *js = malloc(n + 2);
        js[0] = '"';
        memcpy(js + 1, text, n);
        size_t jl = n + 1;
        if (next_random() & 1)
            js[jl++] = '"';
        assert_int_equal(pb_json_value_len(js, jl), ref_string_len(js, jl));
        free(js);

        /* the NATS binding's encoding */
        char *raw = malloc(n ? n : 1);
        memcpy(raw, text, n);
        pb_buf_reset(&enc);
        pb_ce_nats_encode(&enc, raw, n);
        ref_nats_encode(want, text, n);
        assert_int_equal(enc.len, strlen(want));
        assert_memory_equal(enc.data, want, enc.len);
        free(raw);

        /* CloudEvents' control-character check, on the aggregate id */
        char *id = malloc(n + 1);
        memcpy(id, text, n + 1);
        pb_event_t ev = {.event_id = "e", .event_type = "t", .aggregate_type = "a",
                         .aggregate_id = id};
        pb_result_t res = {0};
        assert_int_equal(pb_ce_check_event(&ev, &res), !ref_has_control(text, n));
        free(id);
    }
    pb_buf_free(&enc);
}

/* pb_sink_prepare reads an object of plain strings in place: a value without escapes and
 * control characters, in valid UTF-8, comes back as its bytes; any other goes through jansson,
 * which must then agree with the text. */
static void flat_headers_match_the_parser(void **state)
{
    (void)state;
    static const pb_sink_ops_t ops = {.name = "fake"};
    pb_sink_t snk = {.ops = &ops};
    for (int i = 0; i < 50000; i++) {
        size_t n = (size_t)(next_random() % 41);
        char text[64];
        random_text(text, n, false);
        char *headers = malloc(n + 12); /* {"k": "<text>"} and its NUL */
        memcpy(headers, "{\"k\": \"", 7);
        memcpy(headers + 7, text, n);
        memcpy(headers + 7 + n, "\"}", 3);
        pb_event_t ev = {.headers = headers};
        pb_result_t res = {0};
        bool plain = pb_utf8_valid(text, n) && !strchr(text, '\\');
        for (size_t k = 0; k < n && plain; k++)
            plain = (unsigned char)text[k] >= 0x20;
        bool ok = pb_sink_prepare(&snk, &ev, &res);
        assert_int_equal(ev.flat_headers != 0, plain);
        if (plain) {
            assert_true(ok);
            const char *v = NULL;
            size_t vl = 0;
            assert_true(pb_header_string(&ev, "k", &v, &vl));
            assert_int_equal(vl, n);
            assert_memory_equal(v, text, n);
        }
        pb_sink_release(&ev);
        free(headers);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(word_tests_are_exact),
        cmocka_unit_test(scans_match_byte_loops),
        cmocka_unit_test(flat_headers_match_the_parser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
