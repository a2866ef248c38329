#!/usr/bin/env bash
# `postbox dlq --inbox replay` with the NATS source: a dead message replayed while the stream
# still remembers its Nats-Msg-Id would be dropped by JetStream as a duplicate (and acknowledged),
# so the consumer would never see it again. The replay says so, exits non-zero and keeps the dead
# letter; once the duplicate window has passed, the replay republishes it and it is handled.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"

export POSTBOX_NATS_DUPLICATE_WINDOW=3s POSTBOX_NATS_RELAY_WORST_DOWNTIME=1s
export POSTBOX_CONSUME_CONSUMER=nats-replay
BAD_SQL="SELECT 1 / 0 WHERE \$1::jsonb ? 'x'"
GOOD_SQL="INSERT INTO balance VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)"
pb_init
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL)"
psql_q "SELECT postbox.enqueue('acct', 'a1', 'bad.v1', '{\"account\": \"a1\", \"amount\": 7, \"x\": 1}')" >/dev/null
relay_drain 60
dead() { psql_q "SELECT count(*) FROM postbox.inbox_dead"; }

start_consumer --set "handlers.bad.v1=$BAD_SQL" --set consume.max_attempts=2 \
    --set consume.backoff_base=100ms --set consume.backoff_cap=200ms
wait_until '[[ $(dead) == 1 ]]' 60 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the poison message did not reach inbox_dead"; }
stop_consumer

# at once: within the stream's duplicate window
rc=0
"$POSTBOX_BIN" dlq --inbox replay --consumer nats-replay >"$PB_TMP/replay1.out" 2>&1 || rc=$?
say "replay within the window: exit $rc: $(tr '\n' ' ' <"$PB_TMP/replay1.out")"
((rc != 0)) || fail "the replay within the duplicate window exited 0"
grep -q 'duplicate window' "$PB_TMP/replay1.out" || fail "the replay does not say why the message was not republished"
[[ $(dead) == 1 ]] || fail "the dead letter was dropped although the broker did not take the message again"

sleep 4 # past nats.duplicate_window
"$POSTBOX_BIN" dlq --inbox replay --consumer nats-replay >"$PB_TMP/replay2.out" 2>&1 || { cat "$PB_TMP/replay2.out" >&2; fail "the replay after the window failed"; }
[[ $(dead) == 0 ]] || fail "the replayed dead letter is still in inbox_dead"
start_consumer --set "handlers.bad.v1=$GOOD_SQL"
wait_until '[[ $(psql_q "SELECT amount FROM balance WHERE account = '"'a1'"'") == 7 ]]' 60 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the replayed message was not handled"; }
stop_consumer
say "ok: refused within the duplicate window with the dead letter kept, replayed and handled after it"
