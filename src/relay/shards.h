/* Shards: how several relay instances share the outbox without reordering an aggregate.
 *
 * Every event belongs to shard hash(aggregate_type/aggregate_id) % relay.shards. A shard is
 * relayed by the one instance that holds its session advisory lock (key pair
 * postbox.relay_lock_keys.shard, shard: the first keys are random per schema), so all events of
 * an aggregate pass through one instance at a time, in id order. Instances announce themselves
 * with a shared lock on (relay_lock_keys.member, shards); each takes up to its fair share,
 * ceil(shards / instances), and gives away the excess so that a newcomer gets work. A shard
 * whose owner dies is free the moment PostgreSQL ends its session, and the next balance round
 * of another instance takes it. With relay.shards = 1 this is the single active relay with hot
 * standbys.
 *
 * A new owner takes no row locks and trusts its shards to be its own alone, so it must not claim
 * while a session of the previous owner may still write to them (a settle of a relay that died,
 * still running in its backend; a relay of an older postbox, which claimed on several sessions).
 * Every session of an owner (the poll capture has one) holds a shared "guard" lock
 * (relay_lock_keys.guard, shard), and a new owner uses a shard only once no session of a
 * previous owner holds that guard.
 *
 * Intruders. The keys are secret until a relay takes them, then pg_locks shows them to every
 * session of the cluster, and an advisory lock is anyone's to take. Only sessions whose role may
 * read relay_lock_keys count as relays: the member and guard locks of any other session are
 * ignored (they can neither refuse a relay nor fence a shard), and a shard lock such a session
 * holds, which no relay can take, is named in the relay's log and by `postbox status`. Why not
 * locks that need a grant: a row lock (FOR UPDATE) held for the relay's lifetime keeps a
 * transaction id open, which holds back vacuum in the whole database (every dead outbox row
 * would stay); a table lock needs no transaction id but one table per shard (up to 4096).
 * Keep CONNECT on the database to the roles that need it. */
#ifndef PB_RELAY_SHARDS_H
#define PB_RELAY_SHARDS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/str.h"

typedef struct pb_shards {
    int n;              /* relay.shards */
    bool *owned;        /* n flags: shard lock held */
    bool *usable;       /* n flags: owned and fenced (guard held by every session): claimable */
    int n_owned;
    int fair;           /* the fair share found by the last balance round */
    pb_buf_t owned_sql; /* "{1,5,9}": the claim query's parameter */
    pb_buf_t intruders; /* the last report of report_intruders (shards.c), "" when none */
    bool intruders_checked;
    int64_t intruders_checked_ms; /* when report_intruders last looked (monotonic) */
} pb_shards_t;

void pb_shards_init(pb_shards_t *sh, int n);
void pb_shards_free(pb_shards_t *sh);

/* Forgets ownership (the session that held the locks is gone). */
void pb_shards_reset(pb_shards_t *sh);

/* Announces this instance on conn (the session that will hold the shard locks). PB_FATAL when
 * another instance runs with a different relay.shards: their shards would overlap. */
pb_status_t pb_shards_join(pb_shards_t *sh, PGconn *conn, pb_error_t *err) PB_MUSTCHECK;

/* Takes free shards up to the fair share on conns[0] (the session that joined), and makes the
 * owned shards usable once the previous owner's sessions are gone, taking the shared guard on
 * every one of conns. When may_release, also gives back what exceeds the share (the caller has
 * nothing of those shards claimed or unsettled). *changed tells whether the usable set changed
 * (owned_sql lists the usable shards). */
pb_status_t pb_shards_balance(pb_shards_t *sh, PGconn *const *conns, int nconns, bool may_release,
                              bool *changed, pb_error_t *err) PB_MUSTCHECK;

/* Whether any shard is usable. */
bool pb_shards_usable(const pb_shards_t *sh);

/* Whether the last balance found more shards owned than the fair share (a release is due). */
bool pb_shards_excess(const pb_shards_t *sh);

/* Usable shards, as "0-3,7" for log lines. */
void pb_shards_describe(const pb_shards_t *sh, char *out, size_t outsz);

/* The sessions of conn's database that hold shard locks, i.e. the relay instances at work, in
 * the order of their lowest shard: one row each, columns pid, application_name, client_addr
 * ("local" for a socket), backend_start (UTC, "2024-01-31T12:00:00Z"), state (of
 * pg_stat_activity) and shards ("0,1,5"). Read-only; any session may ask. The caller clears
 * *out; NULL on failure. */
pb_status_t pb_shards_owners(PGconn *conn, PGresult **out, pb_error_t *err) PB_MUSTCHECK;

/* The sessions of conn's database that hold one of the relay's locks (shard, guard or member)
 * without being postbox relays: their roles cannot read postbox.relay_lock_keys, so they took
 * keys seen in pg_locks. One row each, columns pid, role, application_name and what it holds
 * ("shard lock 1, guard of shard 0, member lock of relay.shards = 7"). The caller clears *out;
 * NULL on failure. */
pb_status_t pb_shards_intruders(PGconn *conn, PGresult **out, pb_error_t *err) PB_MUSTCHECK;

#endif
