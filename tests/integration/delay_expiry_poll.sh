#!/usr/bin/env bash
# Expiry and delay with the poll capture: see delay_expiry_lib.sh.
source "$(dirname "$0")/lib.sh"
CAPTURE=poll
source "$(dirname "$0")/delay_expiry_lib.sh"
