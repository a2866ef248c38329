#!/usr/bin/env bash
# The schema's SQL cannot be turned against its callers, nor its relays idled by anyone:
# 1. search_path: objects that shadow what postbox's functions call are not called, neither a
#    better-matching overload found through the default search_path (public.to_jsonb(<table>)
#    against to_jsonb(NEW) in postbox.capture) nor a schema a session puts before pg_catalog
#    (evil.pg_notify against the outbox's NOTIFY trigger behind postbox.enqueue). Every postbox
#    function either pins search_path or has an SQL-standard body (bound when created).
# 2. advisory locks: a session holding the relay's former fixed lock keys (shard, member and
#    guard, as any session may) does not keep the relay idle; the keys of this schema are not
#    readable by an unprivileged role.
source "$(dirname "$0")/lib.sh"

ROLE=pb_sql_hardening_nobody
psql_admin() { psql -XAtq -v ON_ERROR_STOP=1 -d "$PB_ADMIN_DSN" -c "$1" >/dev/null; }
on_exit "psql -XAtq -d '$PB_ADMIN_DSN' -c 'DROP DATABASE IF EXISTS $PB_DB WITH (FORCE)' -c 'DROP ROLE IF EXISTS $ROLE' >/dev/null 2>&1 || true"
psql_admin "DROP ROLE IF EXISTS $ROLE" 2>/dev/null || true
psql_admin "CREATE ROLE $ROLE LOGIN"
pb_init
setup_queue '#'

# ---- 1. search_path ------------------------------------------------------------------------
psql_q "CREATE SCHEMA evil;
        CREATE TABLE evil.calls (fn text);
        GRANT ALL ON SCHEMA evil TO PUBLIC; GRANT ALL ON evil.calls TO PUBLIC;
        CREATE FUNCTION evil.pg_notify(text, text) RETURNS void LANGUAGE sql
            AS \$\$ INSERT INTO evil.calls VALUES ('pg_notify') \$\$;
        CREATE TABLE public.orders (id int PRIMARY KEY, status text);
        CREATE FUNCTION public.to_jsonb(public.orders) RETURNS jsonb LANGUAGE sql
            AS \$\$ INSERT INTO evil.calls VALUES ('to_jsonb') RETURNING '{\"id\": \"shadowed\"}'::jsonb \$\$;
        CREATE TRIGGER orders_paid AFTER UPDATE ON public.orders FOR EACH ROW
            EXECUTE FUNCTION postbox.capture('order', 'id', 'order.paid.v1');
        INSERT INTO public.orders VALUES (7, 'new');" >/dev/null
psql_q "SET search_path = evil, pg_catalog, public;
        SELECT postbox.enqueue('order', '1', 'created.v1', '{}');" >/dev/null
psql_q "UPDATE public.orders SET status = 'paid' WHERE id = 7" >/dev/null
calls=$(psql_q "SELECT coalesce(string_agg(fn, ','), '') FROM evil.calls")
agg=$(psql_q "SELECT aggregate_id FROM postbox.outbox WHERE event_type = 'order.paid.v1'")
say "shadowing functions called: '${calls}'; captured aggregate id: '$agg'"
[[ -z $calls ]] || fail "postbox's functions called the shadowing function(s): $calls"
[[ $agg == 7 ]] || fail "postbox.capture built its payload with a shadowing to_jsonb: aggregate id '$agg'"
unpinned=$(psql_q "SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p
                   WHERE p.pronamespace = 'postbox'::regnamespace AND p.prosqlbody IS NULL
                     AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%')")
[[ -z $unpinned ]] || fail "postbox functions without a pinned search_path: $unpinned"

# ---- 2. advisory lock keys -------------------------------------------------------------------
psql_q "DELETE FROM postbox.outbox" >/dev/null
# what every relay used to take: the shard lock (shard 0 of relay.shards = 1), the member lock
# of another relay.shards (a relay then refused to start) and the guard (the relay waited)
psql -XAtq -d "${POSTBOX_PG_DSN/postgres@/$ROLE@}" \
    -c "SELECT pg_advisory_lock(hashtext('postbox.relay.shard'), 0)" \
    -c "SELECT pg_advisory_lock_shared(hashtext('postbox.relay.member'), 7)" \
    -c "SELECT pg_advisory_lock_shared(hashtext('postbox.relay.guard'), 0)" \
    -c "SELECT pg_sleep(120)" >/dev/null &
PB_PIDS+=("$!")
wait_until "(( \$(psql_q \"SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE l.locktype = 'advisory' AND a.usename = '$ROLE'\") == 3 ))" 10 ||
    fail "the squatting session did not take its locks"
if out=$(psql -XAtq -v ON_ERROR_STOP=1 -d "${POSTBOX_PG_DSN/postgres@/$ROLE@}" -c "SELECT * FROM postbox.relay_lock_keys" 2>&1); then
    fail "an unprivileged role can read the relay's lock keys: $out"
fi
enqueue_seq 5 1 4
start_relay --set relay.poll_interval=200ms
wait_until '(($(queue_count) >= 20))' 20 || fail "the relay published $(queue_count) of 20 events while a session held the old fixed lock keys"
stop_relay
((RELAY_RC == 0)) || fail "the relay exited with $RELAY_RC"
say "ok: shadowing objects are not called; 20 events relayed while another session held the old lock keys"
