#!/usr/bin/env bash
# The wake-up of schema version 27 (sql/027_wake_when_asleep.sql): producers NOTIFY only while a
# relay holds or asks for the sleep lock, and no event waits for the poll interval (60 s here):
#   1. an idle relay sleeps holding the lock; a committed event wakes it at once
#   2. the race: a producer that took the shared lock while no relay slept (so it does not
#      NOTIFY) commits while the relay goes to sleep: the relay's request waits for it, other
#      producers meanwhile NOTIFY and are published at once, and the slow one is published as
#      soon as it commits
#   3. four producers committing at random moments while the relay keeps going to sleep and
#      waking: every event is published within seconds
# Several relays (shards), where the one granted the lock NOTIFYs for those that asked with it:
# model/wake.pml (model_check).
source "$(dirname "$0")/lib.sh"
pb_init
# the sleep lock, in this database (other tests' relays may sleep in theirs)
SLEEP_LOCK="locktype = 'advisory' AND classid = hashtext('postbox.relay.asleep')::oid AND objid = 0 AND objsubid = 2
            AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
OPTS=(--set relay.sink=stdout --set relay.poll_interval=60s)
lock_state() { # the relay sessions' hold on the sleep lock: "" (none), "t" (granted), "f" (waiting)
    psql_q "SELECT coalesce(string_agg(CASE WHEN granted THEN 't' ELSE 'f' END, ','), '') FROM pg_locks
            WHERE $SLEEP_LOCK AND mode = 'ExclusiveLock'"
}
published_ms() { # N SECONDS: ms until N events are published (fails after SECONDS)
    local t0 n=$1
    t0=$(date +%s%N)
    wait_until "(( \$(published_count) >= $n ))" "$2" ||
        fail "only $(published_count) of $n events published after $2 s (poll interval 60 s: a wake-up was lost)"
    echo $((($(date +%s%N) - t0) / 1000000))
}

# ---- 1. the idle relay sleeps with the lock, and wakes at once ----
start_relay "${OPTS[@]}"
wait_until '[[ $(lock_state) == t ]]' 30 || fail "the idle relay does not hold the sleep lock: '$(lock_state)'"
for i in $(seq 1 10); do
    wait_until '[[ $(lock_state) == t ]]' 10 || fail "the relay did not go back to sleep: '$(lock_state)'"
    psql_q "SELECT postbox.enqueue('idle', '$i', 'idle.v1', '{}')" >/dev/null
    published_ms "$i" 10 >/dev/null
done
lat=$(psql_q "SELECT round(max(extract(epoch FROM published_at - created_at)) * 1000) FROM postbox.outbox_published
              WHERE aggregate_type = 'idle'")
say "an asleep relay published each of 10 events at most $lat ms after its transaction began (server clock)"
((lat < 1000)) || fail "an asleep relay took $lat ms to publish an event"
stop_relay

# ---- 2. the race: a commit without NOTIFY while the relay goes to sleep ----
# no relay runs: the producer's try of the shared lock succeeds, it will not NOTIFY
base=$(published_count)
psql -XAtq -d "$POSTBOX_PG_DSN" -c "BEGIN" -c "SELECT postbox.enqueue('race', 'slow', 'race.v1', '{}')" \
    -c "SELECT pg_sleep(6)" -c "COMMIT" >/dev/null &
SLOW=$!
PB_PIDS+=("$SLOW")
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks WHERE $SLEEP_LOCK AND mode = 'ShareLock' AND granted\") == 1 ]]" 10 ||
    fail "the slow producer does not hold the shared sleep lock"
start_relay "${OPTS[@]}"
wait_until '[[ $(lock_state) == f ]]' 10 || fail "the relay's request does not wait for the slow producer: '$(lock_state)'"
psql_q "SELECT postbox.enqueue('race', 'quick', 'race.v1', '{}')" >/dev/null
ms=$(published_ms $((base + 1)) 5)
pid_alive "$SLOW" || fail "the slow producer committed before the check (machine too slow?)"
say "while the relay's request waited, a producer that NOTIFYed was published in $ms ms"
wait "$SLOW" || fail "the slow producer failed"
ms=$(published_ms $((base + 2)) 10)
say "the slow producer, committed without NOTIFY, was published $ms ms after its commit"
((ms < 5000)) || fail "the event committed while the relay went to sleep waited $ms ms"
wait_until '[[ $(lock_state) == t ]]' 10 || fail "the relay did not go to sleep after the slow producer: '$(lock_state)'"

# ---- 3. commits at random moments around the relay's sleep ----
base=$(published_count)
for p in 1 2 3 4; do
    (for i in $(seq 1 40); do
        psql -XAtq -d "$POSTBOX_PG_DSN" -c "SELECT pg_sleep(random() * 0.05)" \
            -c "SELECT postbox.enqueue('random', '$p', 'random.v1', '{}')" >/dev/null || exit 1
    done) &
    PB_PIDS+=("$!")
    producers+=("$!")
done
for pid in "${producers[@]}"; do wait "$pid" || fail "a producer failed"; done
ms=$(published_ms $((base + 160)) 15)
say "160 events from 4 producers at random moments: all published $ms ms after the last commit"
lost=$(psql_q "SELECT count(*) FROM postbox.outbox")
((lost == 0)) || fail "$lost events still in the outbox"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"

say "ok"
