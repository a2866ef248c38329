#include "inbox/screen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool fits_key(const char *s)
{
    size_t len = strnlen(s, PB_INBOX_KEY_MAX + 1);
    return len <= PB_INBOX_KEY_MAX && pb_utf8_valid(s, len);
}

/* s, or its digest written into room when it does not fit an index entry. */
static const char *key_of(const char *s, char *room)
{
    if (!s || fits_key(s))
        return s;
    memcpy(room, PB_INBOX_DIGEST_PREFIX, sizeof PB_INBOX_DIGEST_PREFIX - 1);
    pb_sha256_hex(s, strlen(s), room + sizeof PB_INBOX_DIGEST_PREFIX - 1);
    return room;
}

static bool text_ok(const char *s)
{
    return !s || pb_utf8_valid(s, strlen(s));
}

/* Offset of the first byte where s[0..n) stops being UTF-8 (for the reason's text only). */
static size_t utf8_bad_at(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t len = 1;
        while (len <= 4 && i + len <= n && !pb_utf8_valid(s + i, len))
            len++;
        if (len > 4 || i + len > n)
            return i;
        i += len;
    }
    return n;
}

static void refuse_body(const pb_message_t *m, int64_t body_max, char *why, size_t n)
{
    uint64_t size = m->body_dropped ? m->body_dropped : m->body_len;
    if (size > (uint64_t)body_max) {
        snprintf(why, n, "message body of %llu bytes is larger than consume.max_message_size "
                         "(%lld bytes): not handled%s",
                 (unsigned long long)size, (long long)body_max,
                 m->body_dropped ? " (the body was not kept)" : "");
        return;
    }
    /* the handler takes the body as text ($1): a NUL byte would end it there, silently */
    const char *nul = memchr(m->body, '\0', m->body_len);
    if (nul) {
        snprintf(why, n, "message body holds a NUL byte at offset %zu: the handler's text "
                         "parameter $1 cannot carry it whole (inbox_dead.body keeps all of it)",
                 (size_t)(nul - m->body));
        return;
    }
    if (!pb_utf8_valid(m->body, m->body_len))
        snprintf(why, n, "message body is not valid UTF-8 (at byte %zu): the handler's text "
                         "parameter $1 cannot carry it (inbox_dead.body keeps all of it)",
                 utf8_bad_at(m->body, m->body_len));
}

/* Appends a copy of s with invalid bytes replaced; returns its offset in sc->texts. */
static size_t put_clean(pb_screen_t *sc, const char *s)
{
    size_t at = sc->texts.len, len = strlen(s);
    char *room = pb_malloc(len + 1);
    pb_text_copy(room, len + 1, s);
    pb_buf_append(&sc->texts, room, strlen(room) + 1);
    free(room);
    return at;
}

void pb_screen_batch(pb_screen_t *sc, const pb_message_t *msgs, size_t n, int64_t body_max)
{
    if (n > sc->cap) {
        sc->safe = pb_realloc(sc->safe, n * sizeof *sc->safe);
        sc->why = pb_realloc(sc->why, n * sizeof *sc->why);
        sc->keys = pb_realloc(sc->keys, n * 3 * PB_SCREEN_DIGEST_SIZE);
        sc->cap = n;
    }
    pb_buf_reset(&sc->texts);
    /* offsets first: texts may move while it grows */
    size_t *rk = NULL, *ex = NULL;
    for (size_t i = 0; i < n; i++) {
        const pb_message_t *m = &msgs[i];
        pb_message_t *s = &sc->safe[i];
        char *keys = sc->keys + i * 3 * PB_SCREEN_DIGEST_SIZE;
        char *why = sc->why[i];
        *s = *m;
        why[0] = '\0';
        s->message_id = key_of(m->message_id, keys);
        s->aggregate_type = key_of(m->aggregate_type, keys + PB_SCREEN_DIGEST_SIZE);
        s->aggregate_id = key_of(m->aggregate_id, keys + 2 * PB_SCREEN_DIGEST_SIZE);
        if (!text_ok(m->routing_key) || !text_ok(m->exchange)) {
            if (!rk) {
                rk = pb_malloc(n * sizeof *rk);
                ex = pb_malloc(n * sizeof *ex);
                for (size_t j = 0; j < n; j++)
                    rk[j] = ex[j] = SIZE_MAX;
            }
            if (!text_ok(m->routing_key))
                rk[i] = put_clean(sc, m->routing_key);
            if (!text_ok(m->exchange))
                ex[i] = put_clean(sc, m->exchange);
        }
        if (!text_ok(m->type)) {
            snprintf(why, sizeof sc->why[i], "message type is not valid UTF-8 (at byte %zu)",
                     utf8_bad_at(m->type, strlen(m->type)));
            s->type = NULL;
        } else if (!text_ok(m->headers)) {
            snprintf(why, sizeof sc->why[i], "message headers are not valid UTF-8 (at byte %zu): "
                                             "not kept in inbox_dead",
                     utf8_bad_at(m->headers, strlen(m->headers)));
            s->headers = "{}";
        } else {
            refuse_body(m, body_max, why, sizeof sc->why[i]);
        }
    }
    for (size_t i = 0; rk && i < n; i++) {
        if (rk[i] != SIZE_MAX)
            sc->safe[i].routing_key = sc->texts.data + rk[i];
        if (ex[i] != SIZE_MAX)
            sc->safe[i].exchange = sc->texts.data + ex[i];
    }
    free(rk);
    free(ex);
}

void pb_screen_free(pb_screen_t *sc)
{
    free(sc->safe);
    free(sc->why);
    free(sc->keys);
    pb_buf_free(&sc->texts);
    memset(sc, 0, sizeof *sc);
}
