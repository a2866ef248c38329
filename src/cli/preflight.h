/* Checks of the configuration that come after parsing and before a command runs: contradictory
 * TLS settings, secret files, the connection string, and the warnings about verification that
 * is off. A failure here is a configuration error (exit 2). */
#ifndef PB_CLI_PREFLIGHT_H
#define PB_CLI_PREFLIGHT_H

#include "cli/cli.h"

/* Runs the checks command needs; reads postgres.password_file and amqp.password_file into
 * cfg (the password joins postgres.dsn and amqp.url, where every output hides it). */
pb_status_t pb_preflight(pb_config_t *cfg, const char *command, pb_error_t *err) PB_MUSTCHECK;

#endif
