#include "relay/slot_age.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"

/* PostgreSQL's epoch (2000-01-01) in unix microseconds. */
#define PG_EPOCH_UNIX_US INT64_C(946684800000000)

void pb_slot_age_init(pb_slot_age_t *a)
{
    memset(a, 0, sizeof *a);
}

void pb_slot_age_free(pb_slot_age_t *a)
{
    free(a->txns);
    pb_slot_age_init(a);
}

static pb_slot_age_txn_t *at(const pb_slot_age_t *a, size_t i)
{
    return &a->txns[(a->head + i) % a->cap];
}

/* Doubles the ring, unrolling it so that the oldest entry comes first. */
static void grow(pb_slot_age_t *a)
{
    size_t cap = a->cap ? a->cap * 2 : 64;
    pb_slot_age_txn_t *txns = pb_malloc(cap * sizeof *txns);
    for (size_t i = 0; i < a->n; i++)
        txns[i] = *at(a, i);
    free(a->txns);
    a->txns = txns;
    a->cap = cap;
    a->head = 0;
}

void pb_slot_age_note(pb_slot_age_t *a, uint64_t commit_lsn, int64_t pg_commit_time)
{
    /* another event of the newest transaction, or one read again after the stream was opened
     * anew (the server sends every unconfirmed transaction again, in the same order) */
    if (a->n > 0 && commit_lsn <= at(a, a->n - 1)->commit_lsn)
        return;
    if (a->n == a->cap)
        grow(a);
    *at(a, a->n) = (pb_slot_age_txn_t){commit_lsn, pg_commit_time + PG_EPOCH_UNIX_US};
    a->n++;
}

void pb_slot_age_confirmed(pb_slot_age_t *a, uint64_t confirmed_lsn)
{
    /* the read order is the commit order: the passed ones are at the head */
    while (a->n > 0 && at(a, 0)->commit_lsn < confirmed_lsn) {
        a->head = (a->head + 1) % a->cap;
        a->n--;
    }
}

int64_t pb_slot_age_ms(const pb_slot_age_t *a, int64_t now_us)
{
    if (a->n == 0)
        return 0;
    int64_t age_us = now_us - at(a, 0)->commit_us;
    return age_us > 0 ? age_us / 1000 : 0;
}
