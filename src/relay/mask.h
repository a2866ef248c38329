/* PII masking: per event type rules ([mask] section of the config) that drop a field, mask it
 * (keep its last N characters) or replace it with a keyed HMAC-SHA-256, applied by the relay
 * driver to an event's payload and headers before any sink sees it. The outbox row is never
 * changed: the masked texts live beside the event until its batch is released.
 *
 * Rules of one event type, separated by commas:
 *     order.created = drop customer.ssn, last4 card.number, hmac customer.email
 *     *             = drop headers:x-customer-email
 * A path leads into the payload, or into the headers with "headers:"; segments are names
 * (customer.email), `*` (every member of an object), `[N]`, `[*]` (every element of an array)
 * and `["a name.with dots"]`; a name (or `*`) meeting an array goes into each of its elements.
 * `*` as the event type applies to every type. Event types and header names match whatever
 * their case, payload member names exactly.
 *
 * The event types of relay.mask_allow_types are masked by allow-list: of their payload only
 * what a rule names goes out (keep PATH as it is, lastN and hmac masked, drop still removes).
 *
 * Fail closed: a value in which a rule's path cannot go on (a name into a string, an index into
 * an object) is dropped and counted in pb_mask_unfit_t, never published unchecked.
 *
 * The engine rewrites the JSON text itself: what no rule touches is copied byte for byte (only
 * the whitespace between tokens of a rewritten container goes), so numbers and strings keep
 * their exact text. @thread the relay driver's thread (an engine is immutable once built). */
#ifndef PB_RELAY_MASK_H
#define PB_RELAY_MASK_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "common/event.h"
#include "common/str.h"
#include "config/config.h"

/* Rules per event type, with the HMAC key made ready for them. The rules do not change once
 * built; the key's context is reused for each masked value, so one thread at a time (the
 * relay's driver). */
typedef struct pb_mask pb_mask_t;

/* Rules and rules text of one event type at most, for the 64-bit masks of the rewriter. */
#define PB_MASK_MAX_RULES 64
/* Shortest key accepted for hmac rules (bytes): HMAC-SHA-256 keys should be at least the size
 * of the hash (RFC 2104 section 3). */
#define PB_MASK_MIN_KEY 32
#define PB_MASK_MAX_KEY 4096
/* Deepest nesting of a payload the rules are applied to. */
#define PB_MASK_MAX_DEPTH 512

/* Checks one [mask] entry: the event type and its rules text. PB_FATAL with a message naming
 * the rule and the problem. Also tells whether the rules use hmac (*uses_hmac may be NULL). */
pb_status_t pb_mask_check_rules(const char *event_type, const char *rules, bool *uses_hmac,
                                pb_error_t *err) PB_MUSTCHECK;

/* Checks the config's [mask] entries and relay.mask_allow_types together (one entry per type
 * whatever its case, keep only for allow-listed types, rules for every allow-listed type, a
 * key file set when a rule uses hmac); the key file itself is read by pb_mask_new. */
pb_status_t pb_mask_check_config(const pb_config_t *cfg, pb_error_t *err) PB_MUSTCHECK;

/* Builds the engine from the config's [mask] entries, reading relay.mask_key_file when a rule
 * uses hmac (refused when it is not a regular file, is readable or writable by group or others,
 * or holds fewer than PB_MASK_MIN_KEY bytes). *out is an engine without rules when there are
 * none. PB_FATAL on any error. */
pb_status_t pb_mask_new(const pb_config_t *cfg, pb_mask_t **out, pb_error_t *err) PB_MUSTCHECK;

/* The same from n entries, the allow-listed types (relay.mask_allow_types: comma-separated, "*"
 * for every type; NULL or "" for none) and the key bytes (key may be NULL when no rule uses
 * hmac). */
pb_status_t pb_mask_build(size_t n, char *const *types, char *const *rules,
                          const char *allow_types, const unsigned char *key, size_t key_len,
                          pb_mask_t **out, pb_error_t *err) PB_MUSTCHECK;

void pb_mask_free(pb_mask_t *m);

/* Whether any rule applies to events of this type. */
bool pb_mask_applies(const pb_mask_t *m, const char *event_type);

/* Values dropped by one rewrite because a rule's path could not go into them. */
typedef struct pb_mask_unfit {
    size_t n;
    char first[256]; /* the rule and the place of the first one */
} pb_mask_unfit_t;

/* Rewrites the JSON text json[0..len) of an event of event_type: the payload's rules, or with
 * headers the headers' rules. On PB_OK *changed says whether anything changed; then out holds
 * the masked text (appended); *unfit (may be NULL) counts the values dropped because a rule
 * could not apply to them. PB_FATAL with why when the text is not valid JSON, nests deeper than
 * PB_MASK_MAX_DEPTH, a value cannot take its rule (last4 on an object) or a rule cannot go into
 * the root (a string payload, an index into an object). */
pb_status_t pb_mask_rewrite(const pb_mask_t *m, const char *event_type, bool headers,
                            const char *json, size_t len, pb_buf_t *out, bool *changed,
                            pb_mask_unfit_t *unfit, pb_error_t *why) PB_MUSTCHECK;

/* What pb_mask_event put in place of an event's texts, to be undone by pb_mask_restore. Zero
 * it before the first use. */
typedef struct pb_masked {
    bool active;
    pb_buf_t payload, headers;          /* the masked texts (owned) */
    const char *orig_payload;           /* the capture's texts (borrowed) */
    size_t orig_payload_len;
    const char *orig_headers;
    pb_mask_unfit_t unfit;              /* values dropped as unfit for a rule, to be logged */
} pb_masked_t;

/* Masks one event in place before pb_sink_prepare: ev->payload (and payload_len) and
 * ev->headers point to masked copies kept in *keep, so every sink publishes them. Returns
 * false with result set to PB_OUT_REJECT and the reason when rules apply to the event but its
 * payload or headers cannot be masked (not valid JSON, ...): it is dead-lettered, never
 * published unmasked. An event masked already (ev->masked) is left as it is. */
bool pb_mask_event(const pb_mask_t *m, pb_event_t *ev, pb_masked_t *keep, pb_result_t *result);

/* Points the event at its original texts again (the outbox row as captured, which is what a
 * dead letter stores) and frees the copies. Harmless on an event pb_mask_event left alone. */
void pb_mask_restore(pb_event_t *ev, pb_masked_t *keep);

#endif
