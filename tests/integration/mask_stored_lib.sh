# Helpers of mask_stored_cdc and mask_stored_fallback (relay.mask_stored with the cdc capture),
# sourced after lib.sh: an event with personal data (SECRETS), what the [mask] rules of the tests
# make of it, and the check that no table of schema postbox holds a text the producer wrote.
# the key of the hmac rules
KEY=$PB_TMP/mask.key
printf 'k3y-for-the-mask-stored-cdc-test-0123456789\n' >"$KEY"
chmod 600 "$KEY"
# the rules of an order.created.v1 (and order.lost.v1), as the tests' [mask] sections give them
CREATED_RULES='drop customer.ssn, last4 card.number, hmac customer.email, hmac headers:x-user'
hmac() { printf '%s' "$1" | openssl dgst -sha256 -mac HMAC -macopt "key:$(head -c -1 "$KEY")" | awk '{print $NF}'; }

EMAIL=ann@example.com USER_ID=user-42 SSN=078-05-1120 CARD=4111111111111111
SECRETS=("$SSN" "$CARD" "$USER_ID" "$EMAIL")
PAYLOAD="{\"customer\": {\"name\": \"Ann\", \"ssn\": \"$SSN\", \"email\": \"$EMAIL\"}, \"card\": {\"number\": \"$CARD\"}}"
HEADERS="{\"x-user\": \"$USER_ID\", \"trace\": \"t-1\"}"
ev() { # HOW ID TYPE [NAMED ARGUMENTS]: an event with personal data (HOW: enqueue or emit)
    psql_q "SELECT postbox.$1('order', '$2', '$3', '$PAYLOAD', '$HEADERS'${4:+, $4})" >/dev/null
}
MASKED_CUSTOMER="{\"email\":\"$(hmac "$EMAIL")\",\"name\":\"Ann\"}"
MASKED_CREATED="{\"card\":{\"number\":\"************1111\"},\"customer\":$MASKED_CUSTOMER}"
MASKED_HEADERS="{\"trace\":\"t-1\",\"x-user\":\"$(hmac "$USER_ID")\"}"
stored() { # TABLE ID [ORDER]: payload and headers of the aggregate's row, as jq-sorted JSON
    psql_q "SELECT jsonb_build_object('payload', payload::jsonb, 'headers', coalesce(headers::jsonb, '{}'))
            FROM postbox.$1 WHERE aggregate_id = '$2' ORDER BY id ${3:-DESC} LIMIT 1" | jq -cS .
}
expect_stored() { # TABLE ID JQ EXPECTED [ORDER]
    local got
    got=$(stored "$1" "$2" "${5:-}" | jq -cS "$3")
    [[ $got == "$4" ]] || fail "postbox.$1 of $2: $3 is $got, expected $4"
}
published() { # ID: the payload and headers the stdout sink wrote for the aggregate (one line each)
    jq -cS --arg id "$1" 'select(.aggregate_id == $id) | {payload, headers: (.headers // {} | del(.aggregate_sequence))}' "$PB_RELAY_OUT"
}
no_secrets() { # WHEN: no producer text in any row of any table of schema postbox
    local t n s
    for t in $(psql_q "SELECT tablename FROM pg_tables WHERE schemaname = 'postbox' ORDER BY 1"); do
        for s in "${SECRETS[@]}"; do
            n=$(psql_q "SELECT count(*) FROM postbox.$t x WHERE x::text LIKE '%$s%'")
            ((n == 0)) || fail "$1: \"$s\" is stored in $n row(s) of postbox.$t: $(psql_q "SELECT x::text FROM postbox.$t x WHERE x::text LIKE '%$s%' LIMIT 1")"
        done
    done
    say "$1: no producer text in the $(psql_q "SELECT count(*) FROM pg_tables WHERE schemaname = 'postbox'") tables of schema postbox"
}

