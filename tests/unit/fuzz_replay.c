/* Runs a libFuzzer target (fuzz/<target>.c) once over each input of its seed corpus, without
 * libFuzzer: the corpus doubles as a regression suite that every build runs, and the
 * AddressSanitizer build (scripts/test, build/asan) reports a read past a buffer on a corpus
 * input that once crashed. Usage: fuzz_replay_<target> DIR_OR_FILE... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Feeds one file to the target; false when it cannot be read. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "fuzz_replay: cannot open %s\n", path);
        return 0;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *bigger = realloc(buf, cap *= 2);
            if (!bigger) {
                free(buf);
                buf = NULL;
            }
            buf = bigger;
        }
    }
    int ok = buf != NULL && !ferror(f);
    fclose(f);
    if (!ok) {
        fprintf(stderr, "fuzz_replay: cannot read %s\n", path);
        free(buf);
        return 0;
    }
    /* an exact-size copy, so that ASan sees a read one byte past the input */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) {
        free(buf);
        return 0;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    printf("replayed %s (%zu bytes)\n", path, len);
    return 1;
}

static int replay(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "fuzz_replay: no such file or directory: %s\n", path);
        return 0;
    }
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return replay_file(path);
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "fuzz_replay: cannot list %s\n", path);
        return 0;
    }
    int ok = 1;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            char full[4096];
            int w = snprintf(full, sizeof full, "%s/%s", path, names[i]->d_name);
            if (w < 0 || (size_t)w >= sizeof full) {
                fprintf(stderr, "fuzz_replay: path too long in %s\n", path);
                ok = 0;
            } else if (!replay(full, count)) {
                ok = 0;
            }
        }
        free(names[i]);
    }
    free(names);
    return ok;
}

int main(int argc, char **argv)
{
    int ok = 1, count = 0;
    for (int i = 1; i < argc; i++)
        if (!replay(argv[i], &count))
            ok = 0;
    if (count == 0) {
        fprintf(stderr, "fuzz_replay: no input given\n");
        return 1;
    }
    return ok ? 0 : 1;
}
