-- postbox schema, version 27: the outbox's NOTIFY only when a relay sleeps (issue 32).
--
-- PostgreSQL serialises every transaction that NOTIFYs, cluster-wide: PreCommit_Notify takes a
-- lock that is held until the transaction ends, across the commit's WAL flush, so that the
-- notification queue stays in commit order. With synchronous commit that takes away group
-- commit from the producers (bench/producer, 8 clients: enqueue/plain 0.30 with the NOTIFY,
-- 0.45 without); with synchronous_commit off it still cost 16 producers a sixth of their rate.
-- A busy relay needs no wake-up: it claims again as soon as a batch is settled. Only a relay
-- that sleeps (on LISTEN postbox_outbox, up to relay.poll_interval) does. Hence:
--
-- A relay that finds nothing to claim asks for the advisory lock (hashtext('postbox.relay.asleep'),
-- 0) in exclusive mode, on its settle session, without blocking (it keeps listening meanwhile);
-- once granted it claims once more, then sleeps holding the lock, and lets go of it when it
-- claims events again. The outbox's statement trigger tries the same lock in shared mode, for
-- the transaction: when it cannot have it (a relay sleeps, or asks to), the transaction
-- NOTIFYs as before; when it can, it keeps it until it ends and does not NOTIFY. No event waits
-- for the poll interval:
--   * a transaction that did not NOTIFY holds the shared lock until after its commit is visible,
--     so a relay's exclusive lock is granted only after that, and the relay claims once more
--     after the grant: it finds the event;
--   * a transaction that tried while a relay held or asked for the lock NOTIFYs at commit, and
--     the relay LISTENs from its start.
-- Producers never wait on the lock (a try); a relay never waits for it without listening (a
-- long transaction that holds the shared lock delays only the relay's sleep, and every producer
-- NOTIFYs meanwhile). Several relays (shards) queue for the lock: one sleeps with it, the others
-- ask, and every producer NOTIFYs, waking them all; a relay granted the lock NOTIFYs once
-- itself, since the relays that asked with it waited for the same producers but are not granted
-- while it sleeps (model/wake.pml checks these rules). The cdc capture does not listen: with only
-- cdc relays nobody takes the lock and nobody NOTIFYs. A session that takes the key itself
-- (anyone may take an advisory lock) makes producers NOTIFY again, or keeps a relay asking; the
-- events committed without NOTIFY just before such a session was granted the lock wait for the
-- relay's poll interval, once. The key is not secret.
--
-- postbox.notify (a database, role or session setting): unset, 'on' or 'auto' = as above;
-- 'always' = every committing writer NOTIFYs (version 21's behaviour: use it while relays older
-- than this version run, which do not take the lock and would otherwise wake only by their
-- poll interval); 'off' = never (relays find new events by their poll interval).
--
-- Applying this version replaces one function: an online upgrade.

CREATE OR REPLACE FUNCTION postbox.notify_outbox() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, postbox, pg_temp
AS $$
DECLARE
    v_mode constant text := current_setting('postbox.notify', true);
BEGIN
    IF v_mode = 'always'
       OR (v_mode IS DISTINCT FROM 'off'
           AND NOT pg_try_advisory_xact_lock_shared(hashtext('postbox.relay.asleep'), 0)) THEN
        PERFORM pg_notify('postbox_outbox', '');
    END IF;
    RETURN NULL;
END
$$;
COMMENT ON FUNCTION postbox.notify_outbox() IS
    'wakes a sleeping relay at commit: NOTIFY postbox_outbox only when a relay holds or asks for '
    'the lock (hashtext(''postbox.relay.asleep''), 0), or postbox.notify = always';
