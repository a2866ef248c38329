/* libFuzzer target: the URL parsers, amqp:// (src/broker/amqp/url.c) and redis://
 * (src/broker/redis/conn.c), percent-decoding and the secret redaction of URLs and DSNs
 * (src/common/redact.c). The password of a URL that a parser accepts shows neither in the
 * "where" text of messages nor in the redacted URL. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/amqp/url.h"
#include "broker/redis/conn.h"
#include "common/redact.h"
#include "common/str.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A password long enough not to occur by chance in the rest of the URL. */
static bool telling(const char *password, const char *url)
{
    return password && strlen(password) >= 8 && strstr(url, password) &&
           !strstr(strstr(url, password) + 1, password);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1);
    memcpy(url, data, size);
    url[size] = '\0';
    pb_error_t err;
    char where[512];
    size_t redsz = 2 * size + 16; /* room for the whole redacted text: nothing is cut */
    char *redacted = malloc(redsz);
    pb_redact_secret(url, redacted, redsz);

    pb_amqp_url_t au;
    if (pb_amqp_url_parse(url, &au, &err) == PB_OK) {
        if (!au.host || !au.user || !au.password || !au.vhost || au.port < 1 || au.port > 65535)
            abort();
        pb_amqp_url_where(&au, where, sizeof where);
        if (telling(au.password, url) && !strstr(au.host, au.password) &&
            !strstr(au.vhost, au.password) && !strstr(au.user, au.password) &&
            (strstr(where, au.password) || strstr(redacted, au.password)))
            abort(); /* the password in a message or in the redacted URL */
        pb_amqp_url_free(&au);
    } else if (au.host || au.password) {
        abort(); /* zeroed on error */
    }

    pb_redis_url_t ru;
    if (pb_redis_url_parse(url, &ru, &err) == PB_OK) {
        if (!ru.host || ru.port < 1 || ru.port > 65535 || ru.db < 0)
            abort();
        pb_redis_url_where(&ru, where, sizeof where);
        if (telling(ru.password, url) && !strstr(ru.host, ru.password) &&
            !(ru.user && strstr(ru.user, ru.password)) &&
            (strstr(where, ru.password) || strstr(redacted, ru.password)))
            abort();
        pb_redis_url_free(&ru);
    } else if (ru.host || ru.password) {
        abort();
    }

    char *decoded;
    if (pb_percent_decode(url, size, &decoded)) {
        if (strlen(decoded) > size)
            abort();
        free(decoded);
    }
    char red[256];
    pb_redact_secret(url, red, sizeof red);
    if (!memchr(red, '\0', sizeof red))
        abort();
    free(redacted);
    free(url);
    return 0;
}
