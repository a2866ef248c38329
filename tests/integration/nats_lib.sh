# NATS JetStream helpers for tests/integration/nats_*.sh; sourced after lib.sh:
#   source "$(dirname "$0")/lib.sh"; source "$(dirname "$0")/nats_lib.sh"
#
# Environment: POSTBOX_NATS_TOOL (tests/tools/nats_tool.c, built as nats-tool); POSTBOX_NATS_URL
# comes from `scripts/services env` (lib.sh). Each test gets its own stream PB_<TEST> storing
# the subjects pb.<test>.> (deleted first), and relay.sink = consume.source = nats.
: "${POSTBOX_NATS_TOOL:?POSTBOX_NATS_TOOL must name the nats-tool binary}"
for _v in $(compgen -v POSTBOX_NATS_ || true) $(compgen -v POSTBOX_CONSUME_ || true); do
    case $_v in POSTBOX_NATS_TOOL | POSTBOX_NATS_URL | POSTBOX_NATS_PORT) ;; *) unset "$_v" ;; esac
done
unset _v
export POSTBOX_RELAY_SINK=nats POSTBOX_CONSUME_SOURCE=nats
export POSTBOX_NATS_STREAM=PB_${PB_TEST^^}
export POSTBOX_NATS_SUBJECT_PREFIX=pb.$PB_TEST.

nats_tool() { "$POSTBOX_NATS_TOOL" "$@"; }

[[ $(services status 2>&1) =~ (^|$'\n')nats\ +running ]] ||
    fail "nats-server is not running (scripts/services start nats)"
nats_tool delete-stream "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" ||
    fail "nats-tool delete-stream $POSTBOX_NATS_STREAM failed"

stream_count() { nats_tool count "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM"; }
stream_info() { nats_tool stream-info "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM"; }

# drain_stream FILE EXPECT [IDLE_MS] [TIMEOUT_S]: every message of the test's stream into FILE
# (lines as amqp-tool drain prints them, so check_order and check_all_arrived apply).
drain_stream() {
    local file=$1 expect=$2 idle=${3:-1500} timeout=${4:-300}
    nats_tool drain "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" ">" --expect "$expect" \
        --idle-ms "$idle" --timeout-s "$timeout" >"$file" ||
        fail "draining stream $POSTBOX_NATS_STREAM: only $(wc -l <"$file") of $expect message(s)"
}

# Sum of "N of M events were already in stream" over the relay log: publishes the stream
# acknowledged as duplicates (dropped by Nats-Msg-Id).
relay_duplicate_acks() {
    awk '/sink.nats: .* events were already in stream/ { for (i = 1; i <= NF; i++) if ($i == "of") { s += $(i - 1); break } }
         END { print s + 0 }' "$PB_RELAY_LOG"
}
