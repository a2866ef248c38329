#!/usr/bin/env bash
# The poll relay SIGKILLed while events are delayed: see delay_kill_lib.sh.
source "$(dirname "$0")/lib.sh"
CAPTURE=poll
source "$(dirname "$0")/delay_kill_lib.sh"
