#include "cdc/streamed.h"

#include <stdlib.h>
#include <string.h>

#include "common/str.h"

void pb_streamed_init(pb_streamed_t *set, const char *dir)
{
    memset(set, 0, sizeof *set);
    set->dir = dir;
}

/* Open transactions are few (one per concurrent large transaction): a linear search. */
static pb_streamed_txn_t *find(pb_streamed_t *set, uint32_t xid)
{
    for (size_t i = 0; i < set->n; i++)
        if (set->txns[i].xid == xid)
            return &set->txns[i];
    return NULL;
}

/* Takes t out of the set (keeping the order of the others), returning its spill file. */
static pb_spill_t *take(pb_streamed_t *set, pb_streamed_txn_t *t)
{
    pb_spill_t *sp = t->spill;
    size_t i = (size_t)(t - set->txns);
    memmove(&set->txns[i], &set->txns[i + 1], (set->n - i - 1) * sizeof *set->txns);
    set->n--;
    return sp;
}

pb_status_t pb_streamed_start(pb_streamed_t *set, uint32_t xid, bool first_segment,
                              pb_error_t *err)
{
    pb_streamed_txn_t *t = find(set, xid);
    if (first_segment && t)
        return pb_fail(err, PB_FATAL, "pgoutput: first stream block of transaction %u, which "
                       "is streaming already", xid);
    if (!first_segment && !t)
        return pb_fail(err, PB_FATAL, "pgoutput: stream block of transaction %u, whose first "
                       "block never came", xid);
    if (!t) {
        if (set->n == set->cap) {
            set->cap = set->cap ? set->cap * 2 : 8;
            set->txns = pb_realloc(set->txns, set->cap * sizeof *set->txns);
        }
        set->txns[set->n++] = (pb_streamed_txn_t){xid, NULL};
    }
    set->block_xid = xid;
    return PB_OK;
}

void pb_streamed_stop(pb_streamed_t *set)
{
    set->block_xid = 0;
}

pb_status_t pb_streamed_add(pb_streamed_t *set, uint32_t subxid, const pb_event_t *ev,
                            pb_error_t *err)
{
    pb_streamed_txn_t *t = set->block_xid ? find(set, set->block_xid) : NULL;
    if (!t)
        return pb_fail(err, PB_FATAL, "pgoutput: a streamed change outside a stream block");
    pb_status_t st;
    if (!t->spill && (st = pb_spill_new(set->dir, t->xid, &t->spill, err)) != PB_OK)
        return st;
    return pb_spill_write(t->spill, subxid, ev, err);
}

pb_status_t pb_streamed_abort(pb_streamed_t *set, uint32_t xid, uint32_t subxid, pb_error_t *err)
{
    pb_streamed_txn_t *t = find(set, xid);
    if (!t)
        return PB_OK;
    if (subxid == xid) {
        pb_spill_free(take(set, t));
        return PB_OK;
    }
    return t->spill ? pb_spill_drop_subxact(t->spill, subxid, err) : PB_OK;
}

pb_status_t pb_streamed_commit(pb_streamed_t *set, uint32_t xid, pb_spill_t **replay,
                               pb_error_t *err)
{
    *replay = NULL;
    pb_streamed_txn_t *t = find(set, xid);
    if (!t)
        return pb_fail(err, PB_FATAL, "pgoutput: Stream Commit of transaction %u, which never "
                       "streamed", xid);
    pb_spill_t *sp = take(set, t);
    pb_status_t st = sp ? pb_spill_rewind(sp, err) : PB_OK;
    if (st != PB_OK) {
        pb_spill_free(sp);
        return st;
    }
    *replay = sp;
    return PB_OK;
}

void pb_streamed_clear(pb_streamed_t *set)
{
    for (size_t i = 0; i < set->n; i++)
        pb_spill_free(set->txns[i].spill);
    set->n = 0;
    set->block_xid = 0;
}

void pb_streamed_free(pb_streamed_t *set)
{
    pb_streamed_clear(set);
    free(set->txns);
    set->txns = NULL;
    set->cap = 0;
}
