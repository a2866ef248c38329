/* The judgements of postbox check: pure functions from observed values (and the configuration)
 * to findings, with their words and hints. The families observe; these decide. Unit-tested by
 * tests/unit/test_check.c with values no shared test server can be made to show. */
#ifndef PB_CHECK_JUDGE_H
#define PB_CHECK_JUDGE_H

#include <stdbool.h>
#include <stdint.h>

#include "broker/amqp/queue_bound.h"
#include "check/check.h"

/* PostgreSQL's version (PQserverVersion, server_version): FAIL below what postbox runs on. */
void pb_judge_version(pb_check_report_t *r, int version, const char *version_text);

/* Whether the server accepts writes (PQparameterStatus in_hot_standby): a standby FAILs, since
 * the relay and the consumer wait on it until it is promoted. */
void pb_judge_primary(pb_check_report_t *r, bool in_hot_standby);

/* Clock skew: PostgreSQL's clock minus this host's (skew_us), measured within +-uncertainty_us
 * (half the round trip); FAIL when it surely exceeds max_ms (0: not judged). */
void pb_judge_clock(pb_check_report_t *r, int64_t skew_us, int64_t uncertainty_us, int64_t max_ms);

/* The schema version: present (postbox.schema_migrations exists) and the version recorded.
 * Pending migrations, a database newer than this binary and a missing schema FAIL. Returns
 * whether the schema is current. */
bool pb_judge_schema(pb_check_report_t *r, bool present, int version);

/* The server settings the cdc capture needs, and what is used of them. */
typedef struct pb_check_wal {
    const char *wal_level;
    int max_replication_slots, slots_used;
    int max_wal_senders, senders_used;
    bool slot_exists; /* cdc.slot exists (then it needs no free slot) */
} pb_check_wal_t;

void pb_judge_wal(pb_check_report_t *r, const pb_check_wal_t *w, const pb_config_t *cfg);

/* cdc.slot as pg_replication_slots shows it. */
typedef struct pb_check_slot {
    bool exists;
    bool pgoutput;       /* logical, plugin pgoutput */
    bool this_database;  /* of the configured database */
    bool active;
    const char *wal_status; /* reserved, extended, unreserved, lost (NULL: unknown) */
    bool lag_known;
    int64_t lag_bytes;   /* current WAL position - confirmed_flush_lsn */
    int64_t retained_bytes; /* current WAL position - restart_lsn: WAL the slot keeps */
    /* cdc.max_slot_lag_age, judged by the oldest outbox row not relayed (cdc.mark_published;
     * store/slot_position.h): -1 when not judged or no row is pending */
    int64_t unrelayed_age_ms;
} pb_check_slot_t;

/* at_start: a relay about to stream (an inactive slot is expected, a missing one it creates
 * itself with cdc.create_slot). */
void pb_judge_slot(pb_check_report_t *r, const pb_check_slot_t *s, const pb_config_t *cfg,
                   bool at_start);

/* cdc.publication as pg_publication shows it. */
typedef struct pb_check_publication {
    bool exists;
    bool has_outbox; /* postbox.outbox is in it */
    bool inserts;    /* it publishes inserts */
} pb_check_publication_t;

void pb_judge_publication(pb_check_report_t *r, const pb_check_publication_t *p,
                          const pb_config_t *cfg, bool at_start);

/* REPLICA IDENTITY of postbox.outbox (pg_class.relreplident: d, n, f, i) and whether some
 * publication of it publishes updates or deletes (then the relay's deletes need an identity). */
void pb_judge_replica_identity(pb_check_report_t *r, char relreplident, bool publishes_changes);

/* The REPLICATION attribute of the role a cdc relay logs in as (or superuser). */
void pb_judge_replication_role(pb_check_report_t *r, const char *role, bool may_replicate);

/* A NATS stream: found or not; when found its description and whether it has a limit. */
void pb_judge_nats_stream(pb_check_report_t *r, const char *name, bool exists, bool limited,
                          const char *desc, const pb_config_t *cfg);

/* The bound of Redis streams (redis.max_len, redis.max_age, redis.allow_unlimited). */
void pb_judge_redis_bound(pb_check_report_t *r, const char *name, const pb_config_t *cfg);

/* The bound of the consumer's RabbitMQ queue as declared (amqp.queue_max_length,
 * queue_message_ttl, allow_unlimited); exists: it exists already (and matched the declaration). */
void pb_judge_amqp_queue_bound(pb_check_report_t *r, const char *name, bool exists,
                               const pb_config_t *cfg);

/* The bound of an existing queue postbox does not declare (amqp.queue_declare = false), as
 * pb_amqp_probe_queue_bound found it (detail: its words); allow_unlimited silences the lack. */
void pb_judge_amqp_queue_probed(pb_check_report_t *r, const char *name,
                                pb_amqp_queue_bound_t bound, const char *detail,
                                const pb_config_t *cfg);

#endif
