/* postbox demo: the INI file its relay and consumer run with. Every option is written (from
 * the demo's own effective configuration, so TLS files and credentials carry over) and the
 * demo's settings replace theirs; the children get no POSTBOX_* variables, so this file alone
 * says how they run. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "demo/demo_int.h"

typedef struct writer {
    FILE *out;
    const demo_setting_t *settings;
    size_t n_settings;
    const char *section; /* of the last line written */
    const char *bad;     /* the first option whose value an INI line cannot hold */
} writer_t;

static const char *setting_for(const writer_t *w, const char *name)
{
    for (size_t i = 0; i < w->n_settings; i++)
        if (strcmp(w->settings[i].name, name) == 0)
            return w->settings[i].value;
    return NULL;
}

/* inih ends a value at a newline and takes " ;" for the start of a comment */
static bool ini_safe(const char *v)
{
    return !strchr(v, '\n') && !strchr(v, '\r') && !strchr(v, ';');
}

static void put(writer_t *w, const char *section, const char *key, const char *name,
                const char *value)
{
    const char *s = setting_for(w, name);
    if (s)
        value = s;
    if (!ini_safe(value) && !w->bad)
        w->bad = name;
    if (!w->section || strcmp(w->section, section) != 0)
        fprintf(w->out, "%s[%s]\n", w->section ? "\n" : "", section);
    w->section = section;
    fprintf(w->out, "%s = %s\n", key, value);
}

static void put_int(writer_t *w, const char *section, const char *key, const char *name,
                    int64_t v, const char *unit)
{
    char text[40];
    snprintf(text, sizeof text, "%" PRId64 "%s", v, unit);
    put(w, section, key, name, text);
}

#define PUT_STR(w, sec, key, v) put(w, #sec, #key, #sec "." #key, (v) ? (v) : "")
#define PUT_ENUM PUT_STR
#define PUT_INT(w, sec, key, v) put_int(w, #sec, #key, #sec "." #key, v, "")
#define PUT_MS(w, sec, key, v) put_int(w, #sec, #key, #sec "." #key, v, "ms")
#define PUT_BYTES(w, sec, key, v) put_int(w, #sec, #key, #sec "." #key, v, "")
#define PUT_BOOL(w, sec, key, v) put(w, #sec, #key, #sec "." #key, (v) ? "true" : "false")

pb_status_t demo_write_config(const pb_config_t *base, const demo_setting_t *settings,
                              size_t n_settings, const demo_setting_t *handlers,
                              size_t n_handlers, const char *extra_ini, const char *path,
                              pb_error_t *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return pb_fail(err, PB_FATAL, "%s: %s", path, strerror(errno));
    FILE *out = fdopen(fd, "w");
    if (!out) {
        close(fd);
        return pb_fail(err, PB_FATAL, "%s: %s", path, strerror(errno));
    }
    writer_t w = {.out = out, .settings = settings, .n_settings = n_settings};
    fputs("; written by postbox demo for its relay and consumer\n", out);
#define X(sec, key, type, dflt, min, max, choices, env, doc) PUT_##type(&w, sec, key, base->sec##_##key);
#include "config/options.def"
#undef X
    fprintf(out, "\n[%s]\n", PB_CONFIG_HANDLERS_SECTION);
    for (size_t i = 0; i < n_handlers; i++) {
        if (!ini_safe(handlers[i].value) && !w.bad)
            w.bad = handlers[i].name;
        fprintf(out, "%s = %s\n", handlers[i].name, handlers[i].value);
    }
    if (extra_ini)
        fprintf(out, "\n%s", extra_ini);
    bool ok = !ferror(out);
    if (fclose(out) != 0)
        ok = false;
    if (w.bad)
        return pb_fail(err, PB_FATAL, "the value of %s holds a newline or ';', which the demo's "
                                      "generated configuration file cannot hold", w.bad);
    if (!ok)
        return pb_fail(err, PB_FATAL, "%s: write failed", path);
    return PB_OK;
}
