/* The consumer's lanes: long-lived worker threads that each run one lane's share of a batch
 * (its own PostgreSQL connection and transaction), so that the handlers of different aggregates
 * run in parallel. Lane 0 runs on the caller's thread (it reads the broker ahead while
 * PostgreSQL works); lanes 1..n-1 each have a thread, started once, woken per batch.
 *
 * @thread loop: pb_lanes_run and pb_lanes_free from the consumer's thread only; work(arg, l)
 * runs on lane l's thread and must touch only lane l's state. */
#ifndef PB_CONSUME_LANES_H
#define PB_CONSUME_LANES_H

#include <stdbool.h>

typedef struct pb_lanes pb_lanes_t;

/* n lanes (1..16) running work(arg, lane). A thread that cannot be started leaves its lane to
 * the caller's thread, in line. */
pb_lanes_t *pb_lanes_new(int n, void (*work)(void *arg, int lane), void *arg);

/* Runs work(arg, l) for every lane with busy[l], in parallel; returns when all are done. */
void pb_lanes_run(pb_lanes_t *p, const bool *busy);

/* Stops and joins the threads. Accepts NULL. */
void pb_lanes_free(pb_lanes_t *p);

#endif
