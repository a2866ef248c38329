#include "cli/args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/redact.h"
#include "common/str.h"

bool pb_args_duration_ms(const char *s, int64_t *out)
{
    return pb_parse_duration_ms(s, 1000, out);
}

bool pb_args_count(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < 0)
        return false;
    *out = v;
    return true;
}

const char *pb_args_value(char **args, int n, int *i, const char *name)
{
    const char *a = args[*i];
    size_t len = strlen(name);
    if (strncmp(a, name, len) != 0)
        return NULL;
    if (a[len] == '=')
        return a + len + 1;
    if (a[len] != '\0')
        return NULL;
    if (*i + 1 >= n) {
        fprintf(stderr, "postbox: option %s needs a value\n", name);
        return "";
    }
    return args[++*i];
}

void pb_args_error(const char *fmt, ...)
{
    char msg[1024], red[1024], shown[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pb_redact_secret(msg, red, sizeof red);
    pb_text_escape(shown, sizeof shown, red);
    fprintf(stderr, "%s\n", shown);
}
