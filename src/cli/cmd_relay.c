/* postbox relay: publish committed outbox events to the configured sink. */
#include <string.h>

#include "cli/cli.h"
#include "common/log.h"
#include "relay/relay.h"

int pb_cmd_relay(pb_cli_t *cli)
{
    bool config_error = false;
    pb_relay_opts_t opts = {.drain = cli->drain, .config_error = &config_error};
    pb_error_t err;
    pb_status_t st = pb_relay_run(&cli->cfg, &opts, cli->stop, &err);
    if (st != PB_OK) {
        log_error("relay", "%s", err.msg);
        return config_error ? PB_EXIT_USAGE : PB_EXIT_FAILURE;
    }
    return PB_EXIT_OK;
}
