/* The parts of postbox demo (src/demo/), private to it. */
#ifndef PB_DEMO_DEMO_INT_H
#define PB_DEMO_DEMO_INT_H

#include <libpq-fe.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "common/err.h"
#include "config/config.h"

/* The consumer service's name (consume.consumer) and the one event type of the demo. */
#define DEMO_CONSUMER "shipping"
#define DEMO_EVENT_TYPE "order.placed.v1"
/* Customers are the aggregates: each one's orders must take effect in the order placed. */
#define DEMO_CUSTOMERS 100

/* ---- setup.c: the throwaway database and its schemas ------------------------------------ */

/* A connection string for database dbname on the server of server_dsn (any libpq form); the
 * caller frees *out. */
pb_status_t demo_dsn_for(const char *server_dsn, const char *dbname, char **out,
                         pb_error_t *err) PB_MUSTCHECK;
/* Drops (WITH FORCE) and creates dbname through a connection to server_dsn. */
pb_status_t demo_db_recreate(const char *server_dsn, const char *dbname,
                             pb_error_t *err) PB_MUSTCHECK;
/* postbox's schema (the migrations), the producer's schema `orders` and the consumer service's
 * schema `shipping` with its SQL handler. */
pb_status_t demo_schema_create(PGconn *conn, pb_error_t *err) PB_MUSTCHECK;

/* ---- broker.c: a fresh exchange/queue or stream ------------------------------------------ */

/* Deletes what an earlier run left on the broker of cfg->relay_sink: the queue and exchange
 * (amqp) or the stream with its durable consumers (nats). Missing ones are fine. */
pb_status_t demo_broker_reset(const pb_config_t *cfg, pb_error_t *err) PB_MUSTCHECK;

/* ---- child_config.c: the generated configuration of the relay and the consumer ---------- */

typedef struct demo_setting {
    const char *name; /* section.key */
    const char *value;
} demo_setting_t;

/* Writes every option of base as an INI file at path (mode 0600: it holds the passwords),
 * the settings replacing base's values, then a [handlers] section with n_handlers pairs of
 * type and SQL, then extra_ini as it is (sections of free keys such as librdkafka's; may be
 * NULL). Fails naming a value an INI file cannot hold (a newline or ';'). */
pb_status_t demo_write_config(const pb_config_t *base, const demo_setting_t *settings,
                              size_t n_settings, const demo_setting_t *handlers,
                              size_t n_handlers, const char *extra_ini, const char *path,
                              pb_error_t *err) PB_MUSTCHECK;

/* ---- child.c: the relay and the consumer as child processes ------------------------------ */

typedef struct demo_child {
    const char *name;    /* "relay", "consume" */
    char log_path[512];  /* stdout and stderr of every run, appended */
    pid_t pid;           /* 0 while not running */
    int starts;
    int kills;
    int64_t started_ms;  /* pb_monotonic_ms of the last start */
} demo_child_t;

/* Sets the executable (the running postbox) and the configuration every child gets. */
pb_status_t demo_child_setup(const char *config_path, pb_error_t *err) PB_MUSTCHECK;
/* fork + exec of `postbox -c CONFIG <name>`, the environment's POSTBOX_* variables removed
 * (the generated file says everything) and the child killed if the demo dies. */
pb_status_t demo_child_start(demo_child_t *ch, pb_error_t *err) PB_MUSTCHECK;
/* SIGKILL and reap. */
void demo_child_kill(demo_child_t *ch);
/* SIGTERM, then waits up to timeout_ms (then SIGKILL); returns its exit status, -1 if killed. */
int demo_child_stop(demo_child_t *ch, int64_t timeout_ms);
/* True when the child exited on its own (reaped; *status gets its exit status). */
bool demo_child_exited(demo_child_t *ch, int *status);
/* Runs argv (argv[0] a path) to its end in a child process with stdout/stderr into log_path
 * (appended); returns its pid without waiting, or -1. */
pid_t demo_spawn(char *const argv[], const char *log_path);
/* Occurrences of needle in the file from *offset on; *offset advances to the last complete line
 * read, so calling it again counts only what was appended. */
int64_t demo_count_in_log(const char *path, const char *needle, long *offset);
/* Events the NATS sink found in the stream already when it published them again (JetStream
 * dropped the copy by its Nats-Msg-Id), summed over the relay's log. */
int64_t demo_sum_dropped_copies(const char *path);

/* ---- producers.c: orders at a steady rate from several connections ----------------------- */

typedef struct demo_producers demo_producers_t;

/* Starts n threads, each with its own connection to dsn, committing `orders` orders in all over
 * duration_ms (a share rollback_pct of extra orders rolled back). */
pb_status_t demo_producers_start(const char *dsn, int n, int64_t orders, int64_t duration_ms,
                                 int rollback_pct, demo_producers_t **out,
                                 pb_error_t *err) PB_MUSTCHECK;
/* Orders committed and rolled back so far; true once every thread has finished. */
bool demo_producers_progress(demo_producers_t *p, int64_t *committed, int64_t *rolled_back);
/* Asks the threads to stop (an interrupt). */
void demo_producers_cancel(demo_producers_t *p);
/* Joins the threads; returns the first error of one (err filled), PB_OK when none failed. */
pb_status_t demo_producers_finish(demo_producers_t *p, pb_error_t *err) PB_MUSTCHECK;
void demo_producers_free(demo_producers_t *p);

/* ---- report.c: live progress and the summary --------------------------------------------- */

typedef struct demo_live {
    int64_t target;       /* orders to commit */
    int64_t committed;
    int64_t rolled_back;
    int64_t applied;      /* effects (shipments) */
    int64_t pending;      /* outbox rows not yet published */
    double lag_ms;        /* p50 of the effects applied since the last sample; < 0: none */
    int64_t duplicates;   /* 'duplicate message' lines of the consumer so far */
    int relay_kills, consumer_kills, kills_planned;
    double elapsed_s;
    double commit_rate, apply_rate; /* per second, over the last sample */
} demo_live_t;

/* Progress: a bar redrawn in place on a terminal, a plain line every few seconds otherwise. */
void demo_progress(const demo_live_t *lv, bool tty, bool force);
/* A line about something that happened (a kill), above the bar on a terminal. */
void demo_event(bool tty, const char *fmt, ...) PB_PRINTF(2, 3);
/* Ends the bar's line on a terminal. */
void demo_progress_end(bool tty);

typedef struct demo_result {
    const char *broker;
    double seconds;
    int64_t committed, rolled_back;
    int64_t events_committed;   /* outbox rows, published or not */
    int64_t published, pending, dead_letters, inbox_dead;
    int64_t dup_delivered;      /* deliveries of messages the inbox had seen */
    int64_t dropped_copies;     /* republished events the broker dropped (NATS), -1: n/a */
    int64_t effects, effects_distinct, effects_unknown, out_of_order;
    double lag_p50_ms, lag_p99_ms;
    int relay_kills, consumer_kills, broker_restarts;
} demo_result_t;

/* Fills r's database figures from conn. */
pb_status_t demo_result_query(PGconn *conn, demo_result_t *r, pb_error_t *err) PB_MUSTCHECK;
/* Prints the summary table and the verdict; returns true when every figure agrees. */
bool demo_summary(FILE *out, const demo_result_t *r, int kills_planned);

#endif
