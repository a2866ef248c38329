/* Unit tests for the NATS subject helpers, the stream subjects from the configuration and which
 * JetStream errors are retried. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "broker/nats/conn.h"

static void matches_wildcards(void **state)
{
    (void)state;
    assert_true(pb_nats_subject_matches("postbox.>", "postbox.order.paid.v1"));
    assert_true(pb_nats_subject_matches("postbox.>", "postbox.x"));
    assert_false(pb_nats_subject_matches("postbox.>", "postbox"));
    assert_false(pb_nats_subject_matches("postbox.>", "other.order"));
    assert_true(pb_nats_subject_matches("a.*.c", "a.b.c"));
    assert_false(pb_nats_subject_matches("a.*.c", "a.b.d"));
    assert_false(pb_nats_subject_matches("a.*", "a.b.c"));
    assert_true(pb_nats_subject_matches("a.b", "a.b"));
    assert_false(pb_nats_subject_matches("a.b", "a.bc"));
    assert_false(pb_nats_subject_matches("a.bc", "a.b"));
    assert_true(pb_nats_subject_matches(">", "anything.at.all"));
}

static void validates_publish_subjects(void **state)
{
    (void)state;
    assert_true(pb_nats_subject_valid("postbox.order.paid.v1"));
    assert_true(pb_nats_subject_valid("a"));
    assert_false(pb_nats_subject_valid(""));
    assert_false(pb_nats_subject_valid("a..b"));
    assert_false(pb_nats_subject_valid(".a"));
    assert_false(pb_nats_subject_valid("a."));
    assert_false(pb_nats_subject_valid("a.*.b"));
    assert_false(pb_nats_subject_valid("a.>"));
    assert_false(pb_nats_subject_valid("a b"));
    assert_false(pb_nats_subject_valid("a\tb"));
    assert_true(pb_nats_subject_valid("a*b.c>d")); /* only whole tokens are wildcards */
}

static void config_subjects(void **state)
{
    (void)state;
    pb_config_t cfg;
    pb_config_init(&cfg);
    char **v;
    size_t n;
    pb_error_t err;
    assert_int_equal(pb_nats_config_subjects(&cfg, &v, &n, &err), PB_OK);
    assert_int_equal(n, 1);
    assert_string_equal(v[0], "postbox.>");
    free(v[0]);
    free(v);

    assert_int_equal(pb_config_set(&cfg, "nats.subject_prefix", "orders", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_nats_config_subjects(&cfg, &v, &n, &err), PB_OK);
    assert_string_equal(v[0], "orders.>");
    free(v[0]);
    free(v);

    assert_int_equal(pb_config_set(&cfg, "nats.stream_subjects", " a.> , b.* ", PB_CFG_CLI, &err),
                     PB_OK);
    assert_int_equal(pb_nats_config_subjects(&cfg, &v, &n, &err), PB_OK);
    assert_int_equal(n, 2);
    assert_string_equal(v[0], "a.>");
    assert_string_equal(v[1], "b.*");
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);

    assert_int_equal(pb_config_set(&cfg, "nats.stream_subjects", "a.>,,b", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_nats_config_subjects(&cfg, &v, &n, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "empty subject"));

    assert_int_equal(pb_config_set(&cfg, "nats.stream_subjects", "", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_config_set(&cfg, "nats.subject_prefix", "", PB_CFG_CLI, &err), PB_OK);
    assert_int_equal(pb_nats_config_subjects(&cfg, &v, &n, &err), PB_FATAL);
    pb_config_free(&cfg);
}

/* A cluster in flux (a node down or joining, an election) is retried; a refusal is not. */
static void cluster_errors_are_transient(void **state)
{
    (void)state;
    assert_true(pb_nats_js_transient(NATS_ERR, JSClusterNoPeersErr));
    assert_true(pb_nats_js_transient(NATS_ERR, JSClusterNotAvailErr));
    assert_true(pb_nats_js_transient(NATS_ERR, JSClusterNotLeaderErr));
    assert_true(pb_nats_js_transient(NATS_TIMEOUT, 0));
    assert_false(pb_nats_js_transient(NATS_ERR, JSStreamSubjectOverlapErr));
    assert_false(pb_nats_js_transient(NATS_ERR, JSStreamReplicasNotSupportedErr));
    assert_false(pb_nats_js_transient(NATS_ERR, 0));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_wildcards),
        cmocka_unit_test(validates_publish_subjects),
        cmocka_unit_test(config_subjects),
        cmocka_unit_test(cluster_errors_are_transient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
