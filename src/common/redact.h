/* Secrets out of every text postbox shows: configuration values, error messages, log lines.
 *
 * One scanner recognises every form a secret takes in postbox's inputs and hides its value
 * behind "***":
 *   - URLs and comma-separated URL lists (NATS): the password of each userinfo (user:***
 *     before the host), a NATS token (*** before the host; nats, tls, ws and wss URLs and the
 *     servers that follow one in a list), a password with an unencoded '@', '/' (or, outside
 *     NATS lists, ',': the userinfo ends at the last '@' before the next URL or blank), and a
 *     non-numeric "port" of a URL without '@' (amqp://user:secret, a forgotten host); hosts
 *     and ports stay readable;
 *   - URLs without a scheme, which libnats takes (user:***@host:port);
 *   - URL query parameters and libpq key=value pairs of the secret keys (password, sslpassword,
 *     passwd, token, secret), with or without blanks around '=', quoted (single quotes as in
 *     libpq, double quotes as in JAAS lines) or not, every occurrence; a bare value ends at a
 *     blank (in a URL's query also at '&'), and a key that starts inside hidden text
 *     hides its value to its end too (readers disagree on where values end).
 * Free text around them is copied unchanged, so the scanner also runs over whole messages. */
#ifndef PB_COMMON_REDACT_H
#define PB_COMMON_REDACT_H

#include <stddef.h>

/* Copies in (NULL: "") into out of outsz bytes with every secret replaced by "***"; always
 * NUL-terminated when outsz > 0, cut at outsz - 1 bytes. in and out must not overlap. */
void pb_redact_secret(const char *in, char *out, size_t outsz);

/* The same for a whole nats.url value: each server of the comma-separated list as libnats reads
 * it (scheme optional, userinfo up to the server's last '@', blanks included), its password or
 * token hidden, the rest redacted as above. */
void pb_redact_nats_servers(const char *in, char *out, size_t outsz);

#endif
