#include "metrics/http_guard.h"

#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/str.h"

struct pb_http_conn {
    bool used;
    bool closing;   /* closed by the guard; its entry stays until the server reports it closed,
                     * so that its fd number is not taken for another connection's before then */
    bool answering; /* a whole request arrived; its answer is not sent yet */
    int fd;
    unsigned char peer[16]; /* the client address: 4 bytes for IPv4, 16 for IPv6 */
    unsigned char peer_len;
    int64_t since_ms; /* start of the current deadline */
};

struct pb_http_guard {
    pb_http_limits_t lim;
    pb_http_close_fn *close_fn;
    void *arg;
    pb_http_conn_t *conns; /* lim.slots entries */
    pb_http_guard_stats_t stats;
};

pb_http_guard_t *pb_http_guard_new(const pb_http_limits_t *lim, pb_http_close_fn *close_fn,
                                   void *arg)
{
    PB_ASSERT(lim->keep < lim->slots && lim->keep_per_peer >= 1 &&
              lim->keep_per_peer <= lim->keep && lim->request_ms > 0);
    pb_http_guard_t *g = pb_malloc(sizeof *g);
    *g = (pb_http_guard_t){.lim = *lim, .close_fn = close_fn, .arg = arg};
    g->conns = pb_malloc(lim->slots * sizeof *g->conns);
    memset(g->conns, 0, lim->slots * sizeof *g->conns);
    return g;
}

void pb_http_guard_free(pb_http_guard_t *g)
{
    if (!g)
        return;
    free(g->conns);
    free(g);
}

static bool live(const pb_http_conn_t *c)
{
    return c->used && !c->closing;
}

static bool same_peer(const pb_http_conn_t *a, const pb_http_conn_t *b)
{
    return a->peer_len == b->peer_len && memcmp(a->peer, b->peer, a->peer_len) == 0;
}

static void close_conn(pb_http_guard_t *g, pb_http_conn_t *c, uint64_t *count)
{
    c->closing = true;
    (*count)++;
    g->close_fn(c->fd, g->arg);
}

static unsigned peer_count(const pb_http_guard_t *g, const pb_http_conn_t *of)
{
    unsigned n = 0;
    for (unsigned i = 0; i < g->lim.slots; i++)
        n += live(&g->conns[i]) && same_peer(&g->conns[i], of);
    return n;
}

/* The connection of peer `of` (any peer when NULL), other than `spare`, that has waited longest
 * for its request; NULL when every one is answering. */
static pb_http_conn_t *longest_waiting(pb_http_guard_t *g, const pb_http_conn_t *of,
                                       const pb_http_conn_t *spare)
{
    pb_http_conn_t *best = NULL;
    for (unsigned i = 0; i < g->lim.slots; i++) {
        pb_http_conn_t *c = &g->conns[i];
        if (!live(c) || c == spare || c->answering || (of && !same_peer(c, of)))
            continue;
        if (!best || c->since_ms < best->since_ms)
            best = c;
    }
    return best;
}

/* The live connection, other than `spare`, whose peer holds the most connections and has one
 * waiting for its request: that one, the longest waiting. */
static pb_http_conn_t *busiest_peers_waiting(pb_http_guard_t *g, const pb_http_conn_t *spare)
{
    pb_http_conn_t *best = NULL;
    unsigned best_count = 0;
    for (unsigned i = 0; i < g->lim.slots; i++) {
        pb_http_conn_t *c = &g->conns[i];
        if (!live(c) || c == spare || c->answering)
            continue;
        unsigned n = peer_count(g, c);
        if (n > best_count || (n == best_count && c->since_ms < best->since_ms)) {
            best = c;
            best_count = n;
        }
    }
    return best;
}

static void peer_of(pb_http_conn_t *c, const struct sockaddr *peer, socklen_t peer_len)
{
    c->peer_len = 0;
    if (peer && peer->sa_family == AF_INET && peer_len >= (socklen_t)sizeof(struct sockaddr_in)) {
        memcpy(c->peer, &((const struct sockaddr_in *)(const void *)peer)->sin_addr, 4);
        c->peer_len = 4;
    } else if (peer && peer->sa_family == AF_INET6 &&
               peer_len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        memcpy(c->peer, &((const struct sockaddr_in6 *)(const void *)peer)->sin6_addr, 16);
        c->peer_len = 16;
    }
}

pb_http_conn_t *pb_http_guard_open(pb_http_guard_t *g, int fd, const struct sockaddr *peer,
                                   socklen_t peer_len, int64_t now_ms)
{
    pb_http_conn_t *c = NULL;
    unsigned n_live = 0;
    for (unsigned i = 0; i < g->lim.slots; i++) {
        pb_http_conn_t *e = &g->conns[i];
        if (live(e) && now_ms - e->since_ms >= g->lim.request_ms)
            close_conn(g, e, &g->stats.late);
        if (!e->used && !c)
            c = e;
        n_live += live(e);
    }
    if (!c)
        return NULL;
    *c = (pb_http_conn_t){.used = true, .fd = fd, .since_ms = now_ms};
    peer_of(c, peer, peer_len);
    n_live++;
    for (unsigned n = peer_count(g, c); n > g->lim.keep_per_peer; n--) {
        pb_http_conn_t *victim = longest_waiting(g, c, c);
        if (!victim)
            break;
        close_conn(g, victim, &g->stats.surplus);
        n_live--;
    }
    for (; n_live > g->lim.keep; n_live--) {
        pb_http_conn_t *victim = busiest_peers_waiting(g, c);
        if (!victim)
            break;
        close_conn(g, victim, &g->stats.surplus);
    }
    return c;
}

void pb_http_guard_request(pb_http_conn_t *c, int64_t now_ms)
{
    if (c && !c->answering) {
        c->answering = true;
        c->since_ms = now_ms;
    }
}

void pb_http_guard_answered(pb_http_conn_t *c, int64_t now_ms)
{
    if (c) {
        c->answering = false;
        c->since_ms = now_ms;
    }
}

void pb_http_guard_close(pb_http_guard_t *g, pb_http_conn_t *c)
{
    (void)g;
    if (c)
        *c = (pb_http_conn_t){0};
}

pb_http_guard_stats_t pb_http_guard_stats(const pb_http_guard_t *g)
{
    return g->stats;
}

unsigned pb_http_guard_open_count(const pb_http_guard_t *g)
{
    unsigned n = 0;
    for (unsigned i = 0; i < g->lim.slots; i++)
        n += live(&g->conns[i]);
    return n;
}
