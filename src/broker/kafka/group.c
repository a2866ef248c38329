#include "broker/kafka/group.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "broker/kafka/conf.h"
#include "common/str.h"

#define ASK_TIMEOUT_MS 5000

/* Adds the partitions of topic (from the cluster's metadata) to l; false when it has none. */
static bool add_partitions(rd_kafka_t *rk, const char *topic, rd_kafka_topic_partition_list_t *l)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rkt ? rd_kafka_metadata(rk, 0, rkt, &md, ASK_TIMEOUT_MS)
                                : RD_KAFKA_RESP_ERR__INVALID_ARG;
    bool found = false;
    if (!e && md->topic_cnt == 1 && !md->topics[0].err) {
        for (int p = 0; p < md->topics[0].partition_cnt; p++)
            rd_kafka_topic_partition_list_add(l, topic, md->topics[0].partitions[p].id);
        found = md->topics[0].partition_cnt > 0;
    }
    if (md)
        rd_kafka_metadata_destroy(md);
    if (rkt)
        rd_kafka_topic_destroy(rkt);
    return found;
}

pb_status_t pb_kafka_group_lag(const pb_config_t *cfg, pb_kafka_group_lag_t *out, pb_error_t *err)
{
    memset(out, 0, sizeof *out);
    pb_kafka_group(cfg, out->group, sizeof out->group);
    /* a member of no group: it only reads the group's committed offsets */
    const pb_kafka_forced_t forced[] = {{"group.id", out->group},
                                        {"enable.auto.commit", "false"},
                                        {NULL, NULL}};
    rd_kafka_t *rk = NULL;
    pb_status_t st = pb_kafka_new(cfg, PB_KAFKA_CONSUMER, forced, NULL, &rk, err);
    if (st != PB_OK)
        return st;
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 0, NULL, &md, ASK_TIMEOUT_MS);
    if (e) {
        rd_kafka_destroy(rk);
        return pb_fail(err, PB_TRANSIENT, "kafka at %s: %s", cfg->kafka_brokers,
                       rd_kafka_err2str(e));
    }
    out->brokers = md->broker_cnt;
    rd_kafka_metadata_destroy(md);

    rd_kafka_topic_partition_list_t *topics = pb_kafka_topics(cfg);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(16);
    for (int i = 0; topics && i < topics->cnt; i++)
        if (topics->elems[i].topic[0] != '^')
            add_partitions(rk, topics->elems[i].topic, l);
    if (topics)
        rd_kafka_topic_partition_list_destroy(topics);
    if (l->cnt && (e = rd_kafka_committed(rk, l, ASK_TIMEOUT_MS)) != RD_KAFKA_RESP_ERR_NO_ERROR)
        st = pb_fail(err, PB_TRANSIENT, "kafka at %s: committed offsets of group \"%s\": %s",
                     cfg->kafka_brokers, out->group, rd_kafka_err2str(e));
    if (st == PB_OK && l->cnt) {
        out->parts = pb_malloc((size_t)l->cnt * sizeof *out->parts);
        for (int i = 0; i < l->cnt; i++) {
            const rd_kafka_topic_partition_t *tp = &l->elems[i];
            pb_kafka_partition_lag_t *p = &out->parts[out->n++];
            snprintf(p->topic, sizeof p->topic, "%s", tp->topic);
            p->partition = tp->partition;
            p->committed = tp->offset >= 0 ? tp->offset : -1;
            int64_t lo = -1, hi = -1;
            if (rd_kafka_query_watermark_offsets(rk, tp->topic, tp->partition, &lo, &hi,
                                                 ASK_TIMEOUT_MS) != RD_KAFKA_RESP_ERR_NO_ERROR) {
                p->end = p->lag = -1;
                continue;
            }
            int64_t at = p->committed >= 0 ? p->committed : lo;
            p->end = hi;
            p->lag = hi > at ? hi - at : 0;
        }
    }
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
    return st;
}

void pb_kafka_group_lag_free(pb_kafka_group_lag_t *g)
{
    free(g->parts);
    g->parts = NULL;
    g->n = 0;
}
