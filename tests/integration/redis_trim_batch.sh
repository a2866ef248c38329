#!/usr/bin/env bash
# The Redis sink's stream bound comes from one XTRIM per stream and batch, after the batch's
# XADDs (src/sink/redis.c): with batches that write to 20 streams, the first 16 streams of a
# batch are trimmed by XTRIMs and the other 4 by the bound on their XADDs, and every stream ends
# bounded either way:
#   1. the relay says how it bounds the streams (XTRIM MAXLEN ~ per stream and batch);
#   2. XTRIMs reached the server (its command statistics count them);
#   3. each of the 20 streams holds 100-249 of its 250 entries (MAXLEN ~ 100 trims whole nodes
#      of 100 entries: 150 are left), and every event was published.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"

pb_init
# 20 aggregates interleaved: every batch of 1000 writes to all 20 streams (one per aggregate)
psql_q "SELECT count(postbox.enqueue('order', 's-' || (i % 20), 'created.v1',
                                     jsonb_build_object('n', i)))
        FROM generate_series(1, 5000) i" >/dev/null

xtrims() { redis_cli INFO commandstats | sed -n 's/^cmdstat_xtrim:calls=\([0-9]*\),.*$/\1/p'; }
before=$(xtrims)
before=${before:-0}
relay_drain 120 --set redis.max_age=0 --set redis.max_len=100 --set relay.batch_size=1000 \
    --set 'redis.stream={aggregate_id}'

# 1.
grep -q 'XADD then XTRIM MAXLEN ~ 100 per stream and batch' "$PB_RELAY_LOG" ||
    fail "the relay did not say that it trims by XTRIM: $(grep 'sink.redis: connected' "$PB_RELAY_LOG" | head -1)"
# 2.
after=$(xtrims)
((${after:-0} - before >= 16)) || fail "expected at least 16 XTRIMs (one batch of 16 streams), the server counted $((${after:-0} - before))"
say "XTRIM calls counted by redis-server: $((after - before))"
# 3.
[[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]] || fail "events left in the outbox"
total=0
for k in $(seq 0 19); do
    len=$(stream_len "pb:$PB_TEST:s-$k")
    ((len >= 100 && len < 250)) || fail "stream s-$k holds $len entries: MAXLEN ~ 100 did not trim it (of 250 added)"
    total=$((total + len))
done
say "20 streams, 250 entries added to each, MAXLEN ~ 100: $total entries left in all"
