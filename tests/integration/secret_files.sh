#!/usr/bin/env bash
# Secrets in files: amqp.password_file, postgres.password_file, nats.token_file,
# nats.credentials, metrics.token_file and the TLS private keys (amqp.tls_key, nats.tls_key,
# kafka.ssl.key.location) are refused (exit 2, the file and its mode named)
# when group or others may read them (libpq's rule for .pgpass), and used when they are the
# owner's only; a URL or DSN with a password of its own beside a password file is a
# contradiction (exit 2). No password of a file appears in any output.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_NATS_ || true); do
    case $_v in POSTBOX_NATS_URL | POSTBOX_NATS_PORT | POSTBOX_NATS_TOOL) ;; *) unset "$_v" ;; esac
done
pb_init
setup_queue '#'
S=$PB_TMP/secrets
mkdir -p "$S"
secret() { # NAME MODE TEXT: a file of that mode holding TEXT
    printf '%s\n' "$3" >"$S/$1"
    chmod "$2" "$S/$1"
}
AMQP_NOPW="amqp://guest@127.0.0.1:$POSTBOX_AMQP_PORT/"

# expect_refused NAME ERE [ARGS...]: postbox relay exits 2 naming the problem
expect_refused() {
    local name=$1 re=$2 rc=0
    shift 2
    timeout 30 "$POSTBOX_BIN" "$@" relay --drain >"$PB_TMP/$name.out" 2>&1 || rc=$?
    say "($name) exit $rc: $(head -c 300 "$PB_TMP/$name.out")"
    ((rc == 2)) || fail "($name) exit $rc, expected 2 (a configuration error)"
    grep -Eq -- "$re" "$PB_TMP/$name.out" || fail "($name) the error does not match /$re/: $(cat "$PB_TMP/$name.out")"
}

# (a) readable by group or others: refused, each option
secret amqp-644 644 guest
secret pg-640 640 PbSecPgFile1
secret token-604 604 PbSecToken2
secret creds-640 640 'not a real creds file'
secret metrics-644 644 PbSecMetrics3
expect_refused a1 "amqp.password_file $S/amqp-644: group or others have access \(mode 0644\)" \
    --set "amqp.url=$AMQP_NOPW" --set "amqp.password_file=$S/amqp-644"
expect_refused a2 "postgres.password_file $S/pg-640: group or others have access .*mode 0640" \
    --set "postgres.password_file=$S/pg-640"
expect_refused a3 "nats.token_file $S/token-604: group or others have access .*mode 0604" \
    --set relay.sink=nats --set "nats.token_file=$S/token-604"
expect_refused a4 "nats.credentials $S/creds-640: group or others have access .*mode 0640" \
    --set relay.sink=nats --set "nats.credentials=$S/creds-640"
expect_refused a5 "metrics.token_file $S/metrics-644: group or others have access .*mode 0644" \
    --set metrics.listen=127.0.0.1:1 --set "metrics.token_file=$S/metrics-644"
mkdir -p "$S/dir" && chmod 700 "$S/dir"
expect_refused a6 "nats.token_file $S/dir: not a regular file" --set relay.sink=nats --set "nats.token_file=$S/dir"
# TLS private keys are as secret as a password
secret amqp-key-640 640 'not a real key'
secret nats-key-644 644 'not a real key'
secret kafka-key-604 604 'not a real key'
expect_refused a9 "amqp.tls_key $S/amqp-key-640: group or others have access \(mode 0640\)" \
    --set "amqp.url=amqps://guest:guest@127.0.0.1:1/" --set "amqp.tls_cert=$S/amqp-key-640" --set "amqp.tls_key=$S/amqp-key-640"
expect_refused a10 "nats.tls_key $S/nats-key-644: group or others have access \(mode 0644\)" \
    --set relay.sink=nats --set "nats.tls_cert=$S/nats-key-644" --set "nats.tls_key=$S/nats-key-644"
expect_refused a11 "kafka.ssl.key.location $S/kafka-key-604: group or others have access \(mode 0604\)" \
    --set relay.sink=kafka --set kafka.security.protocol=ssl --set "kafka.ssl.key.location=$S/kafka-key-604"
secret empty 600 ''
expect_refused a7 "amqp.password_file $S/empty: empty" --set "amqp.url=$AMQP_NOPW" --set "amqp.password_file=$S/empty"
expect_refused a8 "amqp.password_file $S/missing: cannot open" --set "amqp.url=$AMQP_NOPW" --set "amqp.password_file=$S/missing"

# (b) a password in the URL or DSN and a password file: contradictory
secret amqp-ok 600 guest
secret pg-ok 600 'PbSecPg File/with@odd chars'"'"
expect_refused b1 'amqp.url has a password and amqp.password_file is set' \
    --set "amqp.password_file=$S/amqp-ok"
POSTBOX_PG_DSN="$POSTBOX_PG_DSN?password=PbSecDsn4" expect_refused b2 \
    'postgres.dsn has a password and postgres.password_file is set' --set "postgres.password_file=$S/pg-ok"

# (c) owner-only files are used: the AMQP password from its file logs in (RabbitMQ checks it),
# the PostgreSQL one joins the DSN, the NATS token goes with the connection
psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '{\"n\": 1}')" >/dev/null
relay_drain 60 --set "amqp.url=$AMQP_NOPW" --set "amqp.password_file=$S/amqp-ok" \
    --set "postgres.password_file=$S/pg-ok" -v
drain_queue "$PB_TMP/c.got" 1 1500 30
[[ $(wc -l <"$PB_TMP/c.got") == 1 ]] || fail "(c) the event published with the password from amqp.password_file did not arrive"
secret amqp-wrong 600 PbSecWrongAmqp5
rc=0
timeout 30 "$POSTBOX_BIN" --set "amqp.url=$AMQP_NOPW" --set "amqp.password_file=$S/amqp-wrong" relay --drain \
    >"$PB_TMP/c-wrong.out" 2>&1 || rc=$?
say "(c) wrong password in amqp.password_file: exit $rc: $(head -c 200 "$PB_TMP/c-wrong.out")"
((rc == 1)) || fail "(c) a wrong password from amqp.password_file: exit $rc, expected 1"
grep -q 'refused the login' "$PB_TMP/c-wrong.out" || fail "(c) the refused login is not reported"
secret token-ok 600 PbSecToken6
psql_q "SELECT postbox.enqueue('order', 'o-2', 'order.created.v1', '{\"n\": 2}')" >/dev/null
relay_drain 60 --set relay.sink=nats --set "nats.token_file=$S/token-ok" --set nats.stream=PB_SECRET_FILES \
    --set nats.subject_prefix=pb.secret_files. -v
"$POSTBOX_NATS_TOOL" delete-stream "$POSTBOX_NATS_URL" PB_SECRET_FILES >/dev/null 2>&1 || true

# (d) no password of a file in any output
"$POSTBOX_BIN" --set "postgres.password_file=$S/pg-ok" --set "amqp.password_file=$S/amqp-ok" config >"$PB_TMP/config.out"
grep -q "^password_file = $S/pg-ok\$" "$PB_TMP/config.out" || fail "(d) postbox config does not show postgres.password_file"
rm -rf "$S"
if grep -rl 'PbSec' "$PB_TMP" >/dev/null; then
    fail "(d) a password from a file is in $(grep -rl PbSec "$PB_TMP" | tr '\n' ' ')"
fi
say "ok: no password from a file in any of the $(find "$PB_TMP" -type f | wc -l) files written"
