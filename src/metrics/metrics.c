#include "metrics/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

/* One label set of a labelled metric: the label text as exposed (`sink="amqp",...`). */
typedef struct series {
    char *labels;
    double value;
} series_t;

typedef struct family {
    const char *name;
    const char *type; /* counter | gauge */
    const char *help;
    const char *label_names[2];
    int n_labels;
    series_t *series;
    size_t n, cap;
    size_t last;        /* index of the last series used: most calls repeat it */
    char *last_raw[2];  /* the label values that found it, unescaped: a repeat is two strcmp,
                         * not a formatted key (the relay counts every event) */
} family_t;

typedef struct histogram {
    const char *name;
    const char *help;
    const double *bounds;
    size_t n_bounds;
    uint64_t counts[24]; /* per bucket, not cumulative; [n_bounds] is +Inf */
    double sum;
    uint64_t count;
} histogram_t;

static const double latency_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                        2.5,   5,    10,    30,   60,  300,  1800};
static const double batch_bounds[] = {1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* Label text of the series being looked up; @locks lock. */
static pb_buf_t key_buf;

static family_t published = {"postbox_published_total", "counter",
                             "events the broker confirmed, by sink and event type",
                             {"sink", "event_type"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t publish_errors = {"postbox_publish_errors_total", "counter",
                                  "failed publish attempts (retried or dead-lettered), by sink and event type",
                                  {"sink", "event_type"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t dead_letters_total = {"postbox_dead_letters_total", "counter",
                                      "events this relay moved to postbox.dead_letters, by sink and event type",
                                      {"sink", "event_type"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t expired_total = {"postbox_expired_total", "counter",
                                 "events that expired (expires_at) before they could be published, moved to postbox.dead_letters with reason expired, by sink and event type",
                                 {"sink", "event_type"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t inbox_processed = {"postbox_inbox_processed_total", "counter",
                                   "messages whose handler ran and committed, by consumer",
                                   {"consumer", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t inbox_duplicates = {"postbox_inbox_duplicates_total", "counter",
                                    "messages found in the inbox already (acknowledged without running the handler), by consumer",
                                    {"consumer", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t inbox_failures = {"postbox_inbox_handler_failures_total", "counter",
                                  "failed handler runs (each retried or dead-lettered), by consumer",
                                  {"consumer", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t inbox_dead = {"postbox_inbox_dead_total", "counter",
                              "messages moved to postbox.inbox_dead, by consumer",
                              {"consumer", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t out_of_order = {"postbox_consumer_out_of_order_total", "counter",
                                "messages handled out of their aggregate's sequence order, by consumer and reason (late: its number is at or below one handled already; gap_skipped: handled without the missing numbers before it after consume.gap_timeout)",
                                {"consumer", "reason"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t slot_lag = {"postbox_replication_slot_lag_bytes", "gauge",
                            "WAL bytes between the current position and the slot's confirmed flush position",
                            {"slot", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t slot_lag_age = {"postbox_replication_slot_lag_age_seconds", "gauge",
                                "seconds since the commit of the oldest transaction with outbox events the cdc relay has read but not confirmed (0: none)",
                                {"slot", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t slot_lag_over = {"postbox_replication_slot_lag_over_limit", "gauge",
                                 "1 while the slot's lag is over cdc.max_slot_lag or its age over cdc.max_slot_lag_age, else 0",
                                 {"slot", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t cdc_fallback = {"postbox_cdc_fallback_active", "gauge",
                                "1 while the cdc relay publishes by polling, its slot given up (cdc.on_excess_lag = poll), else 0",
                                {"slot", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t cdc_rejected = {"postbox_cdc_rejected_messages_total", "counter",
                                "logical messages with the relay's prefix that postbox.emit did not sign (forged?), dropped, by slot",
                                {"slot", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t redis_stream_length = {"postbox_redis_stream_length", "gauge",
                                       "entries in a Redis stream (XLEN), sampled by the redis sink and source",
                                       {"stream", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t redis_group_pending = {"postbox_redis_group_pending", "gauge",
                                       "entries of a Redis stream delivered to the consumer group and not acknowledged",
                                       {"stream", "group"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t redis_group_lag = {"postbox_redis_group_lag", "gauge",
                                   "entries of a Redis stream not yet delivered to the consumer group (-1: Redis cannot tell)",
                                   {"stream", "group"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t redis_group_oldest_idle = {"postbox_redis_group_oldest_pending_idle_seconds", "gauge",
                                           "how long the group's oldest pending entry has gone unacknowledged since its last delivery",
                                           {"stream", "group"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t amqp_queue_messages = {"postbox_amqp_queue_messages", "gauge",
                                       "messages ready in a RabbitMQ queue (not counting unacknowledged ones), sampled by the amqp source",
                                       {"queue", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t amqp_queue_consumers = {"postbox_amqp_queue_consumers", "gauge",
                                        "consumers of a RabbitMQ queue, sampled by the amqp source",
                                        {"queue", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t purged = {"postbox_purged_rows_total", "counter",
                          "rows deleted by retention, by table",
                          {"table", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};

static family_t broker_errors = {"postbox_broker_errors_total", "counter",
                                 "errors the broker client reported (failed deliveries, consumer errors), by broker and kind",
                                 {"broker", "kind"}, 2, NULL, 0, 0, 0, {NULL, NULL}};
static family_t broker_retries = {"postbox_broker_retries_total", "counter",
                                  "messages the broker client sent again by itself after a retriable broker error (Kafka's idempotent producer), by broker",
                                  {"broker", NULL}, 1, NULL, 0, 0, 0, {NULL, NULL}};
static family_t consumer_lag = {"postbox_consumer_lag_messages", "gauge",
                                "messages between the consumer's position and the end of a partition, where the client knows it",
                                {"topic", "partition"}, 2, NULL, 0, 0, 0, {NULL, NULL}};

static family_t *const families_relay[] = {&published, &publish_errors, &dead_letters_total,
                                            &expired_total, &slot_lag, &slot_lag_age, &slot_lag_over,
                                            &cdc_fallback, &cdc_rejected, &redis_stream_length};
static family_t *const families_consume[] = {&inbox_processed, &inbox_duplicates,
                                             &inbox_failures, &inbox_dead, &out_of_order,
                                             &redis_stream_length,
                                             &redis_group_pending, &redis_group_lag,
                                             &redis_group_oldest_idle, &amqp_queue_messages,
                                             &amqp_queue_consumers};

static histogram_t latency = {"postbox_publish_latency_seconds",
                              "time from the event's created_at (or its available_at, when later) to the broker's confirm",
                              latency_bounds, N_OF(latency_bounds), {0}, 0, 0};
static histogram_t batch_size = {"postbox_batch_size",
                                 "events (relay) or messages (consume) per batch",
                                 batch_bounds, N_OF(batch_bounds), {0}, 0, 0};

static struct {
    char component[16];
    double start_time;
    bool database_up, broker_up, owner;
    bool sampled;
    double backlog, backlog_exact, oldest_age, dead_letters, sample_took, sample_time;
    double delayed, cdc_deferred;
    double last_publish;
    bool otlp; /* the OTLP export is on: its counters are shown */
    double otlp_exported, otlp_failed, otlp_dropped;
} g;

void pb_metrics_init(const char *component)
{
    pthread_mutex_lock(&lock);
    snprintf(g.component, sizeof g.component, "%s", component ? component : "");
    g.start_time = (double)pb_wall_us() / 1e6;
    pthread_mutex_unlock(&lock);
}

static void family_clear(family_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->series[i].labels);
    free(f->series);
    f->series = NULL;
    f->n = f->cap = f->last = 0;
    for (size_t i = 0; i < N_OF(f->last_raw); i++) {
        free(f->last_raw[i]);
        f->last_raw[i] = NULL;
    }
}

void pb_metrics_reset(void)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < N_OF(families_relay); i++)
        family_clear(families_relay[i]);
    for (size_t i = 0; i < N_OF(families_consume); i++)
        family_clear(families_consume[i]);
    family_clear(&purged);
    family_clear(&broker_errors);
    family_clear(&broker_retries);
    family_clear(&consumer_lag);
    histogram_t *hs[] = {&latency, &batch_size};
    for (size_t i = 0; i < N_OF(hs); i++) {
        memset(hs[i]->counts, 0, sizeof hs[i]->counts);
        hs[i]->sum = 0;
        hs[i]->count = 0;
    }
    memset(&g, 0, sizeof g);
    pb_buf_free(&key_buf);
    pthread_mutex_unlock(&lock);
}

/* Label value escaping of the exposition format: backslash, double quote, line feed. */
static void append_label_value(pb_buf_t *b, const char *v)
{
    for (const char *p = v ? v : ""; *p; p++) {
        if (*p == '\\')
            pb_buf_puts(b, "\\\\");
        else if (*p == '"')
            pb_buf_puts(b, "\\\"");
        else if (*p == '\n')
            pb_buf_puts(b, "\\n");
        else
            pb_buf_putc(b, *p);
    }
}

static void label_text(pb_buf_t *b, const family_t *f, const char *const *values)
{
    pb_buf_reset(b);
    for (int i = 0; i < f->n_labels; i++) {
        pb_buf_printf(b, "%s%s=\"", i ? "," : "", f->label_names[i]);
        append_label_value(b, values[i]);
        pb_buf_putc(b, '"');
    }
}

static series_t *find_series(family_t *f, const char *key)
{
    if (f->last < f->n && strcmp(f->series[f->last].labels, key) == 0)
        return &f->series[f->last];
    for (size_t i = 0; i < f->n; i++)
        if (strcmp(f->series[i].labels, key) == 0)
            return &f->series[i];
    return NULL;
}

static bool repeats_last(const family_t *f, const char *const *values)
{
    if (f->n == 0)
        return false;
    for (int i = 0; i < f->n_labels; i++)
        if (!f->last_raw[i] || strcmp(f->last_raw[i], values[i] ? values[i] : "") != 0)
            return false;
    return true;
}

/* @locks lock (held by the caller). Returns the series of the label values, creating it. */
static series_t *series_of(family_t *f, const char *const *values)
{
    if (repeats_last(f, values))
        return &f->series[f->last];
    label_text(&key_buf, f, values);
    series_t *s = find_series(f, key_buf.data);
    if (!s && f->n >= PB_METRICS_MAX_SERIES) {
        const char *other[2] = {"other", "other"};
        label_text(&key_buf, f, other);
        s = find_series(f, key_buf.data);
    }
    if (!s) {
        if (f->n == f->cap) {
            f->cap = f->cap ? f->cap * 2 : 8;
            f->series = pb_realloc(f->series, f->cap * sizeof *f->series);
        }
        s = &f->series[f->n++];
        s->labels = pb_strdup(key_buf.data);
        s->value = 0;
    }
    f->last = (size_t)(s - f->series);
    for (int i = 0; i < f->n_labels; i++) {
        free(f->last_raw[i]);
        f->last_raw[i] = pb_strdup(values[i] ? values[i] : "");
    }
    return s;
}

static void add(family_t *f, const char *v0, const char *v1, double delta)
{
    const char *values[2] = {v0, v1};
    pthread_mutex_lock(&lock);
    series_of(f, values)->value += delta;
    pthread_mutex_unlock(&lock);
}

static void set(family_t *f, const char *v0, const char *v1, double value)
{
    const char *values[2] = {v0, v1};
    pthread_mutex_lock(&lock);
    series_of(f, values)->value = value;
    pthread_mutex_unlock(&lock);
}

static void observe(histogram_t *h, double v)
{
    size_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void pb_metrics_published(const char *sink, const char *event_type, double latency_s)
{
    const char *values[2] = {sink, event_type};
    if (latency_s < 0)
        latency_s = 0;
    pthread_mutex_lock(&lock);
    series_of(&published, values)->value += 1;
    observe(&latency, latency_s);
    g.last_publish = (double)pb_wall_us() / 1e6;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_publish_failed(const char *sink, const char *event_type, bool dead)
{
    add(&publish_errors, sink, event_type, 1);
    if (dead)
        add(&dead_letters_total, sink, event_type, 1);
}

void pb_metrics_expired(const char *sink, const char *event_type)
{
    add(&expired_total, sink, event_type, 1);
    add(&dead_letters_total, sink, event_type, 1);
}

void pb_metrics_batch(size_t n)
{
    pthread_mutex_lock(&lock);
    observe(&batch_size, (double)n);
    pthread_mutex_unlock(&lock);
}

void pb_metrics_otlp_spans(size_t exported, size_t failed, size_t dropped)
{
    pthread_mutex_lock(&lock);
    g.otlp = true;
    g.otlp_exported += (double)exported;
    g.otlp_failed += (double)failed;
    g.otlp_dropped += (double)dropped;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_set_state(bool database, bool broker, bool owner)
{
    pthread_mutex_lock(&lock);
    g.database_up = database;
    g.broker_up = broker;
    g.owner = owner;
    pthread_mutex_unlock(&lock);
}

bool pb_metrics_ready(void)
{
    pthread_mutex_lock(&lock);
    bool ready = g.database_up && g.broker_up && g.owner;
    pthread_mutex_unlock(&lock);
    return ready;
}

void pb_metrics_set_outbox(int64_t backlog, bool exact, double oldest_age_s, int64_t dead_letters,
                           double took_s)
{
    pthread_mutex_lock(&lock);
    g.sampled = true;
    g.backlog = (double)backlog;
    g.backlog_exact = exact ? 1 : 0;
    g.oldest_age = oldest_age_s;
    g.dead_letters = (double)dead_letters;
    g.sample_took = took_s;
    g.sample_time = (double)pb_wall_us() / 1e6;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_set_delayed(int64_t delayed, int64_t cdc_deferred)
{
    pthread_mutex_lock(&lock);
    g.delayed = (double)delayed;
    g.cdc_deferred = (double)cdc_deferred;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_set_slot_lag(const char *slot, int64_t bytes)
{
    set(&slot_lag, slot, NULL, (double)bytes);
}

void pb_metrics_set_slot_lag_age(const char *slot, int64_t age_ms)
{
    set(&slot_lag_age, slot, NULL, (double)age_ms / 1000.0);
}

void pb_metrics_set_slot_lag_over(const char *slot, bool over)
{
    set(&slot_lag_over, slot, NULL, over ? 1.0 : 0.0);
}

void pb_metrics_set_cdc_fallback(const char *slot, bool active)
{
    set(&cdc_fallback, slot, NULL, active ? 1.0 : 0.0);
}

void pb_metrics_set_redis_stream(const char *stream, int64_t length)
{
    set(&redis_stream_length, stream, NULL, (double)length);
}

void pb_metrics_set_amqp_queue(const char *queue, int64_t messages, int64_t consumers)
{
    const char *values[2] = {queue, NULL};
    pthread_mutex_lock(&lock);
    series_of(&amqp_queue_messages, values)->value = (double)messages;
    series_of(&amqp_queue_consumers, values)->value = (double)consumers;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_set_redis_group(const char *stream, const char *group, int64_t pending,
                                int64_t lag, double oldest_idle_s)
{
    const char *values[2] = {stream, group};
    pthread_mutex_lock(&lock);
    series_of(&redis_group_pending, values)->value = (double)pending;
    series_of(&redis_group_lag, values)->value = (double)lag;
    series_of(&redis_group_oldest_idle, values)->value = oldest_idle_s;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_inbox(const char *consumer, uint64_t processed, uint64_t duplicates,
                      uint64_t failures, uint64_t dead)
{
    const char *values[2] = {consumer, NULL};
    pthread_mutex_lock(&lock);
    /* create all four series together, so each is exposed (at 0) from the first batch on */
    series_of(&inbox_processed, values)->value += (double)processed;
    series_of(&inbox_duplicates, values)->value += (double)duplicates;
    series_of(&inbox_failures, values)->value += (double)failures;
    series_of(&inbox_dead, values)->value += (double)dead;
    pthread_mutex_unlock(&lock);
}

void pb_metrics_out_of_order(const char *consumer, const char *reason, uint64_t n)
{
    add(&out_of_order, consumer, reason, (double)n);
}

void pb_metrics_purged(const char *table, uint64_t rows)
{
    add(&purged, table, NULL, (double)rows);
}

void pb_metrics_cdc_rejected(const char *slot)
{
    add(&cdc_rejected, slot, NULL, 1);
}

void pb_metrics_broker_error(const char *broker, const char *kind)
{
    add(&broker_errors, broker, kind, 1);
}

void pb_metrics_broker_retries(const char *broker, uint64_t n)
{
    add(&broker_retries, broker, NULL, (double)n);
}

void pb_metrics_set_consumer_lag(const char *topic, int32_t partition, int64_t lag)
{
    char part[16];
    snprintf(part, sizeof part, "%d", (int)partition);
    const char *values[2] = {topic, part};
    pthread_mutex_lock(&lock);
    series_of(&consumer_lag, values)->value = (double)lag;
    pthread_mutex_unlock(&lock);
}

/* ------------------------------------------------------------------------------------------- */

static void header(pb_buf_t *out, const char *name, const char *type, const char *help)
{
    pb_buf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void scalar(pb_buf_t *out, const char *name, const char *type, const char *help, double v)
{
    header(out, name, type, help);
    pb_buf_printf(out, "%s %.17g\n", name, v);
}

static void render_family(pb_buf_t *out, const family_t *f)
{
    header(out, f->name, f->type, f->help);
    for (size_t i = 0; i < f->n; i++)
        pb_buf_printf(out, "%s{%s} %.17g\n", f->name, f->series[i].labels, f->series[i].value);
}

static void render_histogram(pb_buf_t *out, const histogram_t *h)
{
    header(out, h->name, "histogram", h->help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        pb_buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[i],
                      (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    pb_buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", h->name,
                  (unsigned long long)cum, h->name, h->sum, h->name, (unsigned long long)h->count);
}

void pb_metrics_render(pb_buf_t *out)
{
    pthread_mutex_lock(&lock);
    bool relay = strcmp(g.component, "consume") != 0;
    bool consume = strcmp(g.component, "relay") != 0;

    header(out, "postbox_info", "gauge", "postbox version and the component this process runs");
    pb_buf_printf(out, "postbox_info{component=\"");
    append_label_value(out, g.component);
    pb_buf_printf(out, "\",version=\"%s\"} 1\n", POSTBOX_VERSION_STRING);
    scalar(out, "postbox_start_time_seconds", "gauge", "unix time the process started",
           g.start_time);
    scalar(out, "postbox_database_up", "gauge", "1 while connected to PostgreSQL",
           g.database_up ? 1 : 0);
    scalar(out, "postbox_broker_up", "gauge", "1 while connected to the broker",
           g.broker_up ? 1 : 0);
    scalar(out, "postbox_owner", "gauge",
           "1 while this process owns its work (relay: holds the relay lock; consume: consuming)",
           g.owner ? 1 : 0);
    if (relay) {
        if (g.sampled) {
            scalar(out, "postbox_outbox_backlog", "gauge",
                   "pending outbox rows (exact up to the sampler's cap, else an upper bound)",
                   g.backlog);
            scalar(out, "postbox_outbox_backlog_exact", "gauge",
                   "1 when postbox_outbox_backlog was counted exactly, 0 when it is the id-span bound",
                   g.backlog_exact);
            scalar(out, "postbox_outbox_oldest_pending_age_seconds", "gauge",
                   "how long the oldest pending outbox event that is due has waited, since its "
                   "commit or its available_at (0 when none is pending)", g.oldest_age);
            scalar(out, "postbox_outbox_delayed", "gauge",
                   "pending outbox events not due yet: their available_at, or that of an earlier "
                   "event of their aggregate, is still to come (counted in the backlog too)",
                   g.delayed);
            scalar(out, "postbox_cdc_deferred", "gauge",
                   "events the cdc relay set aside in postbox.cdc_deferred until they are due",
                   g.cdc_deferred);
            scalar(out, "postbox_dead_letters", "gauge", "rows in postbox.dead_letters",
                   g.dead_letters);
            scalar(out, "postbox_sample_duration_seconds", "gauge",
                   "time the last backlog sample queries took", g.sample_took);
            scalar(out, "postbox_sample_timestamp_seconds", "gauge",
                   "unix time of the last backlog sample", g.sample_time);
        }
        scalar(out, "postbox_last_publish_timestamp_seconds", "gauge",
               "unix time of the last broker confirm (0: none since the start)", g.last_publish);
        for (size_t i = 0; i < N_OF(families_relay); i++)
            render_family(out, families_relay[i]);
        render_histogram(out, &latency);
        if (g.otlp) {
            scalar(out, "postbox_otlp_spans_exported_total", "counter",
                   "publish spans the OTLP collector accepted", g.otlp_exported);
            scalar(out, "postbox_otlp_spans_failed_total", "counter",
                   "publish spans lost because their export request failed (never retried)",
                   g.otlp_failed);
            scalar(out, "postbox_otlp_spans_dropped_total", "counter",
                   "publish spans dropped without an export: no room under "
                   "relay.otlp_max_pending, or still waiting at stop", g.otlp_dropped);
        }
    }
    if (consume)
        for (size_t i = 0; i < N_OF(families_consume); i++)
            render_family(out, families_consume[i]);
    render_histogram(out, &batch_size);
    render_family(out, &purged);
    render_family(out, &broker_errors);
    render_family(out, &broker_retries);
    render_family(out, &consumer_lag);
    pthread_mutex_unlock(&lock);
}
