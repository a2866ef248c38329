#!/usr/bin/env bash
# Expiry and delay with the cdc capture (outbox rows and postbox.emit): see delay_expiry_lib.sh.
source "$(dirname "$0")/lib.sh"
CAPTURE=cdc
source "$(dirname "$0")/delay_expiry_lib.sh"
