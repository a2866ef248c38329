#!/usr/bin/env bash
# A login without any grant on schema postbox takes the relay's advisory locks. Their keys are
# secret (postbox.relay_lock_keys) until a relay takes them, but pg_locks shows them to every
# session. The intruder reads them while a relay runs, and once that relay stops it holds the
# member lock of another relay.shards (a relay used to refuse to start), the guard of shard 0 (a
# new owner used to wait for ever) and the lock of shard 1. A relay started after it:
#   - starts, and relays shard 0 (the intruder's member and guard locks do not count);
#   - cannot take shard 1 (an advisory lock is anyone's to hold), and says who holds it: its
#     log and `postbox status` name the intruder's role, and status fails its check;
#   - takes shard 1 and relays the rest once the intruder's session ends.
source "$(dirname "$0")/lib.sh"

INTRUDER=pb_lock_intruder
INTRUDER_DSN=${POSTBOX_PG_DSN/postgres@/$INTRUDER@}
as_admin() { psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -c "$1"; }
as_intruder() { psql -XAtq -v ON_ERROR_STOP=1 -d "$INTRUDER_DSN" -c "$1" 2>&1; }
end_intruder() { # ends the intruder's sessions in this test's database
    as_admin "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity
              WHERE usename = '$INTRUDER' AND datname = '$PB_DB'" >/dev/null
}
on_exit "end_intruder; as_admin 'DROP DATABASE IF EXISTS $PB_DB WITH (FORCE)' >/dev/null 2>&1; as_admin 'DROP ROLE IF EXISTS $INTRUDER' >/dev/null 2>&1"
as_admin "SET client_min_messages = warning; DROP ROLE IF EXISTS $INTRUDER" >/dev/null 2>&1 || true
as_admin "CREATE ROLE $INTRUDER LOGIN" >/dev/null

pb_init
use_least_privilege # the relay runs as pb_it_relay, a member of postbox_relay
setup_queue '#'
OPTS=(--set relay.shards=2 --set relay.poll_interval=200ms)
shard0="(hashtext(aggregate_type || '/' || aggregate_id) & 2147483647) % 2 = 0"

if out=$(as_intruder "SELECT * FROM postbox.relay_lock_keys"); then
    fail "the intruder can read the lock keys: $out"
fi
[[ $(psql_q "SELECT has_schema_privilege('$INTRUDER', 'postbox', 'USAGE')") == f ]] ||
    fail "the intruder has a grant on schema postbox"

# ---- a relay runs: the intruder reads its keys in pg_locks ------------------------------------
start_relay "${OPTS[@]}"
FIRST=$RELAY_PID
# in this database: shard locks exclusive (objid 0, 1), guards shared (objid 0, 1), the member
# lock shared with objid = relay.shards (2); not the sleep lock of an idle relay (sql/027: a
# fixed key, no secret)
locks_sql="SELECT l.mode, l.objid, l.classid FROM pg_locks l
           WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
             AND l.classid <> hashtext('postbox.relay.asleep')::oid
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
wait_until "[[ \$(as_intruder \"SELECT count(*) FROM ($locks_sql) x\") == 5 ]]" 20 ||
    fail "the first relay did not take its 5 locks: $(as_intruder "$locks_sql")"
shard_key=$(as_intruder "SELECT DISTINCT classid::bigint::bit(32)::int FROM ($locks_sql) x WHERE mode = 'ExclusiveLock'")
member_key=$(as_intruder "SELECT classid::bigint::bit(32)::int FROM ($locks_sql) x WHERE mode = 'ShareLock' AND objid = 2")
guard_key=$(as_intruder "SELECT DISTINCT classid::bigint::bit(32)::int FROM ($locks_sql) x WHERE mode = 'ShareLock' AND objid = 0")
[[ -n $shard_key && -n $member_key && -n $guard_key ]] ||
    fail "the intruder could not tell the keys apart: $(as_intruder "$locks_sql")"
[[ "$shard_key $member_key $guard_key" == "$(psql_q "SELECT shard || ' ' || member || ' ' || guard FROM postbox.relay_lock_keys")" ]] ||
    fail "the keys read from pg_locks are not the relay's"
say "the intruder read the keys from pg_locks: shard $shard_key, member $member_key, guard $guard_key"
RELAY_PID=$FIRST
stop_relay

# ---- the intruder takes the locks ----------------------------------------------------------------
psql -XAtq -d "$INTRUDER_DSN" -c "SELECT pg_advisory_lock($shard_key, 1)" \
    -c "SELECT pg_advisory_lock_shared($member_key, 7)" \
    -c "SELECT pg_advisory_lock_shared($guard_key, 0)" \
    -c "SELECT pg_sleep(300)" >/dev/null 2>&1 &
PB_PIDS+=("$!")
wait_until "[[ \$(psql_q \"SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND l.granted AND a.usename = '$INTRUDER'\") == 3 ]]" 10 ||
    fail "the intruder's session did not take its locks"

enqueue_seq 20 1 5
total=$(pending_count)
in_shard1=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE NOT ($shard0)")
((in_shard1 > 0 && in_shard1 < total)) || fail "the events do not fall into both shards ($in_shard1 of $total in shard 1)"

# ---- a relay started now relays shard 0 and names the intruder ---------------------------------
start_relay "${OPTS[@]}"
wait_until "(( \$(psql_q \"SELECT count(*) FROM postbox.outbox WHERE $shard0\") == 0 )) || ! pid_alive $RELAY_PID" 20
pid_alive "$RELAY_PID" || fail "the relay exited while the intruder held a member lock of another relay.shards"
left0=$(psql_q "SELECT count(*) FROM postbox.outbox WHERE $shard0")
((left0 == 0)) || fail "$left0 events of shard 0 not published while the intruder held its guard"
sleep 1
[[ $(pending_count) == "$in_shard1" ]] || fail "events of shard 1 were published while the intruder held its lock"
say "shard 0 relayed; the $in_shard1 events of shard 1 wait for the intruder's lock"

named() { grep 'not postbox relays' "$PB_RELAY_LOG" | grep -q "$INTRUDER.*shard lock 1"; }
wait_until named 10 ||
    fail "the relay log does not name the intruder holding shard 1"
grep 'not postbox relays' "$PB_RELAY_LOG" | tail -1 | cut -c1-400 | sed 's/^/  log: /'

rc=0
json=$("$POSTBOX_BIN" status --json) || rc=$?
((rc == 1)) || fail "postbox status exited with $rc while a session that is not a relay held the relay's locks"
python3 - "$json" "$INTRUDER" <<'PY' || fail "postbox status --json does not name the intruder: $json"
import json, sys
o = json.loads(sys.argv[1])
found = [i for i in o["lock_intruders"] if i["role"] == sys.argv[2]]
assert len(found) == 1, o["lock_intruders"]
holds = found[0]["holds"]
for what in ("shard lock 1", "guard of shard 0", "member lock of relay.shards = 7"):
    assert what in holds, holds
assert all(r["shards"] == "0" for r in o["relay_owners"]) and len(o["relay_owners"]) == 1, o["relay_owners"]
assert not o["ok"]
PY
text=$("$POSTBOX_BIN" status) || true
grep -q "NOT postbox relays" <<<"$text" && grep -q "role \"$INTRUDER\"" <<<"$text" ||
    fail "postbox status does not name the intruder: $text"
say "postbox status names the intruder: $(grep "role \"$INTRUDER\"" <<<"$text")"

# ---- the intruder's session ends: the relay takes shard 1 -----------------------------------
end_intruder
wait_until '(($(pending_count) == 0))' 20 || fail "$(pending_count) events still pending after the intruder's session ended"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
grep -q 'no session other than postbox relays holds' "$PB_RELAY_LOG" ||
    fail "the relay did not say the intruder was gone"
n=$(queue_count)
((n == total)) || fail "expected $total messages in the queue, found $n"
"$POSTBOX_BIN" status >/dev/null || fail "postbox status still fails after the intruder left"
say "after the intruder left, the relay took shard 1: $n of $total events published"
