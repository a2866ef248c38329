/* A Redis command in the protocol, written by the sink (see redis_command.h for why). */
#include "sink/redis_command.h"

#include <stdint.h>
#include <string.h>

/* The number of decimal digits of v. */
static size_t decimal_len(size_t v)
{
    size_t n = 1;
    for (; v >= 10; v /= 10)
        n++;
    return n;
}

/* v in n decimal digits at p; returns the byte after them. */
static char *put_decimal(char *p, size_t v, size_t n)
{
    for (size_t i = n; i > 0; i--, v /= 10)
        p[i - 1] = (char)('0' + v % 10);
    return p + n;
}

/* Sized first, then written in one piece: one growth check per command, not four per
 * argument. */
void pb_redis_command(pb_buf_t *out, int argc, const char *const *argv, const size_t *len)
{
    size_t n = argc > 0 ? (size_t)argc : 0;
    size_t total = 1 + decimal_len(n) + 2;
    for (size_t i = 0; i < n; i++)
        total += 1 + decimal_len(len[i]) + 2 + len[i] + 2;
    pb_buf_reset(out);
    char *p = pb_buf_extend(out, total);
    *p++ = '*';
    p = put_decimal(p, n, decimal_len(n));
    *p++ = '\r';
    *p++ = '\n';
    for (size_t i = 0; i < n; i++) {
        *p++ = '$';
        p = put_decimal(p, len[i], decimal_len(len[i]));
        *p++ = '\r';
        *p++ = '\n';
        memcpy(p, argv[i], len[i]);
        p += len[i];
        *p++ = '\r';
        *p++ = '\n';
    }
}
