#include "relay/shadow_sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/str.h"
#include "relay/shadow_rules.h"

/* Longest rendered shadow destination (AMQP routing keys stop at 255, Kafka topics at 249). */
#define SHADOW_DEST_MAX 512

/* What a shadow copy owns beside the event's borrowed strings. */
typedef struct shadow_copy {
    char destination[SHADOW_DEST_MAX];
    char *headers;      /* JSON text with PB_SHADOW_HEADER (json_dumps; free) */
    json_t *header_obj; /* the same as an object (owned reference) */
} shadow_copy_t;

typedef struct shadow_sink {
    pb_sink_t base; /* first: the relay sees a pb_sink_t */
    pb_sink_ops_t ops; /* the inner sink's name and capabilities, these functions */
    pb_sink_t *inner;  /* owned */
    pb_shadow_rules_t rules;
    /* the batch handed to the inner sink while one is in flight (at most one) */
    pb_event_t *events;
    pb_result_t *results;
    size_t *origin;  /* index of each inner event in the relay's batch */
    bool *is_shadow; /* the inner event is a shadow copy */
    size_t n, cap;
    shadow_copy_t *copies;
    size_t n_copies, copies_cap;
} shadow_sink_t;

static void copy_release(shadow_copy_t *c)
{
    free(c->headers);
    json_decref(c->header_obj);
    c->headers = NULL;
    c->header_obj = NULL;
}

/* Fills *copy as the shadow copy of ev under rule, its memory in c. False (with r REJECT) when
 * the destination does not fit or the headers cannot be written. */
static bool copy_make(const pb_shadow_rule_t *rule, const pb_event_t *ev, shadow_copy_t *c,
                      pb_event_t *copy, pb_result_t *r)
{
    c->headers = NULL;
    c->header_obj = NULL;
    if (!pb_shadow_render(rule, ev, c->destination, sizeof c->destination)) {
        pb_result_setf(r, PB_OUT_REJECT, "shadow destination (relay.shadow \"%s\") longer than %d "
                                         "bytes", rule->destination, SHADOW_DEST_MAX - 1);
        return false;
    }
    /* a shallow copy: the values are shared, only the new member is ours; flat headers
     * (read in place by the sinks, no tree) are parsed here, for the copy only */
    json_t *h = ev->header_obj  ? json_copy(ev->header_obj)
                : ev->flat_headers ? json_loads(ev->headers, 0, NULL)
                                   : json_object();
    if (!h || json_object_set_new(h, PB_SHADOW_HEADER, json_string("true")) != 0 ||
        !(c->headers = json_dumps(h, JSON_COMPACT))) {
        json_decref(h);
        pb_result_set(r, PB_OUT_RETRY, "out of memory building the shadow copy's headers");
        return false;
    }
    c->header_obj = h;
    *copy = *ev;
    copy->destination = c->destination;
    copy->headers = c->headers;
    copy->header_obj = h;
    copy->flat_headers = 0; /* the copy's headers are the tree h */
    return true;
}

/* Gives r a failure of the shadow copy to destination, saying so in its reason. */
static void set_shadow_failure(pb_result_t *r, const pb_result_t *shadow, const char *destination)
{
    pb_result_setf(r, shadow->outcome, "shadow copy to \"%s\": %s", destination, shadow->error);
}

static bool shadow_check(pb_sink_t *snk, const pb_event_t *ev, pb_result_t *r)
{
    shadow_sink_t *s = (shadow_sink_t *)snk;
    bool (*inner_check)(pb_sink_t *, const pb_event_t *, pb_result_t *) = s->inner->ops->check;
    const pb_shadow_rule_t *rule = pb_shadow_rule_for(&s->rules, ev->event_type);
    if (!rule || rule->mode == PB_SHADOW_ALSO)
        if (inner_check && !inner_check(s->inner, ev, r))
            return false;
    if (!rule)
        return true;
    shadow_copy_t c;
    pb_event_t copy;
    pb_result_t why = {0};
    bool ok = copy_make(rule, ev, &c, &copy, &why);
    if (ok && inner_check && !inner_check(s->inner, &copy, &why)) {
        ok = false;
        set_shadow_failure(r, &why, c.destination);
    } else if (!ok) {
        *r = why;
    }
    copy_release(&c);
    return ok;
}

static void release_in_flight(shadow_sink_t *s)
{
    for (size_t i = 0; i < s->n_copies; i++)
        copy_release(&s->copies[i]);
    s->n_copies = 0;
    s->n = 0;
}

static void ensure_capacity(shadow_sink_t *s, size_t n)
{
    if (n > s->cap) {
        s->events = pb_realloc(s->events, 2 * n * sizeof *s->events);
        s->results = pb_realloc(s->results, 2 * n * sizeof *s->results);
        s->origin = pb_realloc(s->origin, 2 * n * sizeof *s->origin);
        s->is_shadow = pb_realloc(s->is_shadow, 2 * n * sizeof *s->is_shadow);
        s->cap = n;
    }
    if (n > s->copies_cap) {
        s->copies = pb_realloc(s->copies, n * sizeof *s->copies);
        s->copies_cap = n;
    }
}

/* Appends ev (or its shadow copy) to the inner batch as UNTRIED. */
static pb_event_t *append(shadow_sink_t *s, const pb_event_t *ev, size_t origin, bool shadow)
{
    size_t k = s->n++;
    s->events[k] = *ev;
    s->origin[k] = origin;
    s->is_shadow[k] = shadow;
    pb_result_set(&s->results[k], PB_OUT_UNTRIED, NULL);
    return &s->events[k];
}

/* How bad an outcome is for the event it belongs to: the worst copy decides. */
static int badness(pb_outcome_t o)
{
    switch (o) {
    case PB_OUT_PUBLISHED: return 0;
    case PB_OUT_RETRY: return 2;
    case PB_OUT_REJECT: return 3;
    default: return 1; /* not sent: neither confirmed nor failed */
    }
}

/* Gives every event of the relay's batch that was sent the worst result of its copies. Both
 * copies carry the event's id, so a sink that finds a failed message by its id (an AMQP
 * basic.return) may put the failure down to the other copy: the event's result is the same. */
static void merge_results(shadow_sink_t *s, pb_sink_batch_t *b)
{
    for (size_t k = 0; k < s->n; k++) {
        pb_result_t *out = &b->results[s->origin[k]];
        const pb_result_t *got = &s->results[k];
        bool first = k == 0 || s->origin[k - 1] != s->origin[k];
        bool duplicate = got->duplicate && (first || out->duplicate);
        if (first || badness(got->outcome) > badness(out->outcome)) {
            bool failed = got->outcome == PB_OUT_RETRY || got->outcome == PB_OUT_REJECT;
            if (s->is_shadow[k] && failed)
                set_shadow_failure(out, got, s->events[k].destination);
            else
                *out = *got;
        }
        out->duplicate = duplicate;
    }
}

static pb_status_t shadow_send(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    shadow_sink_t *s = (shadow_sink_t *)snk;
    release_in_flight(s);
    ensure_capacity(s, b->n);
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i].outcome != PB_OUT_UNTRIED)
            continue;
        const pb_event_t *ev = &b->events[i];
        const pb_shadow_rule_t *rule = pb_shadow_rule_for(&s->rules, ev->event_type);
        if (!rule || rule->mode == PB_SHADOW_ALSO)
            append(s, ev, i, false);
        if (!rule)
            continue;
        shadow_copy_t *c = &s->copies[s->n_copies++];
        pb_event_t *copy = append(s, ev, i, true);
        if (!copy_make(rule, ev, c, copy, &s->results[s->n - 1])) {
            /* already failed: the inner sink leaves it alone, the merge passes it on */
            *copy = *ev;
            copy->destination = c->destination;
        }
    }
    pb_sink_batch_t inner = {.events = s->events, .results = s->results, .n = s->n};
    pb_status_t st = s->inner->ops->send(s->inner, &inner, err);
    if (st != PB_OK) {
        merge_results(s, b);
        release_in_flight(s);
    }
    return st;
}

static pb_status_t shadow_await(pb_sink_t *snk, pb_sink_batch_t *b, pb_error_t *err)
{
    shadow_sink_t *s = (shadow_sink_t *)snk;
    pb_sink_batch_t inner = {.events = s->events, .results = s->results, .n = s->n};
    pb_status_t st = s->inner->ops->await(s->inner, &inner, err);
    merge_results(s, b);
    release_in_flight(s);
    return st;
}

static pb_status_t shadow_connect(pb_sink_t *snk, pb_error_t *err)
{
    shadow_sink_t *s = (shadow_sink_t *)snk;
    return s->inner->ops->connect(s->inner, err);
}

static pb_status_t shadow_idle(pb_sink_t *snk, pb_error_t *err)
{
    shadow_sink_t *s = (shadow_sink_t *)snk;
    return s->inner->ops->idle(s->inner, err);
}

static void shadow_free(pb_sink_t *snk)
{
    shadow_sink_t *s = (shadow_sink_t *)snk;
    if (!s)
        return;
    release_in_flight(s);
    pb_sink_free(s->inner);
    pb_shadow_rules_free(&s->rules);
    free(s->events);
    free(s->results);
    free(s->origin);
    free(s->is_shadow);
    free(s->copies);
    free(s);
}

pb_status_t pb_shadow_sink_wrap(const pb_config_t *cfg, pb_sink_t **snk, pb_error_t *err)
{
    pb_shadow_rules_t rules;
    pb_status_t st = pb_shadow_rules_parse(cfg->relay_shadow, &rules, err);
    if (st != PB_OK || rules.n == 0)
        return st;
    shadow_sink_t *s = pb_malloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->inner = *snk;
    s->rules = rules;
    s->ops = (pb_sink_ops_t){
        .name = s->inner->ops->name, /* metrics and logs name the broker, as without rules */
        .caps = s->inner->ops->caps,
        .max_in_flight = 1, /* one inner batch is kept between send and await */
        .connect = shadow_connect,
        .send = shadow_send,
        .await = shadow_await,
        .check = shadow_check,
        .idle = shadow_idle,
        .free = shadow_free,
    };
    s->base.ops = &s->ops;
    s->base.cfg = cfg;
    *snk = &s->base;
    return PB_OK;
}
