#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "common/log.h"
#include "common/redact.h"
#include "common/route.h"
#include "common/str.h"
#include "otlp/exporter.h"
#include "relay/mask.h"
#include "relay/shadow_rules.h"
#include "sink/cloudevents.h"
#include "store/retention_rules.h"

typedef enum opt_type { OPT_STR, OPT_ENUM, OPT_INT, OPT_MS, OPT_BYTES, OPT_BOOL } opt_type_t;

typedef struct option {
    const char *section;
    const char *key;
    opt_type_t type;
    const char *dflt;
    int64_t min;
    int64_t max;
    const char *choices;
    const char *env;
    const char *doc;
    size_t offset;
} option_t;

static const option_t options[] = {
#define X(sec, key, type, dflt, min, max, choices, env, doc)                                       \
    {#sec, #key, OPT_##type, dflt, min, max, choices, env, doc, offsetof(pb_config_t, sec##_##key)},
#include "config/options.def"
#undef X
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static const option_t *find_option(const char *section, const char *key)
{
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strcmp(options[i].section, section) == 0 && strcmp(options[i].key, key) == 0)
            return &options[i];
    return NULL;
}

/* Sets key = value in a section of free keys ([handlers], [mask]), kept in the order given. */
static void set_free_key(size_t *n, char ***keys, char ***values, const char *key,
                         const char *value)
{
    for (size_t i = 0; i < *n; i++) {
        if (strcmp((*keys)[i], key) == 0) {
            free((*values)[i]);
            (*values)[i] = pb_strdup(value);
            return;
        }
    }
    *keys = pb_realloc(*keys, (*n + 1) * sizeof(char *));
    *values = pb_realloc(*values, (*n + 1) * sizeof(char *));
    (*keys)[*n] = pb_strdup(key);
    (*values)[*n] = pb_strdup(value);
    (*n)++;
}

static void set_handler(pb_config_t *cfg, const char *type, const char *sql)
{
    set_free_key(&cfg->n_handlers, &cfg->handler_types, &cfg->handler_sql, type, sql);
}

static void set_mask(pb_config_t *cfg, const char *type, const char *rules)
{
    set_free_key(&cfg->n_masks, &cfg->mask_types, &cfg->mask_rules, type, rules);
}

static void free_keys(size_t *n, char ***keys, char ***values)
{
    for (size_t i = 0; i < *n; i++) {
        free((*keys)[i]);
        free((*values)[i]);
    }
    free(*keys);
    free(*values);
    *keys = *values = NULL;
    *n = 0;
}

/* A librdkafka property: a name of letters, digits, '.', '_' and '-' (librdkafka's own). */
static pb_status_t set_kafka_property(pb_config_t *cfg, const char *key, const char *value,
                                      pb_error_t *err)
{
    if (!*key || strspn(key, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                     strlen(key))
        return pb_fail(err, PB_FATAL, "kafka.%s: not a librdkafka property name", key);
    set_free_key(&cfg->n_kafka_props, &cfg->kafka_prop_keys, &cfg->kafka_prop_values, key, value);
    return PB_OK;
}

bool pb_config_secret_property(const char *name)
{
    static const char *const parts[] = {"password", "secret", "ssl.key.pem", "ssl_key",
                                        "sasl.oauthbearer.config", "sasl.jaas", "credential"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        if (strcasestr(name, parts[i]))
            return true;
    return false;
}

const char *pb_config_handler_for(const pb_config_t *cfg, const char *type)
{
    for (size_t i = 0; type && i < cfg->n_handlers; i++)
        if (strcmp(cfg->handler_types[i], type) == 0)
            return cfg->handler_sql[i];
    return *cfg->consume_handler ? cfg->consume_handler : NULL;
}

static bool known_section(const char *section)
{
    if (strcmp(section, PB_CONFIG_HANDLERS_SECTION) == 0 ||
        strcmp(section, PB_CONFIG_MASK_SECTION) == 0)
        return true;
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (strcmp(options[i].section, section) == 0)
            return true;
    return false;
}

static bool parse_int(const char *s, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

/* "250ms", "5s", "2m", "1h", "1d"; a bare number is milliseconds. */
static bool parse_duration_ms(const char *s, int64_t *out)
{
    return pb_parse_duration_ms(s, 1, out);
}

/* "512kB", "64MB", "1GB", "2TB" (units of 1024, as PostgreSQL's memory settings); a bare number
 * is bytes. */
static bool parse_bytes(const char *s, int64_t *out)
{
    static const struct {
        const char *unit;
        int shift;
    } units[] = {{"", 0}, {"B", 0}, {"kB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40}};
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return false;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].unit) != 0)
            continue;
        if (v > (INT64_MAX >> units[i].shift))
            return false;
        *out = (int64_t)v << units[i].shift;
        return true;
    }
    return false;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static bool enum_allows(const char *choices, const char *value)
{
    size_t n = strlen(value);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0)
            return true;
        if (!bar)
            break;
        p = bar + 1;
    }
    return false;
}

static pb_status_t assign(pb_config_t *cfg, const option_t *o, const char *value, pb_error_t *err)
{
    char *field = (char *)cfg + o->offset;
    int64_t num = 0;
    bool flag;
    switch (o->type) {
    case OPT_ENUM:
        if (!enum_allows(o->choices, value))
            return pb_fail(err, PB_FATAL, "%s.%s: \"%s\" is not one of %s", o->section, o->key,
                           value, o->choices);
        /* fall through */
    case OPT_STR: {
        char **slot = (char **)(void *)field;
        free(*slot);
        *slot = pb_strdup(value);
        return PB_OK;
    }
    case OPT_INT:
        if (!parse_int(value, &num))
            return pb_fail(err, PB_FATAL, "%s.%s: \"%s\" is not an integer", o->section, o->key,
                           value);
        break;
    case OPT_MS:
        if (!parse_duration_ms(value, &num))
            return pb_fail(err, PB_FATAL,
                           "%s.%s: \"%s\" is not a duration (examples: 250ms, 5s, 2m, 1h)",
                           o->section, o->key, value);
        break;
    case OPT_BYTES:
        if (!parse_bytes(value, &num))
            return pb_fail(err, PB_FATAL,
                           "%s.%s: \"%s\" is not a size (examples: 0, 512MB, 1GB)", o->section,
                           o->key, value);
        break;
    case OPT_BOOL:
        if (!parse_bool(value, &flag))
            return pb_fail(err, PB_FATAL, "%s.%s: \"%s\" is not a boolean (true or false)",
                           o->section, o->key, value);
        *(bool *)(void *)field = flag;
        return PB_OK;
    }
    if (num < o->min || num > o->max)
        return pb_fail(err, PB_FATAL, "%s.%s: %s is out of range [%lld, %lld]%s", o->section,
                       o->key, value, (long long)o->min, (long long)o->max,
                       o->type == OPT_MS ? " milliseconds" : o->type == OPT_BYTES ? " bytes" : "");
    *(int64_t *)(void *)field = num;
    return PB_OK;
}

void pb_config_init(pb_config_t *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        pb_error_t err;
        if (assign(cfg, &options[i], options[i].dflt, &err) != PB_OK) {
            /* a bad default is a bug in options.def, caught by the unit tests */
            fprintf(stderr, "postbox: bad default: %s\n", err.msg);
            PB_ASSERT(!"every default in options.def is valid");
        }
    }
}

void pb_config_free(pb_config_t *cfg)
{
    if (!cfg)
        return;
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (options[i].type == OPT_STR || options[i].type == OPT_ENUM) {
            char **slot = (char **)(void *)((char *)cfg + options[i].offset);
            free(*slot);
            *slot = NULL;
        }
    }
    free(cfg->source_file);
    cfg->source_file = NULL;
    free_keys(&cfg->n_handlers, &cfg->handler_types, &cfg->handler_sql);
    free_keys(&cfg->n_masks, &cfg->mask_types, &cfg->mask_rules);
    free_keys(&cfg->n_kafka_props, &cfg->kafka_prop_keys, &cfg->kafka_prop_values);
}

pb_status_t pb_config_set(pb_config_t *cfg, const char *name, const char *value,
                          pb_config_origin_t origin, pb_error_t *err)
{
    (void)origin;
    const char *dot = strchr(name, '.');
    if (!dot || dot == name || !dot[1])
        return pb_fail(err, PB_FATAL, "option \"%s\": expected section.key (e.g. relay.batch_size)",
                       name);
    char section[64];
    size_t sl = (size_t)(dot - name);
    if (sl >= sizeof section)
        return pb_fail(err, PB_FATAL, "unknown option \"%s\"", name);
    memcpy(section, name, sl);
    section[sl] = '\0';
    if (strcmp(section, PB_CONFIG_HANDLERS_SECTION) == 0) {
        set_handler(cfg, dot + 1, value);
        return PB_OK;
    }
    if (strcmp(section, PB_CONFIG_MASK_SECTION) == 0) {
        set_mask(cfg, dot + 1, value);
        return PB_OK;
    }
    const option_t *o = find_option(section, dot + 1);
    if (!o && strcmp(section, PB_CONFIG_KAFKA_SECTION) == 0)
        return set_kafka_property(cfg, dot + 1, value, err);
    if (!o) {
        if (!known_section(section))
            return pb_fail(err, PB_FATAL, "unknown option \"%s\": no section [%s]", name, section);
        return pb_fail(err, PB_FATAL, "unknown option \"%s\": section [%s] has no key \"%s\"",
                       name, section, dot + 1);
    }
    return assign(cfg, o, value, err);
}

typedef struct ini_ctx {
    pb_config_t *cfg;
    pb_error_t *err;
    bool failed;
} ini_ctx_t;

static int on_ini_entry(void *user, const char *section, const char *name, const char *value)
{
    ini_ctx_t *ctx = user;
    if (!section || !*section) {
        pb_fail(ctx->err, PB_FATAL, "key \"%s\" outside of any section", name);
        ctx->failed = true;
        return 0;
    }
    if (!known_section(section)) {
        pb_fail(ctx->err, PB_FATAL, "unknown section [%s]", section);
        ctx->failed = true;
        return 0;
    }
    if (strcmp(section, PB_CONFIG_HANDLERS_SECTION) == 0) {
        set_handler(ctx->cfg, name, value);
        return 1;
    }
    if (strcmp(section, PB_CONFIG_MASK_SECTION) == 0) {
        /* checked here too, so that a bad rule is reported with its line */
        if (pb_mask_check_rules(name, value, NULL, ctx->err) != PB_OK) {
            pb_fail(ctx->err, PB_FATAL, "[mask] %s: %s", name, ctx->err->msg);
            ctx->failed = true;
            return 0;
        }
        set_mask(ctx->cfg, name, value);
        return 1;
    }
    const option_t *o = find_option(section, name);
    if (!o && strcmp(section, PB_CONFIG_KAFKA_SECTION) == 0) {
        if (set_kafka_property(ctx->cfg, name, value, ctx->err) != PB_OK) {
            ctx->failed = true;
            return 0;
        }
        return 1;
    }
    if (!o) {
        pb_fail(ctx->err, PB_FATAL, "unknown key \"%s\" in section [%s]", name, section);
        ctx->failed = true;
        return 0;
    }
    if (assign(ctx->cfg, o, value, ctx->err) != PB_OK) {
        ctx->failed = true;
        return 0;
    }
    return 1;
}

pb_status_t pb_config_load_file(pb_config_t *cfg, const char *path, pb_error_t *err)
{
    /* a directory opens and reads as an empty file: it would be an empty configuration */
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return pb_fail(err, PB_FATAL, "config %s: is a directory, not an INI file", path);
    pb_error_t inner = {0};
    ini_ctx_t ctx = {cfg, &inner, false};
    int rc = ini_parse(path, on_ini_entry, &ctx);
    if (rc == -1)
        return pb_fail(err, PB_FATAL, "config %s: cannot open: %s", path, strerror(errno));
    if (rc == -2)
        return pb_fail(err, PB_FATAL, "config %s: out of memory", path);
    if (rc > 0) {
        if (ctx.failed)
            return pb_fail(err, PB_FATAL, "config %s:%d: %s", path, rc, inner.msg);
        return pb_fail(err, PB_FATAL, "config %s:%d: syntax error (expected [section] or key = value)",
                       path, rc);
    }
    free(cfg->source_file);
    cfg->source_file = pb_strdup(path);
    return PB_OK;
}

pb_status_t pb_config_load_env(pb_config_t *cfg, pb_error_t *err)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const char *v = getenv(options[i].env);
        if (!v)
            continue;
        pb_error_t inner;
        if (assign(cfg, &options[i], v, &inner) != PB_OK)
            return pb_fail(err, PB_FATAL, "environment %s: %s", options[i].env, inner.msg);
    }
    return PB_OK;
}

/* PostgreSQL keeps NAMEDATALEN - 1 bytes of a name and cuts the rest off. */
#define PG_NAME_MAX 63

static bool lower_alnum_or_underscore(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* The cdc names go into SQL and into the grants script a DBA runs, often as a superuser: quoted
 * there, but refused here when PostgreSQL would not take them as they are (a slot: lower-case
 * letters, digits and underscores; a publication: the same, as an unquoted identifier, not
 * starting with a digit), so that no name needs quoting to mean what it says. */
static pb_status_t check_cdc_name(const char *option, const char *name, bool is_slot,
                                  pb_error_t *err)
{
    char shown[160];
    pb_text_escape(shown, sizeof shown, name);
    size_t len = strlen(name);
    if (len == 0)
        return pb_fail(err, PB_FATAL, "%s is empty", option);
    if (len > PG_NAME_MAX)
        return pb_fail(err, PB_FATAL, "%s \"%s\" is %zu bytes long: PostgreSQL names hold at most %d",
                       option, shown, len, PG_NAME_MAX);
    bool ok = is_slot || !(name[0] >= '0' && name[0] <= '9');
    for (size_t i = 0; ok && i < len; i++)
        ok = lower_alnum_or_underscore(name[i]);
    if (!ok)
        return pb_fail(err, PB_FATAL, "%s \"%s\": use only lower-case letters, digits and underscores%s",
                       option, shown, is_slot ? "" : ", not starting with a digit");
    return PB_OK;
}

/* Whether prefix is postbox's own, as postbox.emit accepts it (sql/014_emit_prefix.sql):
 * "postbox", or "postbox." and a name of letters, digits, '_' and '-'. */
static bool emit_prefix_ok(const char *prefix)
{
    static const char own[] = "postbox";
    size_t len = strlen(prefix);
    if (len > PG_NAME_MAX || strncmp(prefix, own, sizeof own - 1) != 0)
        return false;
    const char *rest = prefix + sizeof own - 1;
    if (*rest == '\0')
        return true;
    if (*rest++ != '.' || *rest == '\0')
        return false;
    for (char c; (c = *rest) != '\0'; rest++)
        if (!lower_alnum_or_underscore(c) && !(c >= 'A' && c <= 'Z') && c != '-')
            return false;
    return true;
}

pb_status_t pb_config_validate(const pb_config_t *cfg, pb_error_t *err)
{
    if (check_cdc_name("cdc.slot", cfg->cdc_slot, true, err) != PB_OK ||
        check_cdc_name("cdc.publication", cfg->cdc_publication, false, err) != PB_OK)
        return PB_FATAL;
    if (!emit_prefix_ok(cfg->cdc_message_prefix)) {
        char shown[160];
        pb_text_escape(shown, sizeof shown, cfg->cdc_message_prefix);
        return pb_fail(err, PB_FATAL, "cdc.message_prefix \"%s\" is not postbox's own: use postbox or "
                                      "postbox.NAME (letters, digits, _ and -, at most %d bytes in all), "
                                      "the prefixes postbox.emit writes",
                       shown, PG_NAME_MAX);
    }
    if (cfg->relay_backoff_base > cfg->relay_backoff_cap)
        return pb_fail(err, PB_FATAL, "relay.backoff_base (%lld ms) is larger than relay.backoff_cap (%lld ms)",
                       (long long)cfg->relay_backoff_base, (long long)cfg->relay_backoff_cap);
    pb_retention_rules_t rules;
    if (pb_retention_rules_parse("relay.dead_letter_retention_types",
                                 cfg->relay_dead_letter_retention_types, &rules, err) != PB_OK)
        return PB_FATAL;
    pb_retention_rules_free(&rules);
    if (pb_retention_rules_parse("consume.dead_retention_types", cfg->consume_dead_retention_types,
                                 &rules, err) != PB_OK)
        return PB_FATAL;
    pb_retention_rules_free(&rules);
    pb_error_t inner;
    if (pb_route_check_template(cfg->amqp_routing_key, &inner) != PB_OK)
        return pb_fail(err, PB_FATAL, "amqp.routing_key: %s", inner.msg);
    if (pb_shadow_rules_check(cfg->relay_shadow, err) != PB_OK)
        return PB_FATAL;
    if (pb_ce_check_source(cfg->relay_cloudevents_source, err) != PB_OK)
        return PB_FATAL;
    if (pb_otlp_check_endpoint(cfg->relay_otlp_endpoint, err) != PB_OK)
        return PB_FATAL;
    if (strcmp(cfg->cdc_on_excess_lag, "poll") == 0 && strcmp(cfg->relay_capture, "cdc") == 0) {
        /* the fallback publishes outbox rows: with none kept there is nothing to fall back on */
        if (cfg->cdc_delete_after_insert)
            return pb_fail(err, PB_FATAL, "cdc.on_excess_lag = poll needs the outbox rows, which "
                                          "cdc.delete_after_insert removes: set one of them off");
        if (!cfg->cdc_mark_published)
            return pb_fail(err, PB_FATAL, "cdc.on_excess_lag = poll needs cdc.mark_published: "
                                          "the poll capture tells what the cdc relay published "
                                          "by the marks, and would publish every row again");
        if (cfg->cdc_max_slot_lag <= 0 && cfg->cdc_max_slot_lag_age <= 0)
            return pb_fail(err, PB_FATAL, "cdc.on_excess_lag = poll needs a cdc.max_slot_lag or a "
                                          "cdc.max_slot_lag_age (0 means no limit, so never a "
                                          "fallback)");
    }
    /* the cdc relay stores masked what it moves; rows it never moves would keep what the
     * producer wrote */
    if (cfg->relay_mask_stored && strcmp(cfg->relay_capture, "cdc") == 0 &&
        !cfg->cdc_mark_published && !cfg->cdc_delete_after_insert)
        return pb_fail(err, PB_FATAL, "relay.mask_stored with relay.capture = cdc needs "
                                      "cdc.mark_published or cdc.delete_after_insert: without "
                                      "either the relayed outbox rows stay as the producer wrote "
                                      "them");
    return pb_mask_check_config(cfg, err);
}

static void write_value(const pb_config_t *cfg, const option_t *o, FILE *out)
{
    const char *field = (const char *)cfg + o->offset;
    switch (o->type) {
    case OPT_STR:
    case OPT_ENUM: {
        /* every value, not only URLs and DSNs: a secret may sit in any text option */
        char red[4096];
        const char *value = *(char *const *)(const void *)field;
        if (o->offset == offsetof(pb_config_t, nats_url))
            pb_redact_nats_servers(value, red, sizeof red); /* libnats's reading of the list */
        else
            pb_redact_secret(value, red, sizeof red);
        fputs(red, out);
        break;
    }
    case OPT_INT:
        fprintf(out, "%lld", (long long)*(const int64_t *)(const void *)field);
        break;
    case OPT_MS:
        fprintf(out, "%lldms", (long long)*(const int64_t *)(const void *)field);
        break;
    case OPT_BYTES:
        fprintf(out, "%lld", (long long)*(const int64_t *)(const void *)field);
        break;
    case OPT_BOOL:
        fputs(*(const bool *)(const void *)field ? "true" : "false", out);
        break;
    }
}

void pb_config_redact_property(const char *name, const char *value, char *out, size_t outsz)
{
    if (pb_config_secret_property(name))
        snprintf(out, outsz, "***");
    else
        pb_redact_secret(value, out, outsz); /* a JAAS line, password=..., a URL with one */
}

/* The librdkafka properties, secrets redacted, after the last declared kafka option. */
static void write_kafka_properties(const pb_config_t *cfg, FILE *out)
{
    for (size_t i = 0; i < cfg->n_kafka_props; i++) {
        char red[4096];
        pb_config_redact_property(cfg->kafka_prop_keys[i], cfg->kafka_prop_values[i], red,
                                  sizeof red);
        fprintf(out, "%s = %s\n", cfg->kafka_prop_keys[i], red);
    }
}

/* A section of free keys: the values redacted like every other (SQL may quote a DSN). */
static void write_free_keys(const char *section, size_t n, char **keys, char **values, FILE *out)
{
    if (n)
        fprintf(out, "\n[%s]\n", section);
    for (size_t i = 0; i < n; i++) {
        char red[4096];
        pb_redact_secret(values[i], red, sizeof red);
        fprintf(out, "%s = %s\n", keys[i], red);
    }
}

void pb_config_write(const pb_config_t *cfg, FILE *out)
{
    const char *section = NULL;
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (!section || strcmp(section, options[i].section) != 0) {
            section = options[i].section;
            fprintf(out, "%s[%s]\n", i ? "\n" : "", section);
        }
        fprintf(out, "%s = ", options[i].key);
        write_value(cfg, &options[i], out);
        fputc('\n', out);
        bool last_of_section = i + 1 == N_OPTIONS || strcmp(options[i + 1].section, section) != 0;
        if (last_of_section && strcmp(section, PB_CONFIG_KAFKA_SECTION) == 0)
            write_kafka_properties(cfg, out);
    }
    write_free_keys(PB_CONFIG_HANDLERS_SECTION, cfg->n_handlers, cfg->handler_types,
                    cfg->handler_sql, out);
    write_free_keys(PB_CONFIG_MASK_SECTION, cfg->n_masks, cfg->mask_types, cfg->mask_rules, out);
}

void pb_config_write_reference(FILE *out)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_t *o = &options[i];
        fprintf(out, "  %s.%s = %s%s%s\n      %s\n      env %s", o->section, o->key,
                *o->dflt ? o->dflt : "(empty)", o->choices ? "  one of " : "",
                o->choices ? o->choices : "", o->doc, o->env);
        if (o->type == OPT_INT)
            fprintf(out, ", range %lld..%lld", (long long)o->min, (long long)o->max);
        fputc('\n', out);
    }
}

void pb_config_write_sample(FILE *out)
{
    const char *section = NULL;
    fputs("; postbox configuration. Every option is shown with its default value; environment\n"
          "; variables (named after each option) and --set section.key=value override this file.\n",
          out);
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const option_t *o = &options[i];
        if (!section || strcmp(section, o->section) != 0) {
            section = o->section;
            fprintf(out, "\n[%s]\n", section);
        }
        fprintf(out, "; %s", o->doc);
        if (o->choices)
            fprintf(out, " (one of %s)", o->choices);
        fprintf(out, "\n; env %s\n%s = %s\n", o->env, o->key, o->dflt);
        bool last_of_section = i + 1 == N_OPTIONS || strcmp(options[i + 1].section, section) != 0;
        if (last_of_section && strcmp(section, PB_CONFIG_KAFKA_SECTION) == 0)
            fputs("; any librdkafka property (CONFIGURATION.md of librdkafka), e.g. for a cluster\n"
                  "; with SASL over TLS:\n"
                  "; security.protocol = SASL_SSL\n; sasl.mechanisms = SCRAM-SHA-512\n"
                  "; sasl.username = postbox\n; sasl.password = ...\n"
                  "; ssl.ca.location = /etc/ssl/certs/kafka-ca.pem\n", out);
    }
    fprintf(out, "\n[%s]\n; consume: SQL handler per message type, overriding consume.handler, e.g.\n"
                 "; order.paid.v1 = SELECT shipping.on_order_paid($1::jsonb, $2::jsonb)\n",
            PB_CONFIG_HANDLERS_SECTION);
    fprintf(out,
            "\n[%s]\n"
            "; relay: PII rules per event type (\"*\": every type), applied to what is published\n"
            "; (the outbox row is not changed); separated by commas: drop PATH, lastN PATH (keep\n"
            "; the last N characters, the others become *), hmac PATH (HMAC-SHA-256 with the key\n"
            "; in relay.mask_key_file, as hex), keep PATH (relay.mask_allow_types only); PATH\n"
            "; into the payload, or headers:NAME, e.g.\n"
            "; order.created.v1 = drop customer.ssn, last4 card.number, hmac customer.email, "
            "drop items[*].card\n",
            PB_CONFIG_MASK_SECTION);
}
