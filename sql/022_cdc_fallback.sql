-- postbox schema, version 22: the cdc relay's poll fallback (cdc.on_excess_lag = poll).
--
-- Over cdc.max_slot_lag the relay may give up its replication slot, so that the server keeps no
-- more WAL for it, and publish from the outbox rows with the poll capture until it has caught up;
-- then it creates the slot afresh and streams again. A row here says that the slot named in it is
-- given up: while it exists, the rows of postbox.outbox not yet published are the poll capture's
-- to publish, and a relay that starts (after a crash, anywhere) resumes the fallback instead of
-- streaming from whatever slot it finds, which may have been created at a point past rows nobody
-- published. The row is written (with the slot's record in postbox.cdc_slot_positions deleted) in
-- the transaction before the slot is dropped, and deleted only once everything the new slot does
-- not carry has been published.
CREATE TABLE IF NOT EXISTS postbox.cdc_fallback (
    slot_name text PRIMARY KEY,
    reason    text NOT NULL,                  -- why the relay fell back, for `postbox status` and people
    since     timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE postbox.cdc_fallback IS
    'per cdc replication slot given up by its relay (cdc.on_excess_lag = poll): the outbox rows '
    'are published by the poll capture until the relay streams from a new slot again';
