/* Files that hold a secret (a password, a token, NATS credentials): kept out of the
 * configuration so that it never shows them, and refused when other users may read them. */
#ifndef PB_COMMON_SECRET_FILE_H
#define PB_COMMON_SECRET_FILE_H

#include <stddef.h>

#include "common/err.h"

/* Checks that path is a regular file that neither its group nor others may read, write or
 * execute (libpq's rule for ~/.pgpass). option names the setting in the error. */
pb_status_t pb_check_secret_file(const char *option, const char *path, pb_error_t *err) PB_MUSTCHECK;

/* The same check on fd, the file path opened (for readers of their own format). */
pb_status_t pb_check_secret_fd(const char *option, const char *path, int fd,
                               pb_error_t *err) PB_MUSTCHECK;

/* Checks path as above and reads its first line, surrounding blanks removed, into out of outsz
 * bytes. PB_FATAL when the file is refused, unreadable, empty or its line does not fit; the
 * secret itself never appears in a message. */
pb_status_t pb_read_secret_file(const char *option, const char *path, char *out, size_t outsz,
                                pb_error_t *err) PB_MUSTCHECK;

#endif
