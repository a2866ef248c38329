#include "common/secret_file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pb_status_t check_mode(const char *option, const char *path, const struct stat *st,
                              pb_error_t *err)
{
    if (!S_ISREG(st->st_mode))
        return pb_fail(err, PB_FATAL, "%s %s: not a regular file", option, path);
    if (st->st_mode & (S_IRWXG | S_IRWXO))
        return pb_fail(err, PB_FATAL,
                       "%s %s: group or others have access (mode %04o); a secret file must be "
                       "readable by its owner only (chmod 600)",
                       option, path, (unsigned)(st->st_mode & 07777));
    return PB_OK;
}

pb_status_t pb_check_secret_file(const char *option, const char *path, pb_error_t *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return pb_fail(err, PB_FATAL, "%s %s: cannot open: %s", option, path, strerror(errno));
    return check_mode(option, path, &st, err);
}

pb_status_t pb_check_secret_fd(const char *option, const char *path, int fd, pb_error_t *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return pb_fail(err, PB_FATAL, "%s %s: %s", option, path, strerror(errno));
    return check_mode(option, path, &st, err);
}

pb_status_t pb_read_secret_file(const char *option, const char *path, char *out, size_t outsz,
                                pb_error_t *err)
{
    out[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return pb_fail(err, PB_FATAL, "%s %s: cannot open: %s", option, path, strerror(errno));
    pb_status_t rc = pb_check_secret_fd(option, path, fd, err);
    size_t got = 0;
    bool full = false;
    while (rc == PB_OK && !full) {
        ssize_t n = read(fd, out + got, outsz - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            rc = pb_fail(err, PB_FATAL, "%s %s: cannot read: %s", option, path, strerror(errno));
        else if (n == 0)
            break;
        got += (size_t)n;
        full = got == outsz - 1;
    }
    close(fd);
    out[got] = '\0';
    size_t line = strcspn(out, "\r\n");
    if (rc == PB_OK && full && line == got)
        rc = pb_fail(err, PB_FATAL, "%s %s: its first line is longer than %zu bytes", option, path,
                     outsz - 2);
    out[line] = '\0';
    while (line && isspace((unsigned char)out[line - 1]))
        out[--line] = '\0';
    size_t lead = strspn(out, " \t");
    memmove(out, out + lead, line - lead + 1);
    if (rc == PB_OK && !*out)
        rc = pb_fail(err, PB_FATAL, "%s %s: empty", option, path);
    if (rc != PB_OK)
        memset(out, 0, outsz); /* no half-read secret left behind */
    return rc;
}
