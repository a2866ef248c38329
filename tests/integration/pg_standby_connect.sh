#!/usr/bin/env bash
# A relay and a consumer whose postgres.dsn names a standby (a streaming replica, no
# target_session_attrs): they do not fail on their first write ("cannot execute LISTEN during
# recovery" used to end the relay with exit 1); they say the server is a standby and what to
# configure, publish and handle nothing, and keep waiting. Once the standby is promoted they
# start by themselves, and the events written on the old primary (replicated before it died)
# are published and handled once each. `postbox init` against the standby is refused with the
# same message, and `postbox check` fails postgres.primary.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
N_AGG=4 K=25

use_pg_pair
pb_init
psql_q "CREATE TABLE effect (agg text NOT NULL, seq int NOT NULL, n int NOT NULL, PRIMARY KEY (agg, seq))"
setup_queue '#'
enqueue_seq "$N_AGG" 1 "$K"
total=$((N_AGG * K))
STANDBY_DSN="postgresql://postgres@127.0.0.1:$PG_REPLICA_PORT/$PB_DB"
standby_q() { psql -XAtq -v ON_ERROR_STOP=1 -d "$STANDBY_DSN" -c "$1"; }
wait_until '[[ $(standby_q "SELECT count(*) FROM postbox.outbox") == "$total" ]]' 30 ||
    fail "the events did not reach the standby"

out=$("$POSTBOX_BIN" --dsn "$STANDBY_DSN" init 2>&1) && fail "postbox init against a standby succeeded: $out"
grep -q 'is a standby (read-only, in recovery).*target_session_attrs=read-write' <<<"$out" ||
    fail "postbox init against a standby did not say what to configure: $out"
say "init against the standby: $(cut -c1-200 <<<"$out")"

rc=0
out=$("$POSTBOX_BIN" --dsn "$STANDBY_DSN" check 2>&1) || rc=$?
((rc == 1)) || fail "postbox check against a standby exited $rc: $out"
grep -q 'postgres.primary.*is a standby' <<<"$out" || fail "postbox check did not say the server is a standby: $out"
say "check against the standby: $(grep -m1 'postgres.primary' <<<"$out" | cut -c1-160)"

export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=standby
export POSTBOX_CONSUME_HANDLER="INSERT INTO effect (agg, seq, n)
    VALUES (\$2::jsonb->>'aggregate_id', (\$1::jsonb->>'seq')::int, 1)
    ON CONFLICT (agg, seq) DO UPDATE SET n = effect.n + 1"
standby_said='is a standby (read-only, in recovery), and postbox needs the primary: .*target_session_attrs=read-write'
start_relay --dsn "$STANDBY_DSN" --set relay.reconnect_cap=1s
start_consumer --dsn "$STANDBY_DSN" --set consume.reconnect_cap=1s
wait_until 'grep -q "$standby_said" "$PB_RELAY_LOG" || ! pid_alive $RELAY_PID' 30 ||
    fail "the relay did not say it waits for the standby to be promoted"
wait_until 'grep -q "$standby_said" "$CONSUMER_LOG" || ! pid_alive $CONSUMER_PID' 30 ||
    fail "the consumer did not say it waits for the standby to be promoted: $(tail -n 5 "$CONSUMER_LOG")"
sleep 3 # several retries: still alive, still waiting, nothing done
pid_alive "$RELAY_PID" || fail "the relay exited on a standby"
pid_alive "$CONSUMER_PID" || fail "the consumer exited on a standby: $(tail -n 5 "$CONSUMER_LOG")"
say "relay: $(grep -m1 "$standby_said" "$PB_RELAY_LOG" | cut -c1-250)"
say "relay retried $(grep -c "$standby_said" "$PB_RELAY_LOG") times, consumer $(grep -c "$standby_said" "$CONSUMER_LOG") times in ~3 s"
grep -q 'relaying from' "$PB_RELAY_LOG" && fail "the relay relays from a standby"
[[ $(queue_count) == 0 ]] || fail "messages were published while only a standby was reachable"

pg_pair_kill_primary
pg_pair_promote
t_promote=$(date +%s%N)
wait_until 'grep -q "relaying from postgresql 127.0.0.1:$PG_REPLICA_PORT/" "$PB_RELAY_LOG"' 30 ||
    fail "the relay did not start once the standby was promoted"
say "relay relaying $((($(date +%s%N) - t_promote) / 1000000)) ms after the promotion"
wait_until '[[ $(standby_q "SELECT count(*) FROM effect") == "$total" ]]' 60 ||
    fail "only $(standby_q "SELECT count(*) FROM effect") of $total events handled after the promotion"
say "all $total events handled $((($(date +%s%N) - t_promote) / 1000000)) ms after the promotion"
stop_consumer
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
[[ $(standby_q "SELECT count(*) FROM effect WHERE n <> 1") == 0 ]] || fail "events took effect more than once"
[[ $(standby_q "SELECT count(*) FROM postbox.outbox") == 0 ]] || fail "events left pending"
