/* A Redis command written in the protocol (RESP: "*<argc>\r\n" then "$<len>\r\n<bytes>\r\n" per
 * argument) into a buffer of the sink's own, for redisAppendFormattedCommand.
 *
 * Why: hiredis's redisAppendCommandArgv sizes the command, then formats every argument with
 * sdscatfmt into a fresh string and copies that into its output buffer: with the envelope on an
 * XADD has 40 arguments instead of 22, and that formatting was 7,000 instructions an event, more
 * than half of what the envelope cost the Redis relay. Written here once into a reused buffer, it
 * is the same bytes (tests/unit/test_redis_command.c compares them with hiredis's own).
 *
 * @thread the owner's (no shared state) */
#ifndef PB_SINK_REDIS_COMMAND_H
#define PB_SINK_REDIS_COMMAND_H

#include <stddef.h>

#include "common/str.h"

/** @brief Replaces out's content with the command of argc arguments argv[i] of len[i] bytes. */
void pb_redis_command(pb_buf_t *out, int argc, const char *const *argv, const size_t *len);

#endif
