/* postbox demo: the run. A throwaway database with an `orders` shop and a `shipping` consumer
 * service; the consumer and the relay start as child processes; producer threads place orders
 * at a steady rate (a share rolled back) while the demo SIGKILLs the relay and the consumer at
 * spread-out moments and starts them again (and, with --chaos broker, restarts the broker);
 * once every committed order took effect it stops them and checks the figures. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/backoff.h"
#include "common/clock.h"
#include "common/str.h"
#include "common/log.h"
#include "demo/demo.h"
#include "demo/demo_int.h"
#include "store/pg.h"

#define FAC "demo"
#define TICK_MS 100
#define SAMPLE_MS 500
#define READY_TIMEOUT_MS 60000
#define DRAIN_TIMEOUT_MS 90000
#define STOP_TIMEOUT_MS 30000
#define MIN_UP_MS 800 /* a child runs at least this long between two kills */

typedef struct run {
    const pb_demo_opts_t *o;
    volatile sig_atomic_t *stop;
    bool tty;
    char dir[64];
    char config_path[128];
    char *dsn;
    PGconn *conn;
    pb_config_t child_cfg; /* the generated file, read back */
    demo_child_t relay, consumer;
    int64_t t0_ms;
    int64_t *relay_kill_at, *consumer_kill_at; /* ms after t0 */
    int64_t relay_up_at, consumer_up_at;       /* restart due (ms after t0), 0: running */
    pid_t broker_pid;                          /* scripts/services restarting the broker */
    int broker_restarts;
    char broker_log[128];
    demo_live_t lv;
    int64_t last_id;  /* of the shipments sampled */
    int64_t last_fresh_ms; /* when a sample last found new shipments */
    long dup_offset;  /* read so far of the consumer's log */
} run_t;

static const char *broker_title(const char *broker)
{
    if (strcmp(broker, "nats") == 0)
        return "NATS JetStream";
    if (strcmp(broker, "redis") == 0)
        return "Redis Streams";
    if (strcmp(broker, "kafka") == 0)
        return "Kafka";
    return "RabbitMQ";
}

/* Spreads n moments over the production window, each in its own slot, at a random point of the
 * slot's middle; offset shifts the relay's slots from the consumer's. */
static int64_t *kill_schedule(int n, int64_t window_ms, double offset)
{
    int64_t *at = pb_malloc((size_t)(n > 0 ? n : 1) * sizeof *at);
    for (int i = 0; i < n; i++) {
        double slot = (double)window_ms / n;
        at[i] = (int64_t)(slot * (i + offset + 0.35 * pb_random_unit()));
    }
    return at;
}

static pb_status_t write_child_config(run_t *r, const pb_config_t *cfg, pb_error_t *err)
{
    const pb_demo_opts_t *o = r->o;
    char exchange[160], queue[160], stream[160], prefix[160], redis_prefix[160], redis_stream[160];
    char topic[120], group[160];
    /* the mock cluster of scripts/services never deletes a topic: each run gets its own */
    snprintf(topic, sizeof topic, "%s.%lld.orders", o->database, (long long)(pb_wall_us() / 1000));
    snprintf(group, sizeof group, "%s.%s", topic, DEMO_CONSUMER);
    snprintf(exchange, sizeof exchange, "%s.events", o->database);
    snprintf(queue, sizeof queue, "%s.%s", o->database, DEMO_CONSUMER);
    snprintf(prefix, sizeof prefix, "%s.", o->database);
    size_t k = 0;
    for (const char *c = o->database; *c && k + 1 < sizeof stream; c++)
        stream[k++] = (char)(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
    stream[k] = '\0';
    snprintf(redis_prefix, sizeof redis_prefix, "%s:", o->database);
    snprintf(redis_stream, sizeof redis_stream, "%s:orders", o->database);
    const demo_setting_t settings[] = {
        {"postgres.dsn", r->dsn},
        {"relay.sink", o->broker},
        {"consume.source", o->broker},
        {"relay.capture", "poll"},
        /* small batches: more commits, so more kills land between a confirm and its commit */
        {"relay.batch_size", "50"},
        {"relay.reconnect_cap", "2s"},
        {"relay.backoff_base", "200ms"},
        {"relay.backoff_cap", "2s"},
        {"relay.shards", "1"},
        {"consume.consumer", DEMO_CONSUMER},
        {"consume.reconnect_cap", "2s"},
        {"consume.handler", ""},
        {"amqp.exchange", exchange},
        {"amqp.declare_exchange", "true"},
        {"amqp.queue", queue},
        {"amqp.queue_declare", "true"},
        {"amqp.bindings", "#"},
        {"nats.stream", stream},
        {"nats.stream_create", "true"},
        {"nats.subject_prefix", prefix},
        {"nats.stream_subjects", ""},
        {"nats.durable", ""},
        {"nats.filter_subject", ""},
        /* a killed consumer's deliveries come back after this */
        {"nats.ack_wait", "5s"},
        {"nats.max_age", "1h"},
        /* one stream for every event; a restarted consumer keeps its name, so it takes up its
         * own pending entries first */
        {"redis.stream_prefix", redis_prefix},
        {"redis.stream", "orders"},
        {"redis.streams", redis_stream},
        {"redis.group", ""},
        {"redis.consumer_name", DEMO_CONSUMER},
        {"redis.claim_idle", "2s"},
        {"redis.max_age", "1h"},
        {"kafka.topic", topic},
        {"kafka.topics", topic},
        {"kafka.group", group},
        {"metrics.listen", ""},
        {"log.format", "text"},
        {"log.level", "info"},
    };
    const demo_setting_t handlers[] = {
        {DEMO_EVENT_TYPE, "SELECT shipping.on_order_placed($1::jsonb, $2::jsonb)"},
    };
    /* a killed consumer's partitions go to its successor within seconds */
    const char *kafka_ini = "[kafka]\nsession.timeout.ms = 2500\nheartbeat.interval.ms = 500\n";
    pb_status_t st = demo_write_config(cfg, settings, sizeof settings / sizeof *settings, handlers,
                                       1, strcmp(o->broker, "kafka") == 0 ? kafka_ini : NULL,
                                       r->config_path, err);
    if (st != PB_OK)
        return st;
    if ((st = pb_config_load_file(&r->child_cfg, r->config_path, err)) == PB_OK)
        st = pb_config_validate(&r->child_cfg, err);
    if (st != PB_OK)
        return pb_fail(err, st, "the generated configuration: %s", err->msg);
    return PB_OK;
}

/* scripts/services of the source tree the running binary was built in (build/<dir>/postbox),
 * or POSTBOX_SERVICES_SCRIPT. */
static bool services_script(char *out, size_t n)
{
    const char *env = getenv("POSTBOX_SERVICES_SCRIPT");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return access(out, R_OK) == 0;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0)
        return false;
    exe[len] = '\0';
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash)
            return false;
        *slash = '\0';
        snprintf(out, n, "%s/scripts/services", exe);
        if (access(out, R_OK) == 0)
            return true;
    }
    return false;
}

static void restart_broker(run_t *r)
{
    char script[4200];
    if (!services_script(script, sizeof script)) {
        demo_event(r->tty, "--chaos broker: scripts/services not found (set POSTBOX_SERVICES_SCRIPT); "
                           "the broker is left alone");
        return;
    }
    const char *server = r->o->broker; /* scripts/services names them as --broker does */
    char *argv[] = {(char *)"/bin/bash", (char *)"-c", (char *)"\"$0\" stop \"$1\" && \"$0\" start \"$1\"",
                    script, (char *)server, NULL};
    r->broker_pid = demo_spawn(argv, r->broker_log);
    if (r->broker_pid > 0)
        demo_event(r->tty, "%5.1fs  restarting the broker (%s stop/start %s)",
                   (double)(pb_monotonic_ms() - r->t0_ms) / 1000, script, server);
}

static pb_status_t wait_consumer_ready(run_t *r, pb_error_t *err)
{
    const char *needle = strcmp(r->o->broker, "nats") == 0    ? "durable pull consumer"
                         : strcmp(r->o->broker, "redis") == 0 ? "in group"
                         : strcmp(r->o->broker, "kafka") == 0 ? "assigned"
                                                              : "consuming queue";
    int64_t deadline = pb_monotonic_ms() + READY_TIMEOUT_MS;
    long offset = 0;
    while (demo_count_in_log(r->consumer.log_path, needle, &offset) == 0) {
        int status;
        if (demo_child_exited(&r->consumer, &status))
            return pb_fail(err, PB_FATAL, "postbox consume exited with %d at start (see %s)",
                           status, r->consumer.log_path);
        if (*r->stop)
            return pb_fail(err, PB_TRANSIENT, "interrupted");
        if (pb_monotonic_ms() > deadline)
            return pb_fail(err, PB_TRANSIENT, "postbox consume was not consuming after %d s (see %s)",
                           READY_TIMEOUT_MS / 1000, r->consumer.log_path);
        pb_sleep_ms(TICK_MS);
    }
    return PB_OK;
}

static pb_status_t wait_first_published(run_t *r, pb_error_t *err)
{
    int64_t deadline = pb_monotonic_ms() + READY_TIMEOUT_MS;
    for (;;) {
        PGresult *res = PQexec(r->conn, "SELECT EXISTS (SELECT 1 FROM postbox.outbox_published)");
        pb_status_t st = pb_pg_check(r->conn, res, PGRES_TUPLES_OK, "first published event", err);
        if (st != PB_OK)
            return st;
        bool any = PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        if (any)
            return PB_OK;
        int status;
        if (demo_child_exited(&r->relay, &status))
            return pb_fail(err, PB_FATAL, "postbox relay exited with %d at start (see %s)", status,
                           r->relay.log_path);
        if (*r->stop)
            return pb_fail(err, PB_TRANSIENT, "interrupted");
        if (pb_monotonic_ms() > deadline)
            return pb_fail(err, PB_TRANSIENT, "the relay published nothing within %d s (see %s)",
                           READY_TIMEOUT_MS / 1000, r->relay.log_path);
        pb_sleep_ms(TICK_MS);
    }
}

static pb_status_t sample(run_t *r, pb_error_t *err)
{
    char last[32];
    snprintf(last, sizeof last, "%lld", (long long)r->last_id);
    const char *params[1] = {last};
    PGresult *res = PQexecParams(
        r->conn,
        "SELECT count(*), coalesce(max(id), $1::bigint),"
        "       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY lag_ms), -1),"
        "       (SELECT count(*) FROM postbox.outbox)"
        "  FROM shipping.shipments WHERE id > $1::bigint",
        1, NULL, params, NULL, NULL, 0);
    pb_status_t st = pb_pg_check(r->conn, res, PGRES_TUPLES_OK, "progress", err);
    if (st != PB_OK)
        return st;
    int64_t fresh = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    r->last_id = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    int64_t now = pb_monotonic_ms();
    if (fresh > 0) {
        r->lv.lag_ms = strtod(PQgetvalue(res, 0, 2), NULL);
        r->last_fresh_ms = now;
    } else if (r->lv.committed > r->lv.applied && r->last_fresh_ms) {
        /* nothing applied meanwhile (a process or the broker is down): the lag grows */
        double stalled = (double)(now - r->last_fresh_ms);
        if (stalled > r->lv.lag_ms)
            r->lv.lag_ms = stalled;
    }
    r->lv.pending = strtoll(PQgetvalue(res, 0, 3), NULL, 10);
    r->lv.applied += fresh;
    PQclear(res);
    r->lv.duplicates += demo_count_in_log(r->consumer.log_path, "duplicate message", &r->dup_offset);
    return PB_OK;
}

/* Waits (up to a moment) until committed events wait in the outbox: the relay then has a batch
 * in hand, claimed, in flight or confirmed but not yet settled, which is when a crash matters. */
static void wait_relay_busy(run_t *r)
{
    int64_t until = pb_monotonic_ms() + 1500;
    while (pb_monotonic_ms() < until && !*r->stop) {
        PGresult *res = PQexec(r->conn, "SELECT EXISTS (SELECT 1 FROM postbox.outbox)");
        bool busy = PQresultStatus(res) == PGRES_TUPLES_OK && PQgetvalue(res, 0, 0)[0] == 't';
        PQclear(res);
        if (busy)
            return;
        pb_sleep_ms(2);
    }
}

/* Kills a child whose moment has come (when it has run long enough to have work in hand) and
 * starts it again after a short pause, as a supervisor would. */
static pb_status_t chaos_child(run_t *r, demo_child_t *ch, const int64_t *kill_at, int *n_killed,
                               int64_t *up_at, int64_t now, pb_error_t *err)
{
    if (ch->pid == 0) {
        if (*up_at && now >= *up_at) {
            *up_at = 0;
            return demo_child_start(ch, err);
        }
        return PB_OK;
    }
    if (*n_killed >= r->o->kills || now < kill_at[*n_killed] ||
        pb_monotonic_ms() - ch->started_ms < MIN_UP_MS)
        return PB_OK;
    if (ch == &r->relay)
        wait_relay_busy(r);
    pid_t pid = ch->pid;
    demo_child_kill(ch);
    (*n_killed)++;
    int64_t pause = 200 + (int64_t)(800 * pb_random_unit());
    *up_at = now + pause;
    demo_event(r->tty, "%5.1fs  SIGKILL %s (pid %d), kill %d of %d; started again in %lld ms",
               (double)now / 1000, strcmp(ch->name, "relay") == 0 ? "relay  " : "consumer",
               (int)pid, *n_killed, r->o->kills, (long long)pause);
    return PB_OK;
}

static pb_status_t check_children(run_t *r, pb_error_t *err)
{
    demo_child_t *all[] = {&r->relay, &r->consumer};
    for (int i = 0; i < 2; i++) {
        int status;
        if (demo_child_exited(all[i], &status))
            return pb_fail(err, PB_FATAL, "postbox %s exited by itself with status %d (see %s)",
                           all[i]->name, status, all[i]->log_path);
    }
    if (r->broker_pid > 0) {
        int status;
        if (waitpid(r->broker_pid, &status, WNOHANG) == r->broker_pid) {
            r->broker_pid = 0;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                return pb_fail(err, PB_FATAL, "restarting the broker failed (see %s)", r->broker_log);
            r->broker_restarts++;
            demo_event(r->tty, "%5.1fs  the broker is back", (double)(pb_monotonic_ms() - r->t0_ms) / 1000);
        }
    }
    return PB_OK;
}

static pb_status_t run_loop(run_t *r, demo_producers_t *prod, pb_error_t *err)
{
    const pb_demo_opts_t *o = r->o;
    int relay_killed = 0, consumer_killed = 0;
    bool broker_done = !o->chaos_broker;
    int64_t next_sample = 0, prev_sample_ms = 0, prev_committed = 0, prev_applied = 0;
    int64_t drain_deadline = 0;
    pb_status_t st;
    for (;;) {
        if (*r->stop)
            return pb_fail(err, PB_TRANSIENT, "interrupted");
        int64_t now = pb_monotonic_ms() - r->t0_ms;
        bool produced = demo_producers_progress(prod, &r->lv.committed, &r->lv.rolled_back);
        if ((st = check_children(r, err)) != PB_OK)
            return st;
        if ((st = chaos_child(r, &r->relay, r->relay_kill_at, &relay_killed, &r->relay_up_at, now,
                              err)) != PB_OK ||
            (st = chaos_child(r, &r->consumer, r->consumer_kill_at, &consumer_killed,
                              &r->consumer_up_at, now, err)) != PB_OK)
            return st;
        if (!broker_done && now >= o->duration_ms / 2) {
            broker_done = true;
            restart_broker(r);
        }
        r->lv.relay_kills = relay_killed;
        r->lv.consumer_kills = consumer_killed;
        if (now >= next_sample) {
            if ((st = sample(r, err)) != PB_OK)
                return st;
            double dt = (double)(now - prev_sample_ms) / 1000;
            if (dt > 0) {
                r->lv.commit_rate = (double)(r->lv.committed - prev_committed) / dt;
                r->lv.apply_rate = (double)(r->lv.applied - prev_applied) / dt;
            }
            prev_sample_ms = now;
            prev_committed = r->lv.committed;
            prev_applied = r->lv.applied;
            r->lv.elapsed_s = (double)now / 1000;
            demo_progress(&r->lv, r->tty, false);
            next_sample = now + SAMPLE_MS;
            bool chaos_over = relay_killed >= o->kills && consumer_killed >= o->kills &&
                              r->relay.pid && r->consumer.pid && broker_done && !r->broker_pid;
            if (produced && chaos_over) {
                if (r->lv.applied >= r->lv.committed && r->lv.pending == 0)
                    break;
                if (!drain_deadline)
                    drain_deadline = now + DRAIN_TIMEOUT_MS;
                else if (now > drain_deadline)
                    return pb_fail(err, PB_FATAL, "%lld of %lld committed orders took no effect "
                                                  "within %d s after the last one (%lld unpublished)",
                                   (long long)(r->lv.committed - r->lv.applied),
                                   (long long)r->lv.committed, DRAIN_TIMEOUT_MS / 1000,
                                   (long long)r->lv.pending);
            }
        }
        pb_sleep_ms(TICK_MS);
    }
    demo_progress(&r->lv, r->tty, true);
    return PB_OK;
}

static pb_status_t prepare(run_t *r, const pb_config_t *cfg, pb_error_t *err)
{
    pb_status_t st;
    if (!mkdtemp(r->dir))
        return pb_fail(err, PB_FATAL, "mkdtemp %s: %s", r->dir, strerror(errno));
    snprintf(r->config_path, sizeof r->config_path, "%s/postbox.ini", r->dir);
    snprintf(r->relay.log_path, sizeof r->relay.log_path, "%s/relay.log", r->dir);
    snprintf(r->consumer.log_path, sizeof r->consumer.log_path, "%s/consume.log", r->dir);
    snprintf(r->broker_log, sizeof r->broker_log, "%s/broker.log", r->dir);
    if ((st = demo_db_recreate(cfg->postgres_dsn, r->o->database, err)) != PB_OK)
        return pb_fail(err, st, "database \"%s\": %s", r->o->database, err->msg);
    if ((st = demo_dsn_for(cfg->postgres_dsn, r->o->database, &r->dsn, err)) != PB_OK)
        return st;
    if ((st = pb_pg_connect(r->dsn, &r->conn, err)) != PB_OK)
        return pb_fail(err, st, "cannot connect to database \"%s\": %s", r->o->database, err->msg);
    if ((st = demo_schema_create(r->conn, err)) != PB_OK)
        return pb_fail(err, st, "schema: %s", err->msg);
    if ((st = write_child_config(r, cfg, err)) != PB_OK)
        return st;
    if ((st = demo_broker_reset(&r->child_cfg, err)) != PB_OK)
        return st;
    return demo_child_setup(r->config_path, err);
}

static void print_intro(const run_t *r)
{
    const pb_demo_opts_t *o = r->o;
    printf("postbox demo: %lld orders over %.0f s from %d producer connections (%d%% more rolled "
           "back),\n"
           "relayed through %s to the consumer service \"%s\"; the relay and the consumer are "
           "each SIGKILLed %d times%s.\n"
           "database \"%s\", configuration and logs in %s\n\n",
           (long long)o->orders, (double)o->duration_ms / 1000, o->producers, o->rollback_pct,
           broker_title(o->broker), DEMO_CONSUMER, o->kills,
           o->chaos_broker ? ", the broker restarted once" : "", o->database, r->dir);
    fflush(stdout);
}

int pb_demo_run(const pb_config_t *cfg, const pb_demo_opts_t *o, volatile sig_atomic_t *stop)
{
    run_t r = {.o = o, .stop = stop, .tty = isatty(STDOUT_FILENO) == 1};
    snprintf(r.dir, sizeof r.dir, "/tmp/postbox-demo.XXXXXX");
    r.relay.name = "relay";
    r.consumer.name = "consume";
    r.lv.target = o->orders;
    r.lv.kills_planned = o->kills;
    r.lv.lag_ms = -1;
    pb_config_init(&r.child_cfg);
    demo_producers_t *prod = NULL;
    pb_error_t err;
    bool ok = false;
    int64_t production_ms = o->duration_ms;
    r.relay_kill_at = kill_schedule(o->kills, production_ms, 0.15);
    r.consumer_kill_at = kill_schedule(o->kills, production_ms, 0.5);

    /* a queue, stream or group must exist before the relay publishes; a Kafka consumer group
     * needs its topic, which the relay's first event creates */
    bool consumer_first = strcmp(o->broker, "kafka") != 0;
    pb_status_t st = prepare(&r, cfg, &err);
    if (st == PB_OK) {
        print_intro(&r);
        if (consumer_first && (st = demo_child_start(&r.consumer, &err)) == PB_OK)
            st = wait_consumer_ready(&r, &err);
    }
    if (st == PB_OK)
        st = demo_child_start(&r.relay, &err);
    if (st == PB_OK) {
        r.t0_ms = pb_monotonic_ms();
        st = demo_producers_start(r.dsn, o->producers, o->orders, production_ms, o->rollback_pct,
                                  &prod, &err);
    }
    if (st == PB_OK && !consumer_first && (st = wait_first_published(&r, &err)) == PB_OK &&
        (st = demo_child_start(&r.consumer, &err)) == PB_OK)
        st = wait_consumer_ready(&r, &err);
    if (st == PB_OK)
        st = run_loop(&r, prod, &err);
    demo_progress_end(r.tty);
    if (prod) {
        demo_producers_cancel(prod);
        pb_error_t perr;
        if (demo_producers_finish(prod, &perr) != PB_OK && st == PB_OK) {
            err = perr;
            st = PB_FATAL;
        }
        demo_producers_progress(prod, &r.lv.committed, &r.lv.rolled_back);
    }
    if (r.broker_pid > 0)
        waitpid(r.broker_pid, NULL, 0);
    int relay_rc = demo_child_stop(&r.relay, STOP_TIMEOUT_MS);
    int consumer_rc = demo_child_stop(&r.consumer, STOP_TIMEOUT_MS);
    if (st == PB_OK && (relay_rc != 0 || consumer_rc != 0))
        st = pb_fail(&err, PB_FATAL, "on SIGTERM the relay exited with %d, the consumer with %d",
                     relay_rc, consumer_rc);
    if (st == PB_OK) {
        demo_result_t res = {.broker = broker_title(o->broker),
                             .seconds = (double)(pb_monotonic_ms() - r.t0_ms) / 1000,
                             .committed = r.lv.committed,
                             .rolled_back = r.lv.rolled_back,
                             .relay_kills = r.relay.kills,
                             .consumer_kills = r.consumer.kills,
                             .broker_restarts = r.broker_restarts};
        long offset = 0;
        res.dup_delivered = demo_count_in_log(r.consumer.log_path, "duplicate message", &offset);
        res.dropped_copies =
            strcmp(o->broker, "nats") == 0 ? demo_sum_dropped_copies(r.relay.log_path) : -1;
        if ((st = demo_result_query(r.conn, &res, &err)) == PB_OK)
            ok = demo_summary(stdout, &res, o->kills);
    }
    if (st != PB_OK)
        fprintf(stderr, "postbox demo: %s\n", err.msg);
    if (!strstr(r.dir, "XXXXXX")) {
        if (ok && !o->keep) {
            const char *files[] = {r.config_path, r.relay.log_path, r.consumer.log_path, r.broker_log};
            for (size_t i = 0; i < sizeof files / sizeof *files; i++)
                unlink(files[i]);
            rmdir(r.dir);
            printf("\nthe database \"%s\" is kept for a look (--keep keeps the logs too)\n",
                   o->database);
        } else {
            printf("\nthe database \"%s\" is kept for a look; configuration and logs of the relay "
                   "and the consumer: %s\n", o->database, r.dir);
        }
    }
    demo_producers_free(prod);
    PQfinish(r.conn);
    pb_config_free(&r.child_cfg);
    free(r.dsn);
    free(r.relay_kill_at);
    free(r.consumer_kill_at);
    return ok ? 0 : 1;
}
