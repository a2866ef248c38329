#!/usr/bin/env bash
# A message handled before the retention purge deleted its inbox row is still a duplicate when
# the broker hands it out again (README, "Guarantees"); nothing else becomes one (sql/012):
#   1. A's 1, 2, 3 and 5 take effect (4 never came); `postbox purge` deletes their inbox rows
#      and folds 1-3 and 5 into A's purged set
#   2. copies of 2 and 5, stamped as the originals: duplicates, no effect
#   3. 4, never handled, stamped as the others (an event the relay dead-lettered, replayed):
#      takes effect, late
#   4. a producer whose numbering restarted: new ids with 1 and 2, stamped two hours after the
#      purged rows: take effect
#   5. a copy of 1 without the purge's rows behind it (consumer B, which never purged): a
#      duplicate by its inbox row, as always
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
export POSTBOX_AMQP_QUEUE=$PB_QUEUE
export POSTBOX_CONSUME_CONSUMER=purged POSTBOX_CONSUME_WAIT_FOR_GAPS=never
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (id) VALUES (\$3::jsonb->>'message_id')"
setup_queue '#'
pb_init
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, id text NOT NULL)"

STAMP=$(($(date +%s) - 60))
send() { # ID SEQ [STAMP]: one event of aggregate A
    publish "order.step.v1" "$1" step.v1 "{\"seq\": $2}" --header aggregate_type=order \
        --header aggregate_id=A --header "aggregate_sequence=$2" --timestamp "${3:-$STAMP}"
}
effects() { psql_q "SELECT coalesce(string_agg(id, ',' ORDER BY n), '') FROM effects"; }
drain() {
    local PRE=()
    _with_dsn "$PB_CONSUMER_DSN"
    "$POSTBOX_BIN" "${PRE[@]}" consume --drain >>"$CONSUMER_LOG" 2>&1 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "consume --drain failed"; }
}
expect_effects() { [[ $(effects) == "$1" ]] || fail "effects $(effects), expected $1"; }

say "1. A 1, 2, 3, 5 take effect; the purge folds them"
for k in 1 2 3 5; do send a-$k $k; done
drain
expect_effects a-1,a-2,a-3,a-5
sleep 1.2
out=$("$POSTBOX_BIN" purge --older-than 1s --inbox-only 2>&1) || fail "postbox purge failed: $out"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'purged'") == 0 ]] ||
    fail "inbox rows left after the purge: $out"
purged=$(psql_q "SELECT purged FROM postbox.inbox_sequences WHERE consumer = 'purged' AND aggregate_id = 'A'")
[[ $purged == '{[1,4),[5,6)}' ]] || fail "A's purged set is '$purged', expected {[1,4),[5,6)}"

say "2. copies of 2 and 5: duplicates"
send a-2 2
send a-5 5
drain
expect_effects a-1,a-2,a-3,a-5
grep -q 'duplicate message a-2' "$CONSUMER_LOG" || fail "a-2 was not taken for a duplicate"

say "3. 4, never handled: takes effect"
send a-4 4
drain
expect_effects a-1,a-2,a-3,a-5,a-4

say "4. a restarted numbering, stamped after the purged rows: takes effect"
send a2-1 1 $((STAMP + 7200))
send a2-2 2 $((STAMP + 7200))
drain
expect_effects a-1,a-2,a-3,a-5,a-4,a2-1,a2-2

say "5. without a purge the inbox row decides, as before"
POSTBOX_CONSUME_CONSUMER=never-purged
export POSTBOX_CONSUME_CONSUMER
send b-1 1
drain
send b-1 1
drain
[[ $(psql_q "SELECT count(*) FROM effects WHERE id = 'b-1'") == 1 ]] || fail "b-1 took effect twice"
say "PASS"
