/* libFuzzer target: the PII rule engine (src/relay/mask.c). The input is a rules text, a NUL
 * byte, then a JSON document; the first byte of the rules chooses whether they apply to the
 * payload or (its low bit) to the headers, and (its second bit) whether type "t" is
 * allow-listed. Checked on top of memory safety:
 *   - every JSON text jansson accepts is accepted by the rewriter (unless nested deeper than
 *     PB_MASK_MAX_DEPTH, or holding a raw NUL byte, which jansson lets pass after a number),
 *     and what it writes for it is accepted by jansson too;
 *   - a rewritten text is accepted by the rewriter again. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "relay/mask.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool jansson_accepts(const char *json, size_t len)
{
    json_error_t jerr;
    json_t *v = json_loadb(json, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    json_decref(v);
    return v != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    if (!nul || nul == data)
        return 0;
    bool headers = data[0] & 1;
    char *rules = malloc((size_t)(nul - data));
    memcpy(rules, data + 1, (size_t)(nul - data) - 1);
    rules[nul - data - 1] = '\0';
    size_t len = size - (size_t)(nul - data) - 1;
    char *json = malloc(len ? len : 1); /* exact size: reads past it are caught */
    memcpy(json, nul + 1, len);

    static const unsigned char key[PB_MASK_MIN_KEY] = "fuzzing-key-0123456789abcdefghij";
    char type_name[] = "t", *type = type_name, *texts[1] = {rules};
    pb_mask_t *m = NULL;
    pb_error_t err;
    /* the first byte's second bit: the type is allow-listed (keep rules count) */
    const char *allow = data[0] & 2 ? "t" : NULL;
    if (pb_mask_build(1, &type, texts, allow, key, sizeof key, &m, &err) == PB_OK) {
        pb_buf_t out = {0}, again = {0};
        bool changed, changed2;
        pb_mask_unfit_t unfit;
        pb_status_t st =
            pb_mask_rewrite(m, "t", headers, json, len, &out, &changed, &unfit, &err);
        /* a raw NUL byte is never valid JSON, but jansson takes one after a number ("[2\0]") */
        bool valid = !memchr(json, '\0', len) && jansson_accepts(json, len);
        if (st != PB_OK && valid && strstr(err.msg, "not valid JSON") &&
            !strstr(err.msg, "nested deeper"))
            abort(); /* refused a valid JSON text */
        if (st == PB_OK && changed) {
            if (valid && !jansson_accepts(out.data, out.len))
                abort(); /* wrote invalid JSON for a valid text */
            if (pb_mask_rewrite(m, "t", headers, out.data, out.len, &again, &changed2, NULL,
                                &err) ==
                    PB_OK ||
                !strstr(err.msg, "not valid JSON")) {
                /* accepted again (or refused for a value that cannot take its rule) */
            } else {
                abort();
            }
        }
        pb_buf_free(&out);
        pb_buf_free(&again);
        /* the event hook on the same text */
        pb_event_t ev = {.event_type = "t", .payload = json, .payload_len = len,
                         .headers = NULL};
        pb_masked_t keep = {0};
        pb_result_t res = {0};
        (void)pb_mask_event(m, &ev, &keep, &res);
        pb_mask_restore(&ev, &keep);
        if (ev.payload != json || ev.payload_len != len)
            abort();
        pb_mask_free(m);
    }
    free(json);
    free(rules);
    return 0;
}
