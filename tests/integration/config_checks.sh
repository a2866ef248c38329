#!/usr/bin/env bash
# Configuration mistakes are errors with exit status 2, as --help promises, also those found
# after parsing (URLs, templates, handlers, names, listen addresses, a directory as -c);
# contradictory TLS settings are errors; TLS verification that is off, and a PostgreSQL
# connection to another host without sslmode=verify-full (loopback judged by address, a
# service looked up as libpq does), are warned about at every start;
# a NATS server whose certificate does not verify is a fatal error, not retried forever, and so is
# a server list none of whose servers' certificates verifies.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true) $(compgen -v POSTBOX_NATS_ || true); do
    case $_v in POSTBOX_NATS_URL | POSTBOX_NATS_PORT | POSTBOX_NATS_TOOL) ;; *) unset "$_v" ;; esac
done
pb_init

# expect_exit2 NAME COMMAND ERE [ARGS...]: postbox ARGS COMMAND exits 2 within 30 s, naming it
expect_exit2() {
    local name=$1 cmd=$2 re=$3 rc=0
    shift 3
    timeout 30 "$POSTBOX_BIN" "$@" $cmd >"$PB_TMP/$name.out" 2>&1 || rc=$?
    say "($name) exit $rc: $(head -c 250 "$PB_TMP/$name.out")"
    ((rc == 2)) || fail "($name) postbox $cmd exited $rc, expected 2 (a configuration error)"
    grep -Eq -- "$re" "$PB_TMP/$name.out" || fail "($name) the error does not match /$re/"
}

# (a) a directory given as the config file
mkdir -p "$PB_TMP/conf.d"
expect_exit2 a1 config 'is a directory' -c "$PB_TMP/conf.d"
expect_exit2 a2 relay 'is a directory' -c "$PB_TMP/conf.d"

# (b) configuration errors found after parsing, by the relay and the consumer
expect_exit2 b1 relay 'scheme must be amqp' --set amqp.url=http://x
expect_exit2 b2 relay 'nats.subject' --set relay.sink=nats --set 'nats.subject={nope'
expect_exit2 b3 relay 'amqp.exchange is longer' --set "amqp.exchange=$(printf 'x%.0s' {1..300})"
expect_exit2 b4 consume 'no handler configured'
expect_exit2 b5 consume 'nats.durable' --set consume.source=nats --set consume.handler='SELECT 1' --set nats.durable=a.b
expect_exit2 b6 consume 'amqp.queue is empty' --set consume.handler='SELECT 1' --set amqp.queue=
expect_exit2 b7 relay 'metrics.listen "nonsense"' --set metrics.listen=nonsense
expect_exit2 b9 relay 'nats.url server "wss://\*\*\*@h:443": scheme "wss" is not supported' --set relay.sink=nats \
    --set 'nats.url=nats://h:4222,wss://T0ken@h:443'
expect_exit2 b10 relay 'nats.url: an empty server' --set relay.sink=nats --set 'nats.url=nats://h:4222,'
expect_exit2 b8 consume 'nats.max_deliver' --set consume.source=nats --set consume.handler='SELECT 1' --set nats.max_deliver=2

# (c) TLS files with a plaintext AMQP URL
expect_exit2 c1 relay 'amqp.tls_ca_cert, amqp.tls_cert or amqp.tls_key is set but amqp.url is not amqps' \
    --set amqp.tls_ca_cert=/etc/ssl/certs/ca-certificates.crt
expect_exit2 c2 consume 'is not amqps' --set consume.handler='SELECT 1' --set amqp.tls_cert=/x --set amqp.tls_key=/y

# (d) verification off, or no sslmode=verify-full to another host: a warning at start
warned() { # NAME ERE ARGS...: a relay started with ARGS says ERE within 10 s
    local name=$1 re=$2
    shift 2
    : >"$PB_RELAY_LOG"
    start_relay "$@"
    wait_until 'grep -Eq -- "$re" "$PB_RELAY_LOG"' 10 || { kill_relay; fail "($name) no warning /$re/: $(head -5 "$PB_RELAY_LOG")"; }
    kill_relay
    say "($name) $(grep -Em1 -- "$re" "$PB_RELAY_LOG" | cut -c1-200)"
}
warned d1 'warn .*amqp.tls_verify = false: the broker.s certificate and host name are not checked' \
    --set "amqp.url=amqps://guest:guest@127.0.0.1:$POSTBOX_AMQP_PORT/" --set amqp.tls_verify=false
warned d2 'warn .*nats.tls_verify = false' --set relay.sink=nats --set nats.url=tls://127.0.0.1:1 --set nats.tls_verify=false
pg_warning() { # NAME DSN: the stderr of postbox status with DSN
    POSTBOX_PG_DSN=$2 timeout 30 "$POSTBOX_BIN" status >"$PB_TMP/$1.out" 2>&1 || true
}
pg_warning d3 "host=192.0.2.1 connect_timeout=1 dbname=x"
grep -q 'postgres.dsn: host "192.0.2.1" with sslmode=prefer.*plaintext.*use sslmode=verify-full' "$PB_TMP/d3.out" ||
    fail "(d3) no sslmode warning for a remote host: $(head -3 "$PB_TMP/d3.out")"
say "(d3) $(head -1 "$PB_TMP/d3.out" | cut -c1-220)"
pg_warning d4 "postgresql://u@192.0.2.1/x?sslmode=require&connect_timeout=1"
grep -q 'with sslmode=require: encrypted, but the server.s certificate is not checked' "$PB_TMP/d4.out" ||
    fail "(d4) no sslmode=require warning: $(head -3 "$PB_TMP/d4.out")"
pg_warning d5 "host=192.0.2.1 sslmode=verify-full sslrootcert=/nonexistent connect_timeout=1 dbname=x"
pg_warning d6 "$POSTBOX_PG_DSN"
! grep -q sslmode "$PB_TMP/d5.out" "$PB_TMP/d6.out" || fail "(d5/d6) a warning for verify-full or for the loopback host"
# loopback is judged by address: a name that begins with "127." is another machine
pg_warning d7 "host=127.pb-test.invalid connect_timeout=1 dbname=x"
grep -q 'postgres.dsn: host "127.pb-test.invalid" with sslmode=prefer' "$PB_TMP/d7.out" ||
    fail "(d7) no sslmode warning for a host name beginning with 127.: $(head -3 "$PB_TMP/d7.out")"
# a service (pg_service.conf) is looked up as libpq does; one that is not defined is said
printf '[pbremote]\nhost=192.0.2.1\nconnect_timeout=1\ndbname=x\n\n[pblocal]\nhost=127.0.0.1\nsslmode=disable\n' \
    >"$PB_TMP/pg_service.conf"
PGSERVICEFILE=$PB_TMP/pg_service.conf pg_warning d8 "service=pbremote"
grep -q 'postgres.dsn: host "192.0.2.1" (from service "pbremote") with sslmode=prefer' "$PB_TMP/d8.out" ||
    fail "(d8) no sslmode warning for a service naming a remote host: $(head -3 "$PB_TMP/d8.out")"
PGSERVICEFILE=$PB_TMP/pg_service.conf pg_warning d9 "service=pbnosuch connect_timeout=1"
grep -q 'postgres.dsn: service "pbnosuch" is not defined .*cannot tell which host' "$PB_TMP/d9.out" ||
    fail "(d9) no warning for a service libpq does not know: $(head -3 "$PB_TMP/d9.out")"
PGSERVICEFILE=$PB_TMP/pg_service.conf pg_warning d10 "service=pblocal port=1 connect_timeout=1"
! grep -q 'sslmode\|service' "$PB_TMP/d10.out" || fail "(d10) a warning for a service on the loopback host: $(head -3 "$PB_TMP/d10.out")"
say "(d7-d9) $(head -1 "$PB_TMP/d8.out" | cut -c1-200); $(head -1 "$PB_TMP/d9.out" | cut -c1-200)"

# (e) a NATS server with TLS whose certificate another CA signed: fatal at once
C=$PB_TMP/certs
mkdir -p "$C"
ossl() { openssl "$@" >>"$C/openssl.log" 2>&1 || fail "openssl $1 failed: $(tail -3 "$C/openssl.log")"; }
for ca in ca other; do
    ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=postbox test $ca" -keyout "$C/$ca.key" -out "$C/$ca.pem"
done
ossl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout "$C/server.key" -out "$C/server.csr"
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$C/san.ext"
ossl x509 -req -in "$C/server.csr" -CA "$C/ca.pem" -CAkey "$C/ca.key" -CAcreateserial -days 2 \
    -extfile "$C/san.ext" -out "$C/server.pem"
TLS_PORT=$(free_port)
nats-server -a 127.0.0.1 -p "$TLS_PORT" -js -sd "$PB_TMP/nats-store" --tls --tlscert "$C/server.pem" \
    --tlskey "$C/server.key" >"$PB_TMP/nats-tls.log" 2>&1 &
PB_PIDS+=($!)
wait_until "grep -q 'Server is ready' '$PB_TMP/nats-tls.log'" 20 || fail "(e) the TLS nats-server did not start: $(tail -3 "$PB_TMP/nats-tls.log")"
: >"$PB_RELAY_LOG"
start_relay --set relay.sink=nats --set "nats.url=tls://127.0.0.1:$TLS_PORT" --set "nats.tls_ca_cert=$C/other.pem" \
    --set nats.stream=PB_CONFIG_CHECKS --set nats.subject_prefix=pb.config_checks.
wait_relay 20
say "(e) another CA: exit $RELAY_RC: $(grep -m1 error "$PB_RELAY_LOG" | cut -c1-250)"
((RELAY_RC == 1)) || fail "(e) the relay exited $RELAY_RC with an untrusted certificate, expected 1"
grep -q 'error relay: tls with nats at tls://127.0.0.1:[0-9]* failed' "$PB_RELAY_LOG" || fail "(e) the error does not say the TLS handshake failed"
psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '{\"n\": 1}')" >/dev/null
relay_drain 60 --set relay.sink=nats --set "nats.url=tls://127.0.0.1:$TLS_PORT" --set "nats.tls_ca_cert=$C/ca.pem" \
    --set nats.stream=PB_CONFIG_CHECKS --set nats.subject_prefix=pb.config_checks.
say "(e) the right CA: the relay published through TLS with verification on"

# (f) a server list (libnats reports only its last server's error): a certificate that fails on
# every server is fatal as with one server; with one server down and one failing TLS the relay
# retries and says that TLS failed; a list with a server down and a good one publishes
nats_list=(--set relay.sink=nats --set nats.stream=PB_CONFIG_CHECKS --set nats.subject_prefix=pb.config_checks.)
: >"$PB_RELAY_LOG"
start_relay "${nats_list[@]}" --set "nats.url=tls://127.0.0.1:$TLS_PORT, tls://localhost:$TLS_PORT" \
    --set "nats.tls_ca_cert=$C/other.pem"
wait_relay 30
say "(f1) another CA on every server: exit $RELAY_RC: $(grep -m1 error "$PB_RELAY_LOG" | cut -c1-300)"
((RELAY_RC == 1)) || fail "(f1) the relay exited $RELAY_RC with an untrusted certificate on every server, expected 1"
grep -q 'error relay: tls failed with every nats server of tls://127.0.0.1:[0-9]*, tls://localhost:[0-9]*' "$PB_RELAY_LOG" ||
    fail "(f1) the error does not say that TLS failed with every server"
: >"$PB_RELAY_LOG"
start_relay "${nats_list[@]}" --set "nats.url=tls://127.0.0.1:1,tls://127.0.0.1:$TLS_PORT" \
    --set "nats.tls_ca_cert=$C/other.pem"
wait_until 'grep -q "tls failed with 1 of its 2 servers" "$PB_RELAY_LOG"' 30 ||
    { kill_relay; fail "(f2) a list with a server down and one failing TLS: no word about TLS: $(grep -m2 'warn\|error' "$PB_RELAY_LOG")"; }
pid_alive "$RELAY_PID" || fail "(f2) the relay gave up although a server of the list was only down"
kill_relay
say "(f2) one server down, one failing TLS: retried, $(grep -m1 -o 'tls failed with 1 of.*' "$PB_RELAY_LOG" | cut -c1-200)"
psql_q "SELECT postbox.enqueue('order', 'o-2', 'order.created.v1', '{\"n\": 2}')" >/dev/null
relay_drain 60 "${nats_list[@]}" --set "nats.url=tls://127.0.0.1:1,tls://127.0.0.1:$TLS_PORT" \
    --set "nats.tls_ca_cert=$C/ca.pem"
say "(f3) a list with a server down: published through the other"
say "ok"
