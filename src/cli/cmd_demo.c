/* postbox demo [--broker amqp|nats|redis|kafka] [--orders N] [--duration D] [--kills N] [--producers N]
 * [--rollback PCT] [--chaos broker] [--database NAME] [--keep]: orders flow through the outbox, the relay,
 * the broker, the consumer and its inbox while the relay and the consumer are SIGKILLed; the
 * summary shows that every committed order took effect exactly once and in order. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "common/log.h"
#include "demo/demo.h"

#define DEFAULT_RATE 50 /* orders per second when only one of --orders and --duration is given */

static bool valid_database_name(const char *s)
{
    if (!*s || strlen(s) > 40)
        return false;
    for (const char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return false;
    return *s < '0' || *s > '9';
}

static int bad(const char *what)
{
    fprintf(stderr, "postbox demo: %s (see postbox --help)\n", what);
    return PB_EXIT_USAGE;
}

int pb_cmd_demo(pb_cli_t *cli)
{
    pb_demo_opts_t o = {.broker = "amqp", .database = "postbox_demo", .kills = 4, .producers = 4,
                        .rollback_pct = 10};
    int64_t orders = -1, duration = -1, n;
    for (int i = 0; i < cli->n_args; i++) {
        const char *v;
        char **a = cli->args;
        if ((v = pb_args_value(a, cli->n_args, &i, "--broker"))) {
            if (strcmp(v, "amqp") != 0 && strcmp(v, "nats") != 0 && strcmp(v, "redis") != 0 &&
                strcmp(v, "kafka") != 0)
                return bad("--broker: expected amqp, nats, redis or kafka");
            o.broker = v;
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--orders"))) {
            if (!pb_args_count(v, &orders) || orders < 1 || orders > 10000000)
                return bad("--orders: expected 1..10000000");
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--duration"))) {
            if (!pb_args_duration_ms(v, &duration) || duration < 1000 || duration > 86400000)
                return bad("--duration: expected a duration from 1s to 1d, such as 60s or 2m");
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--kills"))) {
            if (!pb_args_count(v, &n) || n > 100)
                return bad("--kills: expected 0..100");
            o.kills = (int)n;
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--producers"))) {
            if (!pb_args_count(v, &n) || n < 1 || n > 64)
                return bad("--producers: expected 1..64");
            o.producers = (int)n;
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--rollback"))) {
            if (!pb_args_count(v, &n) || n > 90)
                return bad("--rollback: expected a percentage, 0..90");
            o.rollback_pct = (int)n;
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--chaos"))) {
            if (strcmp(v, "broker") != 0)
                return bad("--chaos: expected broker");
            o.chaos_broker = true;
        } else if (strcmp(a[i], "--keep") == 0) {
            o.keep = true;
        } else if ((v = pb_args_value(a, cli->n_args, &i, "--database"))) {
            if (!valid_database_name(v))
                return bad("--database: expected up to 40 lowercase letters, digits and _, "
                           "not starting with a digit");
            o.database = v;
        } else {
            pb_args_error("postbox demo: unknown argument \"%s\" (see postbox --help)", a[i]);
            return PB_EXIT_USAGE;
        }
        if (v && !*v)
            return PB_EXIT_USAGE;
    }
    if (duration < 0)
        duration = orders < 0 ? 60000 : orders * 1000 / DEFAULT_RATE;
    if (duration < 1000)
        duration = 1000;
    if (orders < 0)
        orders = duration * DEFAULT_RATE / 1000;
    o.orders = orders;
    o.duration_ms = duration;
    /* the migrations' lines would push the progress away; -v still shows everything */
    if (pb_log_threshold == PB_LOG_INFO)
        pb_log_set_level("warn");
    return pb_demo_run(&cli->cfg, &o, cli->stop);
}
