-- postbox schema, version 26: relay.mask_stored for the cdc capture.
--
-- With relay.mask_stored the cdc relay sets a delayed event aside in postbox.cdc_deferred with the
-- payload and headers it will publish, masked by the [mask] rules, instead of the producer's
-- texts. masked says so: the relay that claims the row later publishes it as it is, since an
-- hmac rule applied twice would hash the token instead of the value. Rows written before this
-- version, and rows of relays without relay.mask_stored, hold the texts as the stream carried
-- them (false) and are masked when published, as before.
--
-- Applying this version adds a column with a constant default (no table rewrite): an online
-- upgrade. Upgrade every relay of a slot together: a relay older than this version would mask a
-- masked row once more.
ALTER TABLE postbox.cdc_deferred
    ADD COLUMN IF NOT EXISTS masked boolean NOT NULL DEFAULT false;

COMMENT ON COLUMN postbox.cdc_deferred.masked IS
    'payload and headers are masked by [mask] already (relay.mask_stored): published as they are';
