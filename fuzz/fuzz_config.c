/* libFuzzer target: the configuration parser (src/config/config.c through inih): the input is an
 * INI file; what loads is validated and written back (secrets redacted), as `postbox config`
 * does. The [mask] rules of the file go through the rule parser of src/relay/mask.c too. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the parser reads a file: an in-memory one, rewritten for every input */
    static int fd = -1;
    static char path[64];
    static FILE *devnull;
    if (fd < 0) {
        fd = memfd_create("postbox-fuzz-config", 0);
        if (fd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        devnull = fopen("/dev/null", "w");
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        abort();
    pb_config_t cfg;
    pb_error_t err;
    pb_config_init(&cfg);
    pb_status_t st = pb_config_load_file(&cfg, path, &err);
    if (st == PB_OK) {
        (void)pb_config_validate(&cfg, &err);
        pb_config_write(&cfg, devnull);
    } else if (!memchr(err.msg, '\0', sizeof err.msg) || !err.msg[0]) {
        abort(); /* an error always says what is wrong */
    }
    pb_config_free(&cfg);
    return 0;
}
