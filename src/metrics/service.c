#include "metrics/service.h"

#include <stdlib.h>
#include <string.h>

#include "common/secret_file.h"
#include "common/str.h"
#include "janitor/janitor.h"
#include "metrics/http.h"
#include "metrics/metrics.h"

struct pb_ops {
    pb_http_t *http;
    pb_janitor_t *janitor;
    pb_retention_rules_t dead_rules; /* the janitor borrows them */
};

pb_status_t pb_ops_start(const pb_config_t *cfg, const char *component, pb_ops_t **out,
                         pb_error_t *err)
{
    *out = NULL;
    bool relay = strcmp(component, "relay") == 0;
    pb_metrics_init(component);
    pb_metrics_set_state(false, false, false);
    pb_ops_t *ops = pb_malloc(sizeof *ops);
    memset(ops, 0, sizeof *ops);
    pb_status_t st = PB_OK;
    if (*cfg->metrics_listen) {
        char token[1024] = "";
        if (*cfg->metrics_token_file)
            st = pb_read_secret_file("metrics.token_file", cfg->metrics_token_file, token,
                                     sizeof token, err);
        if (st == PB_OK)
            st = pb_http_new(cfg->metrics_listen, token, &ops->http, err);
        memset(token, 0, sizeof token);
        if (st != PB_OK) {
            free(ops);
            return st;
        }
    }
    st = relay ? pb_retention_rules_parse("relay.dead_letter_retention_types",
                                          cfg->relay_dead_letter_retention_types,
                                          &ops->dead_rules, err)
               : pb_retention_rules_parse("consume.dead_retention_types",
                                          cfg->consume_dead_retention_types, &ops->dead_rules,
                                          err);
    pb_janitor_opts_t jo = {
        .dsn = cfg->postgres_dsn,
        .sample_interval_ms = relay && *cfg->metrics_listen ? cfg->metrics_sample_interval : 0,
        /* dead letters first: a dead inbox message's row goes in the same round */
        .purges = {{.target = relay ? PB_PURGE_DEAD_LETTERS : PB_PURGE_INBOX_DEAD,
                    .retention_ms = relay ? cfg->relay_dead_letter_retention
                                          : cfg->consume_dead_retention,
                    .rules = &ops->dead_rules},
                   {.target = relay ? PB_PURGE_OUTBOX : PB_PURGE_INBOX,
                    .retention_ms = relay ? cfg->relay_retention : cfg->consume_retention},
                   /* last: the inbox purge of this round folds its numbers in first */
                   {.target = relay ? PB_PURGE_AGGREGATE_SEQUENCES : PB_PURGE_INBOX_SEQUENCES,
                    .retention_ms = relay ? cfg->relay_sequence_retention
                                          : cfg->consume_sequence_retention}},
        .n_purges = 3,
        .purge_interval_ms = relay ? cfg->relay_purge_interval : cfg->consume_purge_interval,
        .consumer = relay ? NULL : cfg->consume_consumer,
        .make_partitions = true,
        .move_inbox_legacy = !relay,
    };
    if (st == PB_OK)
        st = pb_janitor_start(&jo, &ops->janitor, err);
    if (st != PB_OK) {
        pb_retention_rules_free(&ops->dead_rules);
        pb_http_free(ops->http);
        free(ops);
        return st;
    }
    *out = ops;
    return PB_OK;
}

void pb_ops_stop(pb_ops_t *ops)
{
    if (!ops)
        return;
    pb_metrics_set_state(false, false, false);
    pb_janitor_stop(ops->janitor);
    pb_retention_rules_free(&ops->dead_rules);
    pb_http_free(ops->http);
    free(ops);
}
