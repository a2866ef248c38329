/* The families of postbox check and what they share; only src/check/ includes this. */
#ifndef PB_CHECK_CHECK_INT_H
#define PB_CHECK_CHECK_INT_H

#include <libpq-fe.h>

#include "check/check.h"

typedef struct pb_check_ctx {
    const pb_config_t *cfg;
    unsigned sides;
    bool at_start;
    PGconn *conn;         /* NULL when PostgreSQL could not be reached (database families skip) */
    bool schema_current;  /* set by the schema family: objects of the latest version exist */
    bool schema_absent;   /* set by the schema family: postbox.schema_migrations does not exist */
    pb_check_report_t *r;
} pb_check_ctx_t;

/* A family: runs its checks for ctx->sides into ctx->r. */
typedef void (*pb_check_family_fn)(pb_check_ctx_t *ctx);

void pb_check_postgres(pb_check_ctx_t *ctx);   /* postgres.c: server version, clock skew */
void pb_check_schema(pb_check_ctx_t *ctx);     /* schema.c: migrations, indexes */
void pb_check_privileges(pb_check_ctx_t *ctx); /* privileges.c: print-grants, REPLICATION */
void pb_check_cdc(pb_check_ctx_t *ctx);        /* cdc.c: settings, slot, publication, identity */
void pb_check_broker(pb_check_ctx_t *ctx);     /* broker.c: the sink's and the source's broker */

/* One broker, for the relay's sink and/or the consumer's source (their configuration checked
 * already); the findings are named after the broker ("amqp.connect", "nats.stream"). */
void pb_check_amqp(pb_check_ctx_t *ctx, bool sink, bool source);
void pb_check_nats(pb_check_ctx_t *ctx, bool sink, bool source);
void pb_check_redis(pb_check_ctx_t *ctx, bool sink, bool source);
void pb_check_kafka(pb_check_ctx_t *ctx, bool sink, bool source);

/* Runs a query with text parameters; NULL after adding a FAIL finding named name that says what
 * failed (so callers just stop). */
PGresult *pb_check_query(pb_check_ctx_t *ctx, const char *name, const char *what, const char *sql,
                         int nparams, const char *const *params);

#endif
