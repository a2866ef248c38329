/* Privileges around the postbox schema: who may write an event the relay publishes, and the
 * least-privilege roles of `postbox init --print-grants`. */
#ifndef PB_STORE_GRANTS_H
#define PB_STORE_GRANTS_H

#include <libpq-fe.h>
#include <stdio.h>

#include "common/err.h"
#include "config/config.h"

/* The group roles of pb_grants_write. */
#define PB_ROLE_PRODUCER "postbox_producer"
#define PB_ROLE_RELAY "postbox_relay"
#define PB_ROLE_CONSUMER "postbox_consumer"

typedef enum pb_emit_lock {
    PB_EMIT_LOCK_REVOKED,       /* revoked from PUBLIC just now */
    PB_EMIT_LOCK_ALREADY,       /* PUBLIC could not execute it before */
    PB_EMIT_LOCK_NOT_SUPERUSER, /* PUBLIC can, and only a superuser may change that */
} pb_emit_lock_t;

/* What a superuser runs in the database so that only the roles granted postbox.emit() (which
 * runs as the schema owner) can write logical messages: EXECUTE on every
 * pg_catalog.pg_logical_emit_message revoked from PUBLIC and granted to the owner of postbox.emit. */
extern const char pb_grants_emit_message_sql[];

/* Runs pb_grants_emit_message_sql when PUBLIC may still execute pg_logical_emit_message and the
 * role is a superuser; says in *out what it found and did. */
pb_status_t pb_grants_lock_emit_message(PGconn *conn, pb_emit_lock_t *out,
                                        pb_error_t *err) PB_MUSTCHECK;

/* Writes the SQL (`postbox init --print-grants`) that creates the group roles postbox_producer
 * (enqueue, emit, capture triggers), postbox_relay (its tables; with relay.capture = cdc also the
 * publication and the trigger of cdc.delete_after_insert, which need the outbox's owner) and
 * postbox_consumer (the inbox tables) and grants them what postbox needs, nothing more. To be
 * run by the schema owner after `postbox init`. */
void pb_grants_write(FILE *out, const pb_config_t *cfg);

/* Writes pb_grants_emit_message_sql as comment lines ("--   ..."), for scripts that tell a
 * superuser what to run (print-grants, init --print-sql). */
void pb_grants_write_emit_message_comment(FILE *out);

/* Whose privileges a GRANT of pb_grants_write gives: every group role (USAGE on the schema), or
 * one of them. */
typedef enum pb_grant_section {
    PB_GRANTS_ALL,
    PB_GRANTS_PRODUCER,
    PB_GRANTS_RELAY,
    PB_GRANTS_CONSUMER,
} pb_grant_section_t;

/* What one privilege of pb_grants_write is granted on. */
typedef enum pb_privilege_kind {
    PB_PRIV_SCHEMA,   /* object: the schema's name */
    PB_PRIV_TABLE,    /* object: schema.table */
    PB_PRIV_COLUMN,   /* object: schema.table, column: the column */
    PB_PRIV_FUNCTION, /* object: schema.function(argument types) */
} pb_privilege_kind_t;

/* One privilege of one GRANT statement of pb_grants_write, taken apart, for `postbox check`. */
typedef struct pb_privilege {
    pb_privilege_kind_t kind;
    char privilege[16]; /* SELECT, INSERT, USAGE, EXECUTE, ... */
    char object[128];
    char column[64];
} pb_privilege_t;

/* The privileges pb_grants_write(cfg) gives the group role of section, and those it gives every
 * group role (USAGE on the schema), one per object, column and privilege, in the script's
 * order: *out (free it) of the returned length. The GRANT statements are the single source: the
 * check asks for exactly what the script grants. */
size_t pb_grants_privileges(const pb_config_t *cfg, pb_grant_section_t section,
                            pb_privilege_t **out);

#endif
