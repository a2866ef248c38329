#include "check/judge.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/migrate.h"
#include "store/pg.h"

/* "1.5 GiB" for messages (bytes below 1 KiB as they are). */
static const char *fmt_bytes(int64_t v, char *buf, size_t n)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    if (v < 1024 && v > -1024) {
        snprintf(buf, n, "%" PRId64 " bytes", v);
        return buf;
    }
    double x = (double)v;
    int u = -1;
    while ((x >= 1024.0 || x <= -1024.0) && u < 4) {
        x /= 1024.0;
        u++;
    }
    snprintf(buf, n, "%.1f %s", x, units[u]);
    return buf;
}

/* "1.234 s", "0.4 ms" for messages. */
static const char *fmt_us(int64_t us, char *buf, size_t n)
{
    if (us >= 1000000 || us <= -1000000)
        snprintf(buf, n, "%.3f s", (double)us / 1e6);
    else
        snprintf(buf, n, "%.1f ms", (double)us / 1e3);
    return buf;
}

/* "7d", "2h", "90s", "250 ms" for messages. */
static const char *fmt_ms(int64_t ms, char *buf, size_t n)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (ms >= units[i].ms && ms % units[i].ms == 0) {
            snprintf(buf, n, "%" PRId64 "%s", ms / units[i].ms, units[i].unit);
            return buf;
        }
    snprintf(buf, n, "%" PRId64 " ms", ms);
    return buf;
}

void pb_judge_version(pb_check_report_t *r, int version, const char *version_text)
{
    pb_error_t err;
    if (pb_pg_version_check(version, version_text, &err) != PB_OK) {
        pb_check_finding_t *f = pb_check_add(r, PB_CHECK_FAIL, "postgres.version", "%s", err.msg);
        pb_check_hint(f, "upgrade PostgreSQL to %d or later", PB_PG_MIN_VERSION / 10000);
        return;
    }
    pb_check_add(r, PB_CHECK_OK, "postgres.version", "postgresql %s",
                 version_text ? version_text : "(unknown version)");
}

void pb_judge_primary(pb_check_report_t *r, bool in_hot_standby)
{
    if (!in_hot_standby) {
        pb_check_add(r, PB_CHECK_OK, "postgres.primary", "the server accepts writes (a primary)");
        return;
    }
    pb_check_finding_t *f =
        pb_check_add(r, PB_CHECK_FAIL, "postgres.primary",
                     "the server is a standby (read-only, in recovery): the relay and the "
                     "consumer wait until it is promoted, publishing and handling nothing");
    pb_check_hint(f, "list every node in postgres.dsn with target_session_attrs=read-write, so "
                     "that libpq connects to the primary wherever it is");
}

void pb_judge_clock(pb_check_report_t *r, int64_t skew_us, int64_t uncertainty_us, int64_t max_ms)
{
    int64_t abs_us = skew_us < 0 ? -skew_us : skew_us;
    /* the server read its clock at some moment of the round trip: only what is beyond half of it
     * is surely skew */
    int64_t sure_us = abs_us > uncertainty_us ? abs_us - uncertainty_us : 0;
    char lim[32], a[32], b[32];
    if (max_ms > 0 && sure_us > max_ms * 1000) {
        pb_check_finding_t *f = pb_check_add(
            r, PB_CHECK_FAIL, "postgres.clock",
            "this host's clock is %s %s PostgreSQL's (measured within %s), more than "
            "postgres.max_clock_skew %s",
            fmt_us(abs_us, a, sizeof a), skew_us < 0 ? "ahead of" : "behind",
            fmt_us(uncertainty_us, b, sizeof b), fmt_ms(max_ms, lim, sizeof lim));
        pb_check_hint(f, "synchronise both machines' clocks (NTP, chrony): postbox compares "
                         "PostgreSQL's timestamps (created_at) with its own (publish latency, "
                         "Redis MINID trimming, the consumer's gap and purge windows)");
        return;
    }
    pb_check_add(r, PB_CHECK_OK, "postgres.clock",
                 "this host's clock and PostgreSQL's differ by %s (measured within %s)%s",
                 fmt_us(abs_us, a, sizeof a), fmt_us(uncertainty_us, b, sizeof b),
                 max_ms > 0 ? "" : "; not judged (postgres.max_clock_skew = 0)");
}

bool pb_judge_schema(pb_check_report_t *r, bool present, int version)
{
    int latest = pb_migrate_latest();
    pb_check_finding_t *f;
    if (!present) {
        f = pb_check_add(r, PB_CHECK_FAIL, "schema.version",
                         "schema postbox is not installed (no postbox.schema_migrations)");
        pb_check_hint(f, "run `postbox init` as the role that is to own it, or have a DBA apply "
                         "the SQL of `postbox init --print-sql`");
        return false;
    }
    if (version > latest) {
        f = pb_check_add(r, PB_CHECK_FAIL, "schema.version",
                         "schema postbox is at version %d, newer than this postbox knows (%d)",
                         version, latest);
        pb_check_hint(f, "run the postbox release that upgraded the schema (or a later one)");
        return false;
    }
    if (version < latest) {
        char names[256] = "";
        size_t off = 0;
        int n = 0;
        for (int i = 0; i < pb_migration_count; i++) {
            if (pb_migrations[i].version <= version)
                continue;
            if (off < sizeof names)
                off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", n ? ", " : "",
                                        pb_migrations[i].name);
            n++;
        }
        if (off >= sizeof names)
            strcpy(names + sizeof names - 5, " ...");
        f = pb_check_add(r, PB_CHECK_FAIL, "schema.version",
                         "schema postbox is at version %d, this postbox needs %d: %d migration%s "
                         "pending (%s)",
                         version, latest, n, n == 1 ? "" : "s", names);
        pb_check_hint(f, "run `postbox init`, or `postbox init --print-sql` for a DBA to review "
                         "and apply");
        return false;
    }
    pb_check_add(r, PB_CHECK_OK, "schema.version", "schema postbox at version %d (current)",
                 version);
    return true;
}

void pb_judge_wal(pb_check_report_t *r, const pb_check_wal_t *w, const pb_config_t *cfg)
{
    pb_check_finding_t *f;
    if (strcmp(w->wal_level ? w->wal_level : "", "logical") != 0) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.wal_level",
                         "wal_level is %s: the cdc capture needs logical",
                         w->wal_level ? w->wal_level : "(unknown)");
        pb_check_hint(f, "ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL (or "
                         "relay.capture = poll)");
    } else {
        pb_check_add(r, PB_CHECK_OK, "cdc.wal_level", "wal_level is logical");
    }

    if (w->max_replication_slots == 0 || (!w->slot_exists && w->slots_used >= w->max_replication_slots)) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.replication_slots",
                         "max_replication_slots is %d and %d slot%s exist: no room for slot "
                         "\"%s\"",
                         w->max_replication_slots, w->slots_used, w->slots_used == 1 ? "" : "s",
                         cfg->cdc_slot);
        pb_check_hint(f, "raise max_replication_slots (a restart of PostgreSQL), or drop a slot "
                         "no one streams (pg_replication_slots)");
    } else {
        pb_check_add(r, PB_CHECK_OK, "cdc.replication_slots",
                     "max_replication_slots %d, %d in use", w->max_replication_slots,
                     w->slots_used);
    }

    if (w->max_wal_senders == 0) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.wal_senders",
                         "max_wal_senders is 0: no replication connection is possible");
        pb_check_hint(f, "raise max_wal_senders (a restart of PostgreSQL)");
    } else if (w->senders_used >= w->max_wal_senders) {
        f = pb_check_add(r, PB_CHECK_WARN, "cdc.wal_senders",
                         "every WAL sender is in use (max_wal_senders %d): a relay that starts "
                         "now cannot open its stream",
                         w->max_wal_senders);
        pb_check_hint(f, "raise max_wal_senders (a restart of PostgreSQL), or end a replication "
                         "connection no one needs (pg_stat_replication)");
    } else {
        pb_check_add(r, PB_CHECK_OK, "cdc.wal_senders", "max_wal_senders %d, %d in use",
                     w->max_wal_senders, w->senders_used);
    }
}

void pb_judge_slot(pb_check_report_t *r, const pb_check_slot_t *s, const pb_config_t *cfg,
                   bool at_start)
{
    const char *slot = cfg->cdc_slot;
    pb_check_finding_t *f;
    char a[48], b[48];
    if (!s->exists) {
        if (cfg->cdc_create_slot) {
            if (at_start)
                return; /* the relay creates it now */
            f = pb_check_add(r, PB_CHECK_WARN, "cdc.slot",
                             "replication slot \"%s\" does not exist yet: the relay creates it at "
                             "its start, and only what is committed after that is in its stream",
                             slot);
            pb_check_hint(f, "start the cdc relay before producers write events");
            return;
        }
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.slot",
                         "replication slot \"%s\" does not exist, and cdc.create_slot = false",
                         slot);
        pb_check_hint(f, "create it (SELECT pg_create_logical_replication_slot('%s', 'pgoutput')) "
                         "or set cdc.create_slot = true",
                         slot);
        return;
    }
    if (!s->pgoutput || !s->this_database) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.slot",
                         "replication slot \"%s\" is not a logical pgoutput slot of this database",
                         slot);
        pb_check_hint(f, "name another cdc.slot, or drop that slot if no one needs it");
        return;
    }
    const char *ws = s->wal_status ? s->wal_status : "";
    if (strcmp(ws, "lost") == 0) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.slot",
                         "replication slot \"%s\" has lost WAL it needed (wal_status lost): what "
                         "was committed in that WAL never reaches the relay",
                         slot);
        pb_check_hint(f, "drop it (postbox cdc drop-slot) and start the relay to create it anew; "
                         "outbox rows still pending can be published by `postbox relay --capture "
                         "poll --drain` (events of postbox.emit from that WAL are gone); keep "
                         "max_slot_wal_keep_size above the longest relay outage");
        return;
    }
    if (strcmp(ws, "unreserved") == 0) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.slot",
                         "replication slot \"%s\" is about to lose WAL it needs (wal_status "
                         "unreserved: past max_slot_wal_keep_size)",
                         slot);
        pb_check_hint(f, "get a relay streaming it now (postbox status shows its lag), or raise "
                         "max_slot_wal_keep_size");
        return;
    }
    /* over cdc.max_slot_lag, else over cdc.max_slot_lag_age: the same finding, either limit */
    char over[192] = "";
    if (s->lag_known && cfg->cdc_max_slot_lag > 0 && s->lag_bytes > cfg->cdc_max_slot_lag)
        snprintf(over, sizeof over, "is %s behind the current WAL position, more than "
                                    "cdc.max_slot_lag %s",
                 fmt_bytes(s->lag_bytes, a, sizeof a), fmt_bytes(cfg->cdc_max_slot_lag, b, sizeof b));
    else if (cfg->cdc_max_slot_lag_age > 0 && s->unrelayed_age_ms > cfg->cdc_max_slot_lag_age)
        snprintf(over, sizeof over, "holds WAL with an outbox row not relayed for %s, more than "
                                    "cdc.max_slot_lag_age %s",
                 fmt_ms(s->unrelayed_age_ms, a, sizeof a),
                 fmt_ms(cfg->cdc_max_slot_lag_age, b, sizeof b));
    if (*over) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.slot", "replication slot \"%s\" %s (%s)", slot, over,
                         s->active ? "a relay streams it" : "no relay streams it");
        pb_check_hint(f, "%s", s->active ? "the relay does not keep up or cannot publish: see "
                                           "postbox status and its log (the broker, "
                                           "relay.batch_size)"
                                         : "start the cdc relay; a slot no one will stream again "
                                           "keeps WAL for ever: postbox cdc drop-slot");
        return;
    }
    if (!s->active && !at_start) {
        f = pb_check_add(r, PB_CHECK_WARN, "cdc.slot",
                         "replication slot \"%s\" is inactive: no relay streams it (it keeps %s "
                         "of WAL)",
                         slot, fmt_bytes(s->retained_bytes, a, sizeof a));
        pb_check_hint(f, "start postbox relay --capture cdc; a slot no one will stream again "
                         "keeps WAL for ever: postbox cdc drop-slot");
        return;
    }
    pb_check_add(r, PB_CHECK_OK, "cdc.slot", "replication slot \"%s\": %s, %s behind, wal_status %s",
                 slot, s->active ? "streamed" : "inactive", fmt_bytes(s->lag_bytes, a, sizeof a),
                 *ws ? ws : "unknown");
}

void pb_judge_publication(pb_check_report_t *r, const pb_check_publication_t *p,
                          const pb_config_t *cfg, bool at_start)
{
    const char *pub = cfg->cdc_publication;
    pb_check_finding_t *f;
    if (!p->exists) {
        if (cfg->cdc_create_slot) {
            if (at_start)
                return; /* the relay creates it now, or says why it cannot */
            f = pb_check_add(r, PB_CHECK_WARN, "cdc.publication",
                             "publication \"%s\" does not exist yet: the relay creates it at "
                             "start, which needs the outbox's owner",
                             pub);
            pb_check_hint(f, "a relay that does not own postbox.outbox needs it made by the SQL "
                             "of `postbox --set relay.capture=cdc init --print-grants`");
            return;
        }
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.publication",
                         "publication \"%s\" does not exist, and cdc.create_slot = false", pub);
        pb_check_hint(f, "create it with the SQL of `postbox --set relay.capture=cdc init "
                         "--print-grants`, or set cdc.create_slot = true");
        return;
    }
    if (!p->has_outbox) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.publication",
                         "publication \"%s\" does not include postbox.outbox: no event reaches "
                         "the relay",
                         pub);
        pb_check_hint(f, "ALTER PUBLICATION %s ADD TABLE postbox.outbox", pub);
        return;
    }
    if (!p->inserts) {
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.publication",
                         "publication \"%s\" does not publish inserts: no outbox row reaches the "
                         "relay",
                         pub);
        pb_check_hint(f, "ALTER PUBLICATION %s SET (publish = 'insert')", pub);
        return;
    }
    pb_check_add(r, PB_CHECK_OK, "cdc.publication",
                 "publication \"%s\" publishes the inserts into postbox.outbox", pub);
}

void pb_judge_replica_identity(pb_check_report_t *r, char relreplident, bool publishes_changes)
{
    pb_check_finding_t *f;
    switch (relreplident) {
    case 'd':
        pb_check_add(r, PB_CHECK_OK, "cdc.replica_identity",
                     "postbox.outbox has REPLICA IDENTITY DEFAULT (its primary key)");
        return;
    case 'i':
        pb_check_add(r, PB_CHECK_OK, "cdc.replica_identity",
                     "postbox.outbox has REPLICA IDENTITY USING INDEX");
        return;
    case 'n':
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.replica_identity",
                         "postbox.outbox has REPLICA IDENTITY NOTHING: %s",
                         publishes_changes
                             ? "a publication of it publishes updates or deletes, so the relay's "
                               "moves of relayed rows (and cdc.delete_after_insert's deletes) fail"
                             : "once a publication of it publishes updates or deletes (FOR ALL "
                               "TABLES, a replica), the relay's moves of relayed rows fail");
        break;
    case 'f':
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.replica_identity",
                         "postbox.outbox has REPLICA IDENTITY FULL: every relayed row's move (and "
                         "cdc.delete_after_insert's delete) writes the whole old row, payload and "
                         "all, into the WAL again");
        break;
    default:
        f = pb_check_add(r, PB_CHECK_FAIL, "cdc.replica_identity",
                         "postbox.outbox has an unknown REPLICA IDENTITY (%c)", relreplident);
        break;
    }
    pb_check_hint(f, "ALTER TABLE postbox.outbox REPLICA IDENTITY DEFAULT");
}

void pb_judge_replication_role(pb_check_report_t *r, const char *role, bool may_replicate)
{
    if (may_replicate) {
        pb_check_add(r, PB_CHECK_OK, "privileges.replication",
                     "role \"%s\" may open a replication stream", role);
        return;
    }
    pb_check_finding_t *f = pb_check_add(r, PB_CHECK_FAIL, "privileges.replication",
                                         "role \"%s\" lacks the REPLICATION attribute: the cdc "
                                         "relay cannot stream its slot",
                                         role);
    pb_check_hint(f, "ALTER ROLE \"%s\" REPLICATION (membership in postbox_relay does not pass it "
                     "on)",
                  role);
}

void pb_judge_nats_stream(pb_check_report_t *r, const char *name, bool exists, bool limited,
                          const char *desc, const pb_config_t *cfg)
{
    bool configured_limit = cfg->nats_max_age > 0 || cfg->nats_max_msgs > 0 || cfg->nats_max_bytes > 0;
    pb_check_finding_t *f;
    if (!exists) {
        if (!cfg->nats_stream_create) {
            f = pb_check_add(r, PB_CHECK_FAIL, name,
                             "stream \"%s\" does not exist, and nats.stream_create = false",
                             cfg->nats_stream);
            pb_check_hint(f, "create it (nats stream add) with a limit, or set "
                             "nats.stream_create = true");
        } else if (!configured_limit && !cfg->nats_allow_unlimited) {
            f = pb_check_add(r, PB_CHECK_FAIL, name,
                             "stream \"%s\" would be created without a limit and grow without "
                             "bound",
                             cfg->nats_stream);
            pb_check_hint(f, "set nats.max_age, nats.max_msgs or nats.max_bytes (or "
                             "nats.allow_unlimited = true to accept that)");
        } else {
            pb_check_add(r, PB_CHECK_OK, name,
                         "stream \"%s\" does not exist yet: it is created at start with the "
                         "configured limits",
                         cfg->nats_stream);
        }
        return;
    }
    if (limited) {
        pb_check_add(r, PB_CHECK_OK, name, "%s", desc);
        return;
    }
    if (cfg->nats_allow_unlimited) {
        f = pb_check_add(r, PB_CHECK_WARN, name,
                         "stream \"%s\" has no limit (allowed by nats.allow_unlimited): it grows "
                         "without bound",
                         cfg->nats_stream);
        pb_check_hint(f, "set nats.max_age, nats.max_msgs or nats.max_bytes");
        return;
    }
    if (cfg->nats_stream_create && configured_limit) {
        f = pb_check_add(r, PB_CHECK_WARN, name,
                         "stream \"%s\" has no limit now; the relay and the consumer give it the "
                         "configured ones at start",
                         cfg->nats_stream);
        pb_check_hint(f, "start them (or apply the limits with nats stream edit)");
        return;
    }
    f = pb_check_add(r, PB_CHECK_FAIL, name,
                     "stream \"%s\" has no limit (max_age, max_msgs or max_bytes): it grows "
                     "without bound",
                     cfg->nats_stream);
    pb_check_hint(f, "%s", cfg->nats_stream_create
                              ? "set nats.max_age, nats.max_msgs or nats.max_bytes (or "
                                "nats.allow_unlimited = true to accept that)"
                              : "give the stream a limit (nats stream edit --max-age ...), or "
                                "let postbox manage it with nats.stream_create = true");
}

void pb_judge_redis_bound(pb_check_report_t *r, const char *name, const pb_config_t *cfg)
{
    char buf[32];
    if (cfg->redis_max_len > 0) {
        pb_check_add(r, PB_CHECK_OK, name,
                     "each batch trims its streams to about %lld entries (XTRIM MAXLEN ~)",
                     (long long)cfg->redis_max_len);
    } else if (cfg->redis_max_age > 0) {
        pb_check_add(r, PB_CHECK_OK, name,
                     "each batch trims the entries of its streams older than %s (XTRIM MINID ~)",
                     fmt_ms(cfg->redis_max_age, buf, sizeof buf));
    } else {
        pb_check_finding_t *f = pb_check_add(
            r, cfg->redis_allow_unlimited ? PB_CHECK_WARN : PB_CHECK_FAIL, name,
            "redis streams without a bound%s: they grow without limit",
            cfg->redis_allow_unlimited ? " (allowed by redis.allow_unlimited)" : "");
        pb_check_hint(f, "set redis.max_len or redis.max_age");
    }
}

void pb_judge_amqp_queue_bound(pb_check_report_t *r, const char *name, bool exists,
                               const pb_config_t *cfg)
{
    const char *q = cfg->amqp_queue;
    if (!cfg->amqp_queue_declare) {
        pb_check_add(r, PB_CHECK_OK, name,
                     "queue \"%s\" exists (amqp.queue_declare = false: its arguments, and so its "
                     "bound, are not postbox's; rabbitmqctl list_queues name arguments shows "
                     "them)",
                     q);
        return;
    }
    char ttl[32], len[48] = "";
    if (cfg->amqp_queue_message_ttl > 0 || cfg->amqp_queue_max_length > 0) {
        if (cfg->amqp_queue_max_length > 0)
            snprintf(len, sizeof len, "%sx-max-length %lld",
                     cfg->amqp_queue_message_ttl > 0 ? ", " : "",
                     (long long)cfg->amqp_queue_max_length);
        pb_check_add(r, PB_CHECK_OK, name, "queue \"%s\" %s bounded: %s%s%s", q,
                     exists ? "is" : "does not exist yet; declared at start,",
                     cfg->amqp_queue_message_ttl > 0 ? "x-message-ttl " : "",
                     cfg->amqp_queue_message_ttl > 0
                         ? fmt_ms(cfg->amqp_queue_message_ttl, ttl, sizeof ttl)
                         : "",
                     len);
        return;
    }
    pb_check_finding_t *f = pb_check_add(
        r, cfg->amqp_allow_unlimited ? PB_CHECK_WARN : PB_CHECK_FAIL, name,
        "queue \"%s\" has no bound%s: it grows without limit while its consumers are down", q,
        cfg->amqp_allow_unlimited ? " (allowed by amqp.allow_unlimited)" : "");
    pb_check_hint(f, "set amqp.queue_message_ttl or amqp.queue_max_length (a queue declared "
                     "without them must be deleted and declared again, or bounded by a policy)");
}

void pb_judge_amqp_queue_probed(pb_check_report_t *r, const char *name,
                                pb_amqp_queue_bound_t bound, const char *detail,
                                const pb_config_t *cfg)
{
    const char *q = cfg->amqp_queue;
    if (bound == PB_AMQP_QUEUE_BOUNDED) {
        pb_check_add(r, PB_CHECK_OK, name, "queue \"%s\" is bounded: %s", q, detail);
        return;
    }
    if (bound == PB_AMQP_QUEUE_BOUND_UNKNOWN) {
        pb_check_add(r, PB_CHECK_OK, name,
                     "queue \"%s\" exists; whether it is bounded could not be told (%s): "
                     "rabbitmqctl list_queues name arguments policy shows it", q, detail);
        return;
    }
    pb_check_finding_t *f = pb_check_add(
        r, PB_CHECK_WARN, name, "queue \"%s\" has %s%s: unless a policy bounds it, it grows "
                                "without limit while its consumers are down", q, detail,
        cfg->amqp_allow_unlimited ? " (allowed by amqp.allow_unlimited)" : "");
    if (!cfg->amqp_allow_unlimited)
        pb_check_hint(f, "bound it (x-message-ttl or x-max-length, or a policy: rabbitmqctl "
                         "set_policy ... '{\"max-length\": N}' --apply-to queues) and, for a "
                         "policy, set amqp.allow_unlimited = true");
}
