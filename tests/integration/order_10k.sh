#!/usr/bin/env bash
# 10,000 events over 100 aggregates, default configuration: every event arrives exactly once and
# each aggregate's events arrive in order. While nothing fails, the relay runs no UPDATE
# statement on the outbox (a user's statement-level UPDATE trigger would fire for each).
source "$(dirname "$0")/lib.sh"

N_AGG=100 PER_AGG=100
pb_init
use_least_privilege # the relay runs as a member of postbox_relay
setup_queue '#'
psql_q "CREATE TABLE public.outbox_updates (at timestamptz NOT NULL DEFAULT now());
        CREATE FUNCTION public.count_outbox_updates() RETURNS trigger LANGUAGE plpgsql AS
          \$\$ BEGIN INSERT INTO public.outbox_updates DEFAULT VALUES; RETURN NULL; END \$\$;
        CREATE TRIGGER count_updates AFTER UPDATE ON postbox.outbox
          FOR EACH STATEMENT EXECUTE FUNCTION public.count_outbox_updates();"
t0=$(date +%s%N)
# a few transactions, each a slice of every aggregate's sequence
enqueue_seq $N_AGG 1 25
enqueue_seq $N_AGG 26 50
enqueue_seq $N_AGG 51 75
enqueue_seq $N_AGG 76 $PER_AGG
total=$((N_AGG * PER_AGG))
say "enqueued $(psql_q 'SELECT count(*) FROM postbox.outbox_all') events in $((($(date +%s%N) - t0) / 1000000)) ms"

relay_drain 300
drain_exactly_once "$PB_TMP/got" $total 300
pending=$(pending_count)
say "pending rows: $pending, published rows: $(published_count), dead letters: $(dead_count)"
((pending == 0)) || fail "$pending event(s) still pending"
[[ $(published_count) == "$total" ]] || fail "not every row is marked published"
updates=$(psql_q "SELECT count(*) FROM public.outbox_updates")
((updates == 0)) || fail "$updates UPDATE statement(s) on postbox.outbox although no event failed"
