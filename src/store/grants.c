#include "store/grants.h"

#include <stdlib.h>
#include <string.h>

#include "store/pg.h"

const char pb_grants_emit_message_sql[] =
    "DO $$\n"
    "DECLARE\n"
    "    f regprocedure;\n"
    "    owner name := (SELECT pg_get_userbyid(proowner) FROM pg_proc\n"
    "                   WHERE oid = 'postbox.emit(text,text,text,jsonb,jsonb,text,text)'::regprocedure);\n"
    "BEGIN\n"
    "    FOR f IN SELECT oid::regprocedure FROM pg_proc\n"
    "             WHERE proname = 'pg_logical_emit_message'\n"
    "               AND pronamespace = 'pg_catalog'::regnamespace LOOP\n"
    "        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);\n"
    "        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f, owner);\n"
    "    END LOOP;\n"
    "END $$;\n";

/* Whether PUBLIC may execute some pg_logical_emit_message (a NULL acl is the default: it may),
 * and whether the session's role is a superuser. */
static const char probe_sql[] =
    "SELECT EXISTS (SELECT FROM pg_proc p\n"
    "               WHERE p.proname = 'pg_logical_emit_message'\n"
    "                 AND p.pronamespace = 'pg_catalog'::regnamespace\n"
    "                 AND (p.proacl IS NULL OR EXISTS (\n"
    "                      SELECT FROM aclexplode(p.proacl) a\n"
    "                      WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))),\n"
    "       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)";

pb_status_t pb_grants_lock_emit_message(PGconn *conn, pb_emit_lock_t *out, pb_error_t *err)
{
    PGresult *res = PQexec(conn, probe_sql);
    pb_status_t st = pb_pg_check(conn, res, PGRES_TUPLES_OK,
                                 "check who may execute pg_logical_emit_message", err);
    if (st != PB_OK)
        return st;
    bool public_may = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    bool superuser = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
    PQclear(res);
    if (!public_may) {
        *out = PB_EMIT_LOCK_ALREADY;
        return PB_OK;
    }
    if (!superuser) {
        *out = PB_EMIT_LOCK_NOT_SUPERUSER;
        return PB_OK;
    }
    res = PQexec(conn, pb_grants_emit_message_sql);
    if ((st = pb_pg_check(conn, res, PGRES_COMMAND_OK,
                          "revoke EXECUTE on pg_logical_emit_message from PUBLIC", err)) != PB_OK)
        return st;
    PQclear(res);
    *out = PB_EMIT_LOCK_REVOKED;
    return PB_OK;
}
