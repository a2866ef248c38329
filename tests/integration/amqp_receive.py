#!/usr/bin/python3
# Receives the messages of a RabbitMQ queue with python3-pika (a client that is not postbox's)
# and writes, per message, one line as amqp-tool drain does, plus two columns:
#   message_id TAB type TAB routing_key TAB aggregate_type TAB aggregate_id TAB body
#   TAB arrival (unix microseconds, this host's clock) TAB expiration property ('' when none)
# (tabs and newlines inside fields become spaces), flushed per line so that a test can watch the
# file grow. Acknowledges each message. Stops once EXPECT messages arrived and none arrived for
# IDLE_MS, or after TIMEOUT_S seconds (exit 1 when fewer than EXPECT arrived).
# Usage: amqp_receive.py URL QUEUE EXPECT IDLE_MS TIMEOUT_S
import sys
import time

import pika


def field(v):
    if v is None:
        return ""
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return str(v).replace("\t", " ").replace("\n", " ").replace("\r", " ")


def main():
    url, queue = sys.argv[1], sys.argv[2]
    expect, idle_ms, timeout_s = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=1000)
    got = 0
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    for method, props, body in ch.consume(queue, inactivity_timeout=0.05):
        now = time.monotonic()
        if method is None:
            if (got >= expect and (now - last) * 1000 >= idle_ms) or now > deadline:
                break
            continue
        arrival = time.time_ns() // 1000
        headers = props.headers or {}
        print("\t".join([field(props.message_id), field(props.type), field(method.routing_key),
                         field(headers.get("aggregate_type")), field(headers.get("aggregate_id")),
                         field(body), str(arrival), field(props.expiration)]), flush=True)
        ch.basic_ack(method.delivery_tag)
        got += 1
        last = now
        if now > deadline:
            break
    ch.cancel()
    conn.close()
    if got < expect:
        print(f"amqp_receive.py: only {got} of {expect} message(s) arrived within {timeout_s} s",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
