#!/usr/bin/env bash
# metrics.listen without a host listens on loopback only (not every interface), and with
# metrics.token_file /metrics and /readyz need "Authorization: Bearer <token>" (401 without
# it or with another token), while /healthz stays open; the token is never logged.
source "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"
command -v ss >/dev/null || fail "ss is missing (scripts/install-deps: iproute2)"
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
pb_init
setup_queue '#'
printf 'PbSecMetricsToken7\n' >"$PB_TMP/token"
chmod 600 "$PB_TMP/token"

start_relay --set "metrics.listen=:$PORT" --set "metrics.token_file=$PB_TMP/token"
wait_until "curl -s -o /dev/null $URL/healthz" 30 || fail "nothing answers on port $PORT"
listening=$(ss -Hltn "sport = :$PORT" | awk '{print $4}' | sort -u | tr '\n' ' ')
say "metrics.listen = :$PORT listens on: $listening"
[[ $listening == "127.0.0.1:$PORT " ]] || fail "metrics.listen = :$PORT listens on '$listening', expected 127.0.0.1:$PORT only"

code() { curl -s -o "$PB_TMP/body" -w '%{http_code}' "$@"; }
c=$(code "$URL/healthz")
[[ $c == 200 ]] || fail "/healthz without a token: $c, expected 200"
for path in /metrics /readyz; do
    c=$(code "$URL$path")
    [[ $c == 401 ]] || fail "$path without a token: $c, expected 401"
    c=$(code -H 'Authorization: Bearer PbSecMetricsToken' "$URL$path")
    [[ $c == 401 ]] || fail "$path with a shorter token: $c, expected 401"
    c=$(code -H 'Authorization: Bearer PbSecMetricsToken7x' "$URL$path")
    [[ $c == 401 ]] || fail "$path with a longer token: $c, expected 401"
    c=$(code -H 'Authorization: Basic PbSecMetricsToken7' "$URL$path")
    [[ $c == 401 ]] || fail "$path with another scheme: $c, expected 401"
done
wait_until '[[ $(code -H "Authorization: Bearer PbSecMetricsToken7" "$URL/readyz") == 200 ]]' 30 ||
    fail "/readyz with the token never became 200"
c=$(code -H 'Authorization: Bearer PbSecMetricsToken7' "$URL/metrics")
[[ $c == 200 ]] && grep -q '^postbox_' "$PB_TMP/body" || fail "/metrics with the token: $c, no postbox_ figures"
say "/healthz open; /metrics and /readyz: 401 without the token or with a wrong one, 200 with it"
stop_relay

# an explicit host listens where it says
start_relay --set "metrics.listen=0.0.0.0:$PORT"
wait_until "curl -s -o /dev/null $URL/healthz" 30 || fail "nothing answers on 0.0.0.0:$PORT"
listening=$(ss -Hltn "sport = :$PORT" | awk '{print $4}' | sort -u | tr '\n' ' ')
[[ $listening == "0.0.0.0:$PORT " ]] || fail "metrics.listen = 0.0.0.0:$PORT listens on '$listening'"
c=$(code "$URL/metrics")
[[ $c == 200 ]] || fail "/metrics without metrics.token_file: $c, expected 200"
stop_relay
rm -f "$PB_TMP/token" "$PB_TMP/body"
if grep -rl PbSec "$PB_TMP" >/dev/null; then fail "the token is in $(grep -rl PbSec "$PB_TMP")"; fi

# metrics.listen on a port another process holds: a clear error and exit 1 (it crashed once, when
# the server that did not start was freed)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True)
time.sleep(30)' >"$PB_TMP/held_port" &
PB_PIDS+=($!)
wait_until '[[ -s $PB_TMP/held_port ]]' 10 || fail "no port held for the check"
held=$(<"$PB_TMP/held_port")
rc=0
out=$("$POSTBOX_BIN" --set metrics.listen=127.0.0.1:$held relay 2>&1) || rc=$?
((rc == 1)) || fail "relay with metrics.listen on a port in use exited with $rc, expected 1: ${out: -300}"
grep -q "metrics.listen \"127.0.0.1:$held\": cannot listen" <<<"$out" || fail "no clear error for a port in use: ${out: -300}"
say "metrics.listen on a port in use: exit 1, \"cannot listen\""
say "ok"
