/* postbox check: the preflight of check/check.h from the command line. One line per problem
 * with its hint, or --json; exit 1 when something fails (with --strict also on a warning). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check/check.h"
#include "cli/args.h"
#include "cli/cli.h"

typedef struct check_args {
    bool json, strict, all;
    unsigned sides;
} check_args_t;

static int parse_args(const pb_cli_t *cli, check_args_t *a)
{
    *a = (check_args_t){0};
    for (int i = 0; i < cli->n_args; i++) {
        const char *arg = cli->args[i];
        if (strcmp(arg, "--json") == 0)
            a->json = true;
        else if (strcmp(arg, "--strict") == 0)
            a->strict = true;
        else if (strcmp(arg, "--all") == 0)
            a->all = true;
        else if (strcmp(arg, "--relay") == 0)
            a->sides |= PB_CHECK_RELAY;
        else if (strcmp(arg, "--consume") == 0)
            a->sides |= PB_CHECK_CONSUME;
        else {
            pb_args_error("postbox check: unknown argument \"%s\" (see postbox --help)", arg);
            return PB_EXIT_USAGE;
        }
    }
    /* by default the relay, and the consumer when a handler says this configuration consumes */
    if (!a->sides)
        a->sides = PB_CHECK_RELAY | (*cli->cfg.consume_handler || cli->cfg.n_handlers
                                         ? PB_CHECK_CONSUME
                                         : 0u);
    return PB_EXIT_OK;
}

static const char *sides_text(unsigned sides)
{
    return sides == PB_CHECK_RELAY     ? "relay"
           : sides == PB_CHECK_CONSUME ? "consume"
                                       : "relay and consume";
}

static void write_json(const pb_check_report_t *r, unsigned sides, bool ok)
{
    json_t *o = json_object(), *arr = json_array(), *s = json_array();
    if (sides & PB_CHECK_RELAY)
        json_array_append_new(s, json_string("relay"));
    if (sides & PB_CHECK_CONSUME)
        json_array_append_new(s, json_string("consume"));
    for (size_t i = 0; i < r->n; i++) {
        const pb_check_finding_t *f = &r->items[i];
        json_t *j = json_pack("{s:s, s:s, s:s}", "check", f->name, "status",
                              pb_check_status_name(f->status), "message", f->message);
        json_object_set_new(j, "hint", f->hint ? json_string(f->hint) : json_null());
        json_array_append_new(arr, j);
    }
    json_object_set_new(o, "ok", json_boolean(ok));
    json_object_set_new(o, "sides", s);
    json_object_set_new(o, "problems", json_integer((json_int_t)pb_check_count(r, PB_CHECK_FAIL)));
    json_object_set_new(o, "warnings", json_integer((json_int_t)pb_check_count(r, PB_CHECK_WARN)));
    json_object_set_new(o, "checks", arr);
    char *text = json_dumps(o, JSON_INDENT(2));
    if (text)
        puts(text);
    free(text);
    json_decref(o);
}

static void write_text(const pb_check_report_t *r, const check_args_t *a, const pb_config_t *cfg)
{
    printf("postbox check (%s; relay.sink = %s, relay.capture = %s, consume.source = %s)\n",
           sides_text(a->sides), cfg->relay_sink, cfg->relay_capture, cfg->consume_source);
    for (size_t i = 0; i < r->n; i++) {
        const pb_check_finding_t *f = &r->items[i];
        if (f->status == PB_CHECK_OK && !a->all)
            continue;
        printf("%-4s %s: %s\n", f->status == PB_CHECK_FAIL   ? "FAIL"
                                : f->status == PB_CHECK_WARN ? "WARN"
                                                             : "ok",
               f->name, f->message);
        if (f->hint)
            printf("     hint: %s\n", f->hint);
    }
    size_t fails = pb_check_count(r, PB_CHECK_FAIL), warns = pb_check_count(r, PB_CHECK_WARN),
           oks = pb_check_count(r, PB_CHECK_OK);
    printf("%zu problem%s, %zu warning%s, %zu check%s passed%s\n", fails, fails == 1 ? "" : "s",
           warns, warns == 1 ? "" : "s", oks, oks == 1 ? "" : "s",
           a->all || !oks ? "" : " (--all lists them)");
}

int pb_cmd_check(pb_cli_t *cli)
{
    check_args_t a;
    int rc = parse_args(cli, &a);
    if (rc != PB_EXIT_OK)
        return rc;
    pb_check_report_t r = {0};
    pb_check_opts_t opts = {.sides = a.sides};
    pb_check_run(&cli->cfg, &opts, &r);
    bool ok = pb_check_count(&r, PB_CHECK_FAIL) == 0 &&
              (!a.strict || pb_check_count(&r, PB_CHECK_WARN) == 0);
    if (a.json)
        write_json(&r, a.sides, ok);
    else
        write_text(&r, &a, &cli->cfg);
    pb_check_report_free(&r);
    fflush(stdout);
    return ok ? PB_EXIT_OK : PB_EXIT_FAILURE;
}
