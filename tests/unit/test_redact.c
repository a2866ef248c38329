/* Unit tests for pb_redact_secret: every form a secret takes in postbox's configuration and in
 * the messages built from it is hidden, and the text around it stays readable. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "common/redact.h"

static void expect(const char *in, const char *want)
{
    char out[512];
    pb_redact_secret(in, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("redact(\"%s\")\n  got  \"%s\"\n  want \"%s\"", in, out, want);
}

static void urls(void **state)
{
    (void)state;
    expect("amqp://guest:S3cret@127.0.0.1:5672/", "amqp://guest:***@127.0.0.1:5672/");
    expect("amqps://u:S3cret@h/vh", "amqps://u:***@h/vh");
    expect("postgresql://app:S3cret@db.example:5432/app", "postgresql://app:***@db.example:5432/app");
    expect("postgresql://app@db/app", "postgresql://app@db/app"); /* no password: unchanged */
    expect("amqp://127.0.0.1:5672/", "amqp://127.0.0.1:5672/");
    expect("redis://:S3cret@127.0.0.1:6379", "redis://:***@127.0.0.1:6379");
    expect("nats://127.0.0.1:4222", "nats://127.0.0.1:4222");
}

static void passwords_with_separators(void **state)
{
    (void)state;
    expect("amqp://u:pa/ss@host/vh", "amqp://u:***@host/vh");
    expect("amqp://u:p@ss@host/vh", "amqp://u:***@host/vh");
    expect("postgresql://u:a/b@c@h:5432/db", "postgresql://u:***@h:5432/db");
    /* libnats splits nats.url at commas: "pa" and "ss" are two servers' parts, both hidden */
    expect("nats://u:pa,ss@h:4222", "nats://u:***,***@h:4222");
    expect("amqp://u:p%40ss@host/", "amqp://u:***@host/");
    /* blanks left unencoded (the URL parsers take them; found by fuzz_url) */
    expect("amqp://u:my secret pass@host/", "amqp://u:***@host/");
    expect("redis://:my\tsecret@h:6379", "redis://:***@h:6379");
    expect("nats://my token@h:4222", "nats://***@h:4222");
    expect("bad amqp url \"amqp://u:a b@h/\": no", "bad amqp url \"amqp://u:***@h/\": no");
    expect("amqp://host:5672 refused", "amqp://host:5672 refused");
    /* the host forgotten: the password looks like a port */
    expect("amqp://user:S3cret", "amqp://user:***");
    expect("amqp://user:S3cret/vh", "amqp://user:***/vh");
}

static void nats_lists_and_tokens(void **state)
{
    (void)state;
    expect("nats://a:Pw1@h1:4222,nats://b:Pw2@h2:4222,nats://c:Pw3@h3:4222",
           "nats://a:***@h1:4222,nats://b:***@h2:4222,nats://c:***@h3:4222");
    expect("nats://a:Pw1@h1:4222, tls://b:Pw2@h2:4222", "nats://a:***@h1:4222, tls://b:***@h2:4222");
    expect("nats://T0ken@h1:4222,nats://T0ken2@h2:4222", "nats://***@h1:4222,nats://***@h2:4222");
    expect("tls://T0ken@h:4443", "tls://***@h:4443");
    expect("nats://h1:4222,nats://h2:4222", "nats://h1:4222,nats://h2:4222");
    /* later members without a scheme hide their userinfo, and every host stays readable */
    expect("nats://a:Pw1@h1:4222,b:Pw2@h2:4222", "nats://a:***@h1:4222,b:***@h2:4222");
    expect("nats://T0ken1@h1:4222,T0ken2@h2:4222", "nats://***@h1:4222,***@h2:4222");
    expect("nats://h1:4222, T0ken2@h2:4222", "nats://h1:4222, ***@h2:4222");
    /* NATS's websocket schemes carry tokens too */
    expect("wss://T0kenT0ken@h:443", "wss://***@h:443");
    expect("ws://T0ken@h:80,wss://u:Pw@h2:443", "ws://***@h:80,wss://u:***@h2:443");
}

/* libnats takes "user:password@host:port" and "token@host" without nats:// */
static void urls_without_scheme(void **state)
{
    (void)state;
    expect("u:S3cret@127.0.0.1:4222", "u:***@127.0.0.1:4222");
    expect("u:S3cret@h1:4222,v:Other@h2:4222", "u:***@h1:4222,v:***@h2:4222");
    expect("cannot connect to nats at u:S3cret@h:4222: no servers",
           "cannot connect to nats at u:***@h:4222: no servers");
    expect("url=u:p@ss@h:4222", "url=u:***@h:4222");
    expect("\"u:S3cret@h\"", "\"u:***@h\"");
    /* an address alone, or a user without password, is no secret outside a NATS list */
    expect("mail alice@example.com about it", "mail alice@example.com about it");
    expect("at 10:30 on h:4222", "at 10:30 on h:4222");
}

/* Whole nats.url values: the servers of the list as libnats reads them */
static void expect_nats(const char *in, const char *want)
{
    char out[512];
    pb_redact_nats_servers(in, out, sizeof out);
    if (strcmp(out, want) != 0)
        fail_msg("redact_nats(\"%s\")\n  got  \"%s\"\n  want \"%s\"", in, out, want);
}

static void nats_server_lists(void **state)
{
    (void)state;
    expect_nats("nats://127.0.0.1:4222", "nats://127.0.0.1:4222");
    expect_nats("u:S3cret@h:4222", "u:***@h:4222");
    expect_nats("T0ken@h", "***@h");
    expect_nats("u:my secret pass@h:4222", "u:***@h:4222");
    expect_nats("my token@h:4222", "***@h:4222");
    expect_nats("nats://u:p@ss/w@h1:4222, tls://T0ken@h2:4443,h3",
                "nats://u:***@h1:4222, tls://***@h2:4443,h3");
    expect_nats("wss://T0ken@h:443", "wss://***@h:443");
    expect_nats("nats://user:S3cret", "nats://user:***"); /* no host: the password as a port */
    expect_nats("nats://u:***@h:4222,***@h2", "nats://u:***@h:4222,***@h2");
    expect_nats(" T0ken@h2", " ***@h2"); /* libnats trims each server */
    expect_nats("", "");
    expect_nats(NULL, "");
}

static void url_queries(void **state)
{
    (void)state;
    expect("postgresql://app@db/app?password=S3cret", "postgresql://app@db/app?password=***");
    expect("postgresql://db/app?sslmode=verify-full&password=S3cret&connect_timeout=5",
           "postgresql://db/app?sslmode=verify-full&password=***&connect_timeout=5");
    expect("postgresql:///app?host=/run/pg&sslpassword=K3y", "postgresql:///app?host=/run/pg&sslpassword=***");
    expect("postgresql://db/app?PASSWORD=S3cret", "postgresql://db/app?PASSWORD=***");
}

static void key_value_strings(void **state)
{
    (void)state;
    expect("host=db password=S3cret dbname=app", "host=db password=*** dbname=app");
    expect("host=db password = S3cret dbname=app", "host=db password = *** dbname=app");
    expect("host=db password\t=\tS3cret", "host=db password\t=\t***");
    expect("password='S3 cr\\'et' host=db", "password=*** host=db");
    expect("password=S3cret host=db password=Other", "password=*** host=db password=***");
    expect("password=a/b@c host=db", "password=*** host=db");
    expect("host=db sslpassword=K3y", "host=db sslpassword=***");
    expect("host=db password=", "host=db password=***");
    expect("password='unterminated host=db", "password=***");
    /* words that only contain a key are left alone */
    expect("nats.token_file = /etc/postbox/token", "nats.token_file = /etc/postbox/token");
    expect("nopassword=1 mypassword=2", "nopassword=1 mypassword=2");
    expect("password is wrong", "password is wrong");
    /* double quotes (JAAS lines, Kafka's sasl.jaas.config) */
    expect("password=\"S3 cr\\\"et\" host=db", "password=*** host=db");
}

/* Inputs where the readers disagree (found by fuzz_redact): hidden for every reading */
static void readers_disagree(void **state)
{
    (void)state;
    /* libpq takes '&' into a key=value password; only a URL's query ends there */
    expect("host=db password=S3c&ret dbname=x", "host=db password=*** dbname=x");
    expect("postgresql://db/x?password=S3c&sslmode=require", "postgresql://db/x?password=***&sslmode=require");
    /* libpq reads "password=x" as the value, a JAAS reader "x" as the next key's */
    expect("password= password=\"S3 cret\" user=a", "password= *** user=a");
    /* libpq's URL userinfo ends at '@' or '/': '?' and a newline belong to the password */
    expect("postgresql://u:pa?ss w\nord@h/db", "postgresql://u:***@h/db");
    /* a key = value secret inside a userinfo, going on past its '@' */
    expect("b://u:x password=S3c@ret more", "b://u:*** more");
    /* blanks are white space as libpq reads it */
    expect("password\v=\fS3cret host=db", "password\v=\f*** host=db");
}

/* Kafka JAAS lines: key="value" pairs ending with ';' */
static void jaas_values(void **state)
{
    (void)state;
    expect("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" "
           "password=\"al ice-S3cret\";",
           "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"alice\" "
           "password=***;");
    expect("ScramLoginModule required username=alice password=S3cret;",
           "ScramLoginModule required username=alice password=***");
    expect("principal=admin token=\"S3cret T0k\" scope=x", "principal=admin token=*** scope=x");
}

/* [handlers] values are SQL: a connection string or URL inside one is hidden like anywhere */
static void handler_sql(void **state)
{
    (void)state;
    expect("SELECT dblink_exec('host=db password=S3cret dbname=x', $1::text)",
           "SELECT dblink_exec('host=db password=*** dbname=x', $1::text)");
    expect("SELECT remote.call('postgresql://app:S3cret@db/app', $1::jsonb, $2::jsonb)",
           "SELECT remote.call('postgresql://app:***@db/app', $1::jsonb, $2::jsonb)");
    expect("SELECT shipping.on_order_paid($1::jsonb, $2::jsonb)",
           "SELECT shipping.on_order_paid($1::jsonb, $2::jsonb)");
}

/* Only secrets are hidden: hosts and ports stay for diagnostics */
static void ports_stay(void **state)
{
    (void)state;
    expect("cannot connect to nats at nats://127.0.0.1:4222: no server available",
           "cannot connect to nats at nats://127.0.0.1:4222: no server available");
    expect("amqp://127.0.0.1:5672: connection refused", "amqp://127.0.0.1:5672: connection refused");
    expect("(at nats://h:4222).", "(at nats://h:4222).");
    expect("\"amqp://[::1]:5672\"", "\"amqp://[::1]:5672\"");
    expect("nats://h1:4222,h2:4223: down", "nats://h1:4222,h2:4223: down");
}

static void inside_messages(void **state)
{
    (void)state;
    expect("bad amqp url \"amqp://u:S3cret@h:x/\": the port must be a number",
           "bad amqp url \"amqp://u:***@h:x/\": the port must be a number");
    expect("cannot connect to nats at nats://a:P1@h1:4222,nats://b:P2@h2:4222: no servers",
           "cannot connect to nats at nats://a:***@h1:4222,nats://b:***@h2:4222: no servers");
    expect("cannot reach rabbitmq at 127.0.0.1:5672: connection refused",
           "cannot reach rabbitmq at 127.0.0.1:5672: connection refused");
    expect("reconnected to nats at nats://127.0.0.1:4222", "reconnected to nats at nats://127.0.0.1:4222");
    expect("", "");
    expect(NULL, "");
    /* "password" may be the real one: hidden like any other (usage texts too) */
    expect("bad url: expected amqp://user:password@host:port/vhost",
           "bad url: expected amqp://user:***@host:port/vhost");
    expect("amqp://a\x92.:password@mBrs", "amqp://a\x92.:***@mBrs");
    /* already redacted text stays as it is */
    expect("amqp://guest:***@127.0.0.1:5672/", "amqp://guest:***@127.0.0.1:5672/");
}

static void cut_to_fit(void **state)
{
    (void)state;
    char out[12];
    pb_redact_secret("amqp://u:S3cretS3cret@host/", out, sizeof out);
    assert_string_equal(out, "amqp://u:**");
    pb_redact_secret("password=S3cretS3cret", out, sizeof out);
    assert_string_equal(out, "password=**");
    char one[1];
    pb_redact_secret("password=S3cret", one, sizeof one);
    assert_string_equal(one, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(urls),
        cmocka_unit_test(passwords_with_separators),
        cmocka_unit_test(nats_lists_and_tokens),
        cmocka_unit_test(urls_without_scheme),
        cmocka_unit_test(nats_server_lists),
        cmocka_unit_test(jaas_values),
        cmocka_unit_test(readers_disagree),
        cmocka_unit_test(handler_sql),
        cmocka_unit_test(ports_stay),
        cmocka_unit_test(url_queries),
        cmocka_unit_test(key_value_strings),
        cmocka_unit_test(inside_messages),
        cmocka_unit_test(cut_to_fit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
