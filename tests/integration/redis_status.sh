#!/usr/bin/env bash
# `postbox status` and /metrics with Redis Streams:
#   1. the relay publishes 50 events; its /metrics shows the stream's length;
#   2. a consumer "ghost" of the group (redis-cli XREADGROUP) takes 20 entries and dies: status
#      shows length 50, 20 pending, 30 not delivered (lag) and the oldest pending entry's idle
#      time; --json gives the same figures;
#   3. postbox consume claims the ghost's entries after redis.claim_idle and handles the rest:
#      its /metrics shows the group's pending entries and lag at 0, and so does status; the
#      ghost, holding nothing and silent for 10 x claim_idle, is removed from the group;
#   4. an unreachable Redis makes status fail its check.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/redis_lib.sh"
command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"

STREAM=pb:$PB_TEST:order GROUP=postbox_status-test
export POSTBOX_CONSUME_SOURCE=redis POSTBOX_CONSUME_CONSUMER=status-test POSTBOX_REDIS_STREAMS=$STREAM
export POSTBOX_CONSUME_HANDLER='SELECT 1'
metric() { # URL NAME: the value of the first sample of NAME (with its labels) in URL's /metrics
    curl -sf "$1/metrics" | awk -v n="$2" 'index($0, n) == 1 { print $NF; exit }'
}

pb_init
enqueue_seq 5 1 10

# 1. relay
PORT=$(free_port)
start_relay --set metrics.listen=127.0.0.1:$PORT --set metrics.sample_interval=100ms
URL=http://127.0.0.1:$PORT
wait_until '[[ $(pending_count) == 0 ]]' 30 || fail "the relay did not publish"
len_metric="postbox_redis_stream_length{stream=\"$STREAM\"}"
wait_until '[[ $(metric "$URL" "$len_metric") == 50 ]]' 10 ||
    fail "relay /metrics: $len_metric is '$(metric "$URL" "$len_metric")', expected 50"
say "relay /metrics: $len_metric $(metric "$URL" "$len_metric")"
stop_relay

# 2. a consumer that takes 20 entries and never acknowledges them
redis_cli XGROUP CREATE "$STREAM" "$GROUP" 0 >/dev/null || fail "XGROUP CREATE failed"
redis_cli XREADGROUP GROUP "$GROUP" ghost COUNT 20 STREAMS "$STREAM" '>' >/dev/null || fail "XREADGROUP failed"
sleep 1.2
"$POSTBOX_BIN" status >"$PB_TMP/status" || fail "postbox status failed: $(cat "$PB_TMP/status")"
line=$(grep -E "^  $STREAM " "$PB_TMP/status") || { cat "$PB_TMP/status" >&2; fail "status does not list $STREAM"; }
say "status: $line"
read -r _ len grp pend lag idle _ <<<"$line"
[[ $len == 50 && $grp == "$GROUP" && $pend == 20 && $lag == 30 ]] ||
    fail "status shows length $len, group $grp, pending $pend, lag $lag; expected 50, $GROUP, 20, 30"
awk -v i="$idle" 'BEGIN { exit !(i >= 1.0 && i < 60) }' || fail "oldest pending idle $idle s, expected >= 1 s"
"$POSTBOX_BIN" status --json >"$PB_TMP/status.json" || fail "postbox status --json failed"
python3 - "$PB_TMP/status.json" "$STREAM" "$GROUP" <<'EOF' || fail "status --json does not give the stream's figures"
import json, sys
o = json.load(open(sys.argv[1]))
s = [x for x in o["redis"]["streams"] if x["stream"] == sys.argv[2]][0]
g = [x for x in s["groups"] if x["group"] == sys.argv[3]][0]
assert s["length"] == 50 and g["pending"] == 20 and g["lag"] == 30, (s, g)
assert g["oldest_pending_consumer"] == "ghost" and g["oldest_pending_idle_seconds"] >= 1.0, g
EOF

# 3. postbox consume claims the ghost's entries and handles everything
PORT2=$(free_port)
start_consumer --set metrics.listen=127.0.0.1:$PORT2 --set metrics.sample_interval=100ms \
    --set redis.claim_idle=500ms
URL2=http://127.0.0.1:$PORT2
wait_until '[[ $(inbox_count) == 50 ]]' 30 || { tail -n 20 "$CONSUMER_LOG" >&2; fail "the consumer handled $(inbox_count) of 50"; }
pend_metric="postbox_redis_group_pending{stream=\"$STREAM\",group=\"$GROUP\"}"
lag_metric="postbox_redis_group_lag{stream=\"$STREAM\",group=\"$GROUP\"}"
wait_until '[[ $(metric "$URL2" "$pend_metric") == 0 && $(metric "$URL2" "$lag_metric") == 0 ]]' 10 ||
    fail "consume /metrics: pending $(metric "$URL2" "$pend_metric"), lag $(metric "$URL2" "$lag_metric"); expected 0 and 0"
claimed=$(grep -c "claimed entry .* of stream \"$STREAM\"" "$CONSUMER_LOG" || true)
((claimed == 20)) || fail "$claimed of the ghost's 20 entries were claimed"
# the ghost, silent and holding nothing now, leaves the group after 10 x claim_idle
wait_until '! redis_cli --raw XINFO CONSUMERS "$STREAM" "$GROUP" | grep -qx ghost' 20 ||
    fail "the dead consumer ghost is still in the group: $(redis_cli --raw XINFO CONSUMERS "$STREAM" "$GROUP" | tr '\n' ' ')"
grep -q 'removed consumer "ghost"' "$CONSUMER_LOG" || fail "the removal of ghost is not logged"
say "consume /metrics: $pend_metric $(metric "$URL2" "$pend_metric"), lag $(metric "$URL2" "$lag_metric"), length $(metric "$URL2" "$len_metric")"
stop_consumer
line=$("$POSTBOX_BIN" status | grep -E "^  $STREAM ")
read -r _ len grp pend lag _ <<<"$line"
[[ $pend == 0 && $lag == 0 ]] || fail "status after the consumer: $line"

# 4. unreachable
rc=0
dead_port=$(free_port)
out=$("$POSTBOX_BIN" --set "redis.url=redis://127.0.0.1:$dead_port/0" status 2>&1) || rc=$?
((rc == 1)) && grep -q 'redis cannot be asked' <<<"$out" || { echo "$out" >&2; fail "status with an unreachable redis: exit $rc"; }
say "unreachable redis: status exits 1 ($(grep 'cannot ask redis' <<<"$out" | sed 's/^ *//'))"
