#!/usr/bin/env bash
# The claim statement (postbox.claim, src/store/outbox_sql.h) keeps each aggregate in order
# behind a waiting event by itself: the later events of that aggregate it meets are set waiting
# (until the blocking event's retry time, or their own when later) by the same statement and
# returned with parked = true; other aggregates' events are returned for publishing; the waiting
# event is not returned. The wake statement wakes only due events and, when none is due, runs no
# UPDATE (a statement-level trigger on the outbox does not fire). The same holds with
# relay.shards = 4, through the shard index and without it, and with many shards owned.
source "$(dirname "$0")/lib.sh"

pb_init
# ids 1..5: a-1 (agg A), b-1 (agg D), a-2, b-2, a-3; A and D are in different shards of 4
for e in A:a-1 D:b-1 A:a-2 D:b-2 A:a-3; do
    psql_q "SELECT postbox.enqueue('order', '${e%%:*}', 'created.v1', '{\"e\": \"${e#*:}\"}')" >/dev/null
done
psql_q "CREATE TABLE public.update_statements (n int); INSERT INTO public.update_statements VALUES (0);
        CREATE FUNCTION public.count_update() RETURNS trigger LANGUAGE plpgsql AS
          \$\$ BEGIN UPDATE public.update_statements SET n = n + 1; RETURN NULL; END \$\$;
        CREATE TRIGGER count_update AFTER UPDATE ON postbox.outbox
          FOR EACH STATEMENT EXECUTE FUNCTION public.count_update()"
updates() { psql_q "SELECT n FROM public.update_statements"; }
# a-1 failed and waits an hour; a-3 has a retry time of its own two hours away
psql_q "UPDATE postbox.outbox SET waiting = true, attempts = 1, next_attempt_at = now() + interval '1 hour' WHERE id = 1;
        UPDATE postbox.outbox SET next_attempt_at = now() + interval '2 hours' WHERE id = 5"
u0=$(updates)

claim() { # LIMIT SHARDS OWNED IN_FLIGHT: "id:payload.e:parked" per row, space-separated
    psql_q "SELECT string_agg(id || ':' || (payload::jsonb->>'e') || ':' || parked, ' ' ORDER BY id)
            FROM postbox.claim($1, $2, '$3', '$4')"
}
expect() { # WHAT GOT WANT
    [[ $2 == "$3" ]] || fail "$1: got '$2', expected '$3'"
    say "$1: $2"
}
state() { # "id:waiting:minutes to next_attempt_at" of ids 2, 3, 5
    psql_q "SELECT string_agg(id || ':' || waiting || ':' ||
                              round(extract(epoch FROM next_attempt_at - now()) / 60), ' ' ORDER BY id)
            FROM postbox.outbox WHERE id IN (2, 3, 5)"
}

got=$(claim 10 1 '{}' '{}')
expect "first claim" "$got" "2:b-1:false 3:a-2:true 4:b-2:false 5:a-3:true"
expect "parked rows" "$(state)" "2:false:0 3:true:60 5:true:120"
got=$(claim 10 1 '{}' '{[2,2],[4,4]}')
expect "claim with b-1, b-2 in flight" "${got:-none}" "none"
[[ $(psql_q "SELECT postbox.wake(10)") == 0 ]] || fail "the wake woke events none of which was due"
(($(updates) == u0 + 1)) || fail "an UPDATE statement ran although nothing was due (statements: $((u0)) -> $(updates))"
psql_q "UPDATE postbox.outbox SET next_attempt_at = now() - interval '1 second' WHERE id = 1"
u1=$(updates)
[[ $(psql_q "SELECT postbox.wake(10)") == 1 ]] || fail "the wake did not wake the one due event"
(($(updates) == u1 + 1)) || fail "the wake ran $(($(updates) - u1)) UPDATE statements, expected 1"
got=$(claim 10 1 '{}' '{[2,2],[4,4]}')
expect "claim after a-1 woke" "$got" "1:a-1:false"

# relay.shards = 4: the same from the owner of A's shard, with and without the shard index
psql_q "UPDATE postbox.outbox SET waiting = (id = 1), next_attempt_at = now() + interval '1 hour'"
sa=$(psql_q "SELECT postbox.shard_of('order', 'A', 4)")
sb=$(psql_q "SELECT postbox.shard_of('order', 'D', 4)")
other=$(((sa + 1) % 4))
((other != sb)) || other=$(((sa + 2) % 4))
((other != sb)) || other=$(((sa + 3) % 4))
((sa != sb)) || fail "A and D share shard $sa of 4; the test needs them apart"
want_a="3:a-2:true 5:a-3:true"
want_ab="2:b-1:false 3:a-2:true 4:b-2:false 5:a-3:true"
reset="UPDATE postbox.outbox SET waiting = (id = 1), next_attempt_at = now() + interval '1 hour'"
for mode in without with; do
    if [[ $mode == with ]]; then
        while read -r ddl; do [[ -z $ddl ]] || psql_q "$ddl"; done <<<"$(psql_q "SELECT postbox.shard_index_ddl(4)")"
    fi
    psql_q "$reset"
    expect "shards 4, owning A's shard $sa, $mode the index" "$(claim 10 4 "{$sa}" '{}')" "$want_a"
    psql_q "$reset"
    got=$(claim 10 4 "{$other}" '{}')
    expect "shards 4, owning shard $other (neither A nor D), $mode the index" "${got:-none}" "none"
    psql_q "$reset"
    expect "shards 4, all owned, $mode the index" "$(claim 10 4 '{0,1,2,3}' '{}')" "$want_ab"
done
# many shards owned (more than the merged walk takes): every shard's rows walked, same result
psql_q "$reset"
sa32=$(psql_q "SELECT postbox.shard_of('order', 'A', 32)")
sb32=$(psql_q "SELECT postbox.shard_of('order', 'D', 32)")
owned=$(psql_q "SELECT array_agg(s)::text FROM generate_series(0, 31) s WHERE s <> $sb32 OR s = $sa32")
((sa32 != sb32)) || fail "A and D share shard $sa32 of 32; the test needs them apart"
expect "shards 32, owning all but D's shard" "$(claim 10 32 "$owned" '{}')" "$want_a"
# the index of another shard count goes when a relay starts with 8
ddl=$(psql_q "SELECT postbox.shard_index_ddl(8)")
[[ $ddl == *"DROP INDEX CONCURRENTLY IF EXISTS postbox.outbox_ready_shards_4"* && $ddl == *"CREATE INDEX CONCURRENTLY outbox_ready_shards_8"* ]] ||
    fail "shard_index_ddl(8) does not replace the index for 4: $ddl"
