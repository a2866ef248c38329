/* postbox demo: the relay and the consumer run as child processes of the demo (the running
 * binary, exec'd again with the generated configuration), so that the demo can SIGKILL them
 * at any point, as a crash would, and start them again. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/str.h"
#include "demo/demo_int.h"

extern char **environ;

static char self_exe[4096];
static char config_path[4096];

/* The environment of the relay and the consumer, without POSTBOX_*: only the generated file
 * configures them. Built before any fork (a child of a threaded process must not allocate). */
static char **clean_environment(void)
{
    size_t n = 0;
    for (char **e = environ; *e; e++)
        n++;
    char **env = pb_malloc((n + 1) * sizeof *env);
    size_t k = 0;
    for (char **e = environ; *e; e++)
        if (strncmp(*e, "POSTBOX_", 8) != 0)
            env[k++] = *e;
    env[k] = NULL;
    return env;
}

static char **child_env;

pb_status_t demo_child_setup(const char *config, pb_error_t *err)
{
    ssize_t n = readlink("/proc/self/exe", self_exe, sizeof self_exe - 1);
    if (n <= 0 || (size_t)n >= sizeof self_exe - 1)
        return pb_fail(err, PB_FATAL, "cannot find the postbox executable (/proc/self/exe): %s",
                       strerror(errno));
    self_exe[n] = '\0';
    if (strlen(config) >= sizeof config_path)
        return pb_fail(err, PB_FATAL, "path too long: %s", config);
    strcpy(config_path, config);
    if (!child_env)
        child_env = clean_environment();
    return PB_OK;
}

static void log_line(const char *path, const char *what)
{
    FILE *f = fopen(path, "a");
    if (!f)
        return;
    time_t t = time(NULL);
    struct tm tm;
    char when[32];
    strftime(when, sizeof when, "%H:%M:%S", localtime_r(&t, &tm));
    fprintf(f, "==== %s %s\n", when, what);
    fclose(f);
}

/* fork; the child gets stdout/stderr into log_path, dies with the demo, loses POSTBOX_*. */
static pid_t spawn(const char *path, char *const argv[], const char *log_path, bool clean_env)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd < 0)
        _exit(127);
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    close(fd);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, STDIN_FILENO);
        close(devnull);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) /* the demo died before prctl took effect */
        _exit(127);
    signal(SIGPIPE, SIG_DFL);
    execve(path, argv, clean_env ? child_env : environ);
    static const char msg[] = "postbox demo: exec failed\n";
    if (write(STDERR_FILENO, msg, sizeof msg - 1) < 0)
        _exit(127);
    _exit(127);
}

pb_status_t demo_child_start(demo_child_t *ch, pb_error_t *err)
{
    char *argv[] = {(char *)"postbox", (char *)"-c", config_path, (char *)ch->name, NULL};
    char what[80];
    snprintf(what, sizeof what, "postbox %s (start %d)", ch->name, ch->starts + 1);
    log_line(ch->log_path, what);
    pid_t pid = spawn(self_exe, argv, ch->log_path, true);
    if (pid < 0)
        return pb_fail(err, PB_FATAL, "fork for postbox %s: %s", ch->name, strerror(errno));
    ch->pid = pid;
    ch->starts++;
    ch->started_ms = pb_monotonic_ms();
    return PB_OK;
}

void demo_child_kill(demo_child_t *ch)
{
    if (ch->pid <= 0)
        return;
    kill(ch->pid, SIGKILL);
    while (waitpid(ch->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    ch->pid = 0;
    ch->kills++;
    log_line(ch->log_path, "SIGKILL");
}

int demo_child_stop(demo_child_t *ch, int64_t timeout_ms)
{
    if (ch->pid <= 0)
        return -1;
    kill(ch->pid, SIGTERM);
    int64_t deadline = pb_monotonic_ms() + timeout_ms;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(ch->pid, &status, WNOHANG);
        if (r == ch->pid)
            break;
        if (r < 0 && errno != EINTR) {
            status = -1;
            break;
        }
        if (pb_monotonic_ms() > deadline) {
            kill(ch->pid, SIGKILL);
            waitpid(ch->pid, &status, 0);
            ch->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    ch->pid = 0;
    return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool demo_child_exited(demo_child_t *ch, int *status)
{
    if (ch->pid <= 0)
        return false;
    int st = 0;
    if (waitpid(ch->pid, &st, WNOHANG) != ch->pid)
        return false;
    ch->pid = 0;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return true;
}

pid_t demo_spawn(char *const argv[], const char *log_path)
{
    return spawn(argv[0], argv, log_path, false);
}

int64_t demo_count_in_log(const char *path, const char *needle, long *offset)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (fseek(f, *offset, SEEK_SET) != 0) {
        fclose(f);
        return 0;
    }
    int64_t n = 0;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') /* being written: read it next time */
            break;
        *offset += (long)len;
        if (strstr(line, needle))
            n++;
    }
    free(line);
    fclose(f);
    return n;
}

int64_t demo_sum_dropped_copies(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int64_t sum = 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        /* "sink.nats: N of M events were already in stream ..." */
        const char *at = strstr(line, "sink.nats: ");
        if (!at || !strstr(at, " events were already in stream"))
            continue;
        long long n = 0, m = 0;
        if (sscanf(at + strlen("sink.nats: "), "%lld of %lld", &n, &m) == 2)
            sum += n;
    }
    free(line);
    fclose(f);
    return sum;
}
