#!/usr/bin/env bash
# Dead letters have a retention too (README, "Retention"): the relay's janitor purges
# postbox.dead_letters, the consumer's postbox.inbox_dead, by age, with per-type ages that
# override the default (the first rule that matches wins; 0 keeps).
#   1. relay: default 30d, payment.* 90d, debug.* 1h: of rows dead 100d/40d/40d/10d/2h, exactly
#      the payment one of 100d, the order one of 40d and the debug one of 2h go
#   2. consumer: default 30d, keep.* 0: its dead messages of 40d go, with their inbox rows, in
#      the same round; the kept type and another consumer's rows stay
#   3. `postbox purge --dead-letters --older-than 5d`: every type, both tables
#   4. a bad rule: the relay refuses to start, naming the option
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
pb_init

dead_letter() { # TYPE AGE_SQL: one dead letter of TYPE, dead AGE ago
    psql_q "INSERT INTO postbox.dead_letters (outbox_id, event_id, aggregate_type, aggregate_id,
                event_type, payload, headers, created_at, attempts, reason, dead_at)
            VALUES (1, gen_random_uuid(), 'order', 'A', '$1', '{}', '{}', now() - interval '$2',
                    10, 'test', now() - interval '$2')" >/dev/null
}
dead_letters() { psql_q "SELECT coalesce(string_agg(event_type || '@' || extract(day FROM now() - dead_at)::int, ',' ORDER BY event_type, dead_at), '') FROM postbox.dead_letters"; }

say "1. the relay purges dead letters past their type's retention"
dead_letter payment.captured '100 days'
dead_letter payment.captured '40 days'
dead_letter order.created '40 days'
dead_letter order.created '10 days'
dead_letter debug.tick '2 hours'
start_relay --set relay.sink=stdout --set relay.purge_interval=1s \
    --set relay.dead_letter_retention=30d --set 'relay.dead_letter_retention_types=payment.*=90d, debug.*=1h'
want='order.created@10,payment.captured@40'
wait_until '[[ $(dead_letters) == "$want" ]]' 30 || fail "dead letters left: $(dead_letters), expected $want"
wait_until "grep -q 'purged 3 rows of postbox.dead_letters' '$PB_RELAY_LOG'" 10 ||
    fail "the relay did not log the dead letters' purge"
stop_relay
say "relay: $(grep -o 'purged 3 rows of postbox.dead_letters[^(]*' "$PB_RELAY_LOG" | head -1)"

say "2. the consumer purges its dead messages, and their inbox rows with them"
dead_message() { # CONSUMER ID TYPE AGE_SQL
    psql_q "INSERT INTO postbox.inbox (consumer, message_id, message_type, received_at, processed_at)
            VALUES ('$1', '$2', '$3', now() - interval '$4', NULL);
            INSERT INTO postbox.inbox_dead (consumer, message_id, message_type, body, error, attempts, dead_at)
            VALUES ('$1', '$2', '$3', '\\x7b7d', 'test', 5, now() - interval '$4')" >/dev/null
}
dead_message ret m-old order.created '40 days'
dead_message ret m-kept keep.audit '40 days'
dead_message ret m-new order.created '2 days'
dead_message other m-other order.created '40 days'
ids() { psql_q "SELECT coalesce(string_agg(consumer || '/' || message_id, ',' ORDER BY consumer, message_id), '') FROM postbox.$1"; }
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=ret
export POSTBOX_CONSUME_HANDLER="SELECT 1"
setup_queue '#'
start_consumer --set consume.purge_interval=1s --set consume.dead_retention=30d \
    --set 'consume.dead_retention_types=keep.*=0'
want='other/m-other,ret/m-kept,ret/m-new'
wait_until '[[ $(ids inbox_dead) == "$want" ]]' 30 || fail "dead messages left: $(ids inbox_dead), expected $want"
wait_until '[[ $(ids inbox) == "$want" ]]' 10 || fail "inbox rows left: $(ids inbox), expected $want (the purged dead message's row must go)"
stop_consumer

say "3. postbox purge --dead-letters: every type past the age, both tables"
out=$("$POSTBOX_BIN" purge --older-than 5d --dead-letters 2>&1) || fail "postbox purge failed: $out"
[[ $out == *"postbox.dead_letters: deleted 2 rows"* ]] || fail "postbox purge did not report 2 dead letters: $out"
[[ $out == *"postbox.inbox_dead: deleted 2 rows"* ]] || fail "postbox purge did not report 2 dead messages: $out"
[[ -z $(dead_letters) ]] || fail "dead letters left: $(dead_letters)"
[[ $(ids inbox_dead) == ret/m-new ]] || fail "dead messages left: $(ids inbox_dead), expected ret/m-new"

say "4. a bad rule is refused at start"
: >"$PB_RELAY_LOG"
start_relay --set relay.sink=stdout --set 'relay.dead_letter_retention_types=payment.*'
wait_relay 20
((RELAY_RC != 0)) || fail "the relay started with a rule without an age"
grep -q 'relay.dead_letter_retention_types: rule "payment.\*": no' "$PB_RELAY_LOG" ||
    fail "the error does not name the option and the rule: $(tail -n 3 "$PB_RELAY_LOG")"
say "PASS"
