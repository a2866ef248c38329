-- postbox schema, version 7: events written by postbox.emit() are signed, so that the cdc relay
-- can tell them from forgeries.
--
-- pg_logical_emit_message() is executable by every role (PUBLIC) by default: any login to the
-- database could write a message with the relay's prefix and an event_id, payload and routing
-- key of its choosing, and the relay published it, past every grant on postbox.outbox. Now
-- postbox.emit() (SECURITY DEFINER, executable only by the roles it is granted to) signs each
-- message with an HMAC-SHA-256 key that only the schema owner and the relay (which reads it at
-- start) can read, and the relay drops every message whose signature does not verify. `postbox
-- init` also revokes the built-in from PUBLIC when it runs as a superuser (see README).

-- The key, one row. Stored with its HMAC pads (key XOR 0x36.., key XOR 0x5c..) so the function
-- needs no bit operations per call: HMAC(k, m) = sha256(opad || sha256(ipad || m)) for a key of
-- the hash's block size (64 bytes). Messages the relay meets at an LSN before since_lsn were
-- written before signing existed and are accepted unsigned (drain the relay before upgrading to
-- avoid even that).
CREATE TABLE postbox.emit_key (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    key       bytea   NOT NULL CHECK (length(key) = 64),
    ipad      bytea   NOT NULL,
    opad      bytea   NOT NULL,
    since_lsn pg_lsn  NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON postbox.emit_key FROM PUBLIC;

DO $$
DECLARE
    -- 4 random uuids (gen_random_uuid uses the server's strong random source): 488 random bits
    v_key  bytea := decode((SELECT string_agg(replace(gen_random_uuid()::text, '-', ''), '')
                            FROM generate_series(1, 4)), 'hex');
    v_ipad bytea := v_key;
    v_opad bytea := v_key;
BEGIN
    FOR i IN 0..63 LOOP
        v_ipad := set_byte(v_ipad, i, get_byte(v_key, i) # 54);   -- 0x36
        v_opad := set_byte(v_opad, i, get_byte(v_key, i) # 92);   -- 0x5c
    END LOOP;
    INSERT INTO postbox.emit_key (key, ipad, opad, since_lsn)
    VALUES (v_key, v_ipad, v_opad, pg_current_wal_lsn());
END
$$;

-- The message: 'hmac-sha256:' || 64 hex digits || ':' || the event as JSON text, the MAC taken
-- over the JSON text's UTF-8 bytes.
CREATE OR REPLACE FUNCTION postbox.emit(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_headers        jsonb DEFAULT '{}'::jsonb,
    p_destination    text  DEFAULT NULL,
    p_prefix         text  DEFAULT 'postbox')
RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_event_id uuid := gen_random_uuid();
    v_body     text;
    v_ipad     bytea;
    v_opad     bytea;
BEGIN
    SELECT k.ipad, k.opad INTO STRICT v_ipad, v_opad FROM postbox.emit_key k;
    v_body := jsonb_build_object(
        'event_id', v_event_id,
        'aggregate_type', p_aggregate_type,
        'aggregate_id', p_aggregate_id,
        'event_type', p_event_type,
        'payload', p_payload,
        'headers', coalesce(p_headers, '{}'::jsonb),
        'destination', p_destination,
        'created_at_us', (extract(epoch FROM clock_timestamp()) * 1000000)::bigint)::text;
    PERFORM pg_logical_emit_message(true, p_prefix,
        'hmac-sha256:' || encode(sha256(v_opad || sha256(v_ipad || convert_to(v_body, 'UTF8'))), 'hex')
        || ':' || v_body);
    RETURN v_event_id;
END
$$;
-- A signed event is one the relay publishes: only roles granted this may write one.
REVOKE EXECUTE ON FUNCTION postbox.emit(text, text, text, jsonb, jsonb, text, text) FROM PUBLIC;

-- The relay's --drain marker, for a relay role without EXECUTE on the built-in. p_nonce is the
-- relay's own random text: a marker someone else wrote does not end its drain.
CREATE FUNCTION postbox.emit_drain_marker(p_nonce text)
RETURNS void
LANGUAGE sql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_logical_emit_message(true, 'postbox-drain', p_nonce)
$$;
REVOKE EXECUTE ON FUNCTION postbox.emit_drain_marker(text) FROM PUBLIC;
