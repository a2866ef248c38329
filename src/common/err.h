/* Error status and message record shared by every module.
 *
 * Fallible functions return pb_status_t and, when they fail, write a lowercase message without
 * final punctuation into the caller's pb_error_t. The class decides what a retry loop does:
 * PB_TRANSIENT (network, broker or database unavailable: back off and retry) or PB_FATAL
 * (configuration, protocol violation, refused credentials: stop). Never branch on the text. */
#ifndef PB_COMMON_ERR_H
#define PB_COMMON_ERR_H

#include <stdarg.h>
#include <stddef.h>

typedef enum pb_status {
    PB_OK = 0,
    PB_TRANSIENT = 1,
    PB_FATAL = 2,
} pb_status_t;

typedef struct pb_error {
    char msg[512];
} pb_error_t;

#define PB_MUSTCHECK __attribute__((warn_unused_result))
#define PB_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* Fills err (may be NULL) and returns status, so callers can `return pb_fail(err, ...)`. */
pb_status_t pb_fail(pb_error_t *err, pb_status_t status, const char *fmt, ...) PB_PRINTF(3, 4);

/* Formats into a caller's buffer of the libpostbox API (char *errbuf, size_t errlen), truncating
 * to errlen - 1 bytes; newlines become spaces so the text stays one log line. Does nothing when
 * errbuf is NULL or errlen is 0. */
void pb_errbuf_set(char *errbuf, size_t errlen, const char *fmt, ...) PB_PRINTF(3, 4);

#endif
