/* postbox demo: the throwaway database, postbox's schema in it, the producer's schema `orders`
 * and the consumer service's schema `shipping`, whose SQL handler records every effect. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/event.h"
#include "common/str.h"
#include "demo/demo_int.h"
#include "store/migrate.h"
#include "store/outbox.h"
#include "store/pg.h"

#define DEMO_STR_(x) #x
#define DEMO_STR(x) DEMO_STR_(x)

/* The shop. A customer's orders are numbered by the customer's row (locked by the UPDATE, so
 * concurrent producers number them in commit order); the event carries that number, so the
 * consumer can tell whether a customer's orders arrive in the order they were placed. */
static const char schema_sql[] =
    "CREATE SCHEMA orders;"
    "CREATE TABLE orders.customers (id int PRIMARY KEY, orders_placed int NOT NULL DEFAULT 0);"
    "INSERT INTO orders.customers (id) SELECT generate_series(1, " DEMO_STR(DEMO_CUSTOMERS) ");"
    "CREATE TABLE orders.orders ("
    "  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    "  customer int NOT NULL REFERENCES orders.customers,"
    "  n int NOT NULL,"
    "  amount numeric(10, 2) NOT NULL,"
    "  placed_at timestamptz NOT NULL DEFAULT clock_timestamp());"
    /* the business change of one order; the producer enqueues its event in the same transaction */
    "CREATE FUNCTION orders.place_order(p_customer int, p_amount numeric,"
    "                                   OUT order_id bigint, OUT n int, OUT placed_at text)"
    "LANGUAGE plpgsql AS $$ BEGIN"
    "  UPDATE orders.customers SET orders_placed = orders_placed + 1 WHERE id = p_customer"
    "    RETURNING orders_placed INTO n;"
    "  INSERT INTO orders.orders (customer, n, amount) VALUES (p_customer, n, p_amount)"
    "    RETURNING id, orders.orders.placed_at::text INTO order_id, placed_at;"
    "END $$;"
    /* the consumer service: one shipment per order; no unique key on order_id, so that an order
     * applied twice would show instead of failing */
    "CREATE SCHEMA shipping;"
    "CREATE TABLE shipping.customers (id int PRIMARY KEY, last_n int NOT NULL);"
    "CREATE TABLE shipping.shipments ("
    "  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    "  order_id bigint NOT NULL,"
    "  customer int NOT NULL,"
    "  n int NOT NULL,"
    "  sequence bigint,"
    "  in_order boolean NOT NULL,"
    "  lag_ms double precision NOT NULL,"
    "  applied_at timestamptz NOT NULL DEFAULT clock_timestamp());"
    /* the handler: in order when this is the customer's next order (and, where the relay sends
     * the aggregate's sequence number, when that agrees) */
    "CREATE FUNCTION shipping.on_order_placed(p jsonb, h jsonb) RETURNS void "
    "LANGUAGE plpgsql AS $$"
    "DECLARE"
    "  c int := (p->>'customer')::int;"
    "  k int := (p->>'n')::int;"
    "  seq bigint := nullif(h->>'" PB_SEQUENCE_HEADER "', '')::bigint;"
    "  last int;"
    "BEGIN"
    "  INSERT INTO shipping.customers VALUES (c, 0) ON CONFLICT DO NOTHING;"
    "  SELECT last_n INTO last FROM shipping.customers WHERE id = c FOR UPDATE;"
    "  INSERT INTO shipping.shipments (order_id, customer, n, sequence, in_order, lag_ms)"
    "    VALUES ((p->>'order_id')::bigint, c, k, seq, k = last + 1 AND (seq IS NULL OR seq = k),"
    "            extract(epoch FROM clock_timestamp() - (p->>'placed_at')::timestamptz) * 1000);"
    "  UPDATE shipping.customers SET last_n = greatest(last, k) WHERE id = c;"
    "END $$;";

pb_status_t demo_dsn_for(const char *server_dsn, const char *dbname, char **out, pb_error_t *err)
{
    char *perr = NULL;
    PQconninfoOption *opts = PQconninfoParse(server_dsn ? server_dsn : "", &perr);
    if (!opts) {
        pb_status_t st = pb_fail(err, PB_FATAL, "postgres.dsn: %s", perr ? perr : "out of memory");
        PQfreemem(perr);
        return st;
    }
    pb_buf_t b = {0};
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        const char *v = strcmp(o->keyword, "dbname") == 0 ? dbname : o->val;
        if (!v || !*v)
            continue;
        pb_buf_printf(&b, "%s%s='", b.len ? " " : "", o->keyword);
        for (const char *c = v; *c; c++) {
            if (*c == '\'' || *c == '\\')
                pb_buf_putc(&b, '\\');
            pb_buf_putc(&b, *c);
        }
        pb_buf_putc(&b, '\'');
    }
    PQconninfoFree(opts);
    *out = b.data;
    return PB_OK;
}

pb_status_t demo_db_recreate(const char *server_dsn, const char *dbname, pb_error_t *err)
{
    PGconn *conn;
    pb_status_t st = pb_pg_connect(server_dsn, &conn, err);
    if (st != PB_OK)
        return pb_fail(err, st, "cannot connect to postgresql: %s", err->msg);
    if (strcmp(PQdb(conn), dbname) == 0) { /* a database cannot drop itself: go through postgres */
        PQfinish(conn);
        char *dsn;
        if ((st = demo_dsn_for(server_dsn, "postgres", &dsn, err)) != PB_OK)
            return st;
        st = pb_pg_connect(dsn, &conn, err);
        free(dsn);
        if (st != PB_OK)
            return pb_fail(err, st, "cannot connect to database \"postgres\": %s", err->msg);
    }
    char *ident = PQescapeIdentifier(conn, dbname, strlen(dbname));
    if (!ident) {
        st = pb_fail(err, PB_FATAL, "database name \"%s\": %s", dbname, PQerrorMessage(conn));
    } else {
        char sql[600];
        if ((st = pb_pg_sql_printf(sql, sizeof sql, "drop the demo database", err,
                                   "DROP DATABASE IF EXISTS %s WITH (FORCE)", ident)) == PB_OK &&
            (st = pb_pg_exec(conn, "SET client_min_messages = warning", err)) == PB_OK &&
            (st = pb_pg_exec(conn, sql, err)) == PB_OK &&
            (st = pb_pg_sql_printf(sql, sizeof sql, "create the demo database", err,
                                   "CREATE DATABASE %s", ident)) == PB_OK)
            st = pb_pg_exec(conn, sql, err);
        PQfreemem(ident);
    }
    PQfinish(conn);
    return st;
}

pb_status_t demo_schema_create(PGconn *conn, pb_error_t *err)
{
    int applied;
    pb_status_t st = pb_migrate(conn, &applied, err);
    if (st == PB_OK)
        st = pb_outbox_ensure_shard_index(conn, 1, err);
    if (st == PB_OK)
        st = pb_pg_exec(conn, schema_sql, err);
    return st;
}
