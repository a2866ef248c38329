/* Argument helpers of the commands that take their own arguments (status, dlq, purge). */
#ifndef PB_CLI_ARGS_H
#define PB_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"

/* "250ms", "90s", "15m", "2h", "7d"; a bare number is seconds here (people type ages). */
bool pb_args_duration_ms(const char *s, int64_t *out);
/* A non-negative integer. */
bool pb_args_count(const char *s, int64_t *out);

/* Walks cli args: returns the value of option `name` at args[*i] (advancing *i), "" when the
 * option needs a value and has none (an error has been printed), NULL when args[*i] is not name. */
const char *pb_args_value(char **args, int n, int *i, const char *name);

/* Writes a message about the command line to stderr (a newline follows): what it quotes of the
 * arguments is redacted (a URL or DSN typed in the wrong place) and its control characters
 * escaped. */
void pb_args_error(const char *fmt, ...) PB_PRINTF(1, 2);

#endif
