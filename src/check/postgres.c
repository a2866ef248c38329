/* The server itself: its version, whether it is the primary, and how far its clock is from
 * this host's. */
#include <stdlib.h>
#include <string.h>

#include "check/check_int.h"
#include "check/judge.h"
#include "common/clock.h"

void pb_check_postgres(pb_check_ctx_t *ctx)
{
    pb_judge_version(ctx->r, PQserverVersion(ctx->conn),
                     PQparameterStatus(ctx->conn, "server_version"));
    const char *standby = PQparameterStatus(ctx->conn, "in_hot_standby"); /* PostgreSQL 14 */
    pb_judge_primary(ctx->r, standby && strcmp(standby, "on") == 0);

    /* the server's clock read once, between two readings of ours */
    int64_t before = pb_wall_us();
    PGresult *res = pb_check_query(ctx, "postgres.clock", "read the server's clock",
                                   "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::int8",
                                   0, NULL);
    int64_t after = pb_wall_us();
    if (!res)
        return;
    int64_t server = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    int64_t mid = before + (after - before) / 2;
    pb_judge_clock(ctx->r, server - mid, (after - before) / 2, ctx->cfg->postgres_max_clock_skew);
}
