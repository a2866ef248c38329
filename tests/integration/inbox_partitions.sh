#!/usr/bin/env bash
# The partitioned inbox (README, "Partitioned storage"; sql/024_inbox_partitions.sql):
#   1. `init --partition-by` partitions an inbox holding rows online, its rows in
#      postbox.inbox_legacy until moved (it_inbox_migrate_online tests that at length):
#      inbox_untimed, inbox_default, today and 3 days ahead, each partition with its key
#      (consumer, message_id)
#   2. a day boundary: messages whose UUIDv7 ids fall 10 and 9 days back (backdated
#      partitions) are handled once; copies redelivered after their rows' receipt day are
#      duplicates (the id, not the receipt, picks the partition); ids without a time (an order
#      number, a UUIDv4) go to inbox_untimed, a far-future UUIDv7 and a look-alike with a
#      non-hexadecimal "time" to inbox_default, and each of them is handled once when delivered
#      twice; with consume.commit_inbox_first the row is marked done in its partition
#   3. while the consumer runs and handles a stream of new messages, its retention drops the
#      old partitions (one kept while a row in it was received within the retention), folding
#      their numbers into inbox_sequences: every new message handled once, and copies of the
#      dropped messages are still duplicates
#   4. `postbox purge` drops a partition and purges inbox_untimed by time of receipt
#   5. `postbox check` fails on a partition without its key
source "$(dirname "$0")/lib.sh"
for _v in $(compgen -v POSTBOX_CONSUME_ || true); do unset "$_v"; done
unset POSTBOX_TEST_PARTITION_BY
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=ip POSTBOX_CONSUME_WAIT_FOR_GAPS=never
export POSTBOX_CONSUME_HANDLER="INSERT INTO effects (id) VALUES (\$3::jsonb->>'message_id')"
setup_queue '#'

kind() { psql_q "SELECT relkind FROM pg_class WHERE oid = 'postbox.$1'::regclass"; }
partition_of() { psql_q "SELECT tableoid::regclass FROM postbox.inbox WHERE consumer = 'ip' AND message_id = '$1'"; }
effects() { psql_q "SELECT count(*) FROM effects"; }
effects_of() { psql_q "SELECT count(*) FROM effects WHERE id = '$1'"; }
# uuid7 TIME_SQL: a UUIDv7 whose time is TIME_SQL (random bits from md5)
uuid7() {
    psql_q "SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7' || substr(r, 1, 3) || '-8'
                   || substr(r, 4, 3) || '-' || substr(r, 7, 12)
            FROM (SELECT lpad(to_hex((extract(epoch FROM $1) * 1000)::bigint), 12, '0') AS h,
                         md5(random()::text) AS r) x"
}
send_old() { # ID SEQ STAMP: an event of aggregate OLD
    publish order.step.v1 "$1" step.v1 "{\"seq\": $2}" --header aggregate_type=order \
        --header aggregate_id=OLD --header "aggregate_sequence=$2" --timestamp "$3"
}
drain() {
    local PRE=()
    _with_dsn "$PB_CONSUMER_DSN"
    "$POSTBOX_BIN" "${PRE[@]}" consume --drain >>"$CONSUMER_LOG" 2>&1 ||
        { tail -n 20 "$CONSUMER_LOG" >&2; fail "consume --drain failed"; }
}

say "1. init --partition-by: an inbox holding rows is migrated online (it_inbox_migrate_online)"
"$POSTBOX_BIN" init >/dev/null 2>&1 || fail "postbox init failed"
psql_q "INSERT INTO postbox.inbox (consumer, message_id, processed_at) VALUES ('x', 'early', now())" >/dev/null
out=$("$POSTBOX_BIN" init --partition-by '1 day' 2>&1) || fail "init --partition-by failed: $out"
[[ $(kind inbox) == p ]] || fail "postbox.inbox is not partitioned: $out"
[[ $out == *"postbox.inbox holds rows: it is postbox.inbox_legacy now"* ]] || fail "no warning says the inbox migrates: $out"
[[ $(kind outbox_published) == p ]] || fail "the other tables were not partitioned"
[[ $(psql_q "SELECT moved FROM postbox.inbox_legacy_move(10, NULL, NULL)") == 1 ]] || fail "the legacy row was not moved"
[[ $(psql_q "SELECT postbox.inbox_legacy_finish()") == t ]] || fail "the emptied legacy table was not dropped"
[[ $(psql_q "SELECT to_regclass('postbox.inbox_legacy') IS NULL AND to_regclass('postbox.inbox_migrated') IS NULL") == t ]] ||
    fail "the legacy table or the empty inbox_migrated is left"
[[ $(psql_q "SELECT tableoid::regclass FROM postbox.inbox WHERE message_id = 'early'") == postbox.inbox_untimed ]] ||
    fail "the legacy row is not in inbox_untimed"
psql_q "DELETE FROM postbox.inbox" >/dev/null
n=$(psql_q "SELECT count(*) FROM postbox.partitions_of('inbox') WHERE lower_bound >= postbox.partition_lower('1 day', now())")
((n == 4)) || fail "postbox.inbox has $n partitions from today on, expected 4"
[[ $(kind inbox_untimed) == r && $(kind inbox_default) == r ]] || fail "inbox_untimed or inbox_default missing"
psql_q "SELECT postbox.partition_create('inbox', now() - d * interval '1 day') FROM unnest(ARRAY[10, 9]) d" >/dev/null
[[ $(psql_q "SELECT count(*) FROM postbox.inbox_partitions_without_key()") == 0 ]] ||
    fail "inbox partitions without their key: $(psql_q 'SELECT * FROM postbox.inbox_partitions_without_key()')"
use_least_privilege
psql_q "CREATE TABLE effects (n bigserial PRIMARY KEY, id text NOT NULL);
        GRANT INSERT ON effects TO pb_it_consumer; GRANT USAGE ON SEQUENCE effects_n_seq TO pb_it_consumer"

say "2. a day boundary: copies received on another day are duplicates"
D10="postbox.partition_lower('1 day', now() - interval '10 days')"
D9="postbox.partition_lower('1 day', now() - interval '9 days')"
declare -a OLD_ID OLD_AT
for k in 1 2 3 4 5 6; do
    day=$D10; ((k > 3)) && day=$D9
    OLD_ID[k]=$(uuid7 "$day + interval '1 hour' + $k * interval '1 minute'")
    OLD_AT[k]=$(psql_q "SELECT extract(epoch FROM postbox.inbox_message_time('${OLD_ID[k]}'))::bigint")
    send_old "${OLD_ID[k]}" $k "${OLD_AT[k]}"
done
# an order number and a UUIDv4 (no time); a far-future UUIDv7 and a look-alike whose "time"
# is not hexadecimal (no partition: inbox_default; it must not fail)
UNTIMED=(order-17 "$(psql_q 'SELECT gen_random_uuid()')")
FUTURE=$(uuid7 "now() + interval '400 days'")
LOOKALIKE=0190abcd--f01-7000-8000-000000000000
for id in "${UNTIMED[@]}" "$FUTURE" "$LOOKALIKE"; do publish other.v1 "$id" other.v1 '{}' 2; done
drain
(($(effects) == 10)) || fail "$(effects) effects, expected 10 (6 old, 4 others once each)"
for k in 1 2 3 4 5 6; do
    want=$(psql_q "SELECT postbox.partition_name('inbox', postbox.partition_lower('1 day',
                       postbox.inbox_message_time('${OLD_ID[k]}')))")
    [[ $(partition_of "${OLD_ID[k]}") == "postbox.$want" ]] ||
        fail "${OLD_ID[k]} is in $(partition_of "${OLD_ID[k]}"), expected postbox.$want"
done
for id in "${UNTIMED[@]}"; do
    [[ $(partition_of "$id") == postbox.inbox_untimed ]] || fail "$id is in $(partition_of "$id"), not inbox_untimed"
    (($(effects_of "$id") == 1)) || fail "$id took effect $(effects_of "$id") times"
done
for id in "$FUTURE" "$LOOKALIKE"; do
    [[ $(partition_of "$id") == postbox.inbox_default ]] || fail "$id is in $(partition_of "$id"), not inbox_default"
    (($(effects_of "$id") == 1)) || fail "$id took effect $(effects_of "$id") times"
done
# the rows were received on their ids' days (a day boundary ago and more); o4 just now
psql_q "UPDATE postbox.inbox SET received_at = postbox.inbox_message_time(message_id) + interval '1 minute'
        WHERE consumer = 'ip' AND aggregate_id = 'OLD' AND aggregate_sequence <> 4" >/dev/null
send_old "${OLD_ID[2]}" 2 "${OLD_AT[2]}"
send_old "${OLD_ID[5]}" 5 "${OLD_AT[5]}"
for id in "${UNTIMED[@]}" "$FUTURE" "$LOOKALIKE"; do publish other.v1 "$id" other.v1 '{}'; done
drain
(($(effects) == 10)) || fail "$(effects) effects after the copies, expected 10: a copy was handled again"
grep -q "duplicate message ${OLD_ID[2]}" "$CONSUMER_LOG" || fail "the copy of ${OLD_ID[2]} was not taken for a duplicate"
[[ $(psql_q "SELECT count(*) FROM postbox.inbox WHERE consumer = 'ip'") == 10 ]] || fail "the copies left inbox rows"

# consume.commit_inbox_first: the row committed first, marked done after the handler (an
# UPDATE that finds it by id and key)
FIRST=("$(psql_q 'SELECT postbox.uuid_v7()')" order-18)
for id in "${FIRST[@]}"; do publish other.v1 "$id" other.v1 '{}'; done
POSTBOX_CONSUME_COMMIT_INBOX_FIRST=true drain
for id in "${FIRST[@]}"; do
    (($(effects_of "$id") == 1)) || fail "$id (commit_inbox_first) took effect $(effects_of "$id") times"
    [[ $(psql_q "SELECT processed_at IS NOT NULL FROM postbox.inbox WHERE consumer = 'ip' AND message_id = '$id'") == t ]] ||
        fail "the inbox row of $id (commit_inbox_first) is not marked processed"
done

say "3. retention drops old partitions while the consumer handles new messages"
start_consumer --set consume.retention=7d --set consume.purge_interval=1s
N_NEW=600
publish_new() {
    local b
    for ((b = 0; b < N_NEW / 50; b++)); do
        psql_q "SELECT postbox.uuid_v7() FROM generate_series(1, 50)" | while read -r id; do
            publish new.v1 "$id" new.v1 '{}'
        done
        sleep 0.2
    done
}
publish_new &
PUBLISHER=$!
old_parts() { psql_q "SELECT count(*) FROM postbox.partitions_of('inbox') WHERE lower_bound IS NOT NULL AND upper_bound <= now() - interval '7 days'"; }
wait_until '(( $(old_parts) == 1 ))' 30 || fail "the partition of 10 days ago was not dropped ($(old_parts) old partitions)"
sleep 3 # several purge rounds: the partition of 9 days ago holds a row received just now
(($(old_parts) == 1)) || fail "the partition of 9 days ago was dropped although a row in it was received within the retention"
[[ $(partition_of "${OLD_ID[4]}") == *inbox_p* ]] || fail "${OLD_ID[4]} lost its row"
psql_q "UPDATE postbox.inbox SET received_at = now() - interval '9 days' WHERE message_id = '${OLD_ID[4]}'" >/dev/null
wait_until '(( $(old_parts) == 0 ))' 30 || fail "the partition of 9 days ago was not dropped once its rows were old"
pid_alive "$PUBLISHER" || say "(the publisher finished before the second drop)"
purged=$(psql_q "SELECT purged FROM postbox.inbox_sequences WHERE consumer = 'ip' AND aggregate_id = 'OLD'")
[[ $purged == '{[1,7)}' ]] || fail "OLD's purged set is '$purged', expected {[1,7)} (the dropped rows' numbers)"
(($(grep -c 'dropped 1 partitions of postbox.inbox' "$CONSUMER_LOG") >= 2)) || fail "the consumer did not log both drops"
wait "$PUBLISHER" || fail "publishing failed"
want=$((12 + N_NEW))
wait_until "(( \$(effects) >= $want )) && [[ \$(queue_count) == 0 ]]" 120 || fail "$(effects) effects of $want"
# copies of dropped messages: new ids to the inbox's partitions, duplicates by the fold
send_old "${OLD_ID[1]}" 1 "${OLD_AT[1]}"
send_old "${OLD_ID[6]}" 6 "${OLD_AT[6]}"
wait_until "grep -q 'duplicate message ${OLD_ID[6]}' '$CONSUMER_LOG'" 30 || fail "the copy of ${OLD_ID[6]} was not a duplicate"
wait_until '[[ $(queue_count) == 0 ]]' 10 || fail "messages left in the queue"
stop_consumer
(($(effects) == want)) || fail "$(effects) effects, expected $want: $(psql_q 'SELECT count(*) - count(DISTINCT id) FROM effects') handled twice"
[[ $(psql_q "SELECT count(DISTINCT id) FROM effects") == "$want" ]] || fail "messages handled twice"
say "$N_NEW new messages handled once while 2 old partitions were dropped; copies of their messages were duplicates"

say "4. postbox purge: a partition dropped, inbox_untimed purged by receipt"
psql_q "SELECT postbox.partition_create('inbox', now() - interval '12 days')" >/dev/null
OLD12=$(uuid7 "now() - interval '12 days'")
psql_q "INSERT INTO postbox.inbox (consumer, message_id, received_at, processed_at, aggregate_type, aggregate_id, aggregate_sequence)
        VALUES ('ip', '$OLD12', now() - interval '12 days', now() - interval '12 days', 'order', 'P', 3),
               ('ip', 'untimed-old', now() - interval '8 days', now() - interval '8 days', 'order', 'P', 4)" >/dev/null
[[ $(partition_of "$OLD12") == *inbox_p* ]] || fail "the row of 12 days ago is in $(partition_of "$OLD12")"
out=$("$POSTBOX_BIN" purge --older-than 7d --inbox-only 2>&1) || fail "postbox purge failed: $out"
[[ $out == *"postbox.inbox: dropped 1 partitions"* ]] || fail "postbox purge did not drop the inbox partition: $out"
[[ -z $(partition_of "$OLD12") && -z $(partition_of untimed-old) ]] || fail "rows past the retention left: $out"
[[ -n $(partition_of order-17) ]] || fail "postbox purge deleted a recent untimed row"
purged=$(psql_q "SELECT purged FROM postbox.inbox_sequences WHERE consumer = 'ip' AND aggregate_id = 'P'")
[[ $purged == '{[3,5)}' ]] || fail "P's purged set is '$purged', expected {[3,5)}"

say "5. postbox check: a partition without its key"
today=$(psql_q "SELECT partition FROM postbox.partitions_of('inbox') WHERE lower_bound = postbox.partition_lower('1 day', now())")
psql_q "ALTER TABLE $today DROP CONSTRAINT ${today#postbox.}_pkey" >/dev/null || fail "cannot drop the key of $today"
out=$("$POSTBOX_BIN" check --all 2>&1) && fail "postbox check passed with a partition without its key"
grep -q "partition $today of postbox.inbox has no key on (consumer, message_id)" <<<"$out" ||
    fail "postbox check did not name the partition without a key: $out"
psql_q "ALTER TABLE $today ADD PRIMARY KEY (consumer, message_id)" >/dev/null
out=$("$POSTBOX_BIN" check --all 2>&1) || true
grep -q 'has no key on' <<<"$out" && fail "postbox check still reports a missing key: $out"
grep -q 'index postbox.inbox_pkey' <<<"$out" && fail "postbox check wants inbox_pkey on the partitioned inbox: $out"
say "PASS"
