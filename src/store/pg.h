/* libpq helpers: connecting with backoff, classifying errors as transient or fatal. */
#ifndef PB_STORE_PG_H
#define PB_STORE_PG_H

#include <libpq-fe.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* The oldest PostgreSQL postbox runs on (PQserverVersion form). */
#define PB_PG_MIN_VERSION 140000

/* Checks a connection string as libpq reads it, with messages that never quote it (libpq's
 * do): PB_FATAL on a syntax error, or on a URL whose password has an unencoded '@' or '/'. */
pb_status_t pb_pg_dsn_check(const char *dsn, pb_error_t *err) PB_MUSTCHECK;

/* One attempt. PB_TRANSIENT when the server cannot be reached or refuses for now, PB_FATAL when
 * the connection string itself is malformed or the server is older than PB_PG_MIN_VERSION.
 * Routes server notices into our log. */
pb_status_t pb_pg_connect(const char *dsn, PGconn **out, pb_error_t *err) PB_MUSTCHECK;

/* pb_pg_connect to a server that accepts writes: a hot standby (in_hot_standby, which
 * PostgreSQL 14 reports) is refused with PB_TRANSIENT and a message saying what to configure,
 * so a caller that retries waits for the node to be promoted instead of failing on its first
 * write ("cannot execute LISTEN during recovery"). For the relay, the consumer, the janitor and
 * the commands that change the schema or its rows; `postbox status` reads a standby fine. */
pb_status_t pb_pg_connect_primary(const char *dsn, PGconn **out, pb_error_t *err) PB_MUSTCHECK;

/* pb_pg_connect without the version floor, for `postbox check`, which reports an old server as
 * such (pb_pg_version_check). */
pb_status_t pb_pg_open(const char *dsn, PGconn **out, pb_error_t *err) PB_MUSTCHECK;

/* PB_FATAL "postgresql 13.4 is too old ..." for a server older than PB_PG_MIN_VERSION
 * (version as PQserverVersion gives it, version_text as server_version reads). */
pb_status_t pb_pg_version_check(int version, const char *version_text,
                                pb_error_t *err) PB_MUSTCHECK;

/* Connects to a primary (pb_pg_connect_primary), retrying transient failures with exponential backoff (capped at cap_ms) and logging
 * what it waits for, until it succeeds, a fatal error occurs, or *stop becomes non-zero
 * (then PB_TRANSIENT with "interrupted"). */
pb_status_t pb_pg_connect_retry(const char *dsn, int64_t cap_ms, volatile sig_atomic_t *stop,
                                PGconn **out, pb_error_t *err) PB_MUSTCHECK;

/* Checks a result: returns PB_OK when its status is `expected`. Otherwise fills err with
 * "<what>: <server message>" and classifies: a lost connection, admin shutdown, serialization
 * failure or deadlock is PB_TRANSIENT, anything else PB_FATAL. Clears res on failure. */
pb_status_t pb_pg_check(PGconn *conn, PGresult *res, ExecStatusType expected, const char *what,
                        pb_error_t *err) PB_MUSTCHECK;

/* Runs a command without parameters or result rows ("BEGIN", "COMMIT", ...). */
pb_status_t pb_pg_exec(PGconn *conn, const char *sql, pb_error_t *err) PB_MUSTCHECK;

/* Runs a query without parameters that yields one value (one row, one column) and reads it as a
 * boolean (NULL reads false) or as an integer (*is_null tells a NULL; it may be NULL when the
 * query cannot yield one). Any other shape is PB_FATAL naming what. */
pb_status_t pb_pg_query_bool(PGconn *conn, const char *sql, const char *what, bool *out,
                             pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_pg_query_int64(PGconn *conn, const char *sql, const char *what, int64_t *out,
                              bool *is_null, pb_error_t *err) PB_MUSTCHECK;

/* Pipeline mode (PQenterPipelineMode): queues a statement without parameters, queues a sync
 * point, reads the result of one queued statement (status expect; *out gets it when out is not
 * NULL, else it is cleared), reads a sync point. A statement skipped because an earlier one
 * of its transaction failed is PB_TRANSIENT. */
pb_status_t pb_pg_send(PGconn *conn, const char *sql, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_pg_send_sync(PGconn *conn, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_pg_read_result(PGconn *conn, ExecStatusType expect, const char *what,
                              PGresult **out, pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_pg_read_sync(PGconn *conn, pb_error_t *err) PB_MUSTCHECK;

/* Writes a statement by fmt into the fixed buffer sql[size]. PB_FATAL naming what when it does
 * not fit: a statement cut short would run as another one, or fail with a puzzling error. */
pb_status_t pb_pg_sql_printf(char *sql, size_t size, const char *what, pb_error_t *err,
                             const char *fmt, ...) PB_PRINTF(5, 6) PB_MUSTCHECK;

/* name quoted as an SQL identifier ("x", inner quotes doubled) or as a string literal (its
 * quotes doubled, E'' form when it holds a backslash), by libpq for conn's encoding, into *out
 * (PQfreemem it). PB_FATAL naming what when libpq refuses (invalid encoding, out of memory). */
pb_status_t pb_pg_quote_ident(PGconn *conn, const char *name, const char *what, char **out,
                              pb_error_t *err) PB_MUSTCHECK;
pb_status_t pb_pg_quote_literal(PGconn *conn, const char *text, const char *what, char **out,
                                pb_error_t *err) PB_MUSTCHECK;

/* host:port/dbname of a connection, for log lines (no secrets). */
void pb_pg_describe(PGconn *conn, char *out, size_t outsz);

/* A named statement to prepare on every new connection. */
typedef struct pb_pg_statement {
    const char *name, *sql;
} pb_pg_statement_t;

/* Prepares stmts[0..n) on conn (parameter types inferred); a failure names the statement. */
pb_status_t pb_pg_prepare_all(PGconn *conn, const pb_pg_statement_t *stmts, size_t n,
                              pb_error_t *err) PB_MUSTCHECK;

#endif
