#!/usr/bin/env bash
# `postbox dlq --inbox replay` with the kafka source: a poison message published by the relay
# lands in postbox.inbox_dead; the handler (a SQL function) is fixed while the consumer runs; a
# replay while kafka cannot be reached changes nothing; then the replay produces the message
# again to the topic it was read from, deletes the dead letter, and the running consumer handles
# it exactly once. (One consumer throughout: on the shared mock cluster, a member joining its
# group again after a clean leave sometimes got no assignment within 30 s.)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
TOPIC=$(kafka_topic acct)
export POSTBOX_CONSUME_SOURCE=kafka POSTBOX_CONSUME_CONSUMER=dlq-kafka
export POSTBOX_KAFKA_TOPICS=$TOPIC POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.dlq
on_acct() { # BODY: (re)defines the handler's function
    psql_q "CREATE OR REPLACE FUNCTION on_acct(p jsonb, h jsonb) RETURNS void LANGUAGE plpgsql AS \$f\$ BEGIN $1; END \$f\$"
}

pb_init
psql_q "CREATE TABLE seen (account text, amount bigint, agg text)"
on_acct "RAISE EXCEPTION 'not fixed yet'"
psql_q "SELECT postbox.enqueue('acct', 'a1', 'bad.v1', '{\"account\": \"a1\", \"amount\": 7, \"x\": 1}')" >/dev/null
relay_drain 60
dead() { psql_q "SELECT count(*) FROM postbox.inbox_dead"; }
lag_is_0() { [[ $(kafka_tool lag "$POSTBOX_KAFKA_BROKERS" "$POSTBOX_KAFKA_GROUP" "$TOPIC") == 0 ]]; }

start_consumer --set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500 \
    --set 'handlers.bad.v1=SELECT on_acct($1::jsonb, $2::jsonb)' --set consume.max_attempts=2 \
    --set consume.backoff_base=100ms --set consume.backoff_cap=200ms
wait_until '[[ $(dead) == 1 ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the poison message did not reach inbox_dead"; }
wait_until lag_is_0 10 || fail "the dead message's offset was not committed"
dead_row=$(psql_q "SELECT message_type, routing_key FROM postbox.inbox_dead")
[[ $dead_row == "bad.v1|$TOPIC" ]] || fail "unexpected dead letter: $dead_row"
on_acct "INSERT INTO seen VALUES (p->>'account', (p->>'amount')::bigint, h->>'aggregate_id')"

# no broker to confirm: the dead letter stays
rc=0
"$POSTBOX_BIN" --set kafka.brokers=127.0.0.1:1 dlq --inbox replay --consumer dlq-kafka \
    >"$PB_TMP/replay0.out" 2>&1 || rc=$?
say "replay without kafka: exit $rc: $(grep -v ' info ' "$PB_TMP/replay0.out" | tr '\n' ' ')"
((rc != 0)) || fail "the replay without kafka exited 0"
[[ $(dead) == 1 ]] || fail "the dead letter was deleted although kafka confirmed nothing"

"$POSTBOX_BIN" dlq --inbox replay --consumer dlq-kafka >"$PB_TMP/replay.out" 2>&1 ||
    { cat "$PB_TMP/replay.out" >&2; fail "dlq --inbox replay failed"; }
say "replay: $(grep -v ' info ' "$PB_TMP/replay.out" | tr '\n' ' ')"
[[ $(dead) == 0 ]] || fail "the replayed dead letter is still in inbox_dead"
drain_topic "$PB_TMP/topic" "$TOPIC" 2 1000 20
(($(wc -l <"$PB_TMP/topic") == 2)) || fail "$TOPIC holds $(wc -l <"$PB_TMP/topic") messages after the replay, expected 2"
ids=$(cut -f1 "$PB_TMP/topic" | LC_ALL=C sort -u | wc -l)
((ids == 1)) || fail "the replayed message does not carry the dead message's id: $(cut -f1 "$PB_TMP/topic" | tr '\n' ' ')"

wait_until '[[ $(psql_q "SELECT count(*) FROM seen") -ge 1 ]] && lag_is_0' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the replayed message was not handled"; }
sleep 1 # room for a second delivery, which must not take effect
stop_consumer
seen=$(psql_q "SELECT account, amount, agg FROM seen")
[[ $seen == "a1|7|a1" ]] || fail "the handler's work after the replay: '$seen', expected one row a1|7|a1"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE processed_at IS NOT NULL") == 1 ]] ||
    fail "the replayed message's inbox row is not the one processed row"
[[ $(dead) == 0 ]] || fail "the replayed message went dead again"
say "ok: kept while kafka was unreachable, replayed to $TOPIC, handled once, inbox_dead empty"
