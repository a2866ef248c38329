#!/usr/bin/env bash
# The claim skips exactly the ids in flight (postbox.claim's p_in_flight) and returns the first
# ready rows after them in id order, whatever the shape of the ranges: one run, gaps between
# runs, a run that reaches the end, the limit reached inside a gap, more runs than the claim
# walks one by one (it then filters), a run open at the top, none. Each answer is compared with
# the plain query (ready rows not in flight, ORDER BY id LIMIT n). Published rows and rows of
# another run in flight are never returned. (With an event waiting for a retry the claim takes
# its other path, which parks rows: tests/integration/claim_park.sh.) The claim reads the gaps only: with
# 3,000 ids in flight before 1,000 ready rows it reads about the rows it returns.
source "$(dirname "$0")/lib.sh"

pb_init
psql_q "SELECT count(postbox.enqueue('order', 'agg-' || (i % 7), 'created.v1', jsonb_build_object('i', i, 'pad', repeat('x', 480))))
        FROM generate_series(1, 6000) i" >/dev/null
# ids 101..110 published
psql_q "UPDATE postbox.outbox SET published_at = now() WHERE id BETWEEN 101 AND 110;
        ANALYZE postbox.outbox" >/dev/null

claimed() { # LIMIT IN_FLIGHT
    psql_q "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM postbox.claim($1, 1, '{0}', '$2')"
}
expected() { # LIMIT IN_FLIGHT
    psql_q "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM
              (SELECT id FROM postbox.outbox WHERE published_at IS NULL AND NOT waiting
                 AND NOT ('$2'::int8multirange @> id) ORDER BY id LIMIT $1) s"
}
cases=(
    "1000|{}"
    "1000|{[1,3001)}"
    "1000|{[1,1001),[1501,3001)}"
    "300|{[1,1001),[1501,3001)}"
    "50|{[1,90),[95,120),[150,300),[310,311),[400,2000)}"
    "1000|{[2,3),[4,5),[6,7),[8,9),[10,11),[12,13),[14,15),[16,17),[18,19),[20,21)}"
    "1000|{[11,21),[31,)}"
    "1000|{[5500,5990)}"
    "100|{[1,6001)}"
    "7|{[200,210)}"
)
for c in "${cases[@]}"; do
    limit=${c%%|*} in_flight=${c#*|}
    got=$(claimed "$limit" "$in_flight") want=$(expected "$limit" "$in_flight")
    [[ $got == "$want" ]] || fail "claim($limit, in flight $in_flight): got ${got:0:200}..., expected ${want:0:200}..."
    n=0; [[ -n $got ]] && n=$(tr ',' '\n' <<<"$got" | wc -l)
    say "claim($limit, in flight $in_flight): $n rows, as the plain query"
done
# buffers touched by one claim of 1,000 rows
buffers() { # IN_FLIGHT
    psql_q "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) SELECT count(*) FROM postbox.claim(1000, 1, '{0}', '$1')" |
        sed -n 's/.*Buffers: shared hit=\([0-9]*\).*/\1/p' | head -1
}
buffers '{}' >/dev/null # warm
none=$(buffers '{}')
gaps=$(buffers '{[1,3001)}')
walked=$(buffers '{[1,2),[3,4),[5,6),[7,8),[9,10),[11,12),[13,14),[15,16),[17,18),[19,3001)}')
say "buffers touched by a claim of 1,000 rows: $none with nothing in flight, $gaps behind 3,000 ids in flight (one run), $walked walking over them (10 runs)"
[[ -n $none && -n $gaps && -n $walked ]] || fail "no buffer counts from EXPLAIN"
((gaps * 100 <= none * 115)) || fail "the claim behind 3,000 ids in flight touched $gaps buffers, more than 1.15 x $none"
