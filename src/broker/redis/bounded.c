#include "broker/redis/bounded.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_DEPTH 8          /* the shapes nest 5 deep */
#define LINE_MAX_BYTES 65536 /* a header, status or error line */
#define LINE_INLINE 128      /* headers take 23 bytes at most: longer lines go to the heap */
#define SMALL_MAX 65536      /* an id or stream name kept */
#define READ_CHUNK 16384
#define PAYLOAD_FIELD "payload"
#define PAYLOAD_FIELD_LEN 7

/* The part an array plays in the reply. */
typedef enum role {
    ROLE_OTHER,
    ROLE_STREAMS, /* [pair, ...] */
    ROLE_PAIR,    /* [stream, list] */
    ROLE_LIST,    /* [entry, ...] */
    ROLE_ENTRY,   /* [id, fields] */
    ROLE_FIELDS,  /* [name, value, ...] */
} role_t;

typedef struct frame {
    role_t role;
    bool emit;     /* its elements are passed on (false: read past) */
    int64_t left;  /* elements still to come */
    int64_t index; /* of the next element */
} frame_t;

typedef enum action { KEEP, AS_LENGTH, DROP } action_t;

struct pb_redis_filter {
    pb_redis_shape_t shape;
    pb_redis_limits_t lim;
    frame_t stack[MAX_DEPTH];
    int depth;
    uint64_t bulk_left; /* bytes of the bulk string being read still to come, CRLF included */
    uint64_t bulk_pos;  /* of its bytes read */
    bool bulk_emit;
    bool bulk_name; /* a field name of PAYLOAD_FIELD_LEN bytes: compared with PAYLOAD_FIELD */
    char name[PAYLOAD_FIELD_LEN];
    /* the entry being read */
    bool deferred;
    int payload; /* 0: its name not seen yet, 1: the next value is it, 2: past it */
    uint64_t other, payload_kept;
    /* the reply */
    uint64_t kept, entries;
    bool done;
    /* during a feed: the input, and the run of it passed on unchanged not yet copied out */
    const char *in;
    size_t run_from, run_to;
    void (*emit)(void *arg, const char *p, size_t n);
    void *emit_arg;
    bool emit_failed;
    uint64_t emitted;    /* bytes passed on */
    redisReader *reader; /* emit_to_reader's */
    /* the current line: in[line_from, line_to) with its CRLF, or line[0..nline) when it came
     * in pieces (line_in_input false) */
    bool line_in_input;
    size_t line_from, line_to;
    size_t nline, line_cap;
    char *line; /* line_inline, or on the heap for a long one */
    char line_inline[LINE_INLINE];
};

/* On the caller's stack in pb_redis_get_reply_bounded: no allocation per reply. */
static void filter_init(pb_redis_filter_t *f, pb_redis_shape_t shape, const pb_redis_limits_t *lim)
{
    memset(f, 0, offsetof(pb_redis_filter_t, line_inline));
    f->shape = shape;
    f->lim = *lim;
    if (f->lim.budget == 0)
        f->lim.budget = 1;
    f->line = f->line_inline;
    f->line_cap = LINE_INLINE;
}

static void filter_clear(pb_redis_filter_t *f)
{
    if (f->line != f->line_inline)
        free(f->line);
    f->line = f->line_inline;
}

pb_redis_filter_t *pb_redis_filter_new(pb_redis_shape_t shape, const pb_redis_limits_t *lim)
{
    pb_redis_filter_t *f = pb_malloc(sizeof *f);
    filter_init(f, shape, lim);
    return f;
}

void pb_redis_filter_free(pb_redis_filter_t *f)
{
    if (f) {
        filter_clear(f);
        free(f);
    }
}

bool pb_redis_filter_done(const pb_redis_filter_t *f)
{
    return f->done;
}

uint64_t pb_redis_filter_kept(const pb_redis_filter_t *f)
{
    return f->kept;
}

/* ---- output: runs of the input passed on unchanged are copied out in one piece -------------- */

static void flush_run(pb_redis_filter_t *f)
{
    if (f->run_to > f->run_from) {
        f->emit(f->emit_arg, f->in + f->run_from, f->run_to - f->run_from);
        f->emitted += f->run_to - f->run_from;
    }
    f->run_from = f->run_to = 0;
}

static void pass(pb_redis_filter_t *f, size_t from, size_t to)
{
    if (f->run_to != from || f->run_to == f->run_from) {
        flush_run(f);
        f->run_from = from;
    }
    f->run_to = to;
}

static void put(pb_redis_filter_t *f, const char *s, size_t n)
{
    flush_run(f);
    f->emit(f->emit_arg, s, n);
    f->emitted += n;
}

static void put_int(pb_redis_filter_t *f, char type, int64_t v)
{
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%c%" PRId64 "\r\n", type, v);
    put(f, buf, (size_t)n);
}

/* Passes the current line on as it came. */
static void pass_line(pb_redis_filter_t *f)
{
    if (f->line_in_input) {
        pass(f, f->line_from, f->line_to);
    } else {
        put(f, f->line, f->nline);
    }
}

/* Whether the next element at the current place is passed on. */
static bool child_emits(const pb_redis_filter_t *f)
{
    if (f->depth == 0)
        return true;
    const frame_t *p = &f->stack[f->depth - 1];
    return p->emit && !(p->role == ROLE_FIELDS && p->index >= PB_REDIS_FIELDS_KEPT);
}

static role_t child_role(const pb_redis_filter_t *f, int64_t n)
{
    if (f->depth == 0)
        return f->shape == PB_REDIS_SHAPE_STREAMS ? ROLE_STREAMS : ROLE_LIST;
    const frame_t *p = &f->stack[f->depth - 1];
    switch (p->role) {
    case ROLE_STREAMS:
        return n == 2 ? ROLE_PAIR : ROLE_OTHER;
    case ROLE_PAIR:
        return p->index == 1 ? ROLE_LIST : ROLE_OTHER;
    case ROLE_LIST:
        return n == 2 ? ROLE_ENTRY : ROLE_OTHER;
    case ROLE_ENTRY:
        return p->index == 1 ? ROLE_FIELDS : ROLE_OTHER;
    default:
        return ROLE_OTHER;
    }
}

/* What becomes of a bulk string of n bytes at the current place. */
static action_t decide(pb_redis_filter_t *f, uint64_t n)
{
    const frame_t *p = f->depth ? &f->stack[f->depth - 1] : NULL;
    bool in_fields = p && p->role == ROLE_FIELDS;
    if (!child_emits(f))
        return DROP;
    if (!in_fields)
        return n <= SMALL_MAX ? KEEP : AS_LENGTH;
    if (p->index % 2 == 1 && f->payload == 1) {
        f->payload = 2;
        if (n <= f->lim.payload_max) {
            f->payload_kept = n;
            return KEEP;
        }
    } else if (n <= f->lim.other_max - f->other) { /* other <= other_max */
        f->other += n;
        return KEEP;
    }
    return AS_LENGTH;
}

static void entry_begin(pb_redis_filter_t *f)
{
    f->deferred = f->entries >= f->lim.max_entries || f->kept >= f->lim.budget;
    f->payload = 0;
    f->other = f->payload_kept = 0;
}

static void entry_end(pb_redis_filter_t *f, bool emit)
{
    if (f->deferred) {
        if (emit)
            put(f, ":-1\r\n", 5); /* PB_REDIS_DEFERRED */
        return;
    }
    f->entries++;
    f->kept += f->other + f->payload_kept;
}

/* A value has ended at the current place: closes the arrays it completes. */
static void value_done(pb_redis_filter_t *f)
{
    for (;;) {
        if (f->depth == 0) {
            f->done = true;
            return;
        }
        frame_t *t = &f->stack[f->depth - 1];
        t->index++;
        if (--t->left > 0)
            return;
        f->depth--;
        if (t->role == ROLE_ENTRY)
            entry_end(f, t->emit);
    }
}

/* A length or count: -1 or up to 18 digits (no overflow). */
static bool parse_count(const char *s, size_t n, int64_t *out)
{
    if (n == 0 || n > 18)
        return false;
    if (n == 2 && s[0] == '-' && s[1] == '1') {
        *out = -1;
        return true;
    }
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

static bool array_begin(pb_redis_filter_t *f, int64_t n)
{
    bool emits = child_emits(f);
    role_t role = child_role(f, n);
    bool emit_elements = emits;
    if (role == ROLE_ENTRY) {
        entry_begin(f);
        if (emits && f->deferred)
            put(f, "*3\r\n", 4); /* [id, [], -1] */
        else if (emits)
            pass_line(f); /* unchanged: a whole reply passes as one run of bytes */
    } else if (role == ROLE_FIELDS && (f->deferred || n > PB_REDIS_FIELDS_KEPT)) {
        if (emits)
            put_int(f, '*', f->deferred ? 0 : PB_REDIS_FIELDS_KEPT);
        emit_elements = emits && !f->deferred;
    } else if (emits) {
        pass_line(f);
    }
    if (n == 0) {
        value_done(f);
        return true;
    }
    if (f->depth == MAX_DEPTH)
        return false;
    f->stack[f->depth++] = (frame_t){role, emit_elements, n, 0};
    return true;
}

static void bulk_begin(pb_redis_filter_t *f, uint64_t n)
{
    const frame_t *p = f->depth ? &f->stack[f->depth - 1] : NULL;
    f->bulk_name = p && p->role == ROLE_FIELDS && p->index % 2 == 0 && f->payload == 0 &&
                   p->index < PB_REDIS_FIELDS_KEPT && n == PAYLOAD_FIELD_LEN;
    action_t a = decide(f, n);
    f->bulk_left = n + 2;
    f->bulk_pos = 0;
    f->bulk_emit = a == KEEP;
    if (a == KEEP)
        pass_line(f);
    else if (a == AS_LENGTH)
        put_int(f, ':', n > INT64_MAX ? INT64_MAX : (int64_t)n);
}

static void bulk_end(pb_redis_filter_t *f)
{
    if (f->bulk_name && memcmp(f->name, PAYLOAD_FIELD, PAYLOAD_FIELD_LEN) == 0)
        f->payload = 1;
    f->bulk_name = false;
    value_done(f);
}

/* A value that is its line alone (a status, an error, an integer, a nil): passed on whole where
 * its parent keeps it. */
static void line_value(pb_redis_filter_t *f)
{
    if (child_emits(f))
        pass_line(f);
    value_done(f);
}

/* Handles the current line (len bytes without its CRLF). */
static bool on_line(pb_redis_filter_t *f, const char *line, size_t len)
{
    if (len == 0)
        return false;
    int64_t n;
    switch (line[0]) {
    case '+':
    case '-':
    case ':':
        line_value(f);
        return true;
    case '$':
        if (!parse_count(line + 1, len - 1, &n))
            return false;
        if (n < 0)
            line_value(f);
        else
            bulk_begin(f, (uint64_t)n);
        return true;
    case '*':
        if (!parse_count(line + 1, len - 1, &n))
            return false;
        if (n < 0) {
            line_value(f);
            return true;
        }
        return array_begin(f, n);
    default:
        return false; /* not RESP2 */
    }
}

/* Takes in[0..len) as pb_redis_filter_feed, passing what is kept to f->emit. */
static int64_t feed(pb_redis_filter_t *f, const char *in, size_t len)
{
    f->in = in;
    f->run_from = f->run_to = 0;
    size_t i = 0;
    bool ok = true;
    while (ok && i < len && !f->done) {
        if (f->bulk_left > 0) {
            size_t take = f->bulk_left < len - i ? (size_t)f->bulk_left : len - i;
            if (f->bulk_emit)
                pass(f, i, i + take);
            if (f->bulk_name && f->bulk_pos < PAYLOAD_FIELD_LEN) {
                size_t k = PAYLOAD_FIELD_LEN - (size_t)f->bulk_pos;
                memcpy(f->name + (size_t)f->bulk_pos, in + i, take < k ? take : k);
            }
            f->bulk_left -= take;
            f->bulk_pos += take;
            i += take;
            if (f->bulk_left == 0)
                bulk_end(f);
            continue;
        }
        const char *nl = memchr(in + i, '\n', len - i);
        if (nl && f->nline == 0) { /* the whole line is here */
            size_t end = (size_t)(nl - in) + 1;
            f->line_in_input = true;
            f->line_from = i;
            f->line_to = end;
            ok = end - i >= 2 && in[end - 2] == '\r' && on_line(f, in + i, end - i - 2);
            i = end;
            continue;
        }
        size_t n = nl ? (size_t)(nl - (in + i)) + 1 : len - i;
        if (n > LINE_MAX_BYTES - f->nline)
            return -1;
        if (f->nline + n > f->line_cap) {
            char *big = f->line == f->line_inline ? NULL : f->line;
            f->line_cap = LINE_MAX_BYTES;
            big = pb_realloc(big, f->line_cap);
            if (f->line == f->line_inline)
                memcpy(big, f->line_inline, f->nline);
            f->line = big;
        }
        memcpy(f->line + f->nline, in + i, n);
        f->nline += n;
        i += n;
        if (!nl)
            break;
        f->line_in_input = false;
        ok = f->nline >= 2 && f->line[f->nline - 2] == '\r' &&
             on_line(f, f->line, f->nline - 2);
        f->nline = 0;
    }
    flush_run(f);
    f->in = NULL;
    return ok && !f->emit_failed ? (int64_t)i : -1;
}

static void emit_to_buf(void *arg, const char *p, size_t n)
{
    pb_buf_append(arg, p, n);
}

int64_t pb_redis_filter_feed(pb_redis_filter_t *f, const char *in, size_t len, pb_buf_t *out)
{
    f->emit = emit_to_buf;
    f->emit_arg = out;
    return feed(f, in, len);
}

/* ---- reading from a context ----------------------------------------------------------------- */

static void set_error(redisContext *c, int type, const char *text)
{
    int saved = errno;
    c->err = type;
    snprintf(c->errstr, sizeof c->errstr, "%s", text ? text : strerror(saved));
    errno = saved; /* pb_redis_context_fail tells a timeout by it */
}

/* What the filter keeps goes straight into hiredis's reader. */
static void emit_to_reader(void *arg, const char *p, size_t n)
{
    pb_redis_filter_t *f = arg;
    if (!f->emit_failed && redisReaderFeed(f->reader, p, n) != REDIS_OK)
        f->emit_failed = true;
}

int pb_redis_get_reply_bounded(redisContext *c, pb_redis_shape_t shape,
                               const pb_redis_limits_t *lim, redisReply **reply, uint64_t *kept)
{
    *reply = NULL;
    if (kept)
        *kept = 0;
    if (c->err)
        return REDIS_ERR;
    int written = 0;
    while (!written)
        if (redisBufferWrite(c, &written) != REDIS_OK)
            return REDIS_ERR;
    redisReader *r = c->reader;
    if (r->ridx != -1) {
        set_error(c, REDIS_ERR_PROTOCOL, "a reply was left half read");
        return REDIS_ERR;
    }
    /* what hiredis has read ahead (in 16 KiB pieces) begins this reply: take it back */
    pb_buf_t ahead = {0};
    if (r->len > r->pos) {
        pb_buf_append(&ahead, r->buf + r->pos, r->len - r->pos);
        r->pos = r->len;
    }
    pb_redis_filter_t f;
    filter_init(&f, shape, lim);
    f.emit = emit_to_reader;
    f.emit_arg = &f;
    f.reader = r;
    char chunk[READ_CHUNK];
    size_t ahead_used = 0;
    redisReply *got = NULL;
    uint64_t emitted_at_got = 0;
    int rc = REDIS_OK;
    /* hiredis may have the whole reply before the filter has read past a last value not kept */
    while (!got || !f.done) {
        const char *in = chunk;
        size_t n;
        if (ahead_used < ahead.len) {
            in = ahead.data + ahead_used;
            n = ahead.len - ahead_used;
            ahead_used = ahead.len;
        } else {
            ssize_t k = read(c->fd, chunk, sizeof chunk);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                if (k == 0)
                    set_error(c, REDIS_ERR_EOF, "Server closed the connection");
                else
                    set_error(c, REDIS_ERR_IO, NULL);
                rc = REDIS_ERR;
                break;
            }
            n = (size_t)k;
        }
        int64_t used = feed(&f, in, n);
        /* the replies after this one are hiredis's again */
        size_t rest = used >= 0 ? n - (size_t)used : 0;
        if (rest > 0 && redisReaderFeed(r, in + used, rest) != REDIS_OK)
            f.emit_failed = true;
        void *obj = NULL;
        if (f.emit_failed || r->err) {
            set_error(c, r->err ? r->err : REDIS_ERR_OOM, r->err ? r->errstr : "Out of memory");
            rc = REDIS_ERR;
            break;
        }
        if (used < 0) {
            set_error(c, REDIS_ERR_PROTOCOL, "unexpected reply to a read of stream entries");
            rc = REDIS_ERR;
            break;
        }
        if (!got && redisReaderGetReply(r, &obj) != REDIS_OK) {
            set_error(c, r->err ? r->err : REDIS_ERR_OOM, r->err ? r->errstr : "Out of memory");
            rc = REDIS_ERR;
            break;
        }
        if (obj) {
            got = obj;
            emitted_at_got = f.emitted;
        }
        if ((f.done && !got) || (got && f.emitted != emitted_at_got)) {
            set_error(c, REDIS_ERR_PROTOCOL, "stream entries reply out of step");
            rc = REDIS_ERR;
            break;
        }
    }
    if (rc == REDIS_OK) {
        *reply = got;
        if (kept)
            *kept = f.kept;
    } else if (got) {
        freeReplyObject(got);
    }
    filter_clear(&f);
    pb_buf_free(&ahead);
    return rc;
}
