#include "otlp/traceparent.h"

#include <string.h>

#define VERSION_00_LEN 55 /* 2 + 1 + 32 + 1 + 16 + 1 + 2 */

static int lower_hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* uppercase is not allowed by the specification */
}

/* Whether s[0..n) is lowercase hex and, with nonzero, not only zeros. */
static bool hex_field(const char *s, size_t n, bool nonzero)
{
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        int v = lower_hex_value(s[i]);
        if (v < 0)
            return false;
        any |= v != 0;
    }
    return any || !nonzero;
}

bool pb_traceparent_parse(const char *s, size_t len, pb_trace_context_t *out)
{
    if (len < VERSION_00_LEN || !hex_field(s, 2, false))
        return false;
    bool v00 = s[0] == '0' && s[1] == '0';
    if (s[0] == 'f' && s[1] == 'f')
        return false;
    /* version 00 has nothing after the flags; a later version may, behind a '-' */
    if (v00 ? len != VERSION_00_LEN : len > VERSION_00_LEN && s[VERSION_00_LEN] != '-')
        return false;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return false;
    if (!hex_field(s + 3, 32, true) || !hex_field(s + 36, 16, true) || !hex_field(s + 53, 2, false))
        return false;
    memcpy(out->trace_id, s + 3, 32);
    out->trace_id[32] = '\0';
    memcpy(out->span_id, s + 36, 16);
    out->span_id[16] = '\0';
    out->flags = (uint8_t)(lower_hex_value(s[53]) * 16 + lower_hex_value(s[54]));
    return true;
}

bool pb_tracestate_valid(const char *s, size_t len)
{
    if (len == 0 || len > PB_TRACESTATE_MAX)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] < 0x20 || s[i] > 0x7e)
            return false;
    return true;
}
