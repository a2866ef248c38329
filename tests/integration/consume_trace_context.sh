#!/usr/bin/env bash
# The consumer's side of W3C trace context: events written under `SET LOCAL postbox.traceparent`
# (and tracestate) reach the SQL handler both in its headers argument ($2) and as the session
# settings postbox.traceparent / postbox.tracestate, on all four brokers, with the relay's poll
# capture (and cdc once, on Kafka). In one aggregate, so in one lane, one transaction, in
# order: two events of one traced transaction, an untraced one, one traced with another
# traceparent and no tracestate, an untraced one; each handler must see its own context and an
# untraced one none (not the one before it). Also with consume.commit_inbox_first, and across a handler failure
# rolled back to its savepoint.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
source "$(dirname "$0")/nats_lib.sh"
source "$(dirname "$0")/redis_lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
pb_init
setup_queue '#'

TP1=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
TS1=congo=t61rcWkgMzE
TP2=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00
psql_q "CREATE TABLE seen (via text, n int, setting text, state text, header text)" >/dev/null
# The handler: records what it sees; a payload with "flaky" fails its first attempt (its
# inbox_failures row says it was tried).
psql_q "CREATE FUNCTION on_traced(p jsonb, h jsonb, meta jsonb, via text) RETURNS void
        LANGUAGE plpgsql AS \$f\$
        BEGIN
          IF p ? 'flaky' AND NOT EXISTS (SELECT FROM postbox.inbox_failures f
                                         WHERE f.message_id = meta->>'message_id') THEN
            RAISE EXCEPTION 'fails once';
          END IF;
          INSERT INTO seen VALUES (coalesce(p->>'via', via), (p->>'n')::int,
            coalesce(nullif(current_setting('postbox.traceparent', true), ''), '-'),
            coalesce(nullif(current_setting('postbox.tracestate', true), ''), '-'),
            coalesce(h->>'traceparent', '-'));
        END \$f\$" >/dev/null

enqueue_five() { # AGGREGATE_TYPE AGGREGATE_ID [FUNCTION [VIA]]: two events in one traced
    # transaction, then one untraced, one with another traceparent, one untraced
    local fn=${3:-enqueue} via=${4:+, \"via\": \"$4\"}
    psql_q "BEGIN; SET LOCAL postbox.traceparent = '$TP1'; SET LOCAL postbox.tracestate = '$TS1';
            SELECT postbox.$fn('$1', '$2', 'traced.v1', '{\"n\": 1$via}');
            SELECT postbox.$fn('$1', '$2', 'traced.v1', '{\"n\": 2$via}'); COMMIT;
            SELECT postbox.$fn('$1', '$2', 'traced.v1', '{\"n\": 3$via}');
            BEGIN; SET LOCAL postbox.traceparent = '$TP2';
            SELECT postbox.$fn('$1', '$2', 'traced.v1', '{\"n\": 4$via}'); COMMIT;
            SELECT postbox.$fn('$1', '$2', 'traced.v1', '{\"n\": 5$via}');" >/dev/null
}

consume_drain() { # VIA [GLOBAL OPTIONS...]: postbox consume --drain with the recording handler
    local via=$1 out
    shift
    out=$(POSTBOX_CONSUME_HANDLER="SELECT on_traced(\$1::jsonb, \$2::jsonb, \$3::jsonb, '$via')" \
          timeout 90 "$POSTBOX_BIN" --set consume.lanes=1 "$@" consume --drain 2>&1) ||
        { printf '%s\n' "$out" | tail -n 20 >&2; fail "$via: consume --drain failed"; }
}

check_seen() { # VIA
    local got want
    got=$(psql_q "SELECT n || ' ' || setting || ' ' || state || ' ' || header FROM seen WHERE via = '$1' ORDER BY n")
    want="1 $TP1 $TS1 $TP1
2 $TP1 $TS1 $TP1
3 - - -
4 $TP2 - $TP2
5 - - -"
    [[ $got == "$want" ]] || fail "$1: the handlers saw
$got
expected
$want"
    say "$1: each handler saw its own trace context, in \$2 and in postbox.traceparent/tracestate"
}

say "RabbitMQ"
enqueue_five order a-1
relay_drain 60 --set relay.sink=amqp
POSTBOX_CONSUME_SOURCE=amqp consume_drain amqp
check_seen amqp

say "RabbitMQ, consume.commit_inbox_first"
enqueue_five order a-2 enqueue first
relay_drain 60 --set relay.sink=amqp
POSTBOX_CONSUME_SOURCE=amqp consume_drain first --set consume.commit_inbox_first=true
check_seen first

say "RabbitMQ, a handler failing after a traced one (rolled back to its savepoint)"
psql_q "BEGIN; SET LOCAL postbox.traceparent = '$TP1';
        SELECT postbox.enqueue('order', 'r-1', 'traced.v1', '{\"n\": 1, \"via\": \"rollback\"}'); COMMIT;
        SELECT postbox.enqueue('order', 'r-2', 'traced.v1', '{\"n\": 2, \"via\": \"rollback\", \"flaky\": true}');
        SELECT postbox.enqueue('order', 'r-3', 'traced.v1', '{\"n\": 3, \"via\": \"rollback\"}');" >/dev/null
relay_drain 60 --set relay.sink=amqp
POSTBOX_CONSUME_SOURCE=amqp consume_drain rollback --set consume.backoff_base=100ms --set consume.backoff_cap=200ms
got=$(psql_q "SELECT n || ' ' || setting FROM seen WHERE via = 'rollback' ORDER BY n")
[[ $got == "1 $TP1
2 -
3 -" ]] || fail "after a rolled-back handler the next ones saw: $got"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_failures") == 0 && $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 0 ]] ||
    fail "the flaky message did not end handled"

say "Kafka"
enqueue_five korder k-1
relay_drain 60 --set relay.sink=kafka
POSTBOX_CONSUME_SOURCE=kafka POSTBOX_KAFKA_TOPICS=$(kafka_topic korder) POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.trace \
    consume_drain kafka --set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500
check_seen kafka

say "Kafka, events of the cdc capture (postbox.emit)"
cdc_use_slot
cdc_create_slot --set relay.sink=kafka
enqueue_five kcdc c-1 emit cdc
relay_drain 60 --set relay.sink=kafka --capture cdc
POSTBOX_CONSUME_SOURCE=kafka POSTBOX_KAFKA_TOPICS=$(kafka_topic kcdc) POSTBOX_KAFKA_GROUP=pb.$PB_KAFKA_RUN.tracecdc \
    consume_drain kafka-cdc --set kafka.session.timeout.ms=2500 --set kafka.heartbeat.interval.ms=500
check_seen cdc

say "NATS JetStream"
enqueue_five norder n-1
relay_drain 60 --set relay.sink=nats
POSTBOX_CONSUME_SOURCE=nats consume_drain nats
check_seen nats

say "Redis Streams"
enqueue_five rorder r-1
relay_drain 60 --set relay.sink=redis --set redis.max_age=1d
POSTBOX_CONSUME_SOURCE=redis POSTBOX_REDIS_STREAMS=${POSTBOX_REDIS_STREAM_PREFIX}rorder consume_drain redis
check_seen redis
say "PASS"
