#!/usr/bin/env bash
# The event's created_at reaches NATS JetStream as header created_at (ISO 8601 UTC, microseconds,
# as the Redis sink's field), in poll and in cdc, read back by nats-tool (a plain nats.c client,
# no postbox code). Events are backdated, so a publish-time stamp would not pass.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/nats_lib.sh"
pb_init
cdc_use_slot

insert() { # AGGREGATE_ID CREATED_AT: one event of aggregate type order, backdated
    psql_q "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
            VALUES ('order', '$1', 'stamped.v1', '{}', '$2')" >/dev/null
}
stamps() { # aggregate_id and header created_at of every message of the stream
    nats_tool drain "$POSTBOX_NATS_URL" "$POSTBOX_NATS_STREAM" ">" --expect "$1" --idle-ms 500 \
        --timeout-s 30 --header created_at | awk -F'\t' '{ print $5, $7 }' | sort
}

say "poll: an event created at 2026-01-02 03:04:05.678901 UTC"
insert p-1 '2026-01-02 03:04:05.678901 UTC'
relay_drain 60
got=$(stamps 1)
[[ $got == 'p-1 2026-01-02T03:04:05.678901Z' ]] || fail "poll: read '$got'"

say "cdc: an event created at 2025-06-07 08:09:10.111 UTC"
cdc_create_slot
insert c-1 '2025-06-07 08:09:10.111 UTC'
relay_drain 60 --capture cdc
got=$(stamps 2)
want=$'c-1 2025-06-07T08:09:10.111000Z\np-1 2026-01-02T03:04:05.678901Z'
[[ $got == "$want" ]] || fail "cdc: read '$got', expected '$want'"
say "PASS"
