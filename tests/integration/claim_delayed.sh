#!/usr/bin/env bash
# The claim (postbox.claim) with delayed events (sql/016_expiry_delay.sql): an event written
# with an available_at to come waits from its insert on (waiting, next_attempt_at = available_at),
# through postbox.enqueue, a plain INSERT and libpq's parameters alike; one whose available_at
# passed does not. With W delayed events among 3,000 pending ones of 40 aggregates, each claim
# returns exactly what the plain query says (the first ready rows not in flight, in id order,
# parked when an earlier event of their aggregate waits) for W = 5 (the claim asks the few
# waiting rows' aggregates first) and W = 200 (it asks the waiting rows for every candidate),
# with none, one and several ranges of ids in flight; a parked row waits until the later of its
# own time and its blocker's. The wake lets a delayed event go once due.
source "$(dirname "$0")/lib.sh"

pb_init
psql_q "SELECT postbox.enqueue('order', 'x', 'created.v1', '{}', p_available_at => now() + interval '1 hour');
        SELECT postbox.enqueue('order', 'x', 'created.v1', '{}', p_available_at => now() - interval '1 hour');
        INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, available_at)
        VALUES ('order', 'y', 'created.v1', '{}', now() + interval '1 hour')" >/dev/null
got=$(psql_q "SELECT string_agg(id || ':' || waiting || ':' || (NOT waiting OR next_attempt_at = available_at), ' ' ORDER BY id) FROM postbox.outbox")
[[ $got == "1:true:true 2:false:true 3:true:true" ]] || fail "waiting from the insert on: got $got"
say "delayed on insert: $got (enqueue future, enqueue past, INSERT future)"
rc=0
out=$(psql_q "SELECT postbox.enqueue('order', 'z', 'created.v1', '{}', p_available_at => now(), p_expires_at => now())" 2>&1) || rc=$?
((rc != 0)) && [[ $out == *outbox_expires_after_available* ]] || fail "an event expiring when it becomes available was accepted: $out"
out=$(psql_q "SELECT postbox.enqueue('order', 'z', 'created.v1', '{}', p_expires_at => 'infinity')" 2>&1) && fail "an infinite expiry was accepted"
[[ $out == *outbox_times_finite* ]] || fail "an infinite expiry: $out"
psql_q "TRUNCATE postbox.outbox"

run() { # W: delayed events among the backlog, then each claim case against the plain query
    local w=$1 c got want flight limit
    psql_q "TRUNCATE postbox.outbox;
            INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, available_at)
            SELECT 'order', 'agg-' || (g % 40), 'created.v1', jsonb_build_object('g', g),
                   CASE WHEN g % (3000 / $w) = 7 THEN now() + (g || ' s')::interval END
            FROM generate_series(1, 3000) g ORDER BY g" >/dev/null
    [[ $(psql_q "SELECT count(*) FROM postbox.outbox WHERE waiting") == "$w" ]] || fail "expected $w delayed rows"
    for c in "1000|{}" "1000|{[1,1500]}" "300|{[1,100],[200,900],[1200,1201]}" "50|{[2,3],[5,6],[8,9],[11,12],[14,15],[17,18],[20,21],[23,24],[26,27],[29,2000]}" "3000|{}"; do
        limit=${c%%|*} flight=${c#*|}
        read -r want got < <(psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -F ' ' -f - <<EOF
BEGIN;
SELECT md5(coalesce(string_agg(o.id || ':' || EXISTS (SELECT FROM postbox.outbox b WHERE b.waiting
                        AND b.aggregate_type = o.aggregate_type AND b.aggregate_id = o.aggregate_id
                        AND b.id < o.id), ' ' ORDER BY o.id), '')),
       (SELECT md5(coalesce(string_agg(id || ':' || parked, ' ' ORDER BY id), ''))
        FROM postbox.claim($limit, 1, '{0}', '$flight'))
FROM (SELECT * FROM postbox.outbox WHERE published_at IS NULL AND NOT waiting
        AND NOT ('$flight'::int8multirange @> id) ORDER BY id LIMIT $limit) o;
ROLLBACK;
EOF
        )
        [[ -n $want && $want == "$got" ]] || fail "W=$w: claim($limit, in flight $flight) differs from the plain query"
        say "W=$w: claim($limit, in flight $flight) as the plain query"
    done
    # parked rows wait until the later of their own time and their blocker's
    psql_q "SELECT count(*) FROM postbox.claim(3000, 1, '{0}', '{}')" >/dev/null
    bad=$(psql_q "SELECT count(*) FROM postbox.outbox o WHERE o.waiting AND o.available_at IS NULL
                    AND o.next_attempt_at <> (SELECT max(b.available_at) FROM postbox.outbox b
                                              WHERE b.available_at IS NOT NULL AND b.aggregate_id = o.aggregate_id
                                                AND b.id < o.id)")
    ((bad == 0)) || fail "W=$w: $bad parked row(s) wait until another time than their blocker's"
}
run 5
run 200

# the wake lets a delayed event go when its time comes (here: made due)
psql_q "UPDATE postbox.outbox SET next_attempt_at = now() - interval '1 s', available_at = now() - interval '1 s'
        WHERE id = (SELECT min(id) FROM postbox.outbox WHERE available_at IS NOT NULL)"
[[ $(psql_q "SELECT postbox.wake(10)") == 1 ]] || fail "the wake did not let the due delayed event go"
say "the wake let the due delayed event go"
