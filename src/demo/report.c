/* postbox demo: what the user sees. While it runs, a progress bar redrawn in place on a
 * terminal (a plain line every few seconds when stdout is a file or a pipe); at the end, the
 * summary table whose figures must agree, and the verdict. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "common/clock.h"
#include "demo/demo_int.h"
#include "store/pg.h"

#define PLAIN_EVERY_MS 5000
#define BAR_WIDTH 20

/* 12345678 -> "12,345,678" */
static const char *grouped(int64_t v, char *buf, size_t n)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", (long long)(v < 0 ? -v : v));
    size_t len = strlen(digits), k = 0;
    if (v < 0 && k + 1 < n)
        buf[k++] = '-';
    for (size_t i = 0; i < len && k + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[k++] = ',';
        buf[k++] = digits[i];
    }
    buf[k] = '\0';
    return buf;
}

static const char *duration_text(double ms, char *buf, size_t n)
{
    if (ms < 0)
        snprintf(buf, n, "-");
    else if (ms < 1000)
        snprintf(buf, n, "%.0f ms", ms);
    else
        snprintf(buf, n, "%.1f s", ms / 1000);
    return buf;
}

void demo_progress(const demo_live_t *lv, bool tty, bool force)
{
    static int64_t last_plain_ms;
    char c[32], t[32], a[32], b[32], lag[32];
    int64_t backlog = lv->committed - lv->applied;
    if (tty) {
        int done = lv->target > 0 ? (int)(lv->applied * BAR_WIDTH / lv->target) : 0;
        int placed = lv->target > 0 ? (int)(lv->committed * BAR_WIDTH / lv->target) : 0;
        char bar[BAR_WIDTH + 1], line[512];
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < done ? '#' : i < placed ? '-' : '.';
        bar[BAR_WIDTH] = '\0';
        snprintf(line, sizeof line,
                 "[%s] %3.0fs orders %s/%s %3.0f/s | applied %s %3.0f/s | kills relay %d "
                 "consumer %d | lag %s | backlog %s",
                 bar, lv->elapsed_s, grouped(lv->committed, c, sizeof c),
                 grouped(lv->target, t, sizeof t), lv->commit_rate, grouped(lv->applied, a, sizeof a),
                 lv->apply_rate, lv->relay_kills, lv->consumer_kills,
                 duration_text(lv->lag_ms, lag, sizeof lag), grouped(backlog, b, sizeof b));
        /* one line, or \r cannot redraw it: cut at the terminal's width */
        struct winsize ws;
        if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1 && ws.ws_col < sizeof line)
            line[ws.ws_col - 1] = '\0';
        printf("\r\033[K%s", line);
        fflush(stdout);
        return;
    }
    int64_t now = pb_monotonic_ms();
    if (now - last_plain_ms < (force ? 1000 : PLAIN_EVERY_MS))
        return;
    last_plain_ms = now;
    printf("%5.0fs  orders committed %s of %s (%.0f/s), rolled back %lld, applied %s (%.0f/s), "
           "backlog %s, unpublished %lld, lag %s, duplicates absorbed %lld, kills: relay %d, "
           "consumer %d\n",
           lv->elapsed_s, grouped(lv->committed, c, sizeof c), grouped(lv->target, t, sizeof t),
           lv->commit_rate, (long long)lv->rolled_back, grouped(lv->applied, a, sizeof a),
           lv->apply_rate, grouped(backlog, b, sizeof b), (long long)lv->pending,
           duration_text(lv->lag_ms, lag, sizeof lag), (long long)lv->duplicates, lv->relay_kills,
           lv->consumer_kills);
    fflush(stdout);
}

void demo_event(bool tty, const char *fmt, ...)
{
    if (tty)
        fputs("\r\033[K", stdout);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

void demo_progress_end(bool tty)
{
    if (tty) {
        putchar('\n');
        fflush(stdout);
    }
}

static const char result_sql[] =
    "SELECT (SELECT count(*) FROM postbox.outbox_all),"
    "       (SELECT count(*) FROM postbox.outbox_published),"
    "       (SELECT count(*) FROM postbox.outbox),"
    "       (SELECT count(*) FROM postbox.dead_letters),"
    "       (SELECT count(*) FROM postbox.inbox_dead),"
    "       (SELECT count(*) FROM shipping.shipments),"
    "       (SELECT count(DISTINCT order_id) FROM shipping.shipments),"
    "       (SELECT count(*) FROM shipping.shipments s"
    "         WHERE NOT EXISTS (SELECT 1 FROM orders.orders o WHERE o.id = s.order_id)),"
    "       (SELECT count(*) FROM shipping.shipments WHERE NOT in_order),"
    "       (SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY lag_ms), -1) FROM shipping.shipments),"
    "       (SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY lag_ms), -1) FROM shipping.shipments),"
    "       (SELECT count(*) FROM orders.orders)";

pb_status_t demo_result_query(PGconn *conn, demo_result_t *r, pb_error_t *err)
{
    PGresult *res = PQexec(conn, result_sql);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK, "summary", err);
    if (st != PB_OK)
        return st;
    int64_t orders_rows;
    int64_t *ints[] = {&r->events_committed, &r->published,        &r->pending,
                       &r->dead_letters,     &r->inbox_dead,       &r->effects,
                       &r->effects_distinct, &r->effects_unknown,  &r->out_of_order};
    for (int i = 0; i < 9; i++)
        *ints[i] = strtoll(PQgetvalue(res, 0, i), NULL, 10);
    r->lag_p50_ms = strtod(PQgetvalue(res, 0, 9), NULL);
    r->lag_p99_ms = strtod(PQgetvalue(res, 0, 10), NULL);
    orders_rows = strtoll(PQgetvalue(res, 0, 11), NULL, 10);
    PQclear(res);
    if (orders_rows != r->committed)
        return pb_fail(err, PB_FATAL, "orders.orders holds %lld rows, the producers committed %lld",
                       (long long)orders_rows, (long long)r->committed);
    return PB_OK;
}

typedef struct row_printer {
    FILE *out;
    bool ok;
} row_printer_t;

/* One line of the table: label, figure, a mark when it disagrees, and what it must be. */
static void row(row_printer_t *p, const char *label, const char *figure, bool good,
                const char *note)
{
    if (good && !*note)
        fprintf(p->out, "  %-36s %14s\n", label, figure);
    else
        fprintf(p->out, "  %-36s %14s  %s %s\n", label, figure, good ? "  " : "<-", note);
    if (!good)
        p->ok = false;
}

static void row_n(row_printer_t *p, const char *label, int64_t v, bool good, const char *note)
{
    char b[32];
    row(p, label, grouped(v, b, sizeof b), good, note);
}

bool demo_summary(FILE *out, const demo_result_t *r, int kills_planned)
{
    row_printer_t p = {out, true};
    char b1[32], b2[32], line[96];
    int64_t absorbed = r->dup_delivered - (r->effects - r->effects_distinct);
    fprintf(out, "\npostbox demo on %s: %.0f s, relay SIGKILLed %d times, consumer %d times%s\n\n",
            r->broker, r->seconds, r->relay_kills, r->consumer_kills,
            r->broker_restarts ? ", broker restarted" : "");
    row_n(&p, "orders committed", r->committed, true, "");
    row_n(&p, "orders rolled back", r->rolled_back, true, "(their events must never leave the database)");
    row_n(&p, "events committed", r->events_committed, r->events_committed == r->committed,
          "(one per committed order, none of the rolled-back ones)");
    row_n(&p, "events published", r->published, r->published == r->committed,
          "(confirmed by the broker; must equal orders committed)");
    if (r->dropped_copies >= 0)
        row_n(&p, "republished, dropped by JetStream", r->dropped_copies, true,
              "(a killed relay's batch sent again; Nats-Msg-Id known to the stream)");
    row_n(&p, "duplicates delivered by the broker", r->dup_delivered, true,
          "(republished after a relay kill, redelivered after a consumer kill)");
    row_n(&p, "duplicates absorbed by the inbox", absorbed, absorbed == r->dup_delivered,
          "(acknowledged without running the handler)");
    row_n(&p, "effects applied", r->effects_distinct, r->effects_distinct == r->committed,
          "(shipments; must equal orders committed)");
    row_n(&p, "effects applied twice", r->effects - r->effects_distinct,
          r->effects == r->effects_distinct, "(must be 0)");
    row_n(&p, "effects of rolled-back orders", r->effects_unknown, r->effects_unknown == 0,
          "(must be 0)");
    row_n(&p, "effects out of order", r->out_of_order, r->out_of_order == 0,
          "(a customer's orders applied as placed; must be 0)");
    if (r->pending || r->dead_letters || r->inbox_dead) {
        snprintf(line, sizeof line, "%lld / %lld / %lld", (long long)r->pending,
                 (long long)r->dead_letters, (long long)r->inbox_dead);
        row(&p, "unpublished / dead letters / inbox dead", line, false, "(must be 0)");
    }
    snprintf(line, sizeof line, "%s / %s", duration_text(r->lag_p50_ms, b1, sizeof b1),
             duration_text(r->lag_p99_ms, b2, sizeof b2));
    row(&p, "lag p50 / p99", line, true, "(commit to effect, kills included)");
    snprintf(line, sizeof line, "%d / %d", r->relay_kills, r->consumer_kills);
    row(&p, "kills: relay / consumer", line,
        r->relay_kills >= kills_planned && r->consumer_kills >= kills_planned,
        "(SIGKILL, then started again)");
    fprintf(out, "\n  verdict: %s\n", p.ok ? "PASS - every committed order took effect exactly once, "
                                            "in order, and no rolled-back one did"
                                          : "FAIL - the figures marked <- differ");
    fflush(out);
    return p.ok;
}
