/* Unit tests for the metrics registry (exposition text) and the metrics.listen parser. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/str.h"
#include "metrics/http.h"
#include "metrics/metrics.h"

static char *render(void)
{
    pb_buf_t b = {0};
    pb_metrics_render(&b);
    return b.data;
}

static void counters_by_label(void **state)
{
    (void)state;
    pb_metrics_reset();
    pb_metrics_init("relay");
    pb_metrics_published("amqp", "order.paid.v1", 0.02);
    pb_metrics_published("amqp", "order.paid.v1", 0.2);
    pb_metrics_published("amqp", "order.created.v1", 3);
    pb_metrics_publish_failed("amqp", "order.paid.v1", false);
    pb_metrics_publish_failed("amqp", "order.paid.v1", true);
    char *t = render();
    assert_non_null(strstr(t, "postbox_published_total{sink=\"amqp\",event_type=\"order.paid.v1\"} 2\n"));
    assert_non_null(strstr(t, "postbox_published_total{sink=\"amqp\",event_type=\"order.created.v1\"} 1\n"));
    assert_non_null(strstr(t, "postbox_publish_errors_total{sink=\"amqp\",event_type=\"order.paid.v1\"} 2\n"));
    assert_non_null(strstr(t, "postbox_dead_letters_total{sink=\"amqp\",event_type=\"order.paid.v1\"} 1\n"));
    assert_non_null(strstr(t, "# TYPE postbox_published_total counter\n"));
    assert_non_null(strstr(t, "postbox_info{component=\"relay\",version=\""));
    /* consumer families are not part of a relay's exposition */
    assert_null(strstr(t, "postbox_inbox_processed_total"));
    free(t);
}

static void histogram_is_cumulative(void **state)
{
    (void)state;
    pb_metrics_reset();
    pb_metrics_init("relay");
    pb_metrics_published("amqp", "a", 0.004);  /* le 0.005 */
    pb_metrics_published("amqp", "a", 0.07);   /* le 0.1 */
    pb_metrics_published("amqp", "a", 5000.0); /* +Inf */
    char *t = render();
    assert_non_null(strstr(t, "postbox_publish_latency_seconds_bucket{le=\"0.005\"} 1\n"));
    assert_non_null(strstr(t, "postbox_publish_latency_seconds_bucket{le=\"0.05\"} 1\n"));
    assert_non_null(strstr(t, "postbox_publish_latency_seconds_bucket{le=\"0.1\"} 2\n"));
    assert_non_null(strstr(t, "postbox_publish_latency_seconds_bucket{le=\"1800\"} 2\n"));
    assert_non_null(strstr(t, "postbox_publish_latency_seconds_bucket{le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(t, "postbox_publish_latency_seconds_count 3\n"));
    assert_null(strstr(t, "postbox_last_publish_timestamp_seconds 0\n"));
    free(t);
}

static void label_values_are_escaped(void **state)
{
    (void)state;
    pb_metrics_reset();
    pb_metrics_init("consume");
    pb_metrics_inbox("we\"ird\\na\nme", 3, 1, 2, 1);
    char *t = render();
    assert_non_null(strstr(t, "postbox_inbox_processed_total{consumer=\"we\\\"ird\\\\na\\nme\"} 3\n"));
    assert_non_null(strstr(t, "postbox_inbox_duplicates_total{consumer=\"we\\\"ird\\\\na\\nme\"} 1\n"));
    assert_null(strstr(t, "postbox_published_total"));
    free(t);
}

static void series_are_capped(void **state)
{
    (void)state;
    pb_metrics_reset();
    pb_metrics_init("relay");
    char type[32];
    for (int i = 0; i < PB_METRICS_MAX_SERIES + 50; i++) {
        snprintf(type, sizeof type, "t%d", i);
        pb_metrics_published("amqp", type, 0.01);
    }
    char *t = render();
    assert_non_null(strstr(t, "postbox_published_total{sink=\"other\",event_type=\"other\"} 50\n"));
    free(t);
}

static void readiness_needs_all_three(void **state)
{
    (void)state;
    pb_metrics_reset();
    pb_metrics_set_state(true, true, false);
    assert_false(pb_metrics_ready());
    pb_metrics_set_state(true, false, true);
    assert_false(pb_metrics_ready());
    pb_metrics_set_state(true, true, true);
    assert_true(pb_metrics_ready());
    pb_metrics_set_outbox(123, true, 4.5, 7, 0.001);
    pb_metrics_set_slot_lag("postbox", 4096);
    pb_metrics_cdc_rejected("postbox");
    pb_metrics_cdc_rejected("postbox");
    char *t = render();
    assert_non_null(strstr(t, "postbox_outbox_backlog 123\n"));
    assert_non_null(strstr(t, "postbox_outbox_oldest_pending_age_seconds 4.5\n"));
    assert_non_null(strstr(t, "postbox_dead_letters 7\n"));
    assert_non_null(strstr(t, "postbox_replication_slot_lag_bytes{slot=\"postbox\"} 4096\n"));
    assert_non_null(strstr(t, "postbox_cdc_rejected_messages_total{slot=\"postbox\"} 2\n"));
    assert_non_null(strstr(t, "postbox_owner 1\n"));
    free(t);
}

static void listen_addresses(void **state)
{
    (void)state;
    char host[64];
    unsigned port;
    assert_true(pb_http_parse_listen("127.0.0.1:9187", host, sizeof host, &port));
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 9187);
    assert_true(pb_http_parse_listen("[::1]:80", host, sizeof host, &port));
    assert_string_equal(host, "::1");
    assert_int_equal(port, 80);
    assert_true(pb_http_parse_listen(":9187", host, sizeof host, &port));
    assert_string_equal(host, "");
    assert_false(pb_http_parse_listen("localhost", host, sizeof host, &port));
    assert_false(pb_http_parse_listen("h:0", host, sizeof host, &port));
    assert_false(pb_http_parse_listen("h:70000", host, sizeof host, &port));
    assert_false(pb_http_parse_listen("[::1]9187", host, sizeof host, &port));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counters_by_label),       cmocka_unit_test(histogram_is_cumulative),
        cmocka_unit_test(label_values_are_escaped), cmocka_unit_test(series_are_capped),
        cmocka_unit_test(readiness_needs_all_three), cmocka_unit_test(listen_addresses),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pb_metrics_reset();
    return rc;
}
