/* Where a PostgreSQL connection string leads, as libpq will read it: its host and hostaddr lists
 * and sslmode once a named service (pg_service.conf) and the environment (PGHOST, PGSERVICE,
 * PGSSLMODE, ...) have filled in what the string leaves out. Used to warn about connections
 * that leave the machine without a verified certificate. */
#ifndef PB_STORE_PG_TARGET_H
#define PB_STORE_PG_TARGET_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

typedef struct pb_pg_target {
    char *host;           /* comma-separated as in libpq; NULL: not set (a Unix socket) */
    char *hostaddr;       /* likewise; an entry, when set, is what libpq connects to */
    char *sslmode;        /* NULL: libpq's default, prefer */
    char *service;        /* the service named by the string or PGSERVICE, NULL: none */
    bool service_unknown; /* a service is named but libpq's service files define nothing for it */
} pb_pg_target_t;

/* Fills t for dsn (free it with pb_pg_target_free, also after an error). PB_FATAL when libpq
 * cannot parse dsn. Not thread-safe: a service named in dsn is looked up through PGSERVICE,
 * set for the duration of the call (libpq offers no other way). */
pb_status_t pb_pg_target_resolve(const char *dsn, pb_pg_target_t *t, pb_error_t *err) PB_MUSTCHECK;
void pb_pg_target_free(pb_pg_target_t *t);

/* Whether a host entry h[0..n) stays on this machine by its address: empty (libpq's default
 * socket), a Unix socket path ('/' or '@'), "localhost", an IPv4 literal in 127.0.0.0/8, ::1
 * (also IPv4-mapped). A name is judged remote, however it may resolve ("127.evil.example"). */
bool pb_pg_host_is_loopback(const char *h, size_t n);

/* The first server of t that is not on this machine (its hostaddr, else its host), copied into
 * out; NULL when every one is. */
const char *pb_pg_target_remote(const pb_pg_target_t *t, char *out, size_t outsz);

#endif
