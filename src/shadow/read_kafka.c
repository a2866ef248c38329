/* kafka:TOPIC, read from each partition's low watermark to its high one by a consumer that is
 * assigned the partitions (no group is joined, no offset committed): the topic and every group's
 * offsets are left as they were (shadow/read.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>

#include "broker/kafka/conf.h"
#include "common/clock.h"
#include "shadow/read.h"

#define ASK_TIMEOUT_MS 5000
#define IDLE_TIMEOUT_MS 10000 /* no record for this long before the ends are reached: give up */

/* The record's headers as attributes, then its key as attribute "key". */
static void add_record(const rd_kafka_message_t *r, pb_shadow_msgs_t *out)
{
    pb_shadow_msg_t *m = pb_shadow_msgs_add(out, r->payload ? r->payload : "",
                                            r->payload ? r->len : 0);
    rd_kafka_headers_t *hs = NULL;
    if (rd_kafka_message_headers(r, &hs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *value;
        size_t len;
        for (size_t i = 0; rd_kafka_header_get_all(hs, i, &name, &value, &len) ==
                               RD_KAFKA_RESP_ERR_NO_ERROR; i++)
            pb_shadow_msg_set_attr(m, name, value ? value : "", value ? len : 0);
    }
    if (r->key)
        pb_shadow_msg_set_attr(m, "key", r->key, r->key_len);
}

/* The partitions of topic with their watermarks: l gets (topic, partition, offset = low) of
 * each partition holding records, ends[partition] = high. */
static pb_status_t plan(rd_kafka_t *rk, const char *topic, rd_kafka_topic_partition_list_t *l,
                        int64_t **ends, int *n_parts, size_t *total, pb_error_t *err)
{
    /* every topic's metadata: asking for one by name would create it on a cluster that creates
     * topics on request, and the mock does */
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk, 1, NULL, &md, ASK_TIMEOUT_MS);
    if (e)
        return pb_fail(err, PB_TRANSIENT, "kafka: metadata: %s", rd_kafka_err2str(e));
    const struct rd_kafka_metadata_topic *mt = NULL;
    for (int t = 0; t < md->topic_cnt && !mt; t++)
        if (strcmp(md->topics[t].topic, topic) == 0)
            mt = &md->topics[t];
    pb_status_t st = PB_OK;
    if (!mt || mt->err || mt->partition_cnt == 0) {
        st = pb_fail(err, PB_FATAL, "kafka: no topic \"%s\"%s%s", topic, mt && mt->err ? ": " : "",
                     mt && mt->err ? rd_kafka_err2str(mt->err) : "");
        rd_kafka_metadata_destroy(md);
        return st;
    }
    *n_parts = mt->partition_cnt;
    *ends = calloc((size_t)*n_parts, sizeof **ends);
    if (!*ends)
        abort();
    *total = 0;
    for (int i = 0; i < *n_parts && st == PB_OK; i++) {
        int32_t p = mt->partitions[i].id;
        int64_t lo = 0, hi = 0;
        e = rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi, ASK_TIMEOUT_MS);
        if (e) {
            st = pb_fail(err, PB_TRANSIENT, "kafka: watermarks of %s [%d]: %s", topic, (int)p,
                         rd_kafka_err2str(e));
        } else if (p >= 0 && p < *n_parts && hi > lo) {
            rd_kafka_topic_partition_list_add(l, topic, p)->offset = lo;
            (*ends)[p] = hi;
            *total += (size_t)(hi - lo);
        }
    }
    rd_kafka_metadata_destroy(md);
    return st;
}

static pb_status_t read_all(rd_kafka_t *rk, const char *topic, size_t limit,
                            pb_shadow_msgs_t *out, pb_error_t *err)
{
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(8);
    int64_t *ends = NULL;
    int n_parts = 0;
    size_t total = 0;
    pb_status_t st = plan(rk, topic, l, &ends, &n_parts, &total, err);
    if (st == PB_OK && total > limit)
        st = pb_fail(err, PB_FATAL, "topic \"%s\" holds more than %zu records (--limit)", topic,
                     limit);
    rd_kafka_resp_err_t e;
    if (st == PB_OK && l->cnt > 0 && (e = rd_kafka_assign(rk, l)) != RD_KAFKA_RESP_ERR_NO_ERROR)
        st = pb_fail(err, PB_TRANSIENT, "kafka: assign the partitions of \"%s\": %s", topic,
                     rd_kafka_err2str(e));
    size_t left = total;
    int64_t idle_since = pb_monotonic_ms();
    while (st == PB_OK && left > 0) {
        rd_kafka_message_t *r = rd_kafka_consumer_poll(rk, 200);
        if (!r) {
            if (pb_monotonic_ms() - idle_since > IDLE_TIMEOUT_MS)
                st = pb_fail(err, PB_TRANSIENT, "kafka: topic \"%s\": %zu of %zu records read, "
                                                "nothing more came for %d s", topic, total - left,
                             total, IDLE_TIMEOUT_MS / 1000);
            continue;
        }
        idle_since = pb_monotonic_ms();
        if (r->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            rd_kafka_message_destroy(r);
            continue;
        }
        if (r->err) {
            st = pb_fail(err, PB_TRANSIENT, "kafka: reading \"%s\": %s", topic,
                         rd_kafka_message_errstr(r));
        } else if (r->partition >= 0 && r->partition < n_parts &&
                   r->offset < ends[r->partition]) {
            add_record(r, out); /* records past the high watermark came later: not read */
            left--;
        }
        rd_kafka_message_destroy(r);
    }
    free(ends);
    rd_kafka_topic_partition_list_destroy(l);
    return st;
}

pb_status_t pb_shadow_read_kafka(const pb_config_t *cfg, const char *topic, size_t limit,
                                 pb_shadow_msgs_t *out, pb_error_t *err)
{
    char group[96];
    snprintf(group, sizeof group, "postbox-shadow-compare-%" PRId64, pb_monotonic_ms());
    const pb_kafka_forced_t forced[] = {
        {"group.id", group}, /* required by a consumer handle; never joined (assign only) */
        {"enable.auto.commit", "false"},
        {"enable.auto.offset.store", "false"},
        {NULL, NULL},
    };
    const pb_kafka_callbacks_t cb = {0};
    rd_kafka_t *rk = NULL;
    pb_status_t st = pb_kafka_new(cfg, PB_KAFKA_CONSUMER, forced, &cb, &rk, err);
    if (st != PB_OK)
        return st;
    st = pb_kafka_check_reachable(rk, cfg, ASK_TIMEOUT_MS, err);
    if (st == PB_OK)
        st = read_all(rk, topic, limit, out, err);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return st;
}
