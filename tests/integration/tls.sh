#!/usr/bin/env bash
# TLS, proven: a CA and a server certificate (for the name localhost only) made with openssl,
# and PostgreSQL, RabbitMQ and NATS of this test's own (scripts/services in a state directory
# and on ports of its own; the shared servers are not touched) serving TLS with it. postbox
# connects with verification on: PostgreSQL sslmode=verify-full, AMQP amqps:// with
# amqp.tls_ca_cert, NATS tls:// with nats.tls_ca_cert, and relays events through each. Trusting
# another CA, or connecting by a name the certificate does not hold (127.0.0.1), is refused by
# each with an error that says so.
source "$(dirname "$0")/lib.sh"

# ---- certificates -------------------------------------------------------------------------------
CERTS=$(mktemp -d /tmp/pb-tls-certs.XXXXXX)
chmod 755 "$CERTS" # the servers' users read it
on_exit "rm -rf '$CERTS'"
ossl() { openssl "$@" >>"$CERTS/openssl.log" 2>&1 || fail "openssl $1 failed: $(tail -3 "$CERTS/openssl.log")"; }
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
ossl req -x509 "${ec[@]}" -keyout "$CERTS/ca.key" -out "$CERTS/ca.crt" -days 2 -subj "/CN=postbox test CA"
ossl req -x509 "${ec[@]}" -keyout "$CERTS/other-ca.key" -out "$CERTS/other-ca.crt" -days 2 -subj "/CN=another CA"
ossl req "${ec[@]}" -keyout "$CERTS/server.key" -out "$CERTS/server.csr" -subj "/CN=localhost"
printf 'subjectAltName = DNS:localhost\nbasicConstraints = CA:FALSE\nextendedKeyUsage = serverAuth\n' >"$CERTS/ext"
ossl x509 -req -in "$CERTS/server.csr" -CA "$CERTS/ca.crt" -CAkey "$CERTS/ca.key" -CAcreateserial \
    -out "$CERTS/server.crt" -days 2 -extfile "$CERTS/ext"
# PostgreSQL wants its key owned by its user and closed to others
cp "$CERTS/server.key" "$CERTS/pg-server.key"
chown postgres "$CERTS/pg-server.key"
chmod 600 "$CERTS/pg-server.key"
chmod 644 "$CERTS/server.key" "$CERTS"/*.crt
say "certificates: CA, another CA, server certificate for DNS:localhost signed by the CA"

# ---- servers of our own -------------------------------------------------------------------------
export POSTBOX_SERVICES_DIR=/tmp/pb-tls-svc.$$ POSTBOX_RABBIT_NODENAME=pb-tls-$$@localhost
export POSTBOX_PG_EXTRA_OPTS="-c ssl=on -c ssl_cert_file=$CERTS/server.crt -c ssl_key_file=$CERTS/pg-server.key"
export POSTBOX_NATS_EXTRA_ARGS="--tls --tlscert $CERTS/server.crt --tlskey $CERTS/server.key"
stop_ours() { # the servers of the last attempt, and their state
    env POSTBOX_SERVICES_DIR="$POSTBOX_SERVICES_DIR" POSTBOX_EPMD_PORT="$POSTBOX_EPMD_PORT" \
        POSTBOX_RABBIT_NODENAME="$POSTBOX_RABBIT_NODENAME" \
        bash "$POSTBOX_SOURCE_DIR/scripts/services" stop pg amqp nats >/dev/null 2>&1
    rm -rf "$POSTBOX_SERVICES_DIR"
}
on_exit stop_ours
# Ports below the ephemeral range (32768-60999, where an outgoing connection may hold one) at a
# random base; another process may listen on one of them, so a failed start is tried again
# elsewhere.
t0=$SECONDS
for attempt in 1 2 3; do
    base=$((27000 + (RANDOM % 150) * 30))
    export POSTBOX_PG_PORT=$base POSTBOX_AMQP_PORT=$((base + 1)) POSTBOX_NATS_PORT=$((base + 3))
    export POSTBOX_EPMD_PORT=$((base + 4)) POSTBOX_REDIS_PORT=$((base + 5)) POSTBOX_RABBIT_DIST_PORT=$((base + 10))
    AMQPS_PORT=$((base + 2))
    export POSTBOX_RABBIT_EXTRA_CONF="listeners.ssl.default = 127.0.0.1:$AMQPS_PORT
ssl_options.cacertfile = $CERTS/ca.crt
ssl_options.certfile = $CERTS/server.crt
ssl_options.keyfile = $CERTS/server.key
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false"
    services start pg amqp nats >"$PB_TMP/services.log" 2>&1 && break
    say "attempt $attempt: our servers did not start on ports $base+: $(tail -3 "$PB_TMP/services.log" | tr '\n' ' ')"
    tail -n 5 "$POSTBOX_SERVICES_DIR"/*/log/*.log "$POSTBOX_SERVICES_DIR"/*/*.log >&2 2>/dev/null || true
    stop_ours
    ((attempt < 3)) || fail "our servers did not start in 3 attempts"
done
say "own PostgreSQL :$POSTBOX_PG_PORT, RabbitMQ :$AMQPS_PORT (amqps), NATS :$POSTBOX_NATS_PORT (tls) started in $((SECONDS - t0)) s"
unset POSTBOX_PG_EXTRA_OPTS POSTBOX_RABBIT_EXTRA_CONF POSTBOX_NATS_EXTRA_ARGS
eval "$(services env)"
PLAIN_DSN="host=127.0.0.1 port=$POSTBOX_PG_PORT user=postgres dbname=postbox sslmode=disable"
tls_dsn() { # HOST CA
    echo "host=$1 port=$POSTBOX_PG_PORT user=postgres dbname=postbox sslmode=verify-full sslrootcert=$2"
}
GOOD_DSN=$(tls_dsn localhost "$CERTS/ca.crt")
export POSTBOX_PG_DSN=$GOOD_DSN
psql_q() { psql -XAtq -v ON_ERROR_STOP=1 -d "$PLAIN_DSN" -f - <<<"$1"; }

# expect_refused WHAT TEXT CMD...: CMD must fail (exit non-zero, or still retrying after 10 s: then
# killed) and its output must contain TEXT.
expect_refused() {
    local what=$1 text=$2 pid rc=0
    shift 2
    : >"$PB_TMP/refused.log"
    "$@" >"$PB_TMP/refused.log" 2>&1 &
    pid=$!
    PB_PIDS+=("$pid")
    wait_until "grep -qF -- \"$text\" '$PB_TMP/refused.log' || ! pid_alive $pid" 15 || true
    if pid_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null
        wait_until "! pid_alive $pid" 30 || kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null || true
    else
        wait "$pid" || rc=$?
        ((rc != 0)) || fail "$what: accepted (exit 0): $(tail -3 "$PB_TMP/refused.log")"
    fi
    grep -qF -- "$text" "$PB_TMP/refused.log" ||
        fail "$what: no clear error (expected \"$text\"): $(tail -5 "$PB_TMP/refused.log")"
    say "$what: refused: $(grep -F -- "$text" "$PB_TMP/refused.log" | head -1 | sed 's/^[^ ]* //')"
}

# ---- PostgreSQL: sslmode=verify-full ------------------------------------------------------------
out=$("$POSTBOX_BIN" --dsn "$GOOD_DSN" init 2>&1) || fail "postbox init over verified TLS failed: $out"
[[ $(psql -XAtq -d "$GOOD_DSN" -c "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()") == t ]] ||
    fail "the verify-full connection is not encrypted"
say "postgresql: postbox init over sslmode=verify-full ok"
expect_refused "postgresql, certificate of another CA" "certificate verify failed" \
    "$POSTBOX_BIN" --dsn "$(tls_dsn localhost "$CERTS/other-ca.crt")" init
expect_refused "postgresql, wrong host name" 'does not match host name "127.0.0.1"' \
    "$POSTBOX_BIN" --dsn "$(tls_dsn 127.0.0.1 "$CERTS/ca.crt")" init

# ---- RabbitMQ: amqps:// with amqp.tls_ca_cert ---------------------------------------------------
setup_queue '#' # over the plain listener, which the test's tools use
psql_q "SELECT count(postbox.enqueue('order', 'o-' || i, 'tls.v1', jsonb_build_object('i', i))) FROM generate_series(1, 5) i" >/dev/null
# the URLs (with the password) go through the environment, not the logged command lines
PLAIN_AMQP_URL=$POSTBOX_AMQP_URL
queue_count() { amqp_tool count "$PLAIN_AMQP_URL" "$PB_QUEUE"; }
amqps() { echo "amqps://guest:guest@$1:$AMQPS_PORT/"; }
export POSTBOX_AMQP_URL
POSTBOX_AMQP_URL=$(amqps localhost)
relay_drain 60 --set amqp.tls_ca_cert="$CERTS/ca.crt"
[[ $(queue_count) == 5 ]] || fail "5 events relayed over amqps, $(queue_count) in the queue"
say "rabbitmq: 5 events relayed over amqps:// with the certificate verified"
psql_q "SELECT count(postbox.enqueue('order', 'o-' || i, 'tls.v1', '{}')) FROM generate_series(6, 7) i" >/dev/null
expect_refused "rabbitmq, certificate of another CA" "does not verify against the CA" \
    "$POSTBOX_BIN" --set amqp.tls_ca_cert="$CERTS/other-ca.crt" relay --drain
POSTBOX_AMQP_URL=$(amqps 127.0.0.1)
expect_refused "rabbitmq, wrong host name" 'is not valid for host "127.0.0.1"' \
    "$POSTBOX_BIN" --set amqp.tls_ca_cert="$CERTS/ca.crt" relay --drain
POSTBOX_AMQP_URL=$PLAIN_AMQP_URL
[[ $(queue_count) == 5 ]] || fail "a refused connection published: $(queue_count) messages in the queue"

# ---- NATS: tls:// with nats.tls_ca_cert ---------------------------------------------------------
nats=(--set relay.sink=nats --set nats.max_age=1h --set nats.stream=PB_TLS)
relay_drain 60 "${nats[@]}" --set nats.url="tls://localhost:$POSTBOX_NATS_PORT" --set nats.tls_ca_cert="$CERTS/ca.crt"
[[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 0 ]] || fail "events left pending after the nats relay"
say "nats: 2 events relayed over tls:// with the certificate verified"
psql_q "SELECT postbox.enqueue('order', 'o-8', 'tls.v1', '{}')" >/dev/null
expect_refused "nats, certificate of another CA" "unable to get local issuer certificate" \
    "$POSTBOX_BIN" "${nats[@]}" --set nats.url="tls://localhost:$POSTBOX_NATS_PORT" --set nats.tls_ca_cert="$CERTS/other-ca.crt" relay --drain
expect_refused "nats, wrong host name" "IP address mismatch" \
    "$POSTBOX_BIN" "${nats[@]}" --set nats.url="tls://127.0.0.1:$POSTBOX_NATS_PORT" --set nats.tls_ca_cert="$CERTS/ca.crt" relay --drain
[[ $(psql_q "SELECT count(*) FROM postbox.outbox") == 1 ]] || fail "a refused nats connection published the pending event"
say "ok: TLS verified on all three; another CA and a wrong host name refused by each (total $((SECONDS - t0)) s)"
