/* libFuzzer target: secret redaction (src/common/redact.c) judged by the parsers that log in with
 * the secrets. The input is any text, read the way each library reads its setting:
 *   - libnats, nats.url: servers split at commas (as postbox hands them over), each trimmed; the
 *     scheme ends at the first "://", the userinfo at the server's last '@', the user at its
 *     first ':'; a userinfo without ':' is a token. Checked in pb_redact_nats_servers (postbox
 *     config, every "nats at ..." line), and for a lone server also the password in
 *     pb_redact_secret (free text, e.g. a URL typed on the command line);
 *   - libpq, postgres.dsn: PQconninfoParse's password and sslpassword;
 *   - rabbitmq-c, amqp.url: amqp_parse_url's password;
 *   - a librdkafka property whose name is no secret, holding JAAS-style key="value" pairs (no
 *     URL; quotes delimit values): every password= value, through pb_config_redact_property.
 * Property: no such secret survives in the redacted text. A secret counts when it is at least 8
 * bytes long and occurs once in the input (shorter ones, or ones repeated elsewhere, such as in
 * a host name, cannot be told apart from the text around them). */
#include <ctype.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <amqp.h>
#include <libpq-fe.h>

#include "common/redact.h"
#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_INPUT 4096

static const char *input_text; /* for the report */

static bool telling(const char *secret, size_t len, const char *input)
{
    if (len < 8)
        return false;
    char *s = strndup(secret, len);
    const char *first = strstr(input, s);
    bool once = first && !strstr(first + 1, s);
    free(s);
    return once;
}

/* Aborts when secret[0..len) shows in redacted. */
static void hidden(const char *what, const char *secret, size_t len, const char *redacted)
{
    if (!telling(secret, len, input_text))
        return;
    char *s = strndup(secret, len);
    if (strstr(redacted, s)) {
        fprintf(stderr, "%s \"%s\" shows in \"%s\" (input \"%s\")\n", what, s, redacted, input_text);
        abort();
    }
    free(s);
}

/* The servers of nats.url as libnats reads them. free_text: redacted is pb_redact_secret's, which
 * knows no setting: a user name alone is no secret there, and only an input that is one server
 * as a word (no comma, blank, '=' or second "://", which free text reads as a list, the next
 * word, a key=value pair or the next URL) is judged. */
static void check_nats(const char *in, const char *redacted, bool free_text)
{
    for (const char *p = in;;) {
        size_t n = strcspn(p, ",");
        const char *a = p, *b = p + n;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        const char *rest = a;
        for (const char *q = a; q + 3 <= b; q++)
            if (memcmp(q, "://", 3) == 0) {
                rest = q + 3;
                break;
            }
        const char *at = NULL;
        for (const char *q = rest; q < b; q++)
            if (*q == '@')
                at = q;
        bool plain = true;
        for (const char *q = a; q < b; q++)
            plain = plain && !isspace((unsigned char)*q) &&
                    !(q >= rest && q + 3 <= b && memcmp(q, "://", 3) == 0);
        plain = plain && !strpbrk(in, ",=");
        if (at && (!free_text || plain)) {
            const char *colon = memchr(rest, ':', (size_t)(at - rest));
            if (colon)
                hidden("nats password", colon + 1, (size_t)(at - colon - 1), redacted);
            else if (!free_text)
                hidden("nats token", rest, (size_t)(at - rest), redacted);
        }
        if (!p[n])
            break;
        p += n + 1;
    }
}

static void check_libpq(const char *in, const char *redacted)
{
    char *msg = NULL;
    PQconninfoOption *opts = PQconninfoParse(in, &msg);
    PQfreemem(msg);
    for (const PQconninfoOption *o = opts; o && o->keyword; o++)
        if (o->val && (strcmp(o->keyword, "password") == 0 || strcmp(o->keyword, "sslpassword") == 0))
            hidden("libpq password", o->val, strlen(o->val), redacted);
    PQconninfoFree(opts);
}

static void check_amqp(const char *in, const char *redacted)
{
    char *copy = strdup(in); /* parsed in place */
    struct amqp_connection_info info;
    if (amqp_parse_url(copy, &info) == AMQP_STATUS_OK && info.password)
        hidden("amqp password", info.password, strlen(info.password), redacted);
    free(copy);
}

/* Whether the double quotes of in pair up as delimiters of values: each opening one after '=',
 * each closing one before a blank, ';' or the end (a JAAS tokenizer reads stray quotes
 * differently from a key=value reader, and either reading is a guess). */
static bool quotes_delimit_values(const char *in)
{
    bool inside = false;
    for (const char *p = in; *p; p++) {
        if (inside && *p == '\\' && p[1]) {
            p++;
        } else if (*p == '"' && !inside) {
            if (!(p > in && p[-1] == '='))
                return false;
            inside = true;
        } else if (*p == '"') {
            if (!(p[1] == '\0' || p[1] == ';' || isspace((unsigned char)p[1])))
                return false;
            inside = false;
        }
    }
    return true;
}

/* key=value pairs, values bare (up to a blank or ';') or double-quoted with backslash escapes */
static void check_jaas(const char *in, const char *redacted)
{
    if (!quotes_delimit_values(in) || strstr(in, "://"))
        return; /* a URL's query parameters end at '&': the URL parsers judge those */
    for (const char *p = in; *p;) {
        /* a key starts after a blank in JAAS; after anything but a letter, digit, '_' or '-'
         * here, as in the redaction (which so hides more) */
        bool word = p == in || !(isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '-');
        if (!word || strncasecmp(p, "password=", 9) != 0) {
            p++;
            continue;
        }
        const char *v = p + 9, *e = v;
        if (*v == '"') {
            for (e = ++v; *e && *e != '"'; e++)
                if (*e == '\\' && e[1])
                    e++;
        } else {
            while (*e && !isspace((unsigned char)*e) && *e != ';')
                e++;
        }
        hidden("property password", v, (size_t)(e - v), redacted);
        p = *e ? e + 1 : e;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT || memchr(data, '\0', size))
        return 0; /* settings are C strings */
    char *in = malloc(size + 1);
    memcpy(in, data, size);
    in[size] = '\0';
    input_text = in;
    size_t outsz = 2 * size + 16; /* room for every "***": nothing is cut */
    char *nats = malloc(outsz), *text = malloc(outsz), *prop = malloc(outsz);
    pb_redact_nats_servers(in, nats, outsz);
    pb_redact_secret(in, text, outsz);
    pb_config_redact_property("sasl.kerberos.kinit.cmd", in, prop, outsz);

    check_nats(in, nats, false);
    check_nats(in, text, true);
    check_libpq(in, text);
    check_amqp(in, text);
    check_jaas(in, prop);
    free(nats);
    free(text);
    free(prop);
    free(in);
    return 0;
}
