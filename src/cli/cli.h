/* Subcommands of the postbox binary, one file each; main.c parses the shared options. */
#ifndef PB_CLI_CLI_H
#define PB_CLI_CLI_H

#include <signal.h>
#include <stdbool.h>

#include "config/config.h"

/* Exit codes. */
#define PB_EXIT_OK 0
#define PB_EXIT_FAILURE 1 /* the command ran and failed */
#define PB_EXIT_USAGE 2   /* bad command line or configuration */

typedef struct pb_cli {
    pb_config_t cfg;
    bool drain;                  /* relay --drain */
    bool reference;              /* config --reference */
    bool sample;                 /* config --sample */
    bool print_grants;           /* init --print-grants */
    const char *subcommand;      /* second word, for commands that have them (cdc drop-slot) */
    volatile sig_atomic_t *stop; /* set by SIGTERM / SIGINT */
    char **args;                 /* status, dlq, purge, demo, shadow, init, check: own args */
    int n_args;
} pb_cli_t;

int pb_cmd_init(pb_cli_t *cli);
int pb_cmd_check(pb_cli_t *cli);
int pb_cmd_relay(pb_cli_t *cli);
int pb_cmd_consume(pb_cli_t *cli);
int pb_cmd_status(pb_cli_t *cli);
int pb_cmd_dlq(pb_cli_t *cli);
int pb_cmd_purge(pb_cli_t *cli);
int pb_cmd_cdc(pb_cli_t *cli);
int pb_cmd_demo(pb_cli_t *cli);
int pb_cmd_shadow(pb_cli_t *cli);

#endif
