#!/usr/bin/env bash
# No secret reaches any output, whatever its form: postbox config, the logs of relay runs at
# debug level (PostgreSQL URL with ?password=, key = value pairs with blanks and a second
# password, passwords with '/' and '@', NATS URL lists with several passwords, tokens, NATS
# URLs without a scheme, AMQP URLs, [handlers] SQL, librdkafka properties whose value holds a
# secret, kafka.brokers in postbox status), and the errors of connection strings libpq cannot parse (libpq would quote them),
# which are configuration errors (exit 2). Control characters of messages (ids, types, errors)
# reach neither the text log nor `postbox dlq show` raw. Every test secret contains "PbSec":
# at the end no file of the test holds that text.
source "$(dirname "$0")/lib.sh"

for _v in $(compgen -v POSTBOX_CONSUME_ || true) $(compgen -v POSTBOX_NATS_ || true); do
    case $_v in POSTBOX_NATS_URL | POSTBOX_NATS_PORT | POSTBOX_NATS_TOOL) ;; *) unset "$_v" ;; esac
done
pb_init
PGHOSTPORT=${POSTBOX_PG_DSN#postgresql://postgres@}
PGHOSTPORT=${PGHOSTPORT%%/*}
PGH=${PGHOSTPORT%:*} PGP=${PGHOSTPORT#*:}
OUT=$PB_TMP/outputs
mkdir -p "$OUT"

no_secret() { # FILE WHAT: FILE holds no "PbSec"
    if grep -n PbSec "$1" >/dev/null; then
        fail "$2 shows a secret: $(grep -o '.\{0,40\}PbSec.\{0,20\}' "$1" | head -3 | sed 's/PbSec/<SECRET>/g')"
    fi
}

# (a) postbox config: every form
DSN_QUERY="$POSTBOX_PG_DSN?sslmode=disable&password=PbSecQuery1&connect_timeout=5"
DSN_KV="host=$PGH port=$PGP user=postgres dbname=$PB_DB password = PbSecSpaced2 password=PbSecSecond3"
DSN_SLASH="host=$PGH port=$PGP user=postgres dbname=$PB_DB password='PbSecSl/PbSecAt@PbSecEnd'"
NATS_LIST="nats://u1:PbSecNatsA@127.0.0.1:1,nats://u2:PbSecNatsB@127.0.0.1:2,tls://u3:PbSecNatsC@127.0.0.1:3"
NATS_TOKEN="nats://PbSecToken9@127.0.0.1:1"
# without a scheme (libnats logs in with these), with a websocket token among them
NATS_BARE="u4:PbSecBareD@127.0.0.1:1, PbSecBareToken@127.0.0.1:2,u5:PbSec Blank@127.0.0.1:3"
AMQP_ODD="amqp://guest:PbSecAm/PbSecAn@PbSecAo@127.0.0.1:$POSTBOX_AMQP_PORT/"
i=0
for dsn in "$DSN_QUERY" "$DSN_KV" "$DSN_SLASH"; do
    for nats in "$NATS_LIST" "$NATS_TOKEN" "$NATS_BARE"; do
        i=$((i + 1))
        POSTBOX_PG_DSN=$dsn POSTBOX_NATS_URL=$nats POSTBOX_AMQP_URL=$AMQP_ODD "$POSTBOX_BIN" config \
            >"$OUT/config$i.out" 2>&1 || fail "(a) postbox config failed: $(head -3 "$OUT/config$i.out")"
        no_secret "$OUT/config$i.out" "(a) postbox config"
    done
done
grep -q '^dsn = host=.* password = \*\*\* password=\*\*\*$' "$OUT/config4.out" ||
    fail "(a) the key = value DSN is not shown with its passwords hidden: $(grep '^dsn' "$OUT/config4.out")"
grep -q '^url = nats://u1:\*\*\*@127.0.0.1:1,nats://u2:\*\*\*@127.0.0.1:2,tls://u3:\*\*\*@127.0.0.1:3$' "$OUT/config1.out" ||
    fail "(a) the NATS URL list is not shown with every password hidden: $(grep '^url = nats' "$OUT/config1.out")"

# (b) relay runs at debug level with each DSN form: they connect (the password is accepted or
# not needed) and log nothing secret. Secrets go in through the environment (a command line is
# visible to every user, and the test harness logs it).
for dsn in "$DSN_QUERY" "$DSN_KV" "$DSN_SLASH"; do
    psql_q "SELECT postbox.enqueue('order', 'o-1', 'order.created.v1', '{\"n\": 1}')" >/dev/null
    : >"$PB_RELAY_LOG"
    POSTBOX_PG_DSN=$dsn relay_drain 60 --set relay.sink=stdout -v
    cat "$PB_RELAY_LOG" "$PB_RELAY_OUT" >>"$OUT/relay-b.log"
done
no_secret "$OUT/relay-b.log" "(b) the relay's log"
say "(b) 3 relay runs, $(wc -l <"$OUT/relay-b.log") lines of debug log and output, no secret"

# (c) connection strings libpq cannot parse: exit 2, the problem named, nothing quoted
bad_dsn() { # NAME DSN ERE
    local rc=0
    POSTBOX_PG_DSN=$2 "$POSTBOX_BIN" status >"$OUT/$1.out" 2>&1 || rc=$?
    say "(c) $1: exit $rc: $(head -c 300 "$OUT/$1.out" | sed 's/PbSec/<SECRET>/g')"
    ((rc == 2)) || fail "(c) $1: exit $rc, expected 2 (a configuration error)"
    grep -Eq "$3" "$OUT/$1.out" || fail "(c) $1: the error does not name the problem (/$3/)"
    no_secret "$OUT/$1.out" "(c) $1"
}
bad_dsn word "host=$PGH password=PbSecWord1 PbSecWord2 dbname=x" 'word without "="'
bad_dsn quote "host=$PGH password='PbSecQuote1 dbname=x" 'unterminated quoted'
bad_dsn percent "postgresql://postgres:PbSec%zzPct@$PGHOSTPORT/x" 'percent-encoding'
bad_dsn at "postgresql://postgres:PbSecAt1@PbSecAt2@$PGHOSTPORT/x" "'@' after the user part"
bad_dsn slash "postgresql://postgres:PbSecSl1/PbSecSl2@$PGHOSTPORT/x" "'@' after the user part"
bad_dsn keyword "host=$PGH passwrd=PbSecTypo1 dbname=x" 'unknown keyword'

grep -q '^url = u4:\*\*\*@127.0.0.1:1, \*\*\*@127.0.0.1:2,u5:\*\*\*@127.0.0.1:3$' "$OUT/config3.out" ||
    fail "(a) the NATS list without schemes is not shown with its hosts and ports: $(grep '^url = u4' "$OUT/config3.out")"
# [handlers] SQL and librdkafka properties whose name is no secret but whose value holds one
cat >"$PB_TMP/handlers.ini" <<'INI'
[consume]
handler = SELECT f($1::jsonb, 'password=PbSecHandler0')
[handlers]
order.paid.v1 = SELECT dblink_exec('host=db password=PbSecHandler1', $1::text)
order.sent.v1 = SELECT remote.call('postgresql://app:PbSecHandler2@db/app', $1::jsonb)
[kafka]
sasl.oauthbearer.token.endpoint.url = https://client:PbSecKafkaUrl@idp.example/token
sasl.kerberos.kinit.cmd = kinit password="PbSecKafka Jaas" -k
INI
"$POSTBOX_BIN" -c "$PB_TMP/handlers.ini" config >"$OUT/config-handlers.out" 2>&1 ||
    fail "(a) postbox config with [handlers] failed: $(head -3 "$OUT/config-handlers.out")"
rm "$PB_TMP/handlers.ini" # it holds the secrets itself
no_secret "$OUT/config-handlers.out" "(a) postbox config, [handlers] and [kafka]"
grep -q "^order.paid.v1 = SELECT dblink_exec('host=db password=\*\*\* \$1::text)$" "$OUT/config-handlers.out" ||
    fail "(a) the [handlers] entry is not shown redacted: $(grep '^order.paid' "$OUT/config-handlers.out")"
say "(a) postbox config: $(grep -c . "$OUT"/config*.out | wc -l) outputs without a secret, e.g. $(grep '^url = u4' "$OUT/config3.out")"

# (d) NATS URL lists and tokens in the errors and retries of a relay that cannot connect
for nats in "$NATS_LIST" "$NATS_TOKEN" "$NATS_BARE"; do
    : >"$PB_RELAY_LOG"
    POSTBOX_NATS_URL=$nats start_relay --set relay.sink=nats -v
    wait_until 'grep -q "waiting for the nats broker\|cannot connect to nats" "$PB_RELAY_LOG"' 30 ||
        { kill_relay; fail "(d) the relay does not say it cannot reach nats: $(tail -3 "$PB_RELAY_LOG" | sed 's/PbSec/<SECRET>/g')"; }
    kill_relay
    cat "$PB_RELAY_LOG" >>"$OUT/relay-d.log"
done
no_secret "$OUT/relay-d.log" "(d) the relay's log with NATS URL lists"
grep -q 'nats at u4:\*\*\*@127.0.0.1:1, \*\*\*@127.0.0.1:2,u5:\*\*\*@127.0.0.1:3' "$OUT/relay-d.log" ||
    fail "(d) the relay does not name the servers of a list without schemes: $(grep -m1 'u4' "$OUT/relay-d.log" | sed 's/PbSec/<SECRET>/g')"
say "(d) $(grep -m1 -o 'nats at [^ ]*' "$OUT/relay-d.log")"

# (e) AMQP: a password with '/' and '@' unencoded, and a wrong one (refused by the broker)
rc=0
POSTBOX_AMQP_URL=$AMQP_ODD "$POSTBOX_BIN" relay --drain >"$OUT/amqp-odd.out" 2>&1 || rc=$?
say "(e) odd AMQP URL: exit $rc: $(head -c 200 "$OUT/amqp-odd.out")"
((rc != 0)) || fail "(e) a relay with a malformed AMQP URL exited 0"
no_secret "$OUT/amqp-odd.out" "(e) the malformed AMQP URL's error"
rc=0
POSTBOX_AMQP_URL="amqp://guest:PbSecWrong%2FPw@127.0.0.1:$POSTBOX_AMQP_PORT/" timeout 30 "$POSTBOX_BIN" relay --drain \
    >"$OUT/amqp-wrong.out" 2>&1 || rc=$?
((rc != 0 && rc != 124)) || fail "(e) a relay with a wrong AMQP password: exit $rc"
grep -Eqi 'refused|credential' "$OUT/amqp-wrong.out" || fail "(e) the wrong password is not reported: $(head -3 "$OUT/amqp-wrong.out")"
no_secret "$OUT/amqp-wrong.out" "(e) the refused login's error"

# (f) control characters of a message: id, type and handler error, through the text log and
# postbox dlq show
export POSTBOX_AMQP_QUEUE=$PB_QUEUE POSTBOX_CONSUME_CONSUMER=ctl-test
setup_queue '#'
ESC=$'\e' DEL=$'\x7f' CSI=$'\xc2\x9b'
publish ctl.v1 "id-${ESC}[2J-${DEL}-${CSI}31m" "type-${ESC}]0;title${ESC}\\" '{"n": 1}'
start_consumer --set "consume.handler=SELECT 1 / 0 WHERE \$1 <> E'\\x1b[5m'" --set consume.max_attempts=1
wait_until '[[ $(psql_q "SELECT count(*) FROM postbox.inbox_dead") == 1 ]]' 30 ||
    { tail -5 "$CONSUMER_LOG" >&2; fail "(f) the failing message did not reach inbox_dead"; }
stop_consumer
"$POSTBOX_BIN" dlq --inbox show --all >"$OUT/dlq-show.out" 2>&1 || fail "(f) postbox dlq --inbox show failed"
"$POSTBOX_BIN" dlq --inbox list --all >"$OUT/dlq-list.out" 2>&1 || fail "(f) postbox dlq --inbox list failed"
for f in "$CONSUMER_LOG" "$OUT/dlq-show.out" "$OUT/dlq-list.out"; do
    if LC_ALL=C grep -q "[$ESC$DEL]" "$f" || LC_ALL=C grep -q "$CSI" "$f"; then
        fail "(f) $(basename "$f") holds raw control characters: $(LC_ALL=C grep -a "[$ESC$DEL]\|$CSI" "$f" | head -2 | od -c | head -5)"
    fi
done
grep -q 'message_id *id-\\x1b\[2J-\\x7f-\\u009b31m' "$OUT/dlq-show.out" ||
    fail "(f) dlq show does not show the id with its control characters escaped: $(grep message_id "$OUT/dlq-show.out")"
say "(f) dlq show: $(grep -m1 message_id "$OUT/dlq-show.out"); log: $(grep -m1 -o 'message id-[^ ]*' "$CONSUMER_LOG")"

# (g) a URL or DSN typed in the wrong place of the command line is not echoed with its secret
cli_mistake() { # NAME ARGS...: postbox exits 2, its message holds no secret
    local name=$1 rc=0
    shift
    "$POSTBOX_BIN" "$@" >"$OUT/$name.out" 2>&1 || rc=$?
    ((rc == 2)) || fail "(g) $name: exit $rc, expected 2"
    no_secret "$OUT/$name.out" "(g) $name"
}
cli_mistake positional relay "amqp://guest:PbSecPos1@127.0.0.1:1/"
cli_mistake set-colon --set "amqp.url:amqp://guest:PbSecSet2@127.0.0.1:1/" relay
cli_mistake command "postgresql://postgres:PbSecCmd3@127.0.0.1/x"
cli_mistake status-arg status "password=PbSecArg4"
say "(g) $(cat "$OUT/set-colon.out")"

# (h) postbox status names the Kafka cluster: kafka.brokers with a password (a URL typed there)
for fmt in "" --json; do
    POSTBOX_KAFKA_BROKERS="SASL_SSL://u6:PbSecBrokers@127.0.0.1:1" timeout 60 "$POSTBOX_BIN" \
        --set relay.sink=kafka status $fmt >"$OUT/status$fmt.out" 2>&1 || true
    grep -q 'u6:\*\*\*@127.0.0.1:1' "$OUT/status$fmt.out" || fail "(h) postbox status $fmt does not name the cluster: $(grep -i -m2 kafka "$OUT/status$fmt.out" | sed 's/PbSec/<SECRET>/g')"
    no_secret "$OUT/status$fmt.out" "(h) postbox status $fmt"
done
say "(h) postbox status: $(grep -m1 '^kafka' "$OUT/status.out")"

# everything this test wrote, logs included
if grep -rl PbSec "$PB_TMP" >/dev/null; then
    fail "a secret is in $(grep -rl PbSec "$PB_TMP" | head -3 | tr '\n' ' ')"
fi
say "no test secret in any of the $(find "$PB_TMP" -type f | wc -l) files written"
