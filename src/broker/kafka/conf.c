#include "broker/kafka/conf.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/log.h"
#include "common/secret_file.h"

#define FAC "kafka"

/* librdkafka's log lines (from its threads) as ours; syslog levels. */
static void on_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
    (void)rk;
    if (level <= 3)
        log_error(FAC, "librdkafka %s: %s", fac, buf);
    else if (level == 4)
        log_warn(FAC, "librdkafka %s: %s", fac, buf);
    else if (level <= 6)
        log_info(FAC, "librdkafka %s: %s", fac, buf);
    else
        log_debug(FAC, "librdkafka %s: %s", fac, buf);
}

/* Sets one property; the error names it as the user wrote it (kafka.<name>). */
static pb_status_t set(rd_kafka_conf_t *conf, const char *name, const char *value, pb_error_t *err)
{
    char errstr[512];
    rd_kafka_conf_res_t r = rd_kafka_conf_set(conf, name, value, errstr, sizeof errstr);
    if (r == RD_KAFKA_CONF_OK)
        return PB_OK;
    if (r == RD_KAFKA_CONF_UNKNOWN)
        return pb_fail(err, PB_FATAL, "kafka.%s: librdkafka has no such property (see its "
                                      "CONFIGURATION.md): %s", name, errstr);
    return pb_fail(err, PB_FATAL, "kafka.%s: invalid value: %s", name, errstr);
}

/* Sets a property of the user's. kafka.<property>_file = PATH sets <property> to the first line
 * of PATH (a secret file, e.g. kafka.sasl.password_file), so the secret stays out of the
 * configuration; no librdkafka property ends in "_file". */
static pb_status_t set_user_property(const pb_config_t *cfg, rd_kafka_conf_t *conf,
                                     const char *name, const char *value, pb_error_t *err)
{
    size_t len = strlen(name);
    if (len <= 5 || strcmp(name + len - 5, "_file") != 0)
        return set(conf, name, value, err);
    char prop[256], option[300];
    snprintf(prop, sizeof prop, "%.*s", (int)(len - 5), name);
    snprintf(option, sizeof option, "kafka.%s", name);
    for (size_t i = 0; i < cfg->n_kafka_props; i++)
        if (strcmp(cfg->kafka_prop_keys[i], prop) == 0)
            return pb_fail(err, PB_FATAL, "kafka.%s and %s are both set: give one", prop, option);
    char secret[4096];
    pb_status_t st = pb_read_secret_file(option, value, secret, sizeof secret, err);
    if (st == PB_OK)
        st = set(conf, prop, secret, err);
    explicit_bzero(secret, sizeof secret);
    return st;
}

/* Whether the user's value of a forced property says the same (librdkafka reads true/false
 * and all/-1 alike). */
static bool same_value(const char *name, const char *forced, const char *user)
{
    if (strcasecmp(forced, user) == 0)
        return true;
    if (strcmp(name, "acks") == 0 || strcmp(name, "request.required.acks") == 0)
        return strcmp(user, "-1") == 0 || strcasecmp(user, "all") == 0;
    return false;
}

pb_status_t pb_kafka_new(const pb_config_t *cfg, pb_kafka_role_t role,
                         const pb_kafka_forced_t *forced, const pb_kafka_callbacks_t *cb,
                         rd_kafka_t **out, pb_error_t *err)
{
    *out = NULL;
    if (!*cfg->kafka_brokers)
        return pb_fail(err, PB_FATAL, "kafka.brokers is empty: name the bootstrap servers "
                                      "(host:port, separated by commas)");
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, on_log);
    pb_status_t st = set(conf, "bootstrap.servers", cfg->kafka_brokers, err);
    if (st == PB_OK)
        st = set(conf, "client.id", "postbox", err);
    if (st == PB_OK && role == PB_KAFKA_PRODUCER)
        /* a message not acknowledged within this is reported failed; the relay retries it */
        st = set(conf, "message.timeout.ms", "30000", err);
    if (st == PB_OK && role == PB_KAFKA_PRODUCER)
        /* librdkafka's own retries of produce requests are counted from its statistics */
        st = set(conf, "statistics.interval.ms", "5000", err);
    if (st == PB_OK && role == PB_KAFKA_PRODUCER)
        /* the relay produces a whole batch, then waits for its reports: lingering (librdkafka's
         * default 5 ms) only delays the last requests of every batch */
        st = set(conf, "linger.ms", "1", err);
    if (st == PB_OK && role == PB_KAFKA_CONSUMER)
        /* a new group reads what was published before it joined */
        st = set(conf, "auto.offset.reset", "earliest", err);
    for (size_t i = 0; st == PB_OK && i < cfg->n_kafka_props; i++) {
        const char *name = cfg->kafka_prop_keys[i], *value = cfg->kafka_prop_values[i];
        char shown[512];
        pb_config_redact_property(name, value, shown, sizeof shown);
        for (const pb_kafka_forced_t *f = forced; f && f->name; f++)
            if (strcmp(f->name, name) == 0 && !same_value(name, f->value, value))
                st = pb_fail(err, PB_FATAL, "kafka.%s = %s: postbox's %s needs %s = %s", name,
                             shown,
                             role == PB_KAFKA_PRODUCER ? "kafka sink" : "kafka source", name,
                             f->value);
        if (st == PB_OK)
            st = set_user_property(cfg, conf, name, value, err);
    }
    for (const pb_kafka_forced_t *f = forced; st == PB_OK && f && f->name; f++)
        st = set(conf, f->name, f->value, err);
    if (st != PB_OK) {
        rd_kafka_conf_destroy(conf);
        return st;
    }
    if (cb) {
        rd_kafka_conf_set_opaque(conf, cb->opaque);
        if (cb->delivery)
            rd_kafka_conf_set_dr_msg_cb(conf, cb->delivery);
        if (cb->rebalance)
            rd_kafka_conf_set_rebalance_cb(conf, cb->rebalance);
        if (cb->error)
            rd_kafka_conf_set_error_cb(conf, cb->error);
        if (cb->stats)
            rd_kafka_conf_set_stats_cb(conf, cb->stats);
    }
    char errstr[512];
    rd_kafka_t *rk = rd_kafka_new(role == PB_KAFKA_PRODUCER ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER,
                                  conf, errstr, sizeof errstr);
    if (!rk) {
        rd_kafka_conf_destroy(conf); /* rd_kafka_new takes it only on success */
        return pb_fail(err, PB_FATAL, "kafka: cannot create the %s: %s",
                       role == PB_KAFKA_PRODUCER ? "producer" : "consumer", errstr);
    }
    *out = rk;
    return PB_OK;
}

void pb_kafka_group(const pb_config_t *cfg, char *out, size_t n)
{
    if (*cfg->kafka_group)
        snprintf(out, n, "%s", cfg->kafka_group);
    else
        snprintf(out, n, "postbox_%s", cfg->consume_consumer);
}

rd_kafka_topic_partition_list_t *pb_kafka_topics(const pb_config_t *cfg)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(4);
    for (const char *p = cfg->kafka_topics; *p;) {
        size_t len = strcspn(p, ",");
        const char *a = p, *b = p + len;
        while (a < b && *a == ' ')
            a++;
        while (b > a && b[-1] == ' ')
            b--;
        if (b > a) {
            char name[512];
            snprintf(name, sizeof name, "%.*s", (int)(b - a), a);
            rd_kafka_topic_partition_list_add(l, name, RD_KAFKA_PARTITION_UA);
        }
        p += len + (p[len] == ',');
    }
    if (l->cnt == 0) {
        rd_kafka_topic_partition_list_destroy(l);
        return NULL;
    }
    return l;
}

pb_status_t pb_kafka_check_reachable(rd_kafka_t *rk, const pb_config_t *cfg, int timeout_ms,
                                     pb_error_t *err)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, timeout_ms);
    if (e == RD_KAFKA_RESP_ERR_NO_ERROR && md->broker_cnt > 0) {
        rd_kafka_metadata_destroy(md);
        return PB_OK;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    return pb_fail(err, PB_TRANSIENT, "kafka at %s: no broker answered within %d ms (%s)",
                   cfg->kafka_brokers, timeout_ms,
                   e ? rd_kafka_err2str(e) : "the cluster lists no broker");
}

bool pb_kafka_error_permanent(rd_kafka_resp_err_t e)
{
    switch (e) {
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
        return true;
    default:
        return false;
    }
}

const char *pb_kafka_error_kind(rd_kafka_resp_err_t e, char *buf, size_t n)
{
    const char *name = rd_kafka_err2name(e);
    while (*name == '_')
        name++;
    size_t k = 0;
    for (; name[k] && k + 1 < n; k++)
        buf[k] = (char)tolower((unsigned char)name[k]);
    if (n)
        buf[k] = '\0';
    return buf;
}
