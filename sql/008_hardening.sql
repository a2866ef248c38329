-- postbox schema, version 8: functions that do not depend on the caller's search_path, and
-- advisory lock keys of the relay's shards that are this schema's own.
--
-- search_path. A function whose body is a string is parsed when it runs, with the search_path
-- of the session that runs it: a function or operator that matches its arguments better than
-- the built-in one (CVE-2018-1058: e.g. public.to_jsonb(shop.orders) for to_jsonb(NEW) in
-- postbox.capture) or a schema put before pg_catalog would be called instead, with the
-- privileges of whoever runs postbox's function. Every such function now runs with
-- search_path = pg_catalog, postbox, pg_temp. Functions with an SQL-standard body (RETURN ...,
-- e.g. postbox.shard_of) are bound when created and keep being inlined. Conditions of
-- postbox.capture triggers are evaluated with that search_path too: name objects of other
-- schemas in them with their schema.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.pronamespace = 'postbox'::regnamespace AND p.prosqlbody IS NULL
               AND NOT EXISTS (SELECT FROM unnest(p.proconfig) c WHERE c LIKE 'search\_path=%') LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, postbox, pg_temp', f);
    END LOOP;
END
$$;

-- Advisory lock keys. The relay's shard, member and guard locks used fixed keys
-- (hashtext('postbox.relay.shard'), ...), the same in every database: any session may take any
-- advisory lock, so one holding those keys kept every relay idle or refused. The keys are now
-- random per schema, in a table only the schema owner and the relay's role can read. (A role
-- that may connect still sees them in pg_locks while relays hold them: keep CONNECT on the
-- database to the roles that need it. Stop every relay before upgrading: an older relay still
-- uses the old keys.)
CREATE TABLE postbox.relay_lock_keys (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    member   integer NOT NULL,
    shard    integer NOT NULL,
    guard    integer NOT NULL,
    CHECK (member <> shard AND shard <> guard AND guard <> member)
);
REVOKE ALL ON postbox.relay_lock_keys FROM PUBLIC;

-- 32 bits of a random uuid each (its first 8 hex digits are random)
INSERT INTO postbox.relay_lock_keys (member, shard, guard)
SELECT ('x' || left(replace(gen_random_uuid()::text, '-', ''), 8))::bit(32)::integer,
       ('x' || left(replace(gen_random_uuid()::text, '-', ''), 8))::bit(32)::integer,
       ('x' || left(replace(gen_random_uuid()::text, '-', ''), 8))::bit(32)::integer;
