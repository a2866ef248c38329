#!/usr/bin/env bash
# The cdc relay SIGKILLed while events are delayed (set aside in postbox.cdc_deferred): see
# delay_kill_lib.sh.
source "$(dirname "$0")/lib.sh"
CAPTURE=cdc
source "$(dirname "$0")/delay_kill_lib.sh"
