/* PII masking (relay/mask.c): rule syntax, nested paths, arrays (with and without [*]), missing
 * fields, values a rule cannot go into (dropped), non-string values, drop / lastN / hmac (RFC
 * 4231 vectors), header names and event types in any case, the allow list, the event hook and
 * the key file. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hmac.h"
#include "config/config.h"
#include "relay/mask.h"

/* RFC 4231 test case 6/7 key: 131 bytes of 0xaa (long enough for PB_MASK_MIN_KEY). */
static unsigned char key131[131];

/* The engine of one or two [mask] entries, with relay.mask_allow_types = allow (may be NULL). */
static pb_mask_t *build_allow(const char *type, const char *rules, const char *type2,
                              const char *rules2, const char *allow)
{
    char *types[2] = {(char *)type, (char *)type2};
    char *texts[2] = {(char *)rules, (char *)rules2};
    pb_mask_t *m = NULL;
    pb_error_t err;
    pb_status_t st = pb_mask_build(type2 ? 2 : 1, types, texts, allow, key131, sizeof key131, &m,
                                   &err);
    if (st != PB_OK)
        fail_msg("build failed: %s", err.msg);
    return m;
}

static pb_mask_t *build2(const char *type, const char *rules, const char *type2,
                         const char *rules2)
{
    return build_allow(type, rules, type2, rules2, NULL);
}

static pb_mask_t *build(const char *type, const char *rules)
{
    return build2(type, rules, NULL, NULL);
}

/* What the last apply() dropped as unfit for a rule. */
static pb_mask_unfit_t last_unfit;

/* The payload of an event of type "t" after the rules; "=" when nothing changed. */
static char *apply(pb_mask_t *m, bool headers, const char *json)
{
    static char result[4096];
    pb_buf_t out = {0};
    bool changed;
    pb_error_t why;
    pb_status_t st = pb_mask_rewrite(m, "t", headers, json, strlen(json), &out, &changed,
                                     &last_unfit, &why);
    if (st != PB_OK)
        snprintf(result, sizeof result, "error: %s", why.msg);
    else if (!changed)
        snprintf(result, sizeof result, "=");
    else
        snprintf(result, sizeof result, "%s", out.data);
    if (st == PB_OK && !changed)
        assert_int_equal(out.len, 0);
    pb_buf_free(&out);
    return result;
}

static char *apply_rules(const char *rules, const char *json)
{
    pb_mask_t *m = build("t", rules);
    char *r = apply(m, false, json);
    pb_mask_free(m);
    return r;
}

static void rule_syntax(void **state)
{
    (void)state;
    static const struct {
        const char *rules;
        const char *error; /* NULL: valid */
    } cases[] = {
        {"drop a", NULL},
        {"drop customer.ssn, last4 card.number, hmac customer.email", NULL},
        {"drop items[*].card, last0 items[2].x, drop [0], drop *.email", NULL},
        {"drop [\"a.b c\"].d, hmac headers:x-user-email, drop headers:[\"x.y\"]", NULL},
        {"  drop   a  ,  last100 b  ", NULL},
        {"dorp a", "rule 1 \"dorp a\": unknown action"},
        {"drop a, lost4 b", "rule 2 \"lost4 b\": unknown action"},
        {"drop a; hmac b", "separated by ','"},
        {"drop a,", "rule 2 \"\": empty rule"},
        {"", "no rules"},
        {"drop", "no path after the action"},
        {"last101 a", "at most 100"},
        {"drop a..b", "expected a field name"},
        {"drop a.b*", "unexpected character"},
        {"drop a[", "expected a number"},
        {"drop a[1", "expected ']'"},
        {"drop a[*", "expected ']'"},
        {"drop a[\"x\"", "expected '\"]'"},
        {"drop a[\"\"]", "empty quoted name"},
        {"drop headers:", "no path"},
        {"drop a b", "unexpected character"},
        {"drop a[99999999999]", "too large"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb_error_t err = {0};
        pb_status_t st = pb_mask_check_rules("t", cases[i].rules, NULL, &err);
        if (!cases[i].error) {
            if (st != PB_OK)
                fail_msg("\"%s\" refused: %s", cases[i].rules, err.msg);
            continue;
        }
        if (st != PB_FATAL || !strstr(err.msg, cases[i].error))
            fail_msg("\"%s\": expected an error with \"%s\", got %s", cases[i].rules,
                     cases[i].error, st == PB_OK ? "none" : err.msg);
    }
    bool hmac = true;
    assert_int_equal(pb_mask_check_rules("t", "drop a, last4 b", &hmac, NULL), PB_OK);
    assert_false(hmac);
    assert_int_equal(pb_mask_check_rules("t", "drop a, hmac b", &hmac, NULL), PB_OK);
    assert_true(hmac);
    /* 65 rules: too many for one type */
    char many[1024] = "";
    for (int i = 0; i < 65; i++)
        strcat(many, i ? ", drop a" : "drop a");
    assert_int_equal(pb_mask_check_rules("t", many, NULL, NULL), PB_FATAL);
}

static void nested_paths(void **state)
{
    (void)state;
    const char *doc = "{\"customer\": {\"email\": \"a@b.example\", \"name\": \"Ann\", "
                      "\"address\": {\"zip\": \"12345\", \"city\": \"X\"}}, \"n\": 1}";
    assert_string_equal(apply_rules("drop customer.email", doc),
                        "{\"customer\":{\"name\":\"Ann\",\"address\":{\"zip\": \"12345\", "
                        "\"city\": \"X\"}},\"n\":1}");
    assert_string_equal(apply_rules("last2 customer.address.zip", doc),
                        "{\"customer\":{\"email\":\"a@b.example\",\"name\":\"Ann\","
                        "\"address\":{\"zip\":\"***45\",\"city\":\"X\"}},\"n\":1}");
    /* the whole object, and every member of an object */
    assert_string_equal(apply_rules("drop customer", doc), "{\"n\":1}");
    assert_string_equal(apply_rules("last0 customer.address.*", doc),
                        "{\"customer\":{\"email\":\"a@b.example\",\"name\":\"Ann\","
                        "\"address\":{\"zip\":\"*****\",\"city\":\"*\"}},\"n\":1}");
    /* the last member dropped: no comma left behind */
    assert_string_equal(apply_rules("drop n", doc),
                        "{\"customer\":{\"email\": \"a@b.example\", \"name\": \"Ann\", "
                        "\"address\": {\"zip\": \"12345\", \"city\": \"X\"}}}");
    assert_string_equal(apply_rules("drop a, drop b", "{\"a\":1,\"b\":2}"), "{}");
    /* quoted names with dots and spaces; escaped member names match their decoded text */
    assert_string_equal(apply_rules("drop [\"a.b c\"].d", "{\"a.b c\":{\"d\":1,\"e\":2}}"),
                        "{\"a.b c\":{\"e\":2}}");
    assert_string_equal(apply_rules("drop email", "{\"e\\u006dail\":\"x\",\"k\":1}"),
                        "{\"k\":1}");
}

static void arrays(void **state)
{
    (void)state;
    const char *doc = "{\"items\": [{\"card\": \"4111111111111111\", \"sku\": \"A\"}, "
                      "{\"sku\": \"B\"}, {\"card\": \"5500000000000004\"}]}";
    assert_string_equal(apply_rules("last4 items[*].card", doc),
                        "{\"items\":[{\"card\":\"************1111\",\"sku\":\"A\"},"
                        "{\"sku\":\"B\"},{\"card\":\"************0004\"}]}");
    assert_string_equal(apply_rules("drop items[2].card", doc),
                        "{\"items\":[{\"card\": \"4111111111111111\", \"sku\": \"A\"},"
                        "{\"sku\": \"B\"},{}]}");
    assert_string_equal(apply_rules("drop items[0]", doc),
                        "{\"items\":[{\"sku\": \"B\"},{\"card\": \"5500000000000004\"}]}");
    assert_string_equal(apply_rules("drop items[*]", doc), "{\"items\":[]}");
    /* a payload that is an array, and arrays in arrays */
    assert_string_equal(apply_rules("drop [*].pan", "[{\"pan\":1,\"x\":2},{\"pan\":3}]"),
                        "[{\"x\":2},{}]");
    assert_string_equal(apply_rules("last1 m[*][1]", "{\"m\":[[\"ab\",\"cd\"],[\"ef\"]]}"),
                        "{\"m\":[[\"ab\",\"*d\"],[\"ef\"]]}");
    /* a missing member: no match */
    assert_string_equal(apply_rules("drop x[0]", doc), "=");
}

/* A path without [*] reaches into arrays too: a name (or `*`) meeting an array goes into each
 * of its elements, as deep as arrays nest; [*] says the same explicitly. (It used to match
 * nothing: "drop items.card" published every card.) */
static void names_go_into_arrays(void **state)
{
    (void)state;
    const char *doc = "{\"items\": [{\"card\": \"4111111111111111\", \"sku\": \"A\"}, "
                      "{\"sku\": \"B\"}, {\"card\": \"5500000000000004\"}]}";
    const char *no_cards = "{\"items\":[{\"sku\":\"A\"},{\"sku\":\"B\"},{}]}";
    assert_string_equal(apply_rules("drop items.card", doc), no_cards);
    assert_string_equal(apply_rules("drop items[*].card", doc), no_cards);
    assert_string_equal(apply_rules("last4 items.card", doc),
                        "{\"items\":[{\"card\":\"************1111\",\"sku\":\"A\"},"
                        "{\"sku\":\"B\"},{\"card\":\"************0004\"}]}");
    /* arrays in arrays, an array at the root, `*` over the elements' members */
    assert_string_equal(apply_rules("drop m.ssn", "{\"m\":[[{\"ssn\":1,\"k\":2}],[{\"ssn\":3}]]}"),
                        "{\"m\":[[{\"k\":2}],[{}]]}");
    assert_string_equal(apply_rules("drop pan", "[{\"pan\":1,\"x\":2},{\"pan\":3}]"),
                        "[{\"x\":2},{}]");
    assert_string_equal(apply_rules("last0 people.*", "{\"people\":[{\"a\":\"xy\"},{\"b\":7}]}"),
                        "{\"people\":[{\"a\":\"**\"},{\"b\":\"*\"}]}");
    /* a name that ends the path names the member of each element, not the array */
    assert_string_equal(apply_rules("drop items", "{\"items\":[1,2],\"k\":0}"), "{\"k\":0}");
    assert_int_equal(last_unfit.n, 0);
}

static void missing_fields(void **state)
{
    (void)state;
    assert_string_equal(apply_rules("drop customer.ssn", "{\"customer\":{\"name\":\"x\"}}"),
                        "=");
    assert_string_equal(apply_rules("drop customer.ssn", "{\"n\":1}"), "=");
    assert_string_equal(apply_rules("drop items[5]", "{\"items\":[1,2]}"), "=");
    assert_string_equal(apply_rules("drop a", "{}"), "=");
    assert_string_equal(apply_rules("drop a", "[]"), "=");
    /* null holds nothing: a path through it matches nothing */
    assert_string_equal(apply_rules("drop customer.ssn", "{\"customer\":null}"), "=");
    assert_int_equal(last_unfit.n, 0);
    /* rules of other types do not apply */
    pb_mask_t *m = build("other", "drop a");
    assert_string_equal(apply(m, false, "{\"a\":1}"), "=");
    assert_false(pb_mask_applies(m, "t"));
    assert_true(pb_mask_applies(m, "other"));
    pb_mask_free(m);
}

static void non_string_values(void **state)
{
    (void)state;
    /* numbers are masked by their text, which is kept exactly elsewhere */
    assert_string_equal(apply_rules("last4 card", "{\"card\": 4111111111111111, \"price\": "
                                                  "19.990, \"big\": 123456789012345678901234567890}"),
                        "{\"card\":\"************1111\",\"price\":19.990,"
                        "\"big\":123456789012345678901234567890}");
    assert_string_equal(apply_rules("last2 n", "{\"n\":-1.5e3}"), "{\"n\":\"****e3\"}");
    /* null carries nothing: left as it is */
    assert_string_equal(apply_rules("last4 a, hmac b", "{\"a\":null,\"b\":null}"),
                        "{\"a\":null,\"b\":null}");
    /* lastN cannot mask a boolean, an object or an array: an error, never the value unmasked */
    assert_non_null(strstr(apply_rules("last4 a", "{\"a\":true}"),
                           "error: rule \"last4 a\": the value is a boolean"));
    assert_non_null(strstr(apply_rules("last4 a", "{\"a\":{\"b\":1}}"), "is an object"));
    assert_non_null(strstr(apply_rules("last4 a", "{\"a\":[1]}"), "is an array"));
    /* drop takes any value */
    assert_string_equal(apply_rules("drop a, drop b, drop c", "{\"a\":true,\"b\":{},\"c\":[]}"),
                        "{}");
    /* lastN counts characters, not bytes; escapes and surrogate pairs are one character */
    assert_string_equal(apply_rules("last3 s", "{\"s\":\"ab\xc3\xa9" "c\\n\\ud83d\\ude00\"}"),
                        "{\"s\":\"***c\\n\\ud83d\\ude00\"}");
    assert_string_equal(apply_rules("last9 s", "{\"s\":\"abc\"}"), "{\"s\":\"abc\"}");
}

static void hex_of(const unsigned char *key, size_t key_len, const char *data, char hex[65])
{
    pb_hmac_t *h = pb_hmac_new(key, key_len);
    pb_hmac_hex(h, data, strlen(data), hex);
    pb_hmac_free(h);
}

static void hmac_rfc4231(void **state)
{
    (void)state;
    char hex[65];
    unsigned char k1[20];
    memset(k1, 0x0b, sizeof k1);
    hex_of(k1, sizeof k1, "Hi There", hex); /* test case 1 */
    assert_string_equal(hex, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    hex_of((const unsigned char *)"Jefe", 4, "what do ya want for nothing?", hex); /* case 2 */
    assert_string_equal(hex, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    hex_of(key131, sizeof key131, "Test Using Larger Than Block-Size Key - Hash Key First",
           hex); /* case 6 */
    assert_string_equal(hex, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

    /* through the rules: a string is hashed over its decoded text (case 6 and 7) */
    assert_string_equal(
        apply_rules("hmac s", "{\"s\":\"Test Using Larger Than Block-Size Key - Hash Key First\"}"),
        "{\"s\":\"60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54\"}");
    assert_string_equal(
        apply_rules("hmac s",
                    "{\"s\":\"This is a test using a larger than block-size key and a larger "
                    "than block-size data. The key needs to be hashed before being used by the "
                    "HMAC algorithm.\"}"),
        "{\"s\":\"9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2\"}");
    /* escapes are decoded first: the same text, the same hash */
    assert_string_equal(
        apply_rules("hmac s", "{\"s\":\"Test Using Larger Than Block-Size Key \\u002d Hash Key "
                              "First\"}"),
        "{\"s\":\"60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54\"}");
    /* a number, a boolean, an object: over their JSON text */
    char want[128];
    hex_of(key131, sizeof key131, "4111111111111111", hex);
    snprintf(want, sizeof want, "{\"n\":\"%s\"}", hex);
    assert_string_equal(apply_rules("hmac n", "{\"n\":4111111111111111}"), want);
    hex_of(key131, sizeof key131, "{\"a\": [1, 2]}", hex);
    snprintf(want, sizeof want, "{\"o\":\"%s\"}", hex);
    assert_string_equal(apply_rules("hmac o", "{\"o\":{\"a\": [1, 2]}}"), want);
    hex_of(key131, sizeof key131, "true", hex);
    snprintf(want, sizeof want, "[\"%s\"]", hex);
    assert_string_equal(apply_rules("hmac [0]", "[true]"), want);
}

static void precedence_and_every_type(void **state)
{
    (void)state;
    /* drop wins over another rule on the same value; otherwise the first one listed */
    assert_string_equal(apply_rules("last1 a, drop a", "{\"a\":\"xy\",\"b\":1}"), "{\"b\":1}");
    assert_string_equal(apply_rules("last1 a, last0 a", "{\"a\":\"xy\"}"), "{\"a\":\"*y\"}");
    /* a replaced value is replaced whole: rules deeper inside it do not matter */
    pb_mask_t *m = build2("t", "last0 a.b", "*", "drop a.b.c, drop ssn");
    assert_string_equal(apply(m, false, "{\"a\":{\"b\":\"xyz\"},\"ssn\":\"1\",\"k\":2}"),
                        "{\"a\":{\"b\":\"***\"},\"k\":2}");
    assert_true(pb_mask_applies(m, "anything"));
    pb_buf_t out = {0};
    bool changed;
    pb_error_t why;
    const char *doc = "{\"ssn\":\"1\"}";
    assert_int_equal(
        pb_mask_rewrite(m, "other", false, doc, strlen(doc), &out, &changed, NULL, &why), PB_OK);
    assert_true(changed);
    assert_string_equal(out.data, "{}");
    pb_buf_free(&out);
    pb_mask_free(m);
}

static void headers_rules(void **state)
{
    (void)state;
    pb_mask_t *m = build("t", "hmac headers:x-user-email, drop headers:[\"x.ip\"], drop email");
    char hex[65], want[256];
    hex_of(key131, sizeof key131, "a@b.example", hex);
    snprintf(want, sizeof want, "{\"trace\":\"t1\",\"x-user-email\":\"%s\"}", hex);
    assert_string_equal(apply(m, true, "{\"trace\":\"t1\",\"x-user-email\":\"a@b.example\","
                                       "\"x.ip\":\"10.0.0.1\"}"),
                        want);
    /* the payload rules are not the headers' ones, and the other way round */
    assert_string_equal(apply(m, false, "{\"x-user-email\":\"a\",\"email\":\"b\"}"),
                        "{\"x-user-email\":\"a\"}");
    assert_string_equal(apply(m, true, "{\"email\":\"b\"}"), "=");
    pb_mask_free(m);
}

static void invalid_json(void **state)
{
    (void)state;
    static const char *const docs[] = {
        "", "{", "{\"a\":}", "{\"a\" 1}", "{\"a\":1,}", "[1,]", "{\"a\":01}", "{\"a\":1.}",
        "{\"a\":-}", "{\"a\":tru}", "{\"a\":\"x}", "{\"a\":\"\\x\"}", "{\"a\":\"\\u12g4\"}",
        "{\"a\":\"\x01\"}", "{\"a\":1} x", "{a:1}", "{\"a\":1}}", "nul",
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        const char *r = apply_rules("drop a", docs[i]);
        if (strncmp(r, "error: not valid JSON at byte", 29) != 0)
            fail_msg("\"%s\": expected an error, got %s", docs[i], r);
    }
    /* too deep */
    char deep[2 * (PB_MASK_MAX_DEPTH + 10) + 16];
    size_t n = 0;
    for (int i = 0; i < PB_MASK_MAX_DEPTH + 10; i++)
        deep[n++] = '[';
    for (int i = 0; i < PB_MASK_MAX_DEPTH + 10; i++)
        deep[n++] = ']';
    deep[n] = '\0';
    assert_non_null(strstr(apply_rules("drop a", deep), "nested deeper"));
}

static void event_masked_and_restored(void **state)
{
    (void)state;
    pb_mask_t *m = build("order.created", "last4 card, hmac headers:email");
    const char *payload = "{\"card\":\"4111111111111111\",\"n\":1}";
    const char *headers = "{\"email\":\"x\"}";
    pb_event_t ev = {.event_type = "order.created", .payload = payload,
                     .payload_len = strlen(payload), .headers = headers};
    pb_masked_t keep = {0};
    pb_result_t res = {0};
    assert_true(pb_mask_event(m, &ev, &keep, &res));
    assert_string_equal(ev.payload, "{\"card\":\"************1111\",\"n\":1}");
    assert_int_equal(ev.payload_len, strlen(ev.payload));
    assert_non_null(strstr(ev.headers, "\"email\":\""));
    assert_null(strstr(ev.headers, "\"x\""));
    pb_mask_restore(&ev, &keep);
    assert_ptr_equal(ev.payload, payload);
    assert_int_equal(ev.payload_len, strlen(payload));
    assert_ptr_equal(ev.headers, headers);
    pb_mask_restore(&ev, &keep); /* twice is harmless */

    /* not valid JSON while rules apply: rejected with the reason, pointers untouched */
    const char *broken = "{\"card\": 41";
    ev = (pb_event_t){.event_type = "order.created", .payload = broken,
                      .payload_len = strlen(broken)};
    assert_false(pb_mask_event(m, &ev, &keep, &res));
    assert_int_equal(res.outcome, PB_OUT_REJECT);
    assert_non_null(strstr(res.error, "payload cannot be masked by the [mask] rules of "
                                      "\"order.created\": not valid JSON"));
    assert_ptr_equal(ev.payload, broken);
    pb_mask_restore(&ev, &keep);

    /* no headers, or blank ones: nothing to mask there */
    const char *blanks[] = {NULL, "", " \n"};
    for (int i = 0; i < 3; i++) {
        ev = (pb_event_t){.event_type = "order.created", .payload = payload,
                          .payload_len = strlen(payload), .headers = blanks[i]};
        assert_true(pb_mask_event(m, &ev, &keep, &res));
        assert_ptr_equal(ev.headers, blanks[i]);
        assert_string_equal(ev.payload, "{\"card\":\"************1111\",\"n\":1}");
        pb_mask_restore(&ev, &keep);
    }

    /* another type: left alone, even when it is not JSON */
    ev = (pb_event_t){.event_type = "order.paid", .payload = broken,
                      .payload_len = strlen(broken)};
    res = (pb_result_t){0};
    assert_true(pb_mask_event(m, &ev, &keep, &res));
    assert_ptr_equal(ev.payload, broken);
    assert_false(keep.active);
    pb_mask_restore(&ev, &keep);
    pb_mask_free(m);
    /* no engine (no rules): nothing to do */
    assert_true(pb_mask_event(NULL, &ev, &keep, &res));
}

/* A value that a rule's path cannot go into is dropped (fail closed) and counted, where it used
 * to be published as it was: "last4 card.number" passed a card that was a plain string. */
static void unfit_values_fail_closed(void **state)
{
    (void)state;
    assert_string_equal(apply_rules("last4 card.number", "{\"card\":\"4111111111111111\",\"k\":1}"),
                        "{\"k\":1}");
    assert_int_equal(last_unfit.n, 1);
    assert_string_equal(last_unfit.first, "rule \"last4 card.number\" cannot go into member "
                                          "\"card\", a string: dropped");
    assert_string_equal(apply_rules("hmac customer.email, drop customer.ssn",
                                    "{\"customer\":\"ann@example.com\"}"),
                        "{}");
    assert_int_equal(last_unfit.n, 1);
    /* a number, a boolean; an index into an object; in an array, the elements that do not fit */
    assert_string_equal(apply_rules("drop a.b, drop c.d, drop e[0]",
                                    "{\"a\":4111,\"c\":true,\"e\":{\"0\":\"x\"},\"k\":1}"),
                        "{\"k\":1}");
    assert_int_equal(last_unfit.n, 3);
    assert_string_equal(apply_rules("last4 cards.number",
                                    "{\"cards\":[{\"number\":\"5500000000000004\"},\"4111111111111111\"]}"),
                        "{\"cards\":[{\"number\":\"************0004\"}]}");
    assert_int_equal(last_unfit.n, 1);
    assert_string_equal(last_unfit.first, "rule \"last4 cards.number\" cannot go into element 1, "
                                          "a string: dropped");
    /* after `*`, a member of another shape is not one the path selects: left as it is */
    assert_string_equal(apply_rules("drop *.ssn", "{\"name\":\"Ann\",\"n\":[1],\"c\":{\"ssn\":1}}"),
                        "{\"name\":\"Ann\",\"n\":[1],\"c\":{}}");
    assert_int_equal(last_unfit.n, 0);
    /* the root cannot be dropped: the text is refused (the event is dead-lettered) */
    assert_string_equal(apply_rules("drop a", "\"text\""),
                        "error: rule \"drop a\" cannot go into the payload, which is a string");
    assert_string_equal(apply_rules("drop [0]", "{\"a\":1}"),
                        "error: rule \"drop [0]\" cannot go into the payload, which is an object");
    assert_string_equal(apply_rules("drop a", "null"), "=");
    /* the event hook reports the count and the first one of payload and headers together */
    pb_mask_t *m = build("t", "drop card.number, drop headers:x-user.id");
    const char *payload = "{\"card\":\"4111111111111111\"}", *headers = "{\"x-user\":\"u-1\"}";
    pb_event_t ev = {.event_type = "t", .payload = payload, .payload_len = strlen(payload),
                     .headers = headers};
    pb_masked_t keep = {0};
    pb_result_t res = {0};
    assert_true(pb_mask_event(m, &ev, &keep, &res));
    assert_string_equal(ev.payload, "{}");
    assert_string_equal(ev.headers, "{}");
    assert_int_equal(keep.unfit.n, 2);
    assert_non_null(strstr(keep.unfit.first, "card.number"));
    pb_mask_restore(&ev, &keep);
    pb_mask_free(m);
}

/* Header names match whatever their case (every broker treats them so); the names inside a
 * header's value and the payload's member names match exactly. */
static void header_names_any_case(void **state)
{
    (void)state;
    pb_mask_t *m = build("t", "drop headers:x-ssn, hmac headers:X-User-Email, drop ssn");
    char hex[65], want[256];
    hex_of(key131, sizeof key131, "a@b.example", hex);
    snprintf(want, sizeof want, "{\"trace\":\"t1\",\"x-user-email\":\"%s\"}", hex);
    assert_string_equal(apply(m, true, "{\"X-SSN\":\"078-05-1120\",\"trace\":\"t1\",\"x-Ssn\":\"1\","
                                       "\"x-user-email\":\"a@b.example\",\"X-\\u0053SN\":\"2\"}"),
                        want);
    assert_string_equal(apply(m, false, "{\"SSN\":\"1\",\"ssn\":\"2\"}"), "{\"SSN\":\"1\"}");
    pb_mask_free(m);
    m = build("t", "drop headers:meta.Secret");
    assert_string_equal(apply(m, true, "{\"META\":{\"secret\":1,\"Secret\":2}}"),
                        "{\"META\":{\"secret\":1}}");
    pb_mask_free(m);
}

/* Event types match whatever their case; two entries for one type are refused. */
static void event_types_any_case(void **state)
{
    (void)state;
    pb_mask_t *m = build("Order.Created", "drop ssn");
    assert_true(pb_mask_applies(m, "order.created"));
    assert_true(pb_mask_applies(m, "ORDER.CREATED"));
    assert_false(pb_mask_applies(m, "order.created.v2"));
    pb_buf_t out = {0};
    bool changed;
    pb_error_t why;
    const char *doc = "{\"ssn\":\"1\",\"k\":2}";
    assert_int_equal(pb_mask_rewrite(m, "ORDER.created", false, doc, strlen(doc), &out, &changed,
                                     NULL, &why),
                     PB_OK);
    assert_true(changed);
    assert_string_equal(out.data, "{\"k\":2}");
    pb_buf_free(&out);
    pb_mask_free(m);
    char t1[] = "order.created", t2[] = "ORDER.Created", r1[] = "drop a", r2[] = "drop b";
    char *types[2] = {t1, t2}, *texts[2] = {r1, r2};
    pb_error_t err;
    assert_int_equal(pb_mask_build(2, types, texts, NULL, NULL, 0, &m, &err), PB_FATAL);
    assert_null(m);
    assert_non_null(strstr(err.msg, "mask.order.created and mask.ORDER.Created name the same "
                                    "event type"));
}

/* relay.mask_allow_types: of an allow-listed type's payload, only what a rule names goes out. */
static void allow_list(void **state)
{
    (void)state;
    pb_mask_t *m = build_allow("t", "keep id, keep customer.country, last4 card.number, "
                                    "hmac customer.email, keep items.sku, keep notes, drop notes.ssn",
                               NULL, NULL, "t");
    char hex[65], want[512];
    hex_of(key131, sizeof key131, "a@b.example", hex);
    snprintf(want, sizeof want,
             "{\"id\":7,\"customer\":{\"country\":\"DE\",\"email\":\"%s\"},"
             "\"card\":{\"number\":\"************1111\"},\"items\":[{\"sku\":\"A\"},{}],"
             "\"notes\":{\"text\":\"hi\"}}",
             hex);
    assert_string_equal(
        apply(m, false, "{\"id\":7,\"customer\":{\"name\":\"Ann\",\"country\":\"DE\","
                        "\"email\":\"a@b.example\",\"ssn\":\"078-05-1120\"},"
                        "\"card\":{\"number\":\"4111111111111111\",\"cvv\":\"123\"},"
                        "\"items\":[{\"sku\":\"A\",\"price\":1},{\"price\":2}],"
                        "\"notes\":{\"text\": \"hi\", \"ssn\": \"1\"},\"extra\":{\"a\":1}}"),
        want);
    /* everything kept: unchanged; nothing named: an empty object */
    assert_string_equal(apply(m, false, "{\"id\":7}"), "=");
    assert_string_equal(apply(m, false, "{\"name\":\"Ann\"}"), "{}");
    /* a keep whose path does not fit publishes nothing there, silently; an hmac that cannot
     * go on is a rule that could not apply */
    assert_string_equal(apply(m, false, "{\"id\":1,\"items\":\"A\"}"), "{\"id\":1}");
    assert_int_equal(last_unfit.n, 0);
    assert_string_equal(apply(m, false, "{\"id\":1,\"customer\":\"Ann\"}"), "{\"id\":1}");
    assert_int_equal(last_unfit.n, 1);
    /* the headers are not allow-listed: only their drop, lastN and hmac rules apply */
    assert_string_equal(apply(m, true, "{\"trace\":\"t\"}"), "=");
    /* a payload that is not an object or array is refused */
    assert_non_null(strstr(apply(m, false, "\"Ann\""), "error: the payload is a string"));
    assert_string_equal(apply(m, false, "null"), "=");
    pb_mask_free(m);

    /* "*": its rules join every type's; the allow list matches whatever the case; a type that is
     * not listed keeps every field but those dropped, and the keep rules of "*" do not apply */
    m = build_allow("order.created", "keep id", "*", "keep trace_id, drop id.secret",
                    "ORDER.CREATED");
    pb_buf_t out = {0};
    bool changed;
    pb_error_t why;
    const char *doc = "{\"id\":{\"n\":1,\"secret\":2},\"trace_id\":\"t\",\"name\":\"Ann\"}";
    assert_int_equal(pb_mask_rewrite(m, "order.created", false, doc, strlen(doc), &out, &changed,
                                     NULL, &why),
                     PB_OK);
    assert_string_equal(out.data, "{\"id\":{\"n\":1},\"trace_id\":\"t\"}");
    pb_buf_reset(&out);
    assert_int_equal(pb_mask_rewrite(m, "order.paid", false, doc, strlen(doc), &out, &changed,
                                     NULL, &why),
                     PB_OK);
    assert_string_equal(out.data, "{\"id\":{\"n\":1},\"trace_id\":\"t\",\"name\":\"Ann\"}");
    pb_buf_free(&out);
    pb_mask_free(m);

    /* "*" in the allow list: every type, those without rules publish an empty object */
    m = build_allow("a", "keep x", NULL, NULL, "*");
    assert_true(pb_mask_applies(m, "b"));
    pb_mask_free(m);
}

/* What relay.mask_allow_types and keep rules must agree on, checked when the config is read. */
static void allow_list_config(void **state)
{
    (void)state;
    static const struct {
        const char *type, *rules, *allow, *error; /* error NULL: accepted */
    } cases[] = {
        {"t", "keep a", "t", NULL},
        {"t", "keep a", "T, other.type", "no rules for it"},
        {"t", "keep a", " t , * ", NULL},
        {"t", "keep a", "", "keep applies only to the event types of relay.mask_allow_types"},
        {"*", "keep a", "", "keep applies only"},
        {"*", "keep a", "t", NULL},
        {"t", "drop a", "u", "relay.mask_allow_types names \"u\" but [mask] has no rules"},
        {"t", "drop a", "t,,u", "an empty event type"},
        {"t", "keep headers:x", "t", "keep names payload fields"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pb_config_t cfg;
        pb_error_t err = {0};
        pb_config_init(&cfg);
        char name[64];
        snprintf(name, sizeof name, "mask.%s", cases[i].type);
        pb_status_t st = pb_config_set(&cfg, name, cases[i].rules, PB_CFG_CLI, &err);
        if (st == PB_OK)
            st = pb_config_set(&cfg, "relay.mask_allow_types", cases[i].allow, PB_CFG_CLI, &err);
        if (st == PB_OK)
            st = pb_config_validate(&cfg, &err);
        pb_mask_t *m = NULL;
        if (st == PB_OK)
            st = pb_mask_new(&cfg, &m, &err);
        pb_mask_free(m);
        pb_config_free(&cfg);
        if (!cases[i].error) {
            if (st != PB_OK)
                fail_msg("case %zu refused: %s", i, err.msg);
        } else if (st != PB_FATAL || !strstr(err.msg, cases[i].error)) {
            fail_msg("case %zu: expected an error with \"%s\", got %s", i, cases[i].error,
                     st == PB_OK ? "none" : err.msg);
        }
    }
}

static const char *key_file(const char *content, size_t len, mode_t mode)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/pb-test-mask-XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, content, len), (ssize_t)len);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

static pb_status_t new_with(const char *path, const char *rules, pb_mask_t **m, pb_error_t *err)
{
    pb_config_t cfg;
    pb_config_init(&cfg);
    pb_status_t st = pb_config_set(&cfg, "mask.t", rules, PB_CFG_CLI, err);
    if (st == PB_OK && path)
        st = pb_config_set(&cfg, "relay.mask_key_file", path, PB_CFG_CLI, err);
    if (st == PB_OK)
        st = pb_config_validate(&cfg, err);
    if (st == PB_OK)
        st = pb_mask_new(&cfg, m, err);
    pb_config_free(&cfg);
    return st;
}

static void key_file_rules(void **state)
{
    (void)state;
    const char *key = "0123456789abcdef0123456789abcdef\n"; /* 32 bytes and a newline */
    pb_mask_t *m = NULL;
    pb_error_t err;
    const char *path = key_file(key, strlen(key), 0600);
    assert_int_equal(new_with(path, "hmac a", &m, &err), PB_OK);
    char hex[65], want[128];
    hex_of((const unsigned char *)key, 32, "x", hex);
    snprintf(want, sizeof want, "{\"a\":\"%s\"}", hex);
    assert_string_equal(apply(m, false, "{\"a\":\"x\"}"), want);
    pb_mask_free(m);

    /* readable by group or others: refused, naming the mode */
    for (mode_t mode = 0604; mode <= 0640; mode += 0034) {
        assert_int_equal(chmod(path, mode), 0);
        assert_int_equal(new_with(path, "hmac a", &m, &err), PB_FATAL);
        assert_non_null(strstr(err.msg, "group or others have access"));
        assert_null(m);
    }
    assert_int_equal(chmod(path, 0400), 0);
    assert_int_equal(new_with(path, "hmac a", &m, &err), PB_OK);
    pb_mask_free(m);
    unlink(path);

    /* too short, missing, a directory, not set */
    path = key_file("short\n", 6, 0600);
    assert_int_equal(new_with(path, "hmac a", &m, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "the key must have 32 to 4096 bytes, it has 5"));
    unlink(path);
    assert_int_equal(new_with("/nonexistent/key", "hmac a", &m, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "cannot open"));
    assert_int_equal(new_with("/tmp", "hmac a", &m, &err), PB_FATAL);
    assert_int_equal(new_with(NULL, "hmac a", &m, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "relay.mask_key_file is not set"));
    /* no hmac rule: no key needed */
    assert_int_equal(new_with(NULL, "drop a", &m, &err), PB_OK);
    pb_mask_free(m);
}

static void config_file(void **state)
{
    (void)state;
    char path[] = "/tmp/pb-test-mask-ini-XXXXXX";
    int fd = mkstemp(path);
    const char *ini = "[relay]\nsink = stdout\n[mask]\n"
                      "order.created = drop customer.ssn, last4 card.number ; a comment\n"
                      "* = drop headers:x-ip\n";
    assert_int_equal(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
    close(fd);
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_OK);
    assert_int_equal(cfg.n_masks, 2);
    assert_string_equal(cfg.mask_types[0], "order.created");
    assert_string_equal(cfg.mask_rules[0], "drop customer.ssn, last4 card.number");
    assert_string_equal(cfg.mask_types[1], "*");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    pb_config_write(&cfg, f);
    fclose(f);
    assert_non_null(strstr(text, "[mask]\norder.created = drop customer.ssn, last4 card.number\n"
                                 "* = drop headers:x-ip\n"));
    free(text);
    pb_config_free(&cfg);

    /* a bad rule names the file, the line and the rule */
    fd = open(path, O_WRONLY | O_TRUNC);
    ini = "[mask]\norder.created = drop a\norder.paid = drop b;last4 c\n";
    assert_int_equal(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
    close(fd);
    pb_config_init(&cfg);
    assert_int_equal(pb_config_load_file(&cfg, path, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, ":3: [mask] order.paid: rule 1"));
    assert_non_null(strstr(err.msg, "separated by ','"));
    pb_config_free(&cfg);
    unlink(path);
}

int main(void)
{
    memset(key131, 0xaa, sizeof key131);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rule_syntax),
        cmocka_unit_test(nested_paths),
        cmocka_unit_test(arrays),
        cmocka_unit_test(names_go_into_arrays),
        cmocka_unit_test(unfit_values_fail_closed),
        cmocka_unit_test(header_names_any_case),
        cmocka_unit_test(event_types_any_case),
        cmocka_unit_test(allow_list),
        cmocka_unit_test(allow_list_config),
        cmocka_unit_test(missing_fields),
        cmocka_unit_test(non_string_values),
        cmocka_unit_test(hmac_rfc4231),
        cmocka_unit_test(precedence_and_every_type),
        cmocka_unit_test(headers_rules),
        cmocka_unit_test(invalid_json),
        cmocka_unit_test(event_masked_and_restored),
        cmocka_unit_test(key_file_rules),
        cmocka_unit_test(config_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
