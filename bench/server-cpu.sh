# shellcheck shell=bash
# CPU time of the servers scripts/services started, for benchmarks that report CPU per 1,000
# events by process. Sourced by bench scripts (which set SRC to the source tree).
#
#   server_cpu_init   finds the servers' pids once (call it after the servers are up)
#   server_cpu NAME   CPU seconds (user + system) used so far by server NAME (pg, amqp, nats,
#                     redis, kafka) and its processes: its own, its exited children's (the kernel
#                     adds them to the parent that waited for them, as the postmaster does for
#                     its backends) and its live children's. Prints 0 when it is not running.
# Neither starts a process that the caller's `times` would count, except server_cpu_init.

declare -A SERVER_CPU_PID=()
SERVER_CPU_TCK=100
server_cpu_init() {
    local name state _ pid
    SERVER_CPU_TCK=$(getconf CLK_TCK)
    while read -r name state _ pid _; do
        [[ $state == running ]] && SERVER_CPU_PID[$name]=$pid
    done < <("$SRC/scripts/services" status 2>/dev/null)
}
server_cpu() { # NAME
    local pid=${SERVER_CPU_PID[$1]:-} line rest total=0 c
    local -a f
    [[ -n $pid ]] || { echo 0; return; }
    # /proc/PID/stat after the command: field 14 utime, 15 stime, 16 cutime, 17 cstime
    for c in "$pid" $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
        { read -r line <"/proc/$c/stat"; } 2>/dev/null || continue
        rest=${line##*) }
        read -ra f <<<"$rest"
        total=$((total + f[11] + f[12] + f[13] + f[14]))
    done
    printf '%d.%03d\n' $((total / SERVER_CPU_TCK)) $((total % SERVER_CPU_TCK * 1000 / SERVER_CPU_TCK))
}
