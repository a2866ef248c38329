/* NATS JetStream plumbing shared by the nats sink and the nats source (nats.c 3.4.1).
 *
 * Connecting (URL, TLS, credentials, token file, reconnect policy, library callbacks routed
 * into our log), checking that the server has JetStream at all (core NATS is at-most-once and
 * is refused), and creating or verifying the stream that holds the events (subjects, storage,
 * replicas, at least one limit, duplicate window).
 *
 * Error classes: unreachable server, timeouts and a dropped connection are PB_TRANSIENT;
 * refused credentials, a server without JetStream, a stream that does not match the
 * configuration and every other configuration error are PB_FATAL. Messages never contain a
 * password or token.
 *
 * @thread any caller thread; the callbacks installed here run on nats.c's threads and only log. */
#ifndef PB_BROKER_NATS_CONN_H
#define PB_BROKER_NATS_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <nats/nats.h>

#include "common/err.h"
#include "common/event.h"
#include "config/config.h"

/** Longest subject (with its NUL) postbox renders. */
#define PB_NATS_SUBJECT_MAX 512

/** @brief Takes a reference on the nats.c library (nats_Open on the first). Pair with
 * pb_nats_lib_release, which closes the library (waiting for its threads) on the last. */
void pb_nats_lib_retain(void);
void pb_nats_lib_release(void);

/**
 * @brief Splits nats.url into its servers (at commas, blanks around them removed), as postbox
 * hands them to libnats. PB_FATAL for an empty server or a scheme other than nats:// and
 * tls://. *tls tells whether a server is tls://. Free *servers with pb_nats_servers_free.
 */
pb_status_t pb_nats_servers(const char *url, char ***servers, size_t *n, bool *tls,
                            pb_error_t *err) PB_MUSTCHECK;
void pb_nats_servers_free(char **servers, size_t n);

/** @brief The check of nats.url both the sink and the source make before connecting: not
 * empty, and every server well formed (pb_nats_servers). PB_FATAL otherwise. */
pb_status_t pb_nats_check_url(const pb_config_t *cfg, pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief Connects to cfg->nats_url with the configured TLS and credentials; nats.c then
 * reconnects by itself (forever, every reconnect_wait) when the connection drops.
 * @param fac log facility for connection events ("sink.nats", "source.nats")
 * @param where receives host list for messages (password redacted)
 * @returns PB_OK with *nc set (caller destroys it with natsConnection_Destroy), PB_TRANSIENT when
 *          no server could be reached (the message names the servers of a list whose TLS
 *          handshake failed), PB_FATAL for refused credentials, bad TLS/credential files, or a
 *          TLS handshake that failed with every server.
 */
pb_status_t pb_nats_connect(const pb_config_t *cfg, const char *fac, natsConnection **nc,
                            char *where, size_t wheresz, pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief Fails unless the server answers JetStream API requests (PB_FATAL "jetstream is not
 * enabled..." when it does not; PB_TRANSIENT when the connection is down or the request timed out).
 */
pb_status_t pb_nats_check_jetstream(jsCtx *js, const char *where, pb_error_t *err) PB_MUSTCHECK;

/** What pb_nats_ensure_stream found or made. */
typedef struct pb_nats_stream_desc {
    char text[400];         /* "stream X subjects [..] storage file replicas 1 max_age 7d ..." */
    char **subjects;        /* the stream's subjects (owned; pb_nats_stream_desc_free) */
    size_t nsubjects;
    bool created;           /* it did not exist and was created now */
    bool updated;           /* it existed and its settings were changed */
    bool leaderless;        /* a clustered stream without a leader now (an election) */
} pb_nats_stream_desc_t;

void pb_nats_stream_desc_free(pb_nats_stream_desc_t *d);

/**
 * @brief With nats.stream_create: creates the stream from the configuration, or updates an
 * existing one whose subjects, limits or duplicate window differ (storage cannot change: a
 * mismatch is PB_FATAL). Without: the stream must exist. Either way the stream must have at
 * least one limit unless nats.allow_unlimited (PB_FATAL otherwise), and a duplicate window
 * shorter than nats.relay_worst_downtime is warned about under fac.
 */
pb_status_t pb_nats_ensure_stream(jsCtx *js, const pb_config_t *cfg, const char *fac,
                                  pb_nats_stream_desc_t *desc, pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief The configured stream subjects: nats.stream_subjects split at commas and trimmed, or
 * subject_prefix + ">" when it is empty. PB_FATAL when that leaves no subject.
 * @returns an array of n strings (free each and the array).
 */
pb_status_t pb_nats_config_subjects(const pb_config_t *cfg, char ***subjects, size_t *n,
                                    pb_error_t *err) PB_MUSTCHECK;

/**
 * @brief Looks the stream nats.stream up without changing anything: *exists, and when it exists
 * desc describes it (free with pb_nats_stream_desc_free) and *limited tells whether it has one of
 * max_age, max_msgs, max_bytes. PB_TRANSIENT when the server did not answer.
 */
pb_status_t pb_nats_inspect_stream(jsCtx *js, const pb_config_t *cfg, bool *exists,
                                   bool *limited, pb_nats_stream_desc_t *desc,
                                   pb_error_t *err) PB_MUSTCHECK;

/** @brief The subject of ev: nats.subject_prefix + nats.subject rendered (or the row's
 * destination). False when it does not fit n bytes. */
bool pb_nats_render_subject(const pb_config_t *cfg, const pb_event_t *ev, char *out, size_t n);

/** @brief The configured subject template must land in the stream d describes, else every
 * publish fails: PB_FATAL saying so (or that the template gives an invalid subject). */
pb_status_t pb_nats_check_coverage(const pb_config_t *cfg, const pb_nats_stream_desc_t *d,
                                   pb_error_t *err) PB_MUSTCHECK;

/** @brief NATS subject matching: pattern tokens "*" (one token) and ">" (the rest). */
bool pb_nats_subject_matches(const char *pattern, const char *subject);

/** @brief True when s is a valid publish subject: non-empty dot-separated tokens without
 * whitespace or wildcards. */
bool pb_nats_subject_valid(const char *s);

/** @brief Text of a nats.c failure: "status text: last error text" (no secrets: nats.c does
 * not put credentials in its errors). */
const char *pb_nats_error_text(natsStatus s, char *buf, size_t n);

/** @brief True for statuses that mean the connection is gone or the server did not answer. */
bool pb_nats_status_transient(natsStatus s);

/** @brief True for statuses that mean the connection is gone or the server did not answer, and
 * for JetStream API errors of a cluster in flux (no peers enough for the replicas yet, no meta
 * leader, an election under way): a node down or still joining, so the request is retried. */
bool pb_nats_js_transient(natsStatus s, jsErrCode jerr);

/** @brief "connected", "reconnecting", ... for messages. */
const char *pb_nats_conn_status_name(natsConnStatus st);

#endif
