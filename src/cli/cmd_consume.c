/* postbox consume: read a queue, run the SQL handler of each message exactly once in effect. */
#include "cli/cli.h"
#include "common/log.h"
#include "consume/consume.h"

int pb_cmd_consume(pb_cli_t *cli)
{
    bool config_error = false;
    pb_consume_opts_t opts = {.drain = cli->drain, .config_error = &config_error};
    pb_error_t err;
    if (pb_consume_run(&cli->cfg, &opts, cli->stop, &err) != PB_OK) {
        log_error("consume", "%s", err.msg);
        return config_error ? PB_EXIT_USAGE : PB_EXIT_FAILURE;
    }
    return PB_EXIT_OK;
}
