/* A Redis command in the protocol, written by the sink (see redis_command.h for why). */
#include "sink/redis_command.h"

#include <stdint.h>
#include <string.h>

void pb_redis_command(pb_buf_t *out, int argc, const char *const *argv, const size_t *len)
{
    pb_buf_reset(out);
    pb_buf_putc(out, '*');
    pb_buf_put_int64(out, argc);
    pb_buf_append(out, "\r\n", 2);
    for (int i = 0; i < argc; i++) {
        pb_buf_putc(out, '$');
        pb_buf_put_int64(out, (int64_t)len[i]);
        char *p = pb_buf_extend(out, 2 + len[i] + 2); /* one growth check for the rest */
        memcpy(p, "\r\n", 2);
        memcpy(p + 2, argv[i], len[i]);
        memcpy(p + 2 + len[i], "\r\n", 2);
    }
}
