/* Kafka: a broker of kafka.brokers answers with the configured security properties
 * (pb_kafka_check_reachable; refused credentials show as no answer, with librdkafka's reason),
 * and the topics are there: the consumer's kafka.topics, and the relay's kafka.topic when it is
 * a fixed name. A topic's retention is the cluster's (retention.ms, 7 days by default). */
#include <stdio.h>
#include <string.h>

#include "broker/kafka/conf.h"
#include "check/check_int.h"

#define METADATA_TIMEOUT_MS 5000

static bool has_topic(const struct rd_kafka_metadata *md, const char *name)
{
    for (int i = 0; i < md->topic_cnt; i++)
        if (strcmp(md->topics[i].topic, name) == 0 && !md->topics[i].err)
            return true;
    return false;
}

static void judge_topic(pb_check_ctx_t *ctx, const struct rd_kafka_metadata *md, const char *name,
                        const char *whose)
{
    if (has_topic(md, name)) {
        pb_check_add(ctx->r, PB_CHECK_OK, "kafka.topic", "topic \"%s\" exists (%s)", name, whose);
        return;
    }
    pb_check_finding_t *f = pb_check_add(ctx->r, PB_CHECK_WARN, "kafka.topic",
                                         "topic \"%s\" (%s) does not exist: it works only where "
                                         "the cluster creates topics on first use",
                                         name, whose);
    pb_check_hint(f, "create it (kafka-topics --create, with retention.ms), or let the cluster "
                     "create topics (auto.create.topics.enable)");
}

void pb_check_kafka(pb_check_ctx_t *ctx, bool sink, bool source)
{
    const pb_config_t *cfg = ctx->cfg;
    rd_kafka_t *rk = NULL;
    pb_error_t err;
    pb_check_finding_t *f;
    if (pb_kafka_new(cfg, sink ? PB_KAFKA_PRODUCER : PB_KAFKA_CONSUMER, NULL, NULL, &rk, &err) !=
        PB_OK) {
        pb_check_add(ctx->r, PB_CHECK_FAIL, "kafka.connect", "%s", err.msg);
        return;
    }
    if (pb_kafka_check_reachable(rk, cfg, METADATA_TIMEOUT_MS, &err) != PB_OK) {
        f = pb_check_add(ctx->r, PB_CHECK_FAIL, "kafka.connect", "%s", err.msg);
        pb_check_hint(f, "are the brokers of kafka.brokers running and reachable, and do they "
                         "accept the security properties of [kafka] (security.protocol, sasl.*)?");
        rd_kafka_destroy(rk);
        return;
    }
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, METADATA_TIMEOUT_MS);
    if (e) {
        pb_check_add(ctx->r, PB_CHECK_FAIL, "kafka.connect", "kafka at %s: cannot list the topics: %s",
                     cfg->kafka_brokers, rd_kafka_err2str(e));
        rd_kafka_destroy(rk);
        return;
    }
    pb_check_add(ctx->r, PB_CHECK_OK, "kafka.connect", "kafka at %s answers: %d broker%s, %d topic%s",
                 cfg->kafka_brokers, md->broker_cnt, md->broker_cnt == 1 ? "" : "s",
                 md->topic_cnt, md->topic_cnt == 1 ? "" : "s");
    if (sink && !strchr(cfg->kafka_topic, '{'))
        judge_topic(ctx, md, cfg->kafka_topic, "kafka.topic");
    rd_kafka_topic_partition_list_t *topics = source ? pb_kafka_topics(cfg) : NULL;
    for (int i = 0; topics && i < topics->cnt; i++)
        if (topics->elems[i].topic[0] != '^') /* a pattern names no topic of its own */
            judge_topic(ctx, md, topics->elems[i].topic, "kafka.topics");
    if (topics)
        rd_kafka_topic_partition_list_destroy(topics);
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
}
