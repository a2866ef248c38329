#!/usr/bin/env bash
# /metrics during a relay run: the figures match the database (backlog, published count), the
# exposition parses (promtool check metrics), /healthz and /readyz answer, and a standby relay
# is alive but not ready.
source "$(dirname "$0")/lib.sh"

command -v promtool >/dev/null || fail "promtool is missing (scripts/install-deps installs Debian's prometheus package)"
command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"
PORT=$(free_port)
PORT2=$((PORT + 1))
URL=http://127.0.0.1:$PORT

pb_init
setup_queue '#'
N_AGG=100 PER_AGG=300
total=$((N_AGG * PER_AGG))
for ((k = 1; k <= PER_AGG; k += 100)); do enqueue_seq $N_AGG $k $((k + 99)); done

metric() { # NAME [FILE]: sum of the samples of a metric family (0 when absent)
    awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%d\n", s }' "${2:-$PB_TMP/scrape}"
}
scrape() { curl -sf "$URL/metrics" >"$PB_TMP/scrape"; }

start_relay --set metrics.listen=127.0.0.1:$PORT --set metrics.sample_interval=200ms \
    --set relay.batch_size=50
wait_until "curl -sf $URL/healthz >/dev/null" 30 || fail "/healthz never answered on port $PORT"
wait_until '(( $(published_count) > 0 ))' 60 || fail "the relay published nothing within 60 s"

# during the run: the sampled backlog and the confirm counter against the database. The sample
# is at most 200 ms old and confirmed batches are committed one step later, so allow what the
# relay publishes in a second.
checked=0
for _ in 1 2 3 4 5; do
    t0=$(date +%s%N)
    scrape || fail "scraping /metrics failed"
    db_pending=$(pending_count)
    db_published=$(published_count)
    t1=$(date +%s%N)
    m_backlog=$(metric postbox_outbox_backlog)
    m_published=$(metric postbox_published_total)
    ((db_pending > 0)) || break
    slack=$((2000 + total / 10))
    say "mid-run: metric backlog $m_backlog vs db pending $db_pending; metric published $m_published vs db published $db_published (slack $slack)"
    (( m_backlog - db_pending <= slack && db_pending - m_backlog <= slack )) || fail "backlog metric $m_backlog far from the database's $db_pending"
    (( m_published - db_published <= slack && db_published - m_published <= slack )) || fail "published metric $m_published far from the database's $db_published"
    checked=$((checked + 1))
    sleep 0.3
done
((checked > 0)) || say "the relay finished before a mid-run scrape (nothing to compare mid-run)"

promtool check metrics <"$PB_TMP/scrape" >"$PB_TMP/promtool.out" 2>&1 || {
    cat "$PB_TMP/promtool.out" >&2
    fail "promtool check metrics rejected the exposition"
}
curl -sf "$URL/readyz" >/dev/null || fail "/readyz is not 200 for the active relay"

# a standby relay: alive, not ready
start_relay --set metrics.listen=127.0.0.1:$PORT2
STANDBY_PID=$RELAY_PID
wait_until "curl -sf http://127.0.0.1:$PORT2/healthz >/dev/null" 30 || fail "the standby's /healthz never answered"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT2/readyz")
[[ $code == 503 ]] || fail "the standby's /readyz answered $code, expected 503"
kill -TERM "$STANDBY_PID"
RELAY_PID=$STANDBY_PID wait_relay 30
RELAY_PID=${PB_PIDS[0]}

wait_until '(( $(pending_count) == 0 ))' 300 || fail "still $(pending_count) pending after 300 s"
sleep 1 # one more sample
scrape
db_published=$(published_count)
m_backlog=$(metric postbox_outbox_backlog)
m_published=$(metric postbox_published_total)
m_latency=$(metric postbox_publish_latency_seconds_count)
say "idle: metric backlog $m_backlog, db pending $(pending_count); metric published $m_published, db published $db_published, latency observations $m_latency"
((m_backlog == 0)) || fail "backlog metric $m_backlog after the drain"
((m_published == db_published && db_published == total)) || fail "published metric $m_published, database $db_published, enqueued $total"
((m_latency == total)) || fail "latency histogram count $m_latency, expected $total"
grep -q '^postbox_outbox_backlog_exact 1$' "$PB_TMP/scrape" || fail "backlog not exact"
grep -q '^postbox_broker_up 1$' "$PB_TMP/scrape" || fail "broker_up is not 1"
grep -Eq '^postbox_last_publish_timestamp_seconds [1-9]' "$PB_TMP/scrape" || fail "no last publish timestamp"
promtool check metrics <"$PB_TMP/scrape" || fail "promtool check metrics rejected the exposition"
code=$(curl -s -o /dev/null -w '%{http_code}' "$URL/nope")
[[ $code == 404 ]] || fail "/nope answered $code"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC on SIGTERM"
drain_queue "$PB_TMP/got" $total 2000 120
