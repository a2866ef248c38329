/* Configuration: defaults < INI file < environment < command line.
 *
 * Every option is declared once in options.def; this header turns the table into the fields of
 * pb_config_t (`cfg->amqp_url`, `cfg->relay_batch_size`, ...). Strings are owned by the config
 * and freed by pb_config_free. Durations (MS) are milliseconds, sizes (BYTES) bytes. */
#ifndef PB_CONFIG_CONFIG_H
#define PB_CONFIG_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

#define PB_CTYPE_STR char *
#define PB_CTYPE_ENUM char *
#define PB_CTYPE_INT int64_t
#define PB_CTYPE_MS int64_t
#define PB_CTYPE_BYTES int64_t
#define PB_CTYPE_BOOL bool

typedef struct pb_config {
#define X(sec, key, type, dflt, min, max, choices, env, doc) PB_CTYPE_##type sec##_##key;
#include "config/options.def"
#undef X
    char *source_file; /* the INI file read, or NULL */
    /* [handlers] section: SQL handler per message type (consume), in the order given */
    size_t n_handlers;
    char **handler_types;
    char **handler_sql;
    /* [mask] section: PII rules per event type (relay/mask.h), in the order given */
    size_t n_masks;
    char **mask_types;
    char **mask_rules;
    /* [kafka] keys that are no option above: librdkafka properties ("security.protocol",
     * "sasl.password", ...), passed to librdkafka as they are, in the order given. Checked by
     * librdkafka when a Kafka sink or source is made (an unknown one is a fatal error there). */
    size_t n_kafka_props;
    char **kafka_prop_keys;
    char **kafka_prop_values;
} pb_config_t;

/* Where a value came from, for error messages and `postbox config`. */
typedef enum pb_config_origin {
    PB_CFG_DEFAULT,
    PB_CFG_FILE,
    PB_CFG_ENV,
    PB_CFG_CLI,
} pb_config_origin_t;

/* Fills every option with its default. */
void pb_config_init(pb_config_t *cfg);
void pb_config_free(pb_config_t *cfg);

/* Section whose keys are free: message type = SQL handler. */
#define PB_CONFIG_HANDLERS_SECTION "handlers"

/* Section whose keys are free: event type (or "*") = masking rules (relay/mask.h). */
#define PB_CONFIG_MASK_SECTION "mask"

/* Section whose undeclared keys are librdkafka properties (pb_config_t.kafka_prop_keys). */
#define PB_CONFIG_KAFKA_SECTION "kafka"

/* Whether a free-form property (a librdkafka one) holds a secret by its name: *password*,
 * *secret*, private key material, SASL/OAuth configuration. Its value is never printed. */
bool pb_config_secret_property(const char *name);

/* A librdkafka property's value as it may be shown, into out of outsz bytes: "***" for a secret
 * by name, else the value with any secret in it (password=..., a JAAS line, a URL) hidden. */
void pb_config_redact_property(const char *name, const char *value, char *out, size_t outsz);

/* SQL handler for a message type: the [handlers] entry for it, else consume.handler, else NULL. */
const char *pb_config_handler_for(const pb_config_t *cfg, const char *type);

/* Sets "section.key" from text, validating type and range. Unknown names are errors. */
pb_status_t pb_config_set(pb_config_t *cfg, const char *name, const char *value,
                          pb_config_origin_t origin, pb_error_t *err) PB_MUSTCHECK;

/* Reads an INI file: unknown sections or keys, bad values and syntax errors are fatal errors
 * naming the file and line. */
pb_status_t pb_config_load_file(pb_config_t *cfg, const char *path, pb_error_t *err) PB_MUSTCHECK;

/* Applies every option whose environment variable (column env of options.def) is set. */
pb_status_t pb_config_load_env(pb_config_t *cfg, pb_error_t *err) PB_MUSTCHECK;

/* Checks cross-option rules (backoff_base <= backoff_cap, templates, URLs). */
pb_status_t pb_config_validate(const pb_config_t *cfg, pb_error_t *err) PB_MUSTCHECK;

/* Writes the effective configuration as INI, secrets redacted. */
void pb_config_write(const pb_config_t *cfg, FILE *out);

/* Writes a commented INI file with every option at its default (deploy/postbox.ini). */
void pb_config_write_sample(FILE *out);

/* Writes the option reference (for --help and the README). */
void pb_config_write_reference(FILE *out);

#endif
