/* postbox demo: a throwaway shop whose relay and consumer are killed while orders flow, and a
 * summary that proves every committed order took effect exactly once and in order. */
#ifndef PB_DEMO_DEMO_H
#define PB_DEMO_DEMO_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"

typedef struct pb_demo_opts {
    const char *broker;   /* "amqp" or "nats" */
    const char *database; /* the throwaway database, dropped and created at start */
    int64_t orders;       /* committed orders to generate */
    int64_t duration_ms;  /* over this long, at a steady rate */
    int kills;            /* SIGKILLs of the relay, and as many of the consumer */
    int producers;        /* producer connections */
    int rollback_pct;     /* share of order transactions rolled back, in percent */
    bool chaos_broker;    /* also restart the broker once (through scripts/services) */
    bool keep;            /* keep the configuration and logs after a passing run too */
} pb_demo_opts_t;

/* Runs the demo with the broker and database servers of cfg (its postgres.dsn names the server;
 * the demo works in opts->database on it). Returns the process exit status: 0 when the summary's
 * figures all agree, 1 when one differs or the run failed, 2 for bad options. */
int pb_demo_run(const pb_config_t *cfg, const pb_demo_opts_t *opts, volatile sig_atomic_t *stop);

#endif
