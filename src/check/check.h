/* postbox check: a preflight of what a relay and a consumer need from PostgreSQL and their
 * brokers, each problem found before a start (or a failure hours later) finds it.
 *
 * The checks come in families, one file each (postgres.c, schema.c, privileges.c, cdc.c, and
 * one per broker), run in the order of the registry in check.c. Each family observes what it
 * needs (a query, a passive declare) and hands the observed values to the pure judgements of
 * judge.h, which decide and word the findings; so what a shared server cannot be made to show
 * (wal_level, a lost slot) is unit-tested there.
 *
 * A finding is OK, WARN (worth knowing, nothing fails because of it) or FAIL (something will
 * fail or is wrong: `postbox check` exits 1). Each problem is one line with a hint.
 *
 * A starting relay or consumer runs the cheap part (the database families, no broker: it
 * connects to its broker next anyway, with its own checks and errors) and logs what it finds as
 * warnings: nothing of it stops the start. */
#ifndef PB_CHECK_CHECK_H
#define PB_CHECK_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "common/err.h"
#include "config/config.h"

typedef enum pb_check_status {
    PB_CHECK_OK,
    PB_CHECK_WARN,
    PB_CHECK_FAIL,
} pb_check_status_t;

/* One finding: what was checked (a dotted name such as "cdc.slot"), what was found, what to
 * do about it. */
typedef struct pb_check_finding {
    pb_check_status_t status;
    char name[48];
    char *message; /* one line */
    char *hint;    /* NULL when there is nothing to do */
} pb_check_finding_t;

/* The findings of a run, in the order found. A zeroed report is empty. */
typedef struct pb_check_report {
    pb_check_finding_t *items;
    size_t n, cap;
} pb_check_report_t;

/* Adds a finding; returns it so that a hint can follow (pb_check_hint). */
pb_check_finding_t *pb_check_add(pb_check_report_t *r, pb_check_status_t status, const char *name,
                                 const char *fmt, ...) PB_PRINTF(4, 5);
void pb_check_hint(pb_check_finding_t *f, const char *fmt, ...) PB_PRINTF(2, 3);

size_t pb_check_count(const pb_check_report_t *r, pb_check_status_t status);
void pb_check_report_free(pb_check_report_t *r);

/* "ok", "warn", "fail" */
const char *pb_check_status_name(pb_check_status_t status);

/* Which processes the checks are for: each runs with its own configuration and role. */
#define PB_CHECK_RELAY 1u
#define PB_CHECK_CONSUME 2u

typedef struct pb_check_opts {
    unsigned sides; /* PB_CHECK_RELAY | PB_CHECK_CONSUME */
    bool at_start;  /* the cheap part, for a starting relay or consumer (see above): no broker, and
                     * nothing the starting process is about to do itself (create the slot) */
} pb_check_opts_t;

/* Runs every family that concerns opts->sides into r. Never fails: what cannot be checked (the
 * database is down) is itself a finding. */
void pb_check_run(const pb_config_t *cfg, const pb_check_opts_t *opts, pb_check_report_t *r);

/* At the start of a relay (side PB_CHECK_RELAY) or a consumer: runs the cheap part and logs every
 * problem under fac as a warning with its hint. A database that cannot be reached is left to the
 * process's own connect loop (logged at debug level). */
void pb_check_at_start(const pb_config_t *cfg, unsigned side, const char *fac);

#endif
