#include "consume/lanes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/str.h"

#define MAX_LANES 16

typedef struct worker {
    pb_lanes_t *pool;
    int lane;
    pthread_t thread;
    bool started;
} worker_t;

struct pb_lanes {
    int n;
    void (*work)(void *arg, int lane);
    void *arg;
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    unsigned long generation; /* one more per batch */
    bool busy[MAX_LANES];
    int running;              /* workers still on the current batch */
    bool quit;
    worker_t workers[MAX_LANES];
};

static void *worker_main(void *p)
{
    worker_t *w = p;
    pb_lanes_t *pool = w->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->generation == seen && !pool->quit)
            pthread_cond_wait(&pool->start, &pool->lock);
        if (pool->quit)
            break;
        seen = pool->generation;
        bool mine = pool->busy[w->lane];
        pthread_mutex_unlock(&pool->lock);
        if (mine)
            pool->work(pool->arg, w->lane);
        pthread_mutex_lock(&pool->lock);
        if (mine && --pool->running == 0)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

pb_lanes_t *pb_lanes_new(int n, void (*work)(void *arg, int lane), void *arg)
{
    PB_ASSERT(n >= 1 && n <= MAX_LANES);
    pb_lanes_t *p = pb_malloc(sizeof *p);
    memset(p, 0, sizeof *p);
    p->n = n;
    p->work = work;
    p->arg = arg;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->start, NULL);
    pthread_cond_init(&p->done, NULL);
    for (int l = 1; l < n; l++) {
        worker_t *w = &p->workers[l];
        w->pool = p;
        w->lane = l;
        w->started = pthread_create(&w->thread, NULL, worker_main, w) == 0;
    }
    return p;
}

void pb_lanes_run(pb_lanes_t *p, const bool *busy)
{
    pthread_mutex_lock(&p->lock);
    p->running = 0;
    for (int l = 0; l < p->n; l++) {
        p->busy[l] = busy[l] && (l == 0 || p->workers[l].started);
        if (l > 0 && p->busy[l])
            p->running++;
    }
    p->generation++;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    for (int l = 0; l < p->n; l++) /* lane 0, and any lane without a thread, in line */
        if (busy[l] && (l == 0 || !p->workers[l].started))
            p->work(p->arg, l);
    pthread_mutex_lock(&p->lock);
    while (p->running > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

void pb_lanes_free(pb_lanes_t *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = true;
    pthread_cond_broadcast(&p->start);
    pthread_mutex_unlock(&p->lock);
    for (int l = 1; l < p->n; l++)
        if (p->workers[l].started)
            pthread_join(p->workers[l].thread, NULL);
    pthread_cond_destroy(&p->start);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    free(p);
}
