#include "cli/status_kafka.h"

#include <stdio.h>
#include <string.h>

#include "broker/kafka/group.h"
#include "common/redact.h"

bool pb_status_kafka_wanted(const pb_config_t *cfg)
{
    return strcmp(cfg->relay_sink, "kafka") == 0 || strcmp(cfg->consume_source, "kafka") == 0;
}

json_t *pb_status_kafka(const pb_config_t *cfg)
{
    json_t *o = json_object();
    char brokers[1024];
    pb_redact_secret(cfg->kafka_brokers, brokers, sizeof brokers); /* a mistyped URL with a password */
    json_object_set_new(o, "brokers", json_string(brokers));
    pb_kafka_group_lag_t g;
    pb_error_t err;
    if (pb_kafka_group_lag(cfg, &g, &err) != PB_OK) {
        json_object_set_new(o, "error", json_string(err.msg));
        return o;
    }
    json_object_set_new(o, "broker_count", json_integer(g.brokers));
    json_object_set_new(o, "group", json_string(g.group));
    json_t *arr = json_array();
    json_int_t total = 0;
    for (size_t i = 0; i < g.n; i++) {
        const pb_kafka_partition_lag_t *p = &g.parts[i];
        json_array_append_new(arr, json_pack("{s:s, s:i, s:I, s:I, s:I}", "topic", p->topic,
                                             "partition", (int)p->partition, "committed",
                                             (json_int_t)p->committed, "end", (json_int_t)p->end,
                                             "lag", (json_int_t)p->lag));
        if (p->lag > 0)
            total += p->lag;
    }
    json_object_set_new(o, "lag", json_integer(total));
    json_object_set_new(o, "partitions", arr);
    pb_kafka_group_lag_free(&g);
    return o;
}

void pb_status_kafka_print(const json_t *kafka)
{
    printf("\nkafka (%s)\n", json_string_value(json_object_get(kafka, "brokers")));
    if (json_object_get(kafka, "error")) {
        printf("  cannot ask kafka: %s\n", json_string_value(json_object_get(kafka, "error")));
        return;
    }
    printf("  %-24s %lld\n", "brokers in the cluster",
           (long long)json_integer_value(json_object_get(kafka, "broker_count")));
    json_t *parts = json_object_get(kafka, "partitions");
    if (json_array_size(parts) == 0) {
        printf("  %-24s none (kafka.topics names no existing topic)\n", "consumed partitions");
        return;
    }
    printf("  consumer group \"%s\": lag %lld\n",
           json_string_value(json_object_get(kafka, "group")),
           (long long)json_integer_value(json_object_get(kafka, "lag")));
    printf("  %-40s %9s %12s %12s %10s\n", "topic", "partition", "committed", "end", "lag");
    size_t i;
    json_t *p;
    json_array_foreach(parts, i, p) {
        long long committed = (long long)json_integer_value(json_object_get(p, "committed"));
        char ctxt[24] = "none";
        if (committed >= 0)
            snprintf(ctxt, sizeof ctxt, "%lld", committed);
        printf("  %-40s %9lld %12s %12lld %10lld\n", json_string_value(json_object_get(p, "topic")),
               (long long)json_integer_value(json_object_get(p, "partition")), ctxt,
               (long long)json_integer_value(json_object_get(p, "end")),
               (long long)json_integer_value(json_object_get(p, "lag")));
    }
}
