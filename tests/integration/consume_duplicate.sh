#!/usr/bin/env bash
# postbox consume and messages delivered more than once, or without an id:
#  - one message (same message_id) published twice by hand, and once more after it was handled:
#    the handler runs once (the balance changes once), the inbox holds one row, the two repeats
#    are acknowledged as duplicates (logged and counted), the queue ends empty;
#  - a message without a message_id property: never handled, recorded in postbox.inbox_dead with
#    a reason naming the missing id, and acknowledged.
#  - first deliveries that go to the one-round-trip fast path (all with an id, none redelivered)
#    mixing new messages, an old id and a repeat within the batch: the fast path commits nothing,
#    the batch goes the careful way, each new message takes effect once and the others are
#    acknowledged as duplicates.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=dup-test
export POSTBOX_CONSUME_HANDLER="INSERT INTO balance (account, amount)
    VALUES (\$1::jsonb->>'account', (\$1::jsonb->>'amount')::bigint)
    ON CONFLICT (account) DO UPDATE SET amount = balance.amount + EXCLUDED.amount"

balance_of() { psql_q "SELECT coalesce((SELECT amount FROM balance WHERE account = '$1'), 0)"; }

pb_init
use_least_privilege # relay and consumer as members of postbox_relay / postbox_consumer
psql_q "CREATE TABLE balance (account text PRIMARY KEY, amount bigint NOT NULL);
        GRANT SELECT, INSERT, UPDATE ON balance TO pb_it_consumer" # the handler's own grant
setup_queue '#'

# the same message twice, back to back (very likely one batch: deduplicated within it)
publish deposit.v1 dup-1 deposit.v1 '{"account": "alice", "amount": 5}' 2
# a message with no message_id property
publish deposit.v1 '' deposit.v1 '{"account": "nobody", "amount": 7}'
start_consumer
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 && $(psql_q "SELECT count(*) FROM postbox.inbox") -ge 1 ]]' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer did not handle the first messages within 30 s"; }
wait_until '[[ $(queue_count) == 0 ]]' 10 || fail "the queue still holds $(queue_count) message(s)"

# the same message once more, now that its inbox row is committed (found by the inbox lookup)
publish deposit.v1 dup-1 deposit.v1 '{"account": "alice", "amount": 5}'
wait_until '(( $(grep -c "duplicate message dup-1" "$CONSUMER_LOG") >= 2 ))' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "the third copy of dup-1 was not reported as a duplicate within 30 s"; }
# a control message after it, so that we know the consumer went past the repeat
publish deposit.v1 ok-2 deposit.v1 '{"account": "bob", "amount": 11}'
wait_until '[[ $(balance_of bob) == 11 ]]' 30 || fail "the control message ok-2 was not handled within 30 s"
stop_consumer
grep -E 'duplicate message|inbox_dead|totals' "$CONSUMER_LOG" | sed 's/^/  log: /'

inq=$(queue_count)
alice=$(balance_of alice)
nobody=$(balance_of nobody)
rows=$(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'dup-test' AND message_id = 'dup-1'")
allrows=$(psql_q "SELECT count(*) FROM postbox.inbox")
dup_lines=$(grep -c 'duplicate message dup-1' "$CONSUMER_LOG" || true)
totals=$(grep -o 'totals: .*' "$CONSUMER_LOG" | tail -n 1)
say "balance alice $alice (want 5), nobody $nobody (want 0), bob $(balance_of bob) (want 11)"
say "inbox rows for dup-1: $rows, all inbox rows: $allrows; 'duplicate message dup-1' log lines: $dup_lines"
say "consumer's $totals; messages left in the queue: $inq"
psql_q "SELECT coalesce(message_id, '(null)'), coalesce(message_type, '(null)'), attempts, error, convert_from(body, 'UTF8')
        FROM postbox.inbox_dead" | sed 's/^/  inbox_dead: /'

((alice == 5)) || fail "alice's balance is $alice: the message delivered 3 times took effect $((alice / 5)) times"
((nobody == 0)) || fail "the message without an id ran the handler (balance of 'nobody': $nobody)"
((rows == 1)) || fail "the inbox holds $rows row(s) for dup-1"
((allrows == 2)) || fail "the inbox holds $allrows rows, expected 2 (dup-1, ok-2)"
((dup_lines == 2)) || fail "$dup_lines duplicate(s) of dup-1 logged, expected 2"
[[ $totals == *"processed 2, duplicates 2,"* && $totals == *"dead 1"* ]] ||
    fail "the consumer's totals are '$totals', expected processed 2, duplicates 2, dead 1"
((inq == 0)) || fail "$inq message(s) left in the queue (not acknowledged)"
dead=$(psql_q "SELECT count(*) FROM postbox.inbox_dead WHERE message_id IS NULL AND error ILIKE '%id%'
                 AND convert_from(body, 'UTF8') LIKE '%nobody%'")
((dead == 1)) || fail "no inbox_dead row for the message without an id with a reason that mentions the id"

# while the consumer is stopped, so that they come in one batch: new messages, an old id, and a
# repeat within the batch (the fast path's insert fails on both; nothing of it may stay)
publish deposit.v1 new-3 deposit.v1 '{"account": "carol", "amount": 100}'
publish deposit.v1 dup-1 deposit.v1 '{"account": "alice", "amount": 5}'
publish deposit.v1 new-4 deposit.v1 '{"account": "carol", "amount": 20}'
publish deposit.v1 new-5 deposit.v1 '{"account": "carol", "amount": 3}' 2
: >"$CONSUMER_LOG"
start_consumer
wait_until '[[ $(balance_of carol) -ge 123 && $(queue_count) == 0 ]]' 30 ||
    { tail -n 20 "$CONSUMER_LOG" >&2; fail "new-3, new-4, new-5 were not handled within 30 s"; }
stop_consumer
carol=$(balance_of carol)
alice=$(balance_of alice)
totals=$(grep -o 'totals: .*' "$CONSUMER_LOG" | tail -n 1)
say "second run: balance carol $carol (want 123), alice $alice (want 5); consumer's $totals"
((carol == 123)) || fail "carol's balance is $carol, expected 123 (new-3, new-4, new-5 once each)"
((alice == 5)) || fail "alice's balance is $alice: dup-1 took effect again"
[[ $totals == *"processed 3, duplicates 2,"* ]] ||
    fail "the consumer's totals are '$totals', expected processed 3, duplicates 2"
inq=$(queue_count)
((inq == 0)) || fail "$inq message(s) left in the queue"
