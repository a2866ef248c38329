# Shared set-up and helpers of postbox's integration tests; every tests/integration/*.sh sources it.
#
# Environment (ctest sets it, see tests/CMakeLists.txt):
#   POSTBOX_BIN               the postbox binary
#   POSTBOX_AMQP_TOOL         tests/tools/amqp_tool.c, built as amqp-tool
#   POSTBOX_PRODUCER_EXAMPLE  tests/integration/producer_example.c
#   POSTBOX_SOURCE_DIR        the source tree (for scripts/services)
#   PB_KEEP_TMP=1             keep the per-test temporary directory (logs) after the test
#
# The servers must be running already (scripts/services start). Each test gets:
#   a fresh database pb_<test> (dropped first when it exists) in POSTBOX_PG_DSN,
#   its own exchange pb.<test>.ex (POSTBOX_AMQP_EXCHANGE) and queue pb.<test>.q (PB_QUEUE),
#   a temporary directory PB_TMP holding the relay's log (PB_RELAY_LOG) and stdout (PB_RELAY_OUT).
# Only what the test started (recorded pids) is killed on exit.

set -euo pipefail

# PB_TEST_NAME: a script run for another test (exec'd with other settings) names its own
PB_TEST=${PB_TEST_NAME:-$(basename "${BASH_SOURCE[1]:-$0}" .sh)}
: "${POSTBOX_SOURCE_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${POSTBOX_BIN:?POSTBOX_BIN must name the postbox binary}"
: "${POSTBOX_AMQP_TOOL:?POSTBOX_AMQP_TOOL must name the amqp-tool binary}"
export POSTBOX_SOURCE_DIR POSTBOX_BIN POSTBOX_AMQP_TOOL

say() { printf '[%s %s] %s\n' "$PB_TEST" "$(date +%T)" "$*"; }

services() { bash "$POSTBOX_SOURCE_DIR/scripts/services" "$@"; }

# Configuration that may leak from the caller's shell would change what is tested.
for _v in $(compgen -v POSTBOX_RELAY_ || true) $(compgen -v POSTBOX_LOG_ || true) \
    $(compgen -v POSTBOX_AMQP_ || true) POSTBOX_CONFIG; do
    case $_v in POSTBOX_AMQP_TOOL | POSTBOX_AMQP_PORT) ;; *) unset "$_v" ;; esac
done
unset _v
for _v in $(compgen -v POSTBOX_CDC_ || true); do unset "$_v"; done # cdc options likewise
unset _v
eval "$(services env)"

PB_TMP=$(mktemp -d "/tmp/pb-it-$PB_TEST.XXXXXX")
PB_RELAY_LOG=$PB_TMP/relay.log
PB_RELAY_OUT=$PB_TMP/relay.out
: >"$PB_RELAY_LOG"
: >"$PB_RELAY_OUT"
PB_PIDS=()
PB_ON_EXIT=()
RELAY_PID=
RELAY_RC=

PB_DB=pb_$PB_TEST
PB_ADMIN_DSN=${POSTBOX_PG_DSN%/*}/postgres
export POSTBOX_PG_DSN=${POSTBOX_PG_DSN%/*}/$PB_DB
export POSTBOX_AMQP_EXCHANGE=pb.$PB_TEST.ex
PB_QUEUE=pb.$PB_TEST.q
# the queues amqp-tool setup makes have no bound; postbox consume declares them the same way
# (consume_queue_bound checks the default, a bounded queue)
export POSTBOX_AMQP_QUEUE_MESSAGE_TTL=0 POSTBOX_AMQP_ALLOW_UNLIMITED=true

# ---------------------------------------------------------------------------------------------
# process bookkeeping

pid_alive() { # PID: exists and is not a zombie
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat%% *} != Z ]]
}

# Runs CMD on exit (before the temporary directory goes), e.g. restarting a stopped server.
on_exit() { PB_ON_EXIT+=("$1"); }

pb_cleanup() {
    local rc=$? pid h
    set +e
    for h in "${PB_ON_EXIT[@]}"; do eval "$h"; done
    for pid in "${PB_PIDS[@]}"; do
        if pid_alive "$pid"; then
            kill -KILL "$pid" 2>/dev/null
        fi
        wait "$pid" 2>/dev/null
    done
    if [[ ${PB_KEEP_TMP:-0} == 1 ]]; then
        say "kept $PB_TMP"
    else
        rm -rf "$PB_TMP"
    fi
    if ((rc == 0)); then say "PASS"; else say "FAIL (exit $rc)"; fi
    exit "$rc"
}
trap pb_cleanup EXIT

fail() {
    printf '[%s] FAIL: %s\n' "$PB_TEST" "$*" >&2
    if [[ -s $PB_RELAY_LOG ]]; then
        printf -- '---- last lines of the relay log (%s) ----\n' "$PB_RELAY_LOG" >&2
        tail -n 40 "$PB_RELAY_LOG" >&2
        printf -- '----\n' >&2
    fi
    exit 1
}

# wait_until "CMD" SECONDS: evaluates CMD every 0.2 s until it succeeds; fails after SECONDS.
wait_until() {
    local cmd=$1 end
    end=$(($(date +%s%N) + ${2:-30} * 1000000000))
    until eval "$cmd"; do
        (($(date +%s%N) < end)) || return 1
        sleep 0.2
    done
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL

psql_q() { # SQL: runs it in the test database; unaligned, tuples only
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -f - <<<"$1"
}

# drop_db_slots DB: drops the logical replication slots of database DB (slots are cluster-wide;
# a database that a streamed slot uses cannot be dropped, even WITH (FORCE)), ending a walsender
# that still streams one (e.g. a relay left over by an aborted run). Succeeds when none is left.
drop_db_slots() {
    local db=$1 i left
    for ((i = 0; i < 20; i++)); do
        left=$(psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -f - <<EOF
SET client_min_messages = warning;
DO \$\$
DECLARE s record;
BEGIN
    FOR s IN SELECT slot_name, active_pid FROM pg_replication_slots
              WHERE database = '$db' AND slot_type = 'logical' LOOP
        IF s.active_pid IS NOT NULL THEN
            PERFORM pg_terminate_backend(s.active_pid, 5000);
        END IF;
        BEGIN
            PERFORM pg_drop_replication_slot(s.slot_name);
        EXCEPTION WHEN object_in_use OR undefined_object THEN NULL;  -- retried below
        END;
    END LOOP;
END \$\$;
SELECT count(*) FROM pg_replication_slots WHERE database = '$db';
EOF
        ) || return 1
        ((left == 0)) && return 0
        sleep 0.5
    done
    return 1
}
drop_db_slots "$PB_DB" || fail "cannot drop the replication slots of database $PB_DB"

psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -c "SET client_min_messages = warning" \
    -c "DROP DATABASE IF EXISTS $PB_DB WITH (FORCE)" -c "CREATE DATABASE $PB_DB" >/dev/null ||
    fail "cannot create database $PB_DB (is PostgreSQL running? scripts/services start)"

# pb_init: postbox init; fails the test when it fails. With POSTBOX_TEST_PARTITION_BY (an
# interval, set by the `partitioned` CTest label's copies of key tests) the schema gets the
# partitioned layout (init --partition-by), so the same test runs on both layouts.
pb_init() {
    local out args=()
    [[ -z ${POSTBOX_TEST_PARTITION_BY:-} ]] || args=(--partition-by "$POSTBOX_TEST_PARTITION_BY")
    out=$("$POSTBOX_BIN" init "${args[@]}" 2>&1) || fail "postbox init failed: $out"
    [[ -z ${POSTBOX_TEST_PARTITION_BY:-} ]] ||
        [[ $(psql_q "SELECT relkind FROM pg_class WHERE oid = 'postbox.outbox_published'::regclass") == p ]] ||
        fail "postbox init --partition-by left postbox.outbox_published unpartitioned"
    [[ -z ${POSTBOX_TEST_PARTITION_BY:-} ]] ||
        [[ $(psql_q "SELECT relkind FROM pg_class WHERE oid = 'postbox.inbox'::regclass") == p ]] ||
        fail "postbox init --partition-by left postbox.inbox unpartitioned"
}

# ---- least-privilege roles ------------------------------------------------------------------
# use_least_privilege [GLOBAL OPTIONS]: after pb_init, applies `postbox [OPTIONS] init
# --print-grants` (as the superuser that ran init) and makes the relay and the consumer of this
# test connect as the login roles pb_it_relay (member of postbox_relay, REPLICATION for cdc) and
# pb_it_consumer (member of postbox_consumer): start_relay and start_consumer pass --dsn with
# them unless the caller gives one. pb_it_producer (member of postbox_producer) is there for
# producers (PB_PRODUCER_DSN). The login roles are cluster-wide and shared by the tests (created
# when missing, never dropped); what they may do is granted per database.
PB_RELAY_DSN= PB_CONSUMER_DSN= PB_PRODUCER_DSN=
use_least_privilege() {
    local out
    out=$("$POSTBOX_BIN" "$@" init --print-grants) || fail "postbox init --print-grants failed"
    psql -XAtq -v ON_ERROR_STOP=1 -d "$POSTBOX_PG_DSN" -c 'SET client_min_messages = warning' \
        -f - <<<"$out" >/dev/null || fail "the SQL of postbox init --print-grants failed"
    # roles belong to the whole server and tests run side by side: one test at a time makes them
    # (an advisory lock of the admin database; two concurrent ALTER ROLE of one role can fail)
    psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -f - >/dev/null <<'EOF' || fail "cannot create the test's login roles"
SET client_min_messages = warning;
BEGIN;
SELECT pg_advisory_xact_lock(hashtext('postbox integration test roles'));
DO $$
DECLARE r text[];
BEGIN
    FOREACH r SLICE 1 IN ARRAY ARRAY[['pb_it_relay', 'postbox_relay'], ['pb_it_consumer', 'postbox_consumer'],
                                     ['pb_it_producer', 'postbox_producer']] LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I LOGIN', r[1]);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END;
        IF NOT pg_has_role(r[1], r[2], 'USAGE') THEN
            EXECUTE format('GRANT %I TO %I', r[2], r[1]);
        END IF;
    END LOOP;
    IF NOT (SELECT rolreplication FROM pg_roles WHERE rolname = 'pb_it_relay') THEN
        ALTER ROLE pb_it_relay REPLICATION;
    END IF;
END $$;
COMMIT;
EOF
    PB_RELAY_DSN=${POSTBOX_PG_DSN/postgres@/pb_it_relay@}
    PB_CONSUMER_DSN=${POSTBOX_PG_DSN/postgres@/pb_it_consumer@}
    PB_PRODUCER_DSN=${POSTBOX_PG_DSN/postgres@/pb_it_producer@}
    [[ $PB_RELAY_DSN != "$POSTBOX_PG_DSN" ]] || fail "POSTBOX_PG_DSN does not name the user postgres: $POSTBOX_PG_DSN"
    say "relay and consumer connect as pb_it_relay and pb_it_consumer (postbox init --print-grants)"
}

# sleep_ms MS: sleeps MS milliseconds (0 for a negative MS)
# free_port: a TCP port on 127.0.0.1 that nothing listens on now, taken below the kernel's
# ephemeral range (32768+) so that no outgoing connection of another test or service can hold it
# by the time the process under test binds it.
free_port() {
    local port i
    for i in $(seq 1 200); do
        port=$((20000 + RANDOM % 12000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "$port"
            return 0
        fi
    done
    fail "free_port: no free port found between 20000 and 32000"
}
sleep_ms() { local ms=$(($1 > 0 ? $1 : 0)); sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"; }

# Pending: not published and not dead-lettered.
pending_count() {
    psql_q "SELECT count(*) FROM postbox.outbox o WHERE o.published_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM postbox.dead_letters d WHERE d.event_id = o.event_id)"
}
published_count() { psql_q "SELECT count(*) FROM postbox.outbox_published"; }
dead_count() { psql_q "SELECT count(*) FROM postbox.dead_letters"; }

# enqueue_seq NAGG KFROM KTO [PAD]: one transaction that enqueues, through postbox.enqueue, the
# events with seq KFROM..KTO of each aggregate agg-1..agg-NAGG (aggregate_type 'order', event
# type 'created.v1', payload {"seq": k[, "pad": PAD x's]}), seq-major, so each aggregate's ids
# grow with seq.
enqueue_seq() {
    local nagg=$1 kfrom=$2 kto=$3 pad=${4:-0}
    psql_q "DO \$\$
        DECLARE pad text := CASE WHEN $pad > 0 THEN repeat('x', $pad) END;
        BEGIN
          FOR k IN $kfrom..$kto LOOP
            FOR a IN 1..$nagg LOOP
              PERFORM postbox.enqueue('order', 'agg-' || a, 'created.v1',
                                      jsonb_strip_nulls(jsonb_build_object('seq', k, 'pad', pad)));
            END LOOP;
          END LOOP;
        END \$\$"
}

# start_seq_producers NAGG: in the background until $PB_TMP/stop exists, transaction k enqueues
# seq k of every aggregate agg-1..agg-NAGG (aggregate_type 'order', event type 'created.v1',
# payload {"agg": "agg-N", "seq": k}), one every ~20 ms; PRODUCER_PID (wait on it: non-zero when a
# transaction failed).
start_seq_producers() {
    local nagg=$1
    (
        k=0
        until [[ -e $PB_TMP/stop ]]; do
            k=$((k + 1))
            psql_q "SELECT count(postbox.enqueue('order', 'agg-' || a, 'created.v1',
                                                 jsonb_build_object('agg', 'agg-' || a, 'seq', $k)))
                      FROM generate_series(1, $nagg) a" >/dev/null || exit 1
            sleep 0.02
        done
    ) &
    PRODUCER_PID=$!
    PB_PIDS+=("$PRODUCER_PID")
    on_exit "touch $PB_TMP/stop"
}

# ---------------------------------------------------------------------------------------------
# RabbitMQ

amqp_tool() { "$POSTBOX_AMQP_TOOL" "$@"; }

# setup_queue [BINDING_KEY...]: fresh exchange and queue for this test, bound with the keys
# (default '#'); without keys pass "none" to leave the exchange without any binding.
setup_queue() {
    local keys=("$@")
    ((${#keys[@]})) || keys=('#')
    amqp_tool delete "$POSTBOX_AMQP_URL" "$PB_QUEUE" || fail "amqp-tool delete $PB_QUEUE failed"
    amqp_tool delete-exchange "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" ||
        fail "amqp-tool delete-exchange $POSTBOX_AMQP_EXCHANGE failed"
    if [[ ${keys[0]} == none ]]; then return 0; fi
    amqp_tool setup "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$PB_QUEUE" "${keys[@]}" ||
        fail "amqp-tool setup failed"
}

queue_count() { amqp_tool count "$POSTBOX_AMQP_URL" "$PB_QUEUE"; }

# drain_queue FILE EXPECT [IDLE_MS] [TIMEOUT_S]: consumes the test's queue into FILE.
drain_queue() {
    local file=$1 expect=$2 idle=${3:-2000} timeout=${4:-300}
    amqp_tool drain "$POSTBOX_AMQP_URL" "$PB_QUEUE" --expect "$expect" --idle-ms "$idle" \
        --timeout-s "$timeout" >"$file" || fail "draining $PB_QUEUE: only $(wc -l <"$file") of $expect message(s) arrived"
}

# ---------------------------------------------------------------------------------------------
# the relay

# Global options (--set/-s, -c/--config, --dsn with their values) go before the command, the
# rest after it.
_split_args() {
    PRE=()
    POST=()
    while (($#)); do
        case $1 in
        --set | -s | -c | --config | --dsn) PRE+=("$1" "$2"); shift 2 ;;
        *) POST+=("$1"); shift ;;
        esac
    done
}

# _with_dsn DSN: PRE gets --dsn DSN unless it holds one (or DSN is empty).
_with_dsn() {
    [[ -n $1 ]] || return 0
    local a
    for a in "${PRE[@]}"; do [[ $a != --dsn ]] || return 0; done
    PRE=(--dsn "$1" "${PRE[@]}")
}

start_relay() { # [ARGS...]: postbox relay in the background; RELAY_PID
    local PRE POST
    _split_args "$@"
    _with_dsn "$PB_RELAY_DSN"
    printf '==== %s: postbox %s relay %s\n' "$(date +%T.%N)" "${PRE[*]}" "${POST[*]}" >>"$PB_RELAY_LOG"
    "$POSTBOX_BIN" "${PRE[@]}" relay "${POST[@]}" >>"$PB_RELAY_OUT" 2>>"$PB_RELAY_LOG" &
    RELAY_PID=$!
    PB_PIDS+=("$RELAY_PID")
}

# wait_relay SECONDS: waits for the relay to exit; its exit status in RELAY_RC. Fails the test
# when it is still running after SECONDS.
wait_relay() {
    local secs=${1:-60}
    wait_until '! pid_alive "$RELAY_PID"' "$secs" || fail "the relay (pid $RELAY_PID) still runs after ${secs}s"
    RELAY_RC=0
    wait "$RELAY_PID" || RELAY_RC=$?
}

stop_relay() { # SIGTERM and wait (60 s); exit status in RELAY_RC
    kill -TERM "$RELAY_PID" 2>/dev/null || true
    wait_relay 60
}

kill_relay() { # SIGKILL by recorded pid
    kill -KILL "$RELAY_PID" 2>/dev/null || true
    RELAY_RC=0
    wait "$RELAY_PID" 2>/dev/null || RELAY_RC=$?
}

# relay_drain SECONDS [ARGS...]: postbox relay --drain; fails unless it exits 0 within SECONDS.
relay_drain() {
    local secs=$1 t0
    shift
    t0=$(date +%s%N)
    start_relay --drain "$@"
    wait_relay "$secs"
    ((RELAY_RC == 0)) || fail "postbox relay --drain exited with $RELAY_RC"
    say "relay --drain finished in $((($(date +%s%N) - t0) / 1000000)) ms"
}

# ---------------------------------------------------------------------------------------------
# checks on drained messages (lines of amqp-tool drain)

# check_order FILE: per aggregate (header aggregate_type/aggregate_id), the "seq" of the first
# occurrence of each message_id must strictly increase. Prints total, distinct, duplicates.
check_order() {
    awk -F'\t' '
        {
            total++
            if ($1 in seen) { dup++; next }
            seen[$1] = 1; distinct++
            if (!match($6, /"seq"[ ]*:[ ]*[0-9]+/)) { noseq++; next }
            s = substr($6, RSTART, RLENGTH); sub(/^.*:[ ]*/, "", s); s += 0
            agg = $4 "/" $5
            if (!(agg in last)) naggs++
            else if (s <= last[agg]) {
                bad++
                if (bad <= 10) printf "order violation: aggregate %s: seq %d arrived after seq %d\n", agg, s, last[agg] > "/dev/stderr"
            }
            last[agg] = s
        }
        END {
            printf "messages: %d total, %d distinct, %d duplicates, %d aggregates, %d order violations, %d without seq\n", total, distinct, dup, naggs, bad, noseq
            exit (bad > 0 || noseq > 0) ? 1 : 0
        }' "$1"
}

# drain_exactly_once FILE EXPECT [TIMEOUT_S]: drains the test's queue into FILE, then checks
# that nothing crashed in effect: each aggregate in order, every event of the outbox arrived,
# none twice.
drain_exactly_once() {
    local file=$1 expect=$2 timeout=${3:-300} stats dups
    drain_queue "$file" "$expect" 2000 "$timeout"
    stats=$(check_order "$file") || fail "per-aggregate order broken: $stats"
    say "$stats"
    check_all_arrived "$file"
    dups=$(duplicates_in "$file")
    ((dups == 0)) || fail "$dups duplicate(s) although nothing crashed"
}

# check_all_arrived FILE: every event_id of postbox.outbox is among the message ids in FILE.
check_all_arrived() {
    local file=$1 missing extra
    psql_q "SELECT event_id FROM postbox.outbox_all" | LC_ALL=C sort >"$PB_TMP/db_ids"
    cut -f1 "$file" | LC_ALL=C sort -u >"$PB_TMP/got_ids"
    missing=$(LC_ALL=C comm -23 "$PB_TMP/db_ids" "$PB_TMP/got_ids" | wc -l)
    extra=$(LC_ALL=C comm -13 "$PB_TMP/db_ids" "$PB_TMP/got_ids" | wc -l)
    say "events in the outbox: $(wc -l <"$PB_TMP/db_ids"), distinct message ids received: $(wc -l <"$PB_TMP/got_ids"), missing: $missing, unknown: $extra"
    ((missing == 0)) || fail "$missing event(s) never arrived, e.g. $(LC_ALL=C comm -23 "$PB_TMP/db_ids" "$PB_TMP/got_ids" | head -3 | tr '\n' ' ')"
    ((extra == 0)) || fail "$extra message id(s) arrived that are not in the outbox"
}

duplicates_in() { # FILE: number of lines whose message_id repeats an earlier one
    local total distinct
    total=$(wc -l <"$1")
    distinct=$(cut -f1 "$1" | LC_ALL=C sort -u | wc -l)
    echo $((total - distinct))
}

# ---------------------------------------------------------------------------------------------
# cdc capture (logical replication)

# cdc_use_slot [NAME]: this test's replication slot (default pb_<test>; slot names are
# cluster-wide, so every test has its own) in POSTBOX_CDC_SLOT. On exit the relays the test
# started are killed and the slot is dropped, whatever the outcome.
cdc_use_slot() {
    export POSTBOX_CDC_SLOT=${1:-pb_$PB_TEST}
    on_exit "cdc_drop_slot_on_exit $POSTBOX_CDC_SLOT"
}
cdc_drop_slot_on_exit() {
    local pid
    for pid in "${PB_PIDS[@]}"; do
        pid_alive "$pid" && kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    cdc_drop_slot "$1" || say "could not drop replication slot $1"
}

# cdc_drop_slot NAME: drops the slot once no one streams it (waits up to 10 s for a killed
# relay's walsender to go); succeeds when the slot does not exist.
cdc_drop_slot() {
    local slot=$1 i state
    for ((i = 0; i < 50; i++)); do
        state=$(psql -XAtq -d "$PB_ADMIN_DSN" -c "SELECT active FROM pg_replication_slots WHERE slot_name = '$slot'") ||
            return 1
        case $state in
        '') return 0 ;;
        f) psql -XAtq -d "$PB_ADMIN_DSN" -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null 2>&1 && return 0 ;;
        esac
        sleep 0.2
    done
    return 1
}

# use_private_pg [POSTGRES_OPTIONS]: a PostgreSQL of this test's own (scripts/services in a
# state directory of its own, on a free port, with the options added to postgres' -o), for a
# test whose figures other writers on the shared server would blur (WAL is server-wide) or that
# needs server settings of its own. The test's database on it becomes POSTBOX_PG_DSN (and
# PB_ADMIN_DSN its postgres database); the brokers stay the shared ones. Stopped and removed at
# exit.
use_private_pg() {
    local attempt port dir=/tmp/pb-$PB_TEST-pg.$$
    _stop_private_pg() {
        POSTBOX_SERVICES_DIR=$1 bash "$POSTBOX_SOURCE_DIR/scripts/services" stop pg >/dev/null 2>&1
        rm -rf "$1"
    }
    on_exit "_stop_private_pg $dir"
    for attempt in 1 2 3; do
        port=$(free_port)
        POSTBOX_SERVICES_DIR=$dir POSTBOX_PG_PORT=$port POSTBOX_PG_EXTRA_OPTS=${1:-} \
            bash "$POSTBOX_SOURCE_DIR/scripts/services" start pg >"$PB_TMP/private-pg.log" 2>&1 && break
        say "attempt $attempt: our PostgreSQL did not start on port $port: $(tail -n 3 "$PB_TMP/private-pg.log" | tr '\n' ' ')"
        _stop_private_pg "$dir"
        ((attempt < 3)) || fail "our PostgreSQL did not start in 3 attempts"
    done
    PB_ADMIN_DSN=postgresql://postgres@127.0.0.1:$port/postgres
    export POSTBOX_PG_DSN=postgresql://postgres@127.0.0.1:$port/$PB_DB
    psql -XAtq -d "$PB_ADMIN_DSN" -c "CREATE DATABASE $PB_DB" >/dev/null || fail "cannot create database $PB_DB on our PostgreSQL"
    say "own PostgreSQL on port $port${1:+ ($1)}"
}

slot_confirmed_lsn() { # [SLOT]: confirmed_flush_lsn of the slot (default POSTBOX_CDC_SLOT)
    psql_q "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = '${1:-$POSTBOX_CDC_SLOT}'"
}
lsn_le() { # A B: true when LSN A <= LSN B
    [[ $(psql_q "SELECT '$1'::pg_lsn <= '$2'::pg_lsn") == t ]]
}

# start_cdc_relay [ARGS...]: start_relay --capture cdc ARGS, then waits (30 s) until it streams
# the slot (its log says so), which also creates the slot when it is missing.
start_cdc_relay() {
    local before
    before=$(grep -c 'streaming slot' "$PB_RELAY_LOG" || true)
    start_relay --capture cdc "$@"
    wait_until '(($(grep -c "streaming slot" "$PB_RELAY_LOG" || true) > before)) || ! pid_alive "$RELAY_PID"' 30 ||
        fail "the cdc relay did not start streaming within 30 s"
    pid_alive "$RELAY_PID" || fail "the cdc relay exited at start"
}

# cdc_create_slot: creates the slot (and publication) by starting a cdc relay once and stopping
# it, so that events inserted afterwards are in the slot's stream.
cdc_create_slot() {
    start_cdc_relay "$@"
    stop_relay
}

# cdc_wait_caught_up [SECONDS]: waits (default 60 s) until the slot's confirmed position passes
# the current WAL position, i.e. the broker confirmed every event committed before this call
# (the relay confirms a transaction only then); fails the test otherwise.
cdc_wait_caught_up() {
    local secs=${1:-60} target
    target=$(psql_q "SELECT pg_current_wal_lsn()")
    wait_until 'lsn_le "$target" "$(slot_confirmed_lsn)"' "$secs" ||
        fail "the slot's confirmed position $(slot_confirmed_lsn) did not reach $target within ${secs}s"
}

# check_cdc_marked: with cdc.mark_published (the default), every outbox row the relay published
# must be marked published; fails naming the rows left unmarked.
check_cdc_marked() {
    local n
    n=$(pending_count)
    ((n == 0)) || fail "$n outbox row(s) relayed but left unmarked (published_at NULL): $(psql_q "SELECT string_agg(format('id %s (xmin %s)', id, xmin), ', ' ORDER BY id) FROM (SELECT id, xmin FROM postbox.outbox WHERE published_at IS NULL ORDER BY id LIMIT 10) s")"
}

# ---- postbox consume, for the consumer tests ---------------------------------------------------
CONSUMER_LOG=$PB_TMP/consumer.log
CONSUMER_PID=
start_consumer() { # [ARGS...] global options before the command
    local PRE=("$@")
    _with_dsn "$PB_CONSUMER_DSN"
    printf '==== %s: postbox consume\n' "$(date +%T.%N)" >>"$CONSUMER_LOG"
    "$POSTBOX_BIN" "${PRE[@]}" consume >>"$CONSUMER_LOG" 2>&1 &
    CONSUMER_PID=$!
    PB_PIDS+=("$CONSUMER_PID")
}
kill_consumer() { # SIGKILL, wait
    kill -KILL "$CONSUMER_PID" 2>/dev/null || true
    wait "$CONSUMER_PID" 2>/dev/null || true
}
stop_consumer() { # SIGTERM, wait; fails unless it exits 0
    local rc=0
    kill -TERM "$CONSUMER_PID" 2>/dev/null || true
    wait_until '! pid_alive "$CONSUMER_PID"' 60 || fail "the consumer still runs 60 s after SIGTERM"
    wait "$CONSUMER_PID" || rc=$?
    ((rc == 0)) || { tail -n 30 "$CONSUMER_LOG" >&2; fail "postbox consume exited with $rc on SIGTERM"; }
}
inbox_count() { psql_q "SELECT count(*) FROM postbox.inbox"; }
publish() { # ROUTING_KEY MESSAGE_ID TYPE BODY [COUNT]: one message to the test's exchange
    amqp_tool publish "$POSTBOX_AMQP_URL" "$POSTBOX_AMQP_EXCHANGE" "$@" >/dev/null || fail "amqp-tool publish $* failed"
}

# ---- a primary and its streaming replica, for failover tests -----------------------------------
# use_pg_pair [POSTGRES_OPTIONS]: a PostgreSQL primary of this test's own and a streaming replica
# of it (pg_basebackup -R), both on 127.0.0.1 on free ports, run as the postgres user from
# Debian's binaries, data under a directory of their own; replication is synchronous
# (synchronous_standby_names names the replica, synchronous_commit = on), so a COMMIT that
# succeeded on the primary is on the replica too when the primary dies. Sets PG_PAIR_DIR,
# PG_PRIMARY_PORT, PG_REPLICA_PORT, PG_PRIMARY_DATA, PG_REPLICA_DATA; the test's database is
# created on the primary and POSTBOX_PG_DSN names it on both hosts with
# target_session_attrs=read-write (PB_ADMIN_DSN likewise, database postgres). Both servers are
# stopped (immediate: their data goes anyway) and removed at exit.
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
_pg_as() { runuser -u postgres -- "$@" </dev/null; }
_pg_stop_dir() { # DATA: immediate stop of the server running there, if any
    [[ -f $1/postmaster.pid ]] || return 0
    _pg_as "$PG_BIN/pg_ctl" -D "$1" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
}
_pg_pair_cleanup() {
    _pg_stop_dir "$PG_PAIR_DIR/replica"
    _pg_stop_dir "$PG_PAIR_DIR/primary"
    rm -rf "$PG_PAIR_DIR"
}
# pg_pair_start DATA PORT [OPTIONS]: starts the server of DATA on PORT (waits until it is ready)
pg_pair_start() {
    local data=$1 port=$2 opts
    opts="-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$PG_PAIR_DIR"
    opts+=" -c wal_level=logical -c max_replication_slots=10 -c max_wal_senders=10 -c max_connections=100"
    opts+=" -c synchronous_commit=on -c wal_sender_timeout=10s"
    opts+=" ${3:-}"
    _pg_as "$PG_BIN/pg_ctl" -D "$data" -l "$data.log" -w -t 60 start -o "$opts" >>"$PG_PAIR_DIR/pg_ctl.log" 2>&1 ||
        { tail -n 20 "$data.log" >&2; fail "PostgreSQL in $data did not start on port $port"; }
}
use_pg_pair() {
    local extra=${1:-} state
    PG_PAIR_DIR=/tmp/pb-$PB_TEST-pair.$$ # not under PB_TMP: the postgres user cannot enter it
    PG_PRIMARY_DATA=$PG_PAIR_DIR/primary PG_REPLICA_DATA=$PG_PAIR_DIR/replica
    on_exit _pg_pair_cleanup
    rm -rf "$PG_PAIR_DIR"
    mkdir -p "$PG_PAIR_DIR"
    chown postgres:postgres "$PG_PAIR_DIR"
    _pg_as "$PG_BIN/initdb" -D "$PG_PRIMARY_DATA" -U postgres --auth=trust -E UTF8 --no-locale \
        >"$PG_PAIR_DIR/initdb.log" 2>&1 || fail "initdb failed: $(tail -n 3 "$PG_PAIR_DIR/initdb.log")"
    PG_PRIMARY_PORT=$(free_port)
    # only the primary waits for the replica: once promoted, the replica has no standby to wait for
    pg_pair_start "$PG_PRIMARY_DATA" "$PG_PRIMARY_PORT" "-c synchronous_standby_names=replica $extra"
    # -R: standby.signal and primary_conninfo; cluster_name is the walreceiver's application_name,
    # the name synchronous_standby_names waits for
    _pg_as "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PG_PRIMARY_PORT" -U postgres -D "$PG_REPLICA_DATA" \
        -R -X stream -c fast >"$PG_PAIR_DIR/basebackup.log" 2>&1 ||
        fail "pg_basebackup failed: $(tail -n 3 "$PG_PAIR_DIR/basebackup.log")"
    PG_REPLICA_PORT=$(free_port)
    while [[ $PG_REPLICA_PORT == "$PG_PRIMARY_PORT" ]]; do PG_REPLICA_PORT=$(free_port); done
    pg_pair_start "$PG_REPLICA_DATA" "$PG_REPLICA_PORT" "-c cluster_name=replica $extra"
    wait_until '[[ $(psql -XAtq -h 127.0.0.1 -p "$PG_PRIMARY_PORT" -U postgres -d postgres \
        -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = '"'replica'"'") == sync ]]' 30 ||
        fail "the replica did not become a synchronous standby"
    psql -XAtq -h 127.0.0.1 -p "$PG_PRIMARY_PORT" -U postgres -d postgres -c "CREATE DATABASE $PB_DB" >/dev/null ||
        fail "cannot create database $PB_DB on the primary"
    local hosts="127.0.0.1:$PG_PRIMARY_PORT,127.0.0.1:$PG_REPLICA_PORT"
    PB_ADMIN_DSN="postgresql://postgres@$hosts/postgres?target_session_attrs=read-write"
    export POSTBOX_PG_DSN="postgresql://postgres@$hosts/$PB_DB?target_session_attrs=read-write"
    say "own primary on port $PG_PRIMARY_PORT, synchronous streaming replica on port $PG_REPLICA_PORT"
}
# pg_pair_kill_primary: stops the primary the hard way (pg_ctl stop -m immediate: no shutdown
# checkpoint, every backend gone at once, like a crash)
pg_pair_kill_primary() {
    _pg_as "$PG_BIN/pg_ctl" -D "$PG_PRIMARY_DATA" -m immediate -w -t 30 stop >>"$PG_PAIR_DIR/pg_ctl.log" 2>&1 ||
        fail "pg_ctl stop -m immediate of the primary failed"
}
# pg_pair_promote: promotes the replica (waits until it accepts writes)
pg_pair_promote() {
    _pg_as "$PG_BIN/pg_ctl" -D "$PG_REPLICA_DATA" -w -t 60 promote >>"$PG_PAIR_DIR/pg_ctl.log" 2>&1 ||
        fail "pg_ctl promote of the replica failed"
}
