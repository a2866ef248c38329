/* postbox: command-line entry point. Parses the shared options, loads the configuration
 * (defaults < file < environment < command line) and dispatches to a subcommand. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "cli/preflight.h"
#include "common/log.h"

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal; /* no SA_RESTART: sleeps and selects end at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

static void usage(FILE *out)
{
    fputs("usage: postbox [options] <command> [command options]\n"
          "\n"
          "postbox relays events written to a PostgreSQL outbox table, in the same transaction as\n"
          "the business change, to a message broker: at least once, in order per aggregate.\n"
          "\n"
          "commands:\n"
          "  init            create or upgrade the postbox schema (idempotent)\n"
          "      --print-grants  print the SQL of the least-privilege roles postbox_producer,\n"
          "                  postbox_relay and postbox_consumer instead (see README)\n"
          "      --print-sql [--from-scratch]  print the migrations the database lacks (all of\n"
          "                  them with --from-scratch, which asks no database) as one SQL script\n"
          "                  for review; it records what it applies, as init does\n"
          "      --mark-applied VERSION  record the migrations up to VERSION as applied\n"
          "                  without running them (applied by hand)\n"
          "      --partition-by INTERVAL  put published history and the dead-letter tables on\n"
          "                  the partitioned layout (e.g. \"1 day\"; see README, Partitioned storage)\n"
          "  check           preflight: PostgreSQL version, clock skew, schema version, indexes,\n"
          "                  the role's privileges, cdc settings, slot and replica identity, the\n"
          "                  broker (reachable, credentials, exchange/stream/queue and its bound);\n"
          "                  one line per problem with a hint, exit 1 when one fails\n"
          "      --relay, --consume  check for this side only (default: the relay, and the\n"
          "                  consumer when a handler is configured)\n"
          "      --json      one JSON object; --all also lists what passed; --strict fails on\n"
          "                  warnings too\n"
          "  relay           publish committed events until SIGTERM/SIGINT (the batch in flight\n"
          "                  is finished first, exit 0)\n"
          "      --drain     exit 0 once no pending event that is due is left (cdc: once the\n"
          "                  stream has caught up with everything committed before the start);\n"
          "                  events delayed by their available_at stay for the next relay\n"
          "      --capture poll|cdc  same as --set relay.capture=...\n"
          "  consume         read a queue and run each message's SQL handler exactly once in\n"
          "                  effect (inbox), until SIGTERM/SIGINT\n"
          "      --drain     exit 0 once nothing is pending for the consumer (unacknowledged\n"
          "                  deliveries to come again included) and nothing is held\n"
          "  cdc drop-slot   remove the cdc replication slot and publication (refused while a\n"
          "                  relay streams it)\n"
          "  status          backlog, lag, delayed events, dead letters, inbox counts, relay\n"
          "                  shard owners, slot lag\n"
          "      --json      one JSON object instead of the table\n"
          "      --max-backlog N, --max-lag DURATION, --max-dead N, --max-slot-lag BYTES\n"
          "                  exit 1 when a figure crosses the threshold (a check)\n"
          "  dlq [--inbox] list|show|replay|drop [filters]\n"
          "                  dead letters of the outbox (postbox.dead_letters) or, with --inbox,\n"
          "                  of the consumers (postbox.inbox_dead); filters: --id N,\n"
          "                  --event-type T, --aggregate TYPE:ID, --consumer C, --since TIME,\n"
          "                  --until TIME (timestamps or ages such as 2h), --limit N, --all;\n"
          "                  replay/drop act in one transaction and print how many rows;\n"
          "                  an inbox replay republishes the messages to the broker of\n"
          "                  consume.source (amqp.exchange, or their NATS subjects)\n"
          "  purge --older-than DURATION [--batch N] [--outbox-only|--inbox-only]\n"
          "        [--consumer C] [--dead-letters] [--sequences]\n"
          "                  delete published outbox rows and handled inbox rows older than\n"
          "                  DURATION in batches of short transactions; --dead-letters: also\n"
          "                  dead letters and dead inbox messages dead for longer, any type;\n"
          "                  --sequences: also the sequence rows of aggregates idle for longer\n"
          "                  (README, Retention)\n"
          "  demo [--broker amqp|nats|redis|kafka] [--orders N] [--duration D] [--kills N]\n"
          "       [--producers N] [--rollback PCT] [--chaos broker] [--database NAME] [--keep]\n"
          "                  a throwaway shop (database NAME, default postbox_demo, dropped and\n"
          "                  created) places orders (default 50/s for 60 s, 10% more rolled\n"
          "                  back) while its relay and consumer are SIGKILLed N times each\n"
          "                  (default 4; --chaos broker also restarts the broker through\n"
          "                  scripts/services); prints progress and a summary, exit 1 when an\n"
          "                  order took effect twice, never, or out of order (the children's\n"
          "                  configuration and logs are kept then, or with --keep)\n"
          "  shadow compare --legacy SRC --ours SRC --key SPEC [--fields SPEC,...] [--json]\n"
          "                  read a legacy publisher's queue or stream and postbox's shadow\n"
          "                  copies (relay.shadow) without consuming them (SRC: amqp:QUEUE,\n"
          "                  redis:STREAM, kafka:TOPIC or nats:STREAM), match them by SPEC\n"
          "                  (body, a JSON pointer such as\n"
          "                  /order_id, or header:NAME; --legacy-key/--ours-key when the sides\n"
          "                  differ) and compare the fields (default body; LEGACY=OURS when\n"
          "                  named differently); one line per missing, extra or differing\n"
          "                  event, then a summary; exit 0 same, 1 different, 2 error;\n"
          "                  --body-field F (Redis: the field holding the body, default\n"
          "                  payload), --limit N (messages per side, default 1000000)\n"
          "  config          print the effective configuration (secrets hidden)\n"
          "      --reference list every option with its default, environment variable and meaning\n"
          "      --sample    print a commented INI file with every option at its default\n"
          "\n"
          "options (anywhere on the line):\n"
          "  -c, --config FILE         INI file to read (also: POSTBOX_CONFIG)\n"
          "  -s, --set SECTION.KEY=VAL set one option, e.g. --set relay.batch_size=1000\n"
          "      --dsn DSN             same as --set postgres.dsn=DSN\n"
          "  -v, --verbose             same as --set log.level=debug\n"
          "  -h, --help                this text; --version prints the version\n"
          "\n"
          "precedence: built-in defaults < config file < environment variables < command line.\n"
          "exit codes: 0 success, 1 failure, 2 bad command line or configuration.\n",
          out);
}

typedef struct setting {
    const char *name;
    const char *value;
} setting_t;

static int apply_setting(pb_config_t *cfg, const char *name, const char *value)
{
    pb_error_t err;
    if (pb_config_set(cfg, name, value, PB_CFG_CLI, &err) != PB_OK) {
        fprintf(stderr, "postbox: %s\n", err.msg);
        return -1;
    }
    return 0;
}

/* Commands that take arguments of their own: main passes every argument it does not know on. */
static bool has_own_args(const char *command)
{
    return strcmp(command, "status") == 0 || strcmp(command, "dlq") == 0 ||
           strcmp(command, "purge") == 0 || strcmp(command, "demo") == 0 ||
           strcmp(command, "shadow") == 0 || strcmp(command, "init") == 0 ||
           strcmp(command, "check") == 0;
}

int main(int argc, char **argv)
{
    pb_cli_t cli = {.stop = &stop_requested};
    const char *command = NULL;
    const char *config_file = getenv("POSTBOX_CONFIG");
    setting_t *settings = calloc((size_t)argc, sizeof *settings);
    size_t n_settings = 0;
    bool help = false;
    int rc = PB_EXIT_USAGE;

    cli.args = calloc((size_t)argc, sizeof *cli.args);
    if (!settings || !cli.args)
        return PB_EXIT_FAILURE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            help = true;
        } else if (strcmp(a, "--version") == 0) {
            printf("postbox %s\n", POSTBOX_VERSION_STRING);
            rc = PB_EXIT_OK;
            goto out;
        } else if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0) {
            if (!next)
                goto missing_value;
            config_file = argv[++i];
        } else if (strcmp(a, "-s") == 0 || strcmp(a, "--set") == 0 || strcmp(a, "--dsn") == 0) {
            if (!next)
                goto missing_value;
            if (strcmp(a, "--dsn") == 0) {
                settings[n_settings++] = (setting_t){"postgres.dsn", argv[++i]};
                continue;
            }
            char *eq = strchr(argv[++i], '=');
            if (!eq) {
                pb_args_error("postbox: --set \"%s\": expected section.key=value", argv[i]);
                goto out;
            }
            *eq = '\0';
            settings[n_settings++] = (setting_t){argv[i], eq + 1};
        } else if (strcmp(a, "--capture") == 0) {
            if (!next)
                goto missing_value;
            settings[n_settings++] = (setting_t){"relay.capture", argv[++i]};
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            settings[n_settings++] = (setting_t){"log.level", "debug"};
        } else if (strcmp(a, "--drain") == 0) {
            cli.drain = true;
        } else if (strcmp(a, "--reference") == 0) {
            cli.reference = true;
        } else if (strcmp(a, "--sample") == 0) {
            cli.sample = true;
        } else if (strcmp(a, "--print-grants") == 0) {
            cli.print_grants = true;
        } else if (command && has_own_args(command)) {
            cli.args[cli.n_args++] = argv[i];
        } else if (a[0] == '-') {
            pb_args_error("postbox: unknown option \"%s\" (see postbox --help)", a);
            goto out;
        } else if (!command) {
            command = a;
        } else if (!cli.subcommand) {
            cli.subcommand = a;
        } else {
            pb_args_error("postbox: unexpected argument \"%s\" (see postbox --help)", a);
            goto out;
        }
        continue;
    missing_value:
        fprintf(stderr, "postbox: option %s needs a value\n", a);
        goto out;
    }
    if (help || !command) {
        usage(help ? stdout : stderr);
        if (help && command && (strcmp(command, "relay") == 0 || strcmp(command, "consume") == 0)) {
            fputs("\nconfiguration options:\n", stdout);
            pb_config_write_reference(stdout);
        }
        rc = help ? PB_EXIT_OK : PB_EXIT_USAGE;
        goto out;
    }

    if (cli.subcommand && strcmp(command, "cdc") != 0 && strcmp(command, "dlq") != 0) {
        pb_args_error("postbox: unexpected argument \"%s\" (see postbox --help)", cli.subcommand);
        goto out;
    }

    pb_config_init(&cli.cfg);
    pb_error_t err;
    if (config_file && pb_config_load_file(&cli.cfg, config_file, &err) != PB_OK) {
        fprintf(stderr, "postbox: %s\n", err.msg);
        goto out_cfg;
    }
    if (pb_config_load_env(&cli.cfg, &err) != PB_OK) {
        fprintf(stderr, "postbox: %s\n", err.msg);
        goto out_cfg;
    }
    for (size_t i = 0; i < n_settings; i++)
        if (apply_setting(&cli.cfg, settings[i].name, settings[i].value))
            goto out_cfg;
    if (pb_config_validate(&cli.cfg, &err) != PB_OK) {
        fprintf(stderr, "postbox: %s\n", err.msg);
        goto out_cfg;
    }
    pb_log_set_level(cli.cfg.log_level);
    pb_log_set_format(cli.cfg.log_format);
    if (pb_preflight(&cli.cfg, command, &err) != PB_OK) {
        fprintf(stderr, "postbox: %s\n", err.msg);
        goto out_cfg;
    }
    install_signals();

    if (strcmp(command, "init") == 0) {
        rc = pb_cmd_init(&cli);
    } else if (strcmp(command, "check") == 0) {
        rc = pb_cmd_check(&cli);
    } else if (strcmp(command, "relay") == 0) {
        rc = pb_cmd_relay(&cli);
    } else if (strcmp(command, "consume") == 0) {
        rc = pb_cmd_consume(&cli);
    } else if (strcmp(command, "cdc") == 0) {
        rc = pb_cmd_cdc(&cli);
    } else if (strcmp(command, "status") == 0) {
        rc = pb_cmd_status(&cli);
    } else if (strcmp(command, "dlq") == 0) {
        rc = pb_cmd_dlq(&cli);
    } else if (strcmp(command, "purge") == 0) {
        rc = pb_cmd_purge(&cli);
    } else if (strcmp(command, "demo") == 0) {
        rc = pb_cmd_demo(&cli);
    } else if (strcmp(command, "shadow") == 0) {
        rc = pb_cmd_shadow(&cli);
    } else if (strcmp(command, "config") == 0) {
        if (cli.reference)
            pb_config_write_reference(stdout);
        else if (cli.sample)
            pb_config_write_sample(stdout);
        else
            pb_config_write(&cli.cfg, stdout);
        rc = PB_EXIT_OK;
    } else {
        pb_args_error("postbox: unknown command \"%s\" (see postbox --help)", command);
    }
out_cfg:
    pb_config_free(&cli.cfg);
out:
    free(settings);
    free(cli.args);
    return rc;
}
