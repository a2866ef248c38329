#include "store/pg_target.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/str.h"

static const char *option_value(const PQconninfoOption *opts, const char *key)
{
    for (const PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, key) == 0)
            return o->val && *o->val ? o->val : NULL;
    return NULL;
}

static char *dup_or_null(const char *s)
{
    return s ? pb_strdup(s) : NULL;
}

/* libpq's defaults with PGSERVICE set to service (NULL: unset) for the call. */
static PQconninfoOption *defaults_for(const char *service)
{
    const char *old = getenv("PGSERVICE");
    char *saved = dup_or_null(old);
    if (service)
        setenv("PGSERVICE", service, 1);
    else
        unsetenv("PGSERVICE");
    PQconninfoOption *d = PQconndefaults(); /* reads the service file, then the environment */
    if (saved)
        setenv("PGSERVICE", saved, 1);
    else
        unsetenv("PGSERVICE");
    free(saved);
    return d;
}

/* Whether two option arrays of PQconndefaults hold the same values but for "service". */
static bool same_options(const PQconninfoOption *a, const PQconninfoOption *b)
{
    for (; a->keyword && b->keyword; a++, b++) {
        const char *x = a->val ? a->val : "", *y = b->val ? b->val : "";
        if (strcmp(a->keyword, b->keyword) != 0)
            return false;
        if (strcmp(a->keyword, "service") != 0 && strcmp(x, y) != 0)
            return false;
    }
    return !a->keyword && !b->keyword;
}

pb_status_t pb_pg_target_resolve(const char *dsn, pb_pg_target_t *t, pb_error_t *err)
{
    memset(t, 0, sizeof *t);
    PQconninfoOption *opts = PQconninfoParse(dsn, NULL);
    if (!opts)
        return pb_fail(err, PB_FATAL, "postgres.dsn is not a valid connection string");
    const char *named = option_value(opts, "service");
    if (!named)
        named = getenv("PGSERVICE");
    char *service = dup_or_null(named); /* getenv's text changes with PGSERVICE below */
    /* libpq's order: the string, then the service's section, then the environment */
    PQconninfoOption *dflt = defaults_for(service);
    if (service) {
        t->service = service;
        /* a service that changes nothing is not defined (libpq fails the connection then) */
        PQconninfoOption *plain = defaults_for(NULL);
        t->service_unknown = !dflt || !plain || same_options(dflt, plain);
        PQconninfoFree(plain);
    }
    static const char *const keys[] = {"host", "hostaddr", "sslmode"};
    char **fields[] = {&t->host, &t->hostaddr, &t->sslmode};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *v = option_value(opts, keys[i]);
        *fields[i] = dup_or_null(v ? v : option_value(dflt, keys[i]));
    }
    PQconninfoFree(dflt);
    PQconninfoFree(opts);
    return PB_OK;
}

void pb_pg_target_free(pb_pg_target_t *t)
{
    if (!t)
        return;
    free(t->host);
    free(t->hostaddr);
    free(t->sslmode);
    free(t->service);
    memset(t, 0, sizeof *t);
}

bool pb_pg_host_is_loopback(const char *h, size_t n)
{
    if (n == 0 || h[0] == '/' || h[0] == '@') /* libpq's default socket, a socket directory */
        return true;
    char text[INET6_ADDRSTRLEN + 16];
    if (n >= sizeof text)
        return false;
    memcpy(text, h, n);
    text[n] = '\0';
    if (strcasecmp(text, "localhost") == 0)
        return true;
    struct in_addr v4;
    if (inet_pton(AF_INET, text, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    struct in6_addr v6;
    if (inet_pton(AF_INET6, text, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    return false;
}

/* Entry i of a comma-separated list (its start and length); false past its end. */
static bool list_entry(const char *list, size_t i, const char **start, size_t *len)
{
    if (!list)
        return false;
    const char *p = list;
    for (; i > 0; i--) {
        p = strchr(p, ',');
        if (!p)
            return false;
        p++;
    }
    *start = p;
    *len = strcspn(p, ",");
    return true;
}

const char *pb_pg_target_remote(const pb_pg_target_t *t, char *out, size_t outsz)
{
    /* libpq pairs the lists entry by entry; an entry's hostaddr, when set, is where it goes */
    for (size_t i = 0;; i++) {
        const char *h = NULL, *a = NULL;
        size_t hn = 0, an = 0;
        bool more_h = list_entry(t->host, i, &h, &hn), more_a = list_entry(t->hostaddr, i, &a, &an);
        if (!more_h && !more_a)
            return NULL;
        const char *e = more_a && an ? a : h;
        size_t en = more_a && an ? an : hn;
        if (e && !pb_pg_host_is_loopback(e, en)) {
            snprintf(out, outsz, "%.*s", (int)en, e);
            return out;
        }
    }
}
