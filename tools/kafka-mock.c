/* kafka-mock: librdkafka's mock cluster (rdkafka_mock.h) run as a server on 127.0.0.1, for
 * postbox's tests, benchmarks and demo (no Kafka broker is packaged for Debian). It speaks the
 * Kafka protocol over TCP, so the relay, the consumer and any ordinary client (kcat) use it as a
 * cluster; everything is kept in memory and lost when it stops.
 *
 * Usage: kafka-mock [--brokers N] [--bootstrap-file FILE] [--pid-file FILE] [--control FIFO]
 *                   [--nodelay on|off]
 *
 * The brokers listen on ports the mock picks (librdkafka 2.0.2 cannot be told one); their
 * bootstrap list ("127.0.0.1:P1,127.0.0.1:P2,...") goes to stdout and, written atomically, to
 * --bootstrap-file once they accept connections. SIGTERM or SIGINT stops it (exit 0).
 *
 * --control FIFO: a named pipe read for commands, one per line, to inject failures the way
 * librdkafka's own tests do:
 *   produce-errors COUNT ERROR   the next COUNT produce requests fail with ERROR (a Kafka error
 *                                name such as NOT_ENOUGH_REPLICAS, or its number)
 *   request-errors APIKEY COUNT ERROR   the same for any request type (Kafka protocol API key)
 *   clear-errors APIKEY          forgets the errors still queued for that request type
 *   broker-down ID | broker-up ID   a broker stops (connections dropped and refused) or comes
 *                                back; the partitions it leads stay without a leader until
 *                                partition-leader moves them, as a controller would
 *   topic-create TOPIC PARTITIONS REPLICATION   a topic with that many partitions and replicas
 *   partition-leader TOPIC PARTITION ID   broker ID becomes the partition's leader
 *   coordinator GROUP ID         broker ID becomes the consumer group's coordinator
 * Each command's outcome is logged to stderr.
 *
 * --nodelay on: its brokers answer without Nagle's delay (TCP_NODELAY on every connection they
 * accept), as Kafka's brokers do. librdkafka 2.0.2's mock leaves Nagle on, and so does this one
 * by default: when a client has several requests in flight on one connection, a response after
 * the first may wait for the client's delayed acknowledgement (~40 ms on Linux), and a producer
 * that waits for its delivery reports, as postbox's relay does after each batch, pays that once
 * per batch (20,000 events/s where the relay's PostgreSQL work allows 80,000; issue 32).
 * bench/relay-kafka turns it on to measure what a Kafka cluster would allow; the tests keep the
 * slower default, which their kill timings are tuned to (it_kafka_cdc_kill hit a publishing
 * relay with only 2 of its 5 kills in one of two runs with it on). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define PRODUCE_API_KEY 0 /* the Kafka protocol's number of the Produce request */

static volatile sig_atomic_t stop;
static bool tcp_nodelay; /* --nodelay on; set before the mock cluster's thread starts */

/* The mock's listeners call accept(2) inside librdkafka; this definition, in the executable,
 * comes first in the dynamic linker's lookup, so with --nodelay on each connection they accept
 * gets TCP_NODELAY (see the top of the file) before the real accept's result is handed back. */
typedef int accept_fn(int, struct sockaddr *, socklen_t *);

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
    static accept_fn *real_accept;
    if (!real_accept)
        real_accept = (accept_fn *)dlsym(RTLD_NEXT, "accept");
    if (!real_accept) {
        errno = ENOSYS;
        return -1;
    }
    int s = real_accept(fd, addr, len);
    int one = 1;
    /* a socket that refuses the option still works, only slower: the connection is kept */
    if (s >= 0 && tcp_nodelay && setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
        fprintf(stderr, "kafka-mock: TCP_NODELAY on an accepted connection: %s\n",
                strerror(errno));
    return s;
}

static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static void vsay(const char *fmt, va_list ap)
{
    fputs("kafka-mock: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
    exit(1);
}

static long parse_long(const char *s, const char *what, long min, long max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        die("%s: \"%s\" is not a number in %ld..%ld", what, s, min, max);
    return v;
}

/* Writes text to path through a temporary file and rename, so a reader never sees half. */
static void write_atomically(const char *path, const char *text)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        die("path too long: %s", path);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%s\n", text) < 0 || fclose(f) != 0)
        die("cannot write %s: %s", tmp, strerror(errno));
    if (rename(tmp, path) != 0)
        die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
}

/* A Kafka error by name ("NOT_ENOUGH_REPLICAS", "_TRANSPORT") or number; false when unknown. */
static bool error_by_name(const char *s, rd_kafka_resp_err_t *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end != s && !*end) {
        *out = (rd_kafka_resp_err_t)v;
        return true;
    }
    const struct rd_kafka_err_desc *descs;
    size_t n;
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++) {
        if (descs[i].name && strcasecmp(descs[i].name, s) == 0) {
            *out = descs[i].code;
            return true;
        }
    }
    return false;
}

/* Queues cnt errors err for requests of api_key. */
static void push_errors(rd_kafka_mock_cluster_t *mc, int api_key, long cnt, rd_kafka_resp_err_t err)
{
    rd_kafka_resp_err_t *errs = calloc((size_t)cnt, sizeof *errs);
    if (!errs)
        die("out of memory");
    for (long i = 0; i < cnt; i++)
        errs[i] = err;
    rd_kafka_mock_push_request_errors_array(mc, (int16_t)api_key, (size_t)cnt, errs);
    free(errs);
    say("the next %ld requests of api key %d fail with %s", cnt, api_key, rd_kafka_err2name(err));
}

/* Runs one control command line. */
static void run_command(rd_kafka_mock_cluster_t *mc, char *line)
{
    char *words[5];
    int n = 0;
    for (char *tok = strtok(line, " \t\r"); tok && n < 5; tok = strtok(NULL, " \t\r"))
        words[n++] = tok;
    if (n == 0)
        return;
    rd_kafka_resp_err_t err;
    if (!strcmp(words[0], "produce-errors") && n == 3) {
        long cnt = strtol(words[1], NULL, 10);
        if (cnt < 1 || cnt > 100000 || !error_by_name(words[2], &err)) {
            say("produce-errors: bad count or unknown error \"%s\"", words[2]);
            return;
        }
        push_errors(mc, PRODUCE_API_KEY, cnt, err);
    } else if (!strcmp(words[0], "request-errors") && n == 4) {
        long key = strtol(words[1], NULL, 10), cnt = strtol(words[2], NULL, 10);
        if (key < 0 || key > 1000 || cnt < 1 || cnt > 100000 || !error_by_name(words[3], &err)) {
            say("request-errors: bad api key, count or unknown error \"%s\"", words[3]);
            return;
        }
        push_errors(mc, (int)key, cnt, err);
    } else if (!strcmp(words[0], "clear-errors") && n == 2) {
        rd_kafka_mock_clear_request_errors(mc, (int16_t)strtol(words[1], NULL, 10));
        say("errors of api key %s cleared", words[1]);
    } else if ((!strcmp(words[0], "broker-down") || !strcmp(words[0], "broker-up")) && n == 2) {
        int32_t id = (int32_t)strtol(words[1], NULL, 10);
        err = words[0][7] == 'd' ? rd_kafka_mock_broker_set_down(mc, id)
                                 : rd_kafka_mock_broker_set_up(mc, id);
        say("%s %d: %s", words[0], (int)id, rd_kafka_err2str(err));
    } else if (!strcmp(words[0], "topic-create") && n == 4) {
        long parts = strtol(words[2], NULL, 10), repl = strtol(words[3], NULL, 10);
        if (parts < 1 || parts > 1000 || repl < 1 || repl > 16) {
            say("topic-create: bad partition count or replication factor");
            return;
        }
        err = rd_kafka_mock_topic_create(mc, words[1], (int)parts, (int)repl);
        say("topic-create %s, %ld partitions, replication %ld: %s", words[1], parts, repl,
            rd_kafka_err2str(err));
    } else if (!strcmp(words[0], "partition-leader") && n == 4) {
        int32_t part = (int32_t)strtol(words[2], NULL, 10), id = (int32_t)strtol(words[3], NULL, 10);
        err = rd_kafka_mock_partition_set_leader(mc, words[1], part, id);
        say("partition-leader %s [%d] -> broker %d: %s", words[1], (int)part, (int)id,
            rd_kafka_err2str(err));
    } else if (!strcmp(words[0], "coordinator") && n == 3) {
        int32_t id = (int32_t)strtol(words[2], NULL, 10);
        err = rd_kafka_mock_coordinator_set(mc, "group", words[1], id);
        say("coordinator of group %s -> broker %d: %s", words[1], (int)id, rd_kafka_err2str(err));
    } else {
        say("unknown control command \"%s\" (produce-errors, request-errors, clear-errors, "
            "broker-down, broker-up, topic-create, partition-leader, coordinator)", words[0]);
    }
}

/* Reads what the control pipe holds and runs every complete line. */
static void read_control(rd_kafka_mock_cluster_t *mc, int fd, char *buf, size_t cap, size_t *len)
{
    ssize_t r = read(fd, buf + *len, cap - 1 - *len);
    if (r <= 0)
        return;
    *len += (size_t)r;
    buf[*len] = '\0';
    char *start = buf, *nl;
    while ((nl = strchr(start, '\n'))) {
        *nl = '\0';
        run_command(mc, start);
        start = nl + 1;
    }
    *len -= (size_t)(start - buf);
    memmove(buf, start, *len);
    if (*len == cap - 1) /* a line longer than the buffer: drop it */
        *len = 0;
}

int main(int argc, char **argv)
{
    long nbrokers = 3;
    const char *bootstrap_file = NULL, *pid_file = NULL, *control = NULL;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            die("%s needs a value (usage: kafka-mock [--brokers N] [--bootstrap-file FILE] "
                "[--pid-file FILE] [--control FIFO] [--nodelay on|off])", argv[i]);
        if (!strcmp(argv[i], "--brokers"))
            nbrokers = parse_long(argv[++i], "--brokers", 1, 16);
        else if (!strcmp(argv[i], "--bootstrap-file"))
            bootstrap_file = argv[++i];
        else if (!strcmp(argv[i], "--pid-file"))
            pid_file = argv[++i];
        else if (!strcmp(argv[i], "--control"))
            control = argv[++i];
        else if (!strcmp(argv[i], "--nodelay")) {
            const char *v = argv[++i];
            if (strcmp(v, "on") != 0 && strcmp(v, "off") != 0)
                die("--nodelay: \"%s\" is not on or off", v);
            tcp_nodelay = strcmp(v, "on") == 0;
        }
        else
            die("unknown option %s", argv[i]);
    }

    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    int cfd = -1;
    if (control) {
        if (mkfifo(control, 0600) != 0 && errno != EEXIST)
            die("cannot make control pipe %s: %s", control, strerror(errno));
        /* read-write, so the pipe never reports end of file when a writer goes */
        if ((cfd = open(control, O_RDWR | O_NONBLOCK | O_CLOEXEC)) < 0)
            die("cannot open control pipe %s: %s", control, strerror(errno));
    }

    /* The cluster lives inside a client handle; this one never connects anywhere. */
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "client.id", "kafka-mock", errstr, sizeof errstr) != RD_KAFKA_CONF_OK ||
        rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof errstr) != RD_KAFKA_CONF_OK)
        die("%s", errstr); /* log_level 4: not the notice that this handle has no brokers */
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk)
        die("cannot create the client handle: %s", errstr);
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, (int)nbrokers);
    if (!mc)
        die("cannot create a mock cluster of %ld brokers (see the messages above)", nbrokers);
    const char *bootstraps = rd_kafka_mock_cluster_bootstraps(mc);

    if (pid_file) {
        char pid[32];
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        write_atomically(pid_file, pid);
    }
    if (bootstrap_file)
        write_atomically(bootstrap_file, bootstraps);
    printf("%s\n", bootstraps);
    fflush(stdout);
    say("%ld brokers on %s", nbrokers, bootstraps);

    char buf[4096];
    size_t len = 0;
    while (!stop) {
        struct pollfd pfd = {.fd = cfd, .events = POLLIN};
        if (poll(&pfd, cfd >= 0 ? 1 : 0, 500) > 0 && (pfd.revents & POLLIN))
            read_control(mc, cfd, buf, sizeof buf, &len);
    }
    say("stopping");
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    if (cfd >= 0)
        close(cfd);
    if (bootstrap_file)
        unlink(bootstrap_file);
    return 0;
}
