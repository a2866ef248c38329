#include "cdc/spill.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/str.h"

/* The stdio buffer of a spill file: what one streamed transaction costs in memory. */
#define SPILL_BUFFER_BYTES (64 * 1024)
#define N_STRINGS PB_CDC_EVENT_STRINGS
#define NULL_STRING UINT32_MAX
/* A record larger than this is not one the relay wrote: the file is damaged. */
#define MAX_RECORD_BYTES (UINT32_MAX - 1)

/* A run of consecutive events of one (sub)transaction: where it starts in the file. */
typedef struct run {
    uint32_t subxid;
    uint64_t offset;
    uint64_t count;
} run_t;

struct pb_spill {
    FILE *f;
    char dir[256]; /* for error messages */
    uint32_t top_xid;
    uint64_t size;  /* bytes written (the end of the last record) */
    uint64_t count; /* events written and not dropped */
    run_t *runs;
    size_t n_runs, cap_runs;
    bool reading;
};

/* The fixed part of a record, after its length. */
typedef struct fixed {
    int64_t id, created_at_us, sequence, available_at_us, expires_at_us;
    int32_t attempts;
    uint32_t reserved;
} fixed_t;

static const char *spill_dir(const char *dir)
{
    if (dir && *dir)
        return dir;
    const char *tmp = getenv("TMPDIR");
    return tmp && *tmp ? tmp : "/tmp";
}

/* An unlinked file in dir: O_TMPFILE where the file system has it, else a name removed at once. */
static int open_unlinked(const char *dir)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/postbox-spill-XXXXXX", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0 && unlink(path) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

pb_status_t pb_spill_new(const char *dir, uint32_t top_xid, pb_spill_t **out, pb_error_t *err)
{
    *out = NULL;
    const char *where = spill_dir(dir);
    int fd = open_unlinked(where);
    if (fd < 0)
        return pb_fail(err, PB_TRANSIENT, "cannot create a spill file for streamed transactions in "
                       "\"%s\" (cdc.spill_dir): %s", where, strerror(errno));
    FILE *f = fdopen(fd, "w+b");
    if (!f) {
        int saved = errno;
        close(fd);
        return pb_fail(err, PB_TRANSIENT, "spill file in \"%s\": %s", where, strerror(saved));
    }
    if (setvbuf(f, NULL, _IOFBF, SPILL_BUFFER_BYTES) != 0) {
        fclose(f);
        return pb_fail(err, PB_TRANSIENT, "spill file in \"%s\": cannot set its buffer", where);
    }
    pb_spill_t *sp = pb_malloc(sizeof *sp);
    memset(sp, 0, sizeof *sp);
    sp->f = f;
    sp->top_xid = top_xid;
    snprintf(sp->dir, sizeof sp->dir, "%s", where);
    *out = sp;
    return PB_OK;
}

static pb_status_t io_error(pb_spill_t *sp, const char *what, pb_error_t *err)
{
    return pb_fail(err, PB_TRANSIENT, "%s the spill file of streamed transaction %u (in \"%s\", "
                   "cdc.spill_dir): %s", what, sp->top_xid, sp->dir,
                   errno ? strerror(errno) : "unexpected end of file");
}

static bool put(pb_spill_t *sp, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, sp->f) == n;
}

static size_t str_len(const char *s, size_t payload_len, int i)
{
    return i == 4 ? payload_len : strlen(s);
}

pb_status_t pb_spill_write(pb_spill_t *sp, uint32_t subxid, const pb_event_t *ev,
                           pb_error_t *err)
{
    PB_ASSERT(!sp->reading);
    const char *strs[N_STRINGS];
    pb_cdc_event_get_strings(ev, strs);
    uint64_t body = sizeof(fixed_t);
    for (int i = 0; i < N_STRINGS; i++)
        body += sizeof(uint32_t) + (strs[i] ? str_len(strs[i], ev->payload_len, i) + 1 : 0);
    if (body > MAX_RECORD_BYTES)
        return pb_fail(err, PB_FATAL, "event %s is too large to spill (%llu bytes)", ev->event_id,
                       (unsigned long long)body);
    fixed_t fx = {ev->id, ev->created_at_us, ev->sequence, ev->available_at_us, ev->expires_at_us,
                  ev->attempts, 0};
    uint32_t body_len = (uint32_t)body;
    errno = 0;
    bool ok = put(sp, &body_len, sizeof body_len) && put(sp, &fx, sizeof fx);
    for (int i = 0; ok && i < N_STRINGS; i++) {
        uint32_t len = strs[i] ? (uint32_t)str_len(strs[i], ev->payload_len, i) : NULL_STRING;
        ok = put(sp, &len, sizeof len) && (!strs[i] || (put(sp, strs[i], len) && put(sp, "", 1)));
    }
    if (!ok)
        return io_error(sp, "cannot write", err);
    if (sp->n_runs == 0 || sp->runs[sp->n_runs - 1].subxid != subxid) {
        if (sp->n_runs == sp->cap_runs) {
            sp->cap_runs = sp->cap_runs ? sp->cap_runs * 2 : 16;
            sp->runs = pb_realloc(sp->runs, sp->cap_runs * sizeof *sp->runs);
        }
        sp->runs[sp->n_runs++] = (run_t){subxid, sp->size, 0};
    }
    sp->runs[sp->n_runs - 1].count++;
    sp->size += sizeof body_len + body;
    sp->count++;
    return PB_OK;
}

pb_status_t pb_spill_drop_subxact(pb_spill_t *sp, uint32_t subxid, pb_error_t *err)
{
    PB_ASSERT(!sp->reading);
    /* Going back from the end, every run belongs to the aborted subtransaction's subtree until
     * one of the top-level transaction's own: while a subtransaction runs, its parent writes
     * nothing. The earliest run of subxid found there is where the subtree began. */
    size_t from = sp->n_runs;
    for (size_t i = sp->n_runs; i > 0; i--) {
        if (sp->runs[i - 1].subxid == sp->top_xid)
            break;
        if (sp->runs[i - 1].subxid == subxid)
            from = i - 1;
    }
    if (from == sp->n_runs)
        return PB_OK; /* it wrote nothing here */
    uint64_t dropped = 0;
    for (size_t i = from; i < sp->n_runs; i++)
        dropped += sp->runs[i].count;
    uint64_t offset = sp->runs[from].offset;
    errno = 0;
    if (fflush(sp->f) != 0 || ftruncate(fileno(sp->f), (off_t)offset) != 0 ||
        fseeko(sp->f, (off_t)offset, SEEK_SET) != 0)
        return io_error(sp, "cannot cut", err);
    sp->n_runs = from;
    sp->size = offset;
    sp->count -= dropped;
    return PB_OK;
}

pb_status_t pb_spill_rewind(pb_spill_t *sp, pb_error_t *err)
{
    errno = 0;
    if (fflush(sp->f) != 0 || fseeko(sp->f, 0, SEEK_SET) != 0)
        return io_error(sp, "cannot rewind", err);
    sp->reading = true;
    free(sp->runs); /* only the writing needs them */
    sp->runs = NULL;
    sp->n_runs = sp->cap_runs = 0;
    return PB_OK;
}

/* A string of the record at *p (left bytes remain); NULL for a NULL one; *bad on damage. */
static const char *take_str(char **p, size_t *left, uint32_t *len, bool *bad)
{
    uint32_t n;
    if (*left < sizeof n) {
        *bad = true;
        return NULL;
    }
    memcpy(&n, *p, sizeof n);
    *p += sizeof n;
    *left -= sizeof n;
    *len = 0;
    if (n == NULL_STRING)
        return NULL;
    if ((uint64_t)n + 1 > *left || (*p)[n] != '\0') {
        *bad = true;
        return NULL;
    }
    const char *s = *p;
    *p += n + 1;
    *left -= n + 1;
    *len = n;
    return s;
}

pb_status_t pb_spill_read(pb_spill_t *sp, pb_cdc_event_t *out, bool *got, pb_error_t *err)
{
    PB_ASSERT(sp->reading);
    *got = false;
    uint32_t body_len;
    errno = 0;
    size_t n = fread(&body_len, 1, sizeof body_len, sp->f);
    if (n == 0 && feof(sp->f))
        return PB_OK;
    if (n != sizeof body_len || body_len < sizeof(fixed_t))
        return io_error(sp, "damaged record in", err);
    char *block = pb_malloc(body_len);
    if (fread(block, 1, body_len, sp->f) != body_len) {
        free(block);
        return io_error(sp, "cannot read", err);
    }
    memset(out, 0, sizeof *out);
    fixed_t fx;
    memcpy(&fx, block, sizeof fx);
    char *p = block + sizeof fx;
    size_t left = body_len - sizeof fx;
    const char *strs[N_STRINGS];
    uint32_t lens[N_STRINGS];
    bool bad = false;
    for (int i = 0; i < N_STRINGS && !bad; i++)
        strs[i] = take_str(&p, &left, &lens[i], &bad);
    if (bad || left != 0 || !strs[0] || !strs[1] || !strs[2] || !strs[3] || !strs[4]) {
        free(block);
        errno = 0;
        return io_error(sp, "damaged record in", err);
    }
    pb_event_t *ev = &out->ev;
    ev->id = fx.id;
    ev->created_at_us = fx.created_at_us;
    ev->sequence = fx.sequence;
    ev->available_at_us = fx.available_at_us;
    ev->expires_at_us = fx.expires_at_us;
    ev->attempts = fx.attempts;
    pb_cdc_event_set_strings(ev, strs, lens[4]);
    out->block = block;
    *got = true;
    return PB_OK;
}

uint64_t pb_spill_count(const pb_spill_t *sp)
{
    return sp->count;
}

uint64_t pb_spill_bytes(const pb_spill_t *sp)
{
    return sp->size;
}

void pb_spill_free(pb_spill_t *sp)
{
    if (!sp)
        return;
    fclose(sp->f); /* the file has no name: closing it frees its space */
    free(sp->runs);
    free(sp);
}
