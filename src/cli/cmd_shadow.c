/* postbox shadow compare: reads the legacy publisher's queue or stream and postbox's shadow
 * copies (relay.shadow), matches the messages by a key and reports, one line each, those
 * missing from ours, those extra in ours and those whose fields differ, then a summary.
 * Exit 0 when both sides are the same, 1 when they differ, 2 on an error (bad arguments, a
 * broker that cannot be read). Nothing is consumed (shadow/read.h). */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "shadow/compare.h"
#include "shadow/read.h"

#define EXIT_DIFFERENT 1
#define EXIT_ERROR 2
#define DEFAULT_LIMIT 1000000

typedef struct compare_args {
    const char *legacy, *ours;
    const char *key, *legacy_key, *ours_key;
    const char *fields;
    const char *legacy_body_field, *ours_body_field;
    int64_t limit;
    bool json;
} compare_args_t;

/* Parses the arguments after "compare"; false (a message printed) on a bad one. */
static bool parse_args(const pb_cli_t *cli, compare_args_t *a)
{
    *a = (compare_args_t){.limit = DEFAULT_LIMIT, .fields = ""};
    for (int i = 1; i < cli->n_args; i++) {
        const char *v;
        char **args = cli->args;
        int n = cli->n_args;
        if (strcmp(args[i], "--json") == 0) {
            a->json = true;
            continue;
        }
        if ((v = pb_args_value(args, n, &i, "--legacy")))
            a->legacy = v;
        else if ((v = pb_args_value(args, n, &i, "--ours")))
            a->ours = v;
        else if ((v = pb_args_value(args, n, &i, "--key")))
            a->key = v;
        else if ((v = pb_args_value(args, n, &i, "--legacy-key")))
            a->legacy_key = v;
        else if ((v = pb_args_value(args, n, &i, "--ours-key")))
            a->ours_key = v;
        else if ((v = pb_args_value(args, n, &i, "--fields")))
            a->fields = v;
        else if ((v = pb_args_value(args, n, &i, "--body-field")))
            a->legacy_body_field = a->ours_body_field = v;
        else if ((v = pb_args_value(args, n, &i, "--legacy-body-field")))
            a->legacy_body_field = v;
        else if ((v = pb_args_value(args, n, &i, "--ours-body-field")))
            a->ours_body_field = v;
        else if ((v = pb_args_value(args, n, &i, "--limit"))) {
            if (*v && (!pb_args_count(v, &a->limit) || a->limit < 1)) {
                pb_args_error("postbox shadow compare: --limit \"%s\" is not a positive count", v);
                return false;
            }
        } else {
            pb_args_error("postbox shadow compare: unknown argument \"%s\" (see postbox --help)",
                          args[i]);
            return false;
        }
        if (!*v)
            return false; /* pb_args_value said that the value is missing */
    }
    if (!a->legacy || !a->ours) {
        fprintf(stderr, "postbox shadow compare: --legacy and --ours are required (amqp:QUEUE, "
                        "redis:STREAM, kafka:TOPIC or nats:STREAM)\n");
        return false;
    }
    if (!a->key && (!a->legacy_key || !a->ours_key)) {
        fprintf(stderr, "postbox shadow compare: --key (or both --legacy-key and --ours-key) is "
                        "required: body, a JSON pointer such as /order_id, or header:NAME\n");
        return false;
    }
    if (!a->legacy_key)
        a->legacy_key = a->key;
    if (!a->ours_key)
        a->ours_key = a->key;
    return true;
}

/* Reads one side; false (the error printed) when it cannot be read. */
static bool read_side(const pb_config_t *cfg, pb_shadow_source_t *src, const char *body_field,
                      size_t limit, pb_shadow_msgs_t *out)
{
    if (body_field && *body_field)
        src->body_field = body_field;
    pb_error_t err;
    if (pb_shadow_read(cfg, src, limit, out, &err) != PB_OK) {
        fprintf(stderr, "postbox shadow compare: %s: %s\n", src->text, err.msg);
        return false;
    }
    return true;
}

static int compare(pb_cli_t *cli)
{
    compare_args_t a;
    if (!parse_args(cli, &a))
        return EXIT_ERROR;
    pb_shadow_opts_t opts = {0};
    pb_shadow_source_t legacy, ours;
    pb_error_t err;
    if (pb_shadow_source_parse(a.legacy, "--legacy", &legacy, &err) != PB_OK ||
        pb_shadow_source_parse(a.ours, "--ours", &ours, &err) != PB_OK ||
        pb_shadow_spec_parse(a.legacy_key, a.key ? "--key" : "--legacy-key", &opts.key_legacy,
                             &err) != PB_OK ||
        pb_shadow_spec_parse(a.ours_key, a.key ? "--key" : "--ours-key", &opts.key_ours, &err) !=
            PB_OK ||
        pb_shadow_fields_parse(a.fields, &opts, &err) != PB_OK) {
        fprintf(stderr, "postbox shadow compare: %s\n", err.msg);
        pb_shadow_opts_free(&opts);
        return EXIT_ERROR;
    }
    pb_shadow_msgs_t lm = {0}, om = {0};
    int rc = EXIT_ERROR;
    if (read_side(&cli->cfg, &legacy, a.legacy_body_field, (size_t)a.limit, &lm) &&
        read_side(&cli->cfg, &ours, a.ours_body_field, (size_t)a.limit, &om)) {
        pb_shadow_report_t rep;
        pb_shadow_compare(&opts, &lm, &om, &rep);
        if (a.json)
            pb_shadow_report_write_json(&rep, a.legacy, a.ours, stdout);
        else
            pb_shadow_report_write_text(&rep, stdout);
        rc = pb_shadow_report_equal(&rep) ? PB_EXIT_OK : EXIT_DIFFERENT;
        pb_shadow_report_free(&rep);
    }
    fflush(stdout);
    pb_shadow_msgs_free(&lm);
    pb_shadow_msgs_free(&om);
    pb_shadow_opts_free(&opts);
    return rc;
}

int pb_cmd_shadow(pb_cli_t *cli)
{
    if (cli->n_args == 0 || strcmp(cli->args[0], "compare") != 0) {
        pb_args_error("postbox shadow: expected \"compare\" (see postbox --help)");
        return EXIT_ERROR;
    }
    return compare(cli);
}
