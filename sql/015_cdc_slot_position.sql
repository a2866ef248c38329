-- postbox schema, version 15: the position the cdc relay last confirmed on its replication slot.
--
-- A slot that is dropped, invalidated (wal_status = 'lost', max_slot_wal_keep_size) or dropped
-- and created again under the same name silently skips every change between its old position
-- and its new one: a new slot starts at the WAL position of its creation. The slot itself cannot
-- tell (PostgreSQL 15 keeps no creation time or identity of a slot), so the relay records here,
-- in the database it relays from, how far it confirmed, and checks the slot against it whenever
-- it connects: a slot that is missing, lost, or whose confirmed position is past the recorded
-- one is not the slot the relay confirmed on, and the relay stops instead of skipping.
--
-- The relay writes a position here before it reports it to PostgreSQL (never after), so the
-- slot's confirmed_flush_lsn of the genuine slot is never past the row; it writes at most once a
-- second, in a statement of its own (not per event). `postbox cdc drop-slot` deletes the row with
-- the slot: a slot dropped on purpose is created afresh at the next start.
CREATE TABLE IF NOT EXISTS postbox.cdc_slot_positions (
    slot_name     text PRIMARY KEY,
    confirmed_lsn pg_lsn NOT NULL,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE postbox.cdc_slot_positions IS
    'per cdc replication slot, the position the relay last confirmed on it (written before it is '
    'reported to the server): a slot whose confirmed_flush_lsn is past it was replaced';
