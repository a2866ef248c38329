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
#include <string.h>

typedef enum pb_status {
    PB_OK = 0,
    PB_TRANSIENT = 1,
    PB_FATAL = 2,
} pb_status_t;

/* What a failed call tells its caller. msg is valid UTF-8, cut on a character boundary. */
typedef struct pb_error {
    pb_status_t status; /* what the failing call returned */
    char sqlstate[6];   /* PostgreSQL's SQLSTATE when the server reported the error, else "" */
    char msg[512];
} pb_error_t;

/* SQLSTATEs the code branches on (PostgreSQL, Appendix A). */
#define PB_SQLSTATE_UNDEFINED_TABLE "42P01"
#define PB_SQLSTATE_UNDEFINED_FUNCTION "42883"
#define PB_SQLSTATE_UNDEFINED_OBJECT "42704"
#define PB_SQLSTATE_INVALID_SCHEMA "3F000"
#define PB_SQLSTATE_CHARACTER_NOT_IN_REPERTOIRE "22021"
#define PB_SQLSTATE_INSUFFICIENT_PRIVILEGE "42501"

/* Whether err carries the given SQLSTATE. */
static inline int pb_error_sqlstate_is(const pb_error_t *err, const char *state)
{
    return err && err->sqlstate[0] && strcmp(err->sqlstate, state) == 0;
}

/* Whether err says that a schema object postbox needs is missing (`postbox init` not run). */
static inline int pb_error_schema_missing(const pb_error_t *err)
{
    return pb_error_sqlstate_is(err, PB_SQLSTATE_UNDEFINED_TABLE) ||
           pb_error_sqlstate_is(err, PB_SQLSTATE_UNDEFINED_FUNCTION) ||
           pb_error_sqlstate_is(err, PB_SQLSTATE_INVALID_SCHEMA) ||
           pb_error_sqlstate_is(err, PB_SQLSTATE_UNDEFINED_OBJECT);
}

/* Invariants of our own code (never input from outside): logs where and aborts. */
#define PB_ASSERT(cond)                                                                         \
    ((cond) ? (void)0 : pb_assert_fail(#cond, __FILE__, __LINE__, __func__))
_Noreturn void pb_assert_fail(const char *cond, const char *file, int line, const char *func);

#define PB_MUSTCHECK __attribute__((warn_unused_result))
#define PB_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))

/* Fills err (may be NULL: then only returns status) with status, no SQLSTATE and the message
 * (which may use err->msg itself as an argument), and returns status, so callers can
 * `return pb_fail(err, ...)`. */
pb_status_t pb_fail(pb_error_t *err, pb_status_t status, const char *fmt, ...) PB_PRINTF(3, 4);

/* Formats into a caller's buffer of the libpostbox API (char *errbuf, size_t errlen), truncating
 * to errlen - 1 bytes; newlines become spaces so the text stays one log line. Does nothing when
 * errbuf is NULL or errlen is 0. */
void pb_errbuf_set(char *errbuf, size_t errlen, const char *fmt, ...) PB_PRINTF(3, 4);

#endif
