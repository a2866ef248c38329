/* The broker's side of a publish (src/sink/*.c: send, then await the confirms). The broker
 * decides each message's fate; the relay sees only the outcome:
 *   ack          stored (routed to the consumer's queue when its subscription takes the type),
 *                confirmed
 *   duplicate    stored twice, confirmed (a broker-side redelivery or a publish repeated by the
 *                client library)
 *   nack/return  not stored, failed (basic.nack; basic.return of a mandatory message)
 *   unconfirmed  the connection or the broker went before the confirm: stored or not, and the
 *                relay counts it failed (the driver's await returns an error)
 * A confirmed message is never lost (persistent, durable queue: README "Guarantees"). Delivery
 * order to the consumer is free (consumer.pml takes any queued copy): late, out of order and
 * redelivered copies are all possible. */

#define P_FAILED    0
#define P_CONFIRMED 1

inline route(e, copies) {
    if
    :: SUBSCRIBED(e) -> queued[e] = queued[e] + copies
    :: else -> skip /* routed to other queues only */
    fi
}

inline publish(e, outcome) {
    if
    :: outcome = P_CONFIRMED; route(e, 1)
    :: MAY_FAULT(broker_dups) -> FAULT(broker_dups); outcome = P_CONFIRMED; route(e, 2)
    :: MAY_FAULT(broker_nacks) -> FAULT(broker_nacks); outcome = P_FAILED
    :: MAY_FAULT(broker_unconfirmed) -> FAULT(broker_unconfirmed); outcome = P_FAILED;
        if
        :: route(e, 1)
        :: skip
        fi
    fi
}
