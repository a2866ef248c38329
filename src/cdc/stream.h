/* The logical replication stream of `relay --capture cdc`: a walsender connection
 * (replication=database) reading a pgoutput slot, in the shape of pg_recvlogical.
 *
 * The caller decides what is safe to confirm; the stream only reports it to the server (flush
 * position of standby status updates), periodically and whenever a keepalive asks. */
#ifndef PB_CDC_STREAM_H
#define PB_CDC_STREAM_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "config/config.h"

typedef struct pb_cdc_stream {
    const pb_config_t *cfg;
    PGconn *conn;
    char *buf;              /* last CopyData buffer, released on the next read */
    uint64_t received_lsn;  /* highest WAL position seen */
    uint64_t keepalive_end; /* server's send position from the last keepalive */
    uint64_t confirmed_lsn; /* what we allow the server to forget */
    uint64_t reported_lsn;  /* confirmed_lsn as last sent */
    int64_t last_report_ms;
    bool in_use_elsewhere;  /* open failed because another relay streams the slot */
    bool copying;           /* the server streams (START_REPLICATION answered, no end seen) */
    bool streams_in_progress; /* protocol 2, streaming on: large transactions come in blocks */
} pb_cdc_stream_t;

/* With create (cdc.create_slot, and no position recorded for the slot: a missing slot must not
 * be replaced by a new one), ensures the publication (inserts of postbox.outbox only) and the
 * slot exist; then starts streaming from the slot's confirmed position. PB_TRANSIENT when the
 * server is unreachable or the slot is in use by another relay (then in_use_elsewhere is set:
 * stand by and retry). */
pb_status_t pb_cdc_stream_open(pb_cdc_stream_t *s, const pb_config_t *cfg, bool create,
                               pb_error_t *err) PB_MUSTCHECK;

/* Waits up to timeout_ms for the next XLogData payload. *len = 0 when none arrived. *data is
 * valid until the next call. Answers keepalives that ask for a reply. */
/* Opens a replication connection without streaming, makes sure of the publication and creates
 * the slot with an exported snapshot: its name into snapshot[size], the slot's consistent point
 * into *consistent. Another session may take the snapshot (SET TRANSACTION SNAPSHOT) while s
 * stays open and runs nothing else; what that snapshot sees is not in the slot, everything
 * committed later is. Close s with pb_cdc_stream_close. An existing slot is an error. */
pb_status_t pb_cdc_stream_create_exported(pb_cdc_stream_t *s, const pb_config_t *cfg,
                                          char *snapshot, size_t size, uint64_t *consistent,
                                          pb_error_t *err) PB_MUSTCHECK;

pb_status_t pb_cdc_stream_read(pb_cdc_stream_t *s, int64_t timeout_ms, const char **data,
                               size_t *len, pb_error_t *err) PB_MUSTCHECK;

/* Allows the server to forget WAL up to lsn (never moves backwards). Sends a status update
 * when it changed and the last one is older than 100 ms, or when the status interval passed. */
pb_status_t pb_cdc_stream_confirm(pb_cdc_stream_t *s, uint64_t lsn, pb_error_t *err) PB_MUSTCHECK;

/* While streaming: a final status update (confirmed_lsn, whatever the 100 ms gap), CopyDone, and
 * a short wait for the server's end of the copy; then closes. Accepts a closed stream. */
void pb_cdc_stream_close(pb_cdc_stream_t *s);

/* "16/B374D848" <-> 64-bit LSN. */
bool pb_lsn_parse(const char *text, uint64_t *lsn);
void pb_lsn_format(uint64_t lsn, char *out, size_t outsz);

#endif
