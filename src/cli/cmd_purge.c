/* postbox purge --older-than DURATION [--batch N] [--outbox-only|--inbox-only] [--consumer C]
 * [--dead-letters] [--sequences]: retention by hand (the relay and the consumer also purge
 * periodically: relay.retention, consume.retention, relay.dead_letter_retention,
 * consume.dead_retention, relay.sequence_retention, consume.sequence_retention).
 * Deletes published outbox rows and handled inbox rows older than DURATION, with
 * --dead-letters the dead letters (postbox.dead_letters, postbox.inbox_dead) dead for longer
 * than DURATION whatever their type, and with --sequences the sequence rows of aggregates idle
 * for longer (postbox.aggregate_sequences with the outbox, postbox.inbox_sequences with the
 * inbox, after its purge: sql/018), in batches, each batch its own short transaction
 * (store/purge.h); SIGTERM/SIGINT stop it between two batches. Prints rows, batches and the
 * longest batch per table. */
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "store/pg.h"
#include "store/purge.h"

static int purge_one(pb_cli_t *cli, PGconn *conn, pb_purge_target_t target, int64_t older_ms,
                     const char *consumer, int batch)
{
    pb_purge_t p;
    pb_error_t err;
    int64_t t0 = pb_monotonic_ms();
    if (pb_purge_begin(&p, conn, target, older_ms, NULL, consumer, batch, &err) != PB_OK) {
        fprintf(stderr, "postbox purge: %s\n", err.msg);
        return PB_EXIT_FAILURE;
    }
    while (!p.done && !*cli->stop) {
        uint64_t rows;
        if (pb_purge_step(&p, &rows, &err) != PB_OK) {
            fprintf(stderr, "postbox purge: postbox.%s: %s (%llu rows deleted before)\n",
                    pb_purge_table(target), err.msg, (unsigned long long)p.deleted);
            return PB_EXIT_FAILURE;
        }
        log_debug("purge", "postbox.%s: batch of %llu rows", pb_purge_table(target),
                  (unsigned long long)rows);
    }
    if (p.partitioned)
        printf("postbox.%s: dropped %llu partitions past the retention (partitioned layout)\n",
               pb_purge_table(target), (unsigned long long)p.partitions_dropped);
    printf("postbox.%s: deleted %llu rows older than %s in %llu batches of at most %d "
           "(longest batch %.0f ms, %.1f s in all)%s\n",
           pb_purge_table(target), (unsigned long long)p.deleted, p.cutoff,
           (unsigned long long)p.batches, p.batch, p.max_batch_ms,
           (double)(pb_monotonic_ms() - t0) / 1000.0, p.done ? "" : "; interrupted");
    fflush(stdout);
    return p.done ? PB_EXIT_OK : PB_EXIT_FAILURE;
}

int pb_cmd_purge(pb_cli_t *cli)
{
    int64_t older_ms = -1, batch = 0;
    bool outbox = true, inbox = true, dead = false, sequences = false;
    const char *consumer = NULL;
    for (int i = 0; i < cli->n_args; i++) {
        const char *v;
        if (strcmp(cli->args[i], "--outbox-only") == 0) {
            inbox = false;
        } else if (strcmp(cli->args[i], "--inbox-only") == 0) {
            outbox = false;
        } else if (strcmp(cli->args[i], "--dead-letters") == 0) {
            dead = true;
        } else if (strcmp(cli->args[i], "--sequences") == 0) {
            sequences = true;
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--older-than"))) {
            if (!*v || !pb_args_duration_ms(v, &older_ms) || older_ms <= 0) {
                fprintf(stderr, "postbox purge: --older-than: expected a duration such as 7d\n");
                return PB_EXIT_USAGE;
            }
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--batch"))) {
            if (!*v || !pb_args_count(v, &batch) || batch < 1 || batch > 1000000) {
                fprintf(stderr, "postbox purge: --batch: expected 1..1000000\n");
                return PB_EXIT_USAGE;
            }
        } else if ((v = pb_args_value(cli->args, cli->n_args, &i, "--consumer"))) {
            if (!*v)
                return PB_EXIT_USAGE;
            consumer = v;
        } else {
            pb_args_error("postbox purge: unknown argument \"%s\" (see postbox --help)",
                          cli->args[i]);
            return PB_EXIT_USAGE;
        }
    }
    if (older_ms < 0) {
        fprintf(stderr, "postbox purge: --older-than DURATION is required (e.g. 7d)\n");
        return PB_EXIT_USAGE;
    }
    if (!outbox && !inbox) {
        fprintf(stderr, "postbox purge: --outbox-only and --inbox-only exclude each other\n");
        return PB_EXIT_USAGE;
    }
    PGconn *conn;
    pb_error_t err;
    if (pb_pg_connect_primary(cli->cfg.postgres_dsn, &conn, &err) != PB_OK) {
        fprintf(stderr, "postbox purge: cannot connect to postgresql: %s\n", err.msg);
        return PB_EXIT_FAILURE;
    }
    int rc = PB_EXIT_OK;
    if (outbox)
        rc = purge_one(cli, conn, PB_PURGE_OUTBOX, older_ms, NULL, (int)batch);
    if (rc == PB_EXIT_OK && outbox && dead)
        rc = purge_one(cli, conn, PB_PURGE_DEAD_LETTERS, older_ms, NULL, (int)batch);
    if (rc == PB_EXIT_OK && inbox && dead) /* first: a dead message's inbox row goes with it */
        rc = purge_one(cli, conn, PB_PURGE_INBOX_DEAD, older_ms, consumer, (int)batch);
    if (rc == PB_EXIT_OK && inbox)
        rc = purge_one(cli, conn, PB_PURGE_INBOX, older_ms, consumer, (int)batch);
    /* after the inbox: its purge folds the numbers of the rows it deletes into these rows */
    if (rc == PB_EXIT_OK && outbox && sequences)
        rc = purge_one(cli, conn, PB_PURGE_AGGREGATE_SEQUENCES, older_ms, NULL, (int)batch);
    if (rc == PB_EXIT_OK && inbox && sequences)
        rc = purge_one(cli, conn, PB_PURGE_INBOX_SEQUENCES, older_ms, consumer, (int)batch);
    PQfinish(conn);
    return rc;
}
