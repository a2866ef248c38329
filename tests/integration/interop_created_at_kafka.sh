#!/usr/bin/env bash
# The event's created_at reaches Kafka as the record's timestamp (CreateTime), in poll and in
# cdc, as a client that is not postbox's (Debian's kcat) reads it. Events are backdated, so a
# publish-time stamp would not pass.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/kafka_lib.sh"
command -v kcat >/dev/null || fail "kcat is not installed (scripts/install-deps)"
pb_init
cdc_use_slot

insert() { # AGGREGATE_ID CREATED_AT: one event of aggregate type order, backdated
    psql_q "INSERT INTO postbox.outbox (aggregate_type, aggregate_id, event_type, payload, created_at)
            VALUES ('order', '$1', 'stamped.v1', '{}', '$2')" >/dev/null
}
epoch_ms() { date -u -d "$1" +%s%3N; }
records() { # key and timestamp (ms) of every record of the order topic, as kcat prints them
    kcat -C -b "$POSTBOX_KAFKA_BROKERS" -t "$(kafka_topic order)" -o beginning -e -q -f '%k %T\n'
}

P_AT='2026-01-02 03:04:05.678 UTC' C_AT='2025-06-07 08:09:10.111 UTC'
say "poll: an event created at $P_AT"
insert p-1 "$P_AT"
relay_drain 60
got=$(records)
[[ $got == "p-1 $(epoch_ms "$P_AT")" ]] || fail "poll: kcat read '$got', expected 'p-1 $(epoch_ms "$P_AT")'"

say "cdc: an event created at $C_AT"
cdc_create_slot
insert c-1 "$C_AT"
relay_drain 60 --capture cdc
got=$(records | sort)
want=$(printf 'c-1 %s\np-1 %s' "$(epoch_ms "$C_AT")" "$(epoch_ms "$P_AT")")
[[ $got == "$want" ]] || fail "cdc: kcat read '$got', expected '$want'"
say "PASS"
