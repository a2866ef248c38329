# shellcheck shell=bash
# Redis Streams helpers for tests/integration/redis_*.sh; sourced after lib.sh:
#   source "$(dirname "$0")/lib.sh"; source "$(dirname "$0")/redis_lib.sh"
#
# POSTBOX_REDIS_URL and POSTBOX_REDIS_PORT come from `scripts/services env` (lib.sh). Each test
# gets its own streams pb:<test>:<aggregate_type> (redis.stream_prefix pb:<test>:, deleted
# first), and relay.sink = redis. Streams are read back with redis-cli, not with postbox.
for _v in $(compgen -v POSTBOX_REDIS_ || true); do
    case $_v in POSTBOX_REDIS_URL | POSTBOX_REDIS_PORT) ;; *) unset "$_v" ;; esac
done
unset _v
export POSTBOX_RELAY_SINK=redis
export POSTBOX_REDIS_STREAM_PREFIX=pb:$PB_TEST:
PB_REDIS_PORT=$POSTBOX_REDIS_PORT

redis_cli() { redis-cli -h 127.0.0.1 -p "$PB_REDIS_PORT" "$@"; }

# redis_clear: deletes every key of this test (pb:<test>:*).
redis_clear() {
    local k
    redis_cli --scan --pattern "pb:$PB_TEST:*" | while read -r k; do
        redis_cli DEL "$k" >/dev/null
    done
}

redis_cli PING >/dev/null 2>&1 || fail "redis-server is not answering on port $PB_REDIS_PORT (scripts/services start redis)"
redis_clear

redis_streams() { redis_cli --scan --pattern "pb:$PB_TEST:*" | LC_ALL=C sort; }

# drain_redis FILE [EXPECT]: every entry of the test's streams into FILE, one line per entry as
# amqp-tool drain prints them (event_id TAB event_type TAB stream TAB aggregate_type TAB
# aggregate_id TAB payload TAB aggregate_sequence), so check_order and check_all_arrived apply.
# Fails when fewer than EXPECT entries are there.
drain_redis() {
    local file=$1 expect=${2:-0} s
    : >"$file"
    for s in $(redis_streams); do
        redis_cli --raw XRANGE "$s" - + | awk -v stream="$s" '
            function flush() {
                if (id != "") printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", f["event_id"], f["event_type"], stream, f["aggregate_type"], f["aggregate_id"], f["payload"], f["aggregate_sequence"]
                delete f
            }
            # an entry id stands where a field name would: a new entry starts
            key == "" && /^[0-9]+-[0-9]+$/ { flush(); id = $0; next }
            key == "" { key = $0; next }
            { gsub(/\t/, " "); f[key] = $0; key = "" }
            END { flush() }' >>"$file"
    done
    (($(wc -l <"$file") >= expect)) || fail "the streams hold $(wc -l <"$file") entries, expected at least $expect"
}

stream_len() { redis_cli XLEN "$1"; }
