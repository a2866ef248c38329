#!/usr/bin/env bash
# Slow clients do not starve the probes: 40 connections to metrics.listen that each send one
# header line every 4 s (and come back when the server closes them) run beside a probe that asks
# /healthz every half second for 12 s; every probe must answer 200 within 1 s. Run without and
# then with metrics.token_file (/healthz is open either way); with the token a scrape of /metrics
# must get through as well.
source "$(dirname "$0")/lib.sh"

command -v curl >/dev/null || fail "curl is missing (scripts/install-deps)"
SLOW=40
PROBE_SECS=12
PORT=$(free_port)
URL=http://127.0.0.1:$PORT
pb_init
printf 'PbSlowClientsToken3\n' >"$PB_TMP/token"
chmod 600 "$PB_TMP/token"

# SLOW connections; each sends a request line, then one header line every 4 s, never the blank
# line that ends the headers. A connection the server closed is opened again at the next round.
# Prints "open N" once all are open, and at the end how many times connections were reopened.
slow_clients() { # SECONDS
    python3 -u - "$PORT" "$SLOW" "$1" <<'EOF'
import select, socket, sys, time
port, n, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
conns, reopened, line = [None] * n, 0, 0

def connect():
    s = socket.create_connection(("127.0.0.1", port), timeout=2)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: postbox\r\n")
    return s

def closed_by_server(s):
    # readable: an answer (an error status) or EOF, either way the server gave up on the request
    readable, _, _ = select.select([s], [], [], 0)
    return bool(readable)

end = time.time() + secs
first = True
while time.time() < end:
    for i in range(n):
        try:
            if conns[i] is not None and closed_by_server(conns[i]):
                conns[i].close()
                conns[i] = None
            if conns[i] is None:
                conns[i] = connect()
                reopened += 0 if first else 1
            else:
                conns[i].sendall(b"X-Slow-%d: %d\r\n" % (i, line))
        except OSError:
            if conns[i] is not None:
                conns[i].close()
            conns[i] = None
    if first:
        print("open %d" % sum(c is not None for c in conns))
        first = False
    line += 1
    time.sleep(4)
print("reopened %d" % reopened)
EOF
}

# Asks /healthz every 0.5 s for PROBE_SECS; fails on the first probe slower than 1 s or not 200.
probe_healthz() { # WHAT
    local end=$((SECONDS + PROBE_SECS)) n=0 code
    while ((SECONDS < end)); do
        code=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 1 "$URL/healthz") ||
            fail "$1: probe $((n + 1)) got no answer within 1 s ($code) while $SLOW slow clients were connected"
        [[ $code == 200\ * ]] || fail "$1: probe $((n + 1)) answered $code"
        n=$((n + 1))
        sleep 0.5
    done
    say "$1: $n probes of /healthz, each answered 200 within 1 s"
}

run_case() { # WHAT [relay args...]
    local what=$1
    shift
    start_relay --set relay.sink=stdout --set "metrics.listen=127.0.0.1:$PORT" "$@"
    wait_until "curl -s -o /dev/null --max-time 1 $URL/healthz" 30 || fail "$what: nothing answers on port $PORT"
    slow_clients $((PROBE_SECS + 4)) >"$PB_TMP/slow.out" 2>"$PB_TMP/slow.err" &
    local slow_pid=$!
    PB_PIDS+=("$slow_pid")
    wait_until "grep -q '^open' '$PB_TMP/slow.out'" 20 || fail "$what: the slow clients did not connect: $(cat "$PB_TMP/slow.err")"
    say "$what: $(head -1 "$PB_TMP/slow.out") slow connections"
    sleep 1
    probe_healthz "$what"
    if [[ $what == *token* ]]; then
        local c
        c=$(curl -s -o "$PB_TMP/body" -w '%{http_code}' --max-time 2 \
            -H 'Authorization: Bearer PbSlowClientsToken3' "$URL/metrics") || true
        [[ $c == 200 ]] && grep -q '^postbox_' "$PB_TMP/body" ||
            fail "$what: /metrics with the token answered '$c' while the slow clients were connected"
        say "$what: /metrics with the token answered 200"
    fi
    wait "$slow_pid" || fail "$what: the slow clients failed: $(cat "$PB_TMP/slow.err")"
    say "$what: slow clients $(tail -1 "$PB_TMP/slow.out")"
    stop_relay
}

run_case "without a token"
run_case "with metrics.token_file" --set "metrics.token_file=$PB_TMP/token"
say "ok"
