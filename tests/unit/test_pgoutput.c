/* Unit tests for the pgoutput decoder and the cdc event builders, fed with hand-built
 * messages in the wire format (protocol version 1, and 2 with streamed transactions; text
 * values). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "cdc/events.h"
#include "cdc/pgoutput.h"

/* A small builder for wire messages. */
typedef struct wire {
    unsigned char b[4096];
    size_t n;
} wire_t;

static void w_u8(wire_t *w, unsigned v) { w->b[w->n++] = (unsigned char)v; }
static void w_u16(wire_t *w, unsigned v) { w_u8(w, v >> 8); w_u8(w, v & 0xff); }
static void w_u32(wire_t *w, uint32_t v) { w_u16(w, v >> 16); w_u16(w, v & 0xffff); }
static void w_u64(wire_t *w, uint64_t v) { w_u32(w, (uint32_t)(v >> 32)); w_u32(w, (uint32_t)v); }
static void w_str(wire_t *w, const char *s) { size_t l = strlen(s) + 1; memcpy(w->b + w->n, s, l); w->n += l; }
static void w_text(wire_t *w, const char *s) { w_u8(w, 't'); w_u32(w, (uint32_t)strlen(s)); memcpy(w->b + w->n, s, strlen(s)); w->n += strlen(s); }

static void relation(wire_t *w, uint32_t relid, const char *const *cols, int ncols)
{
    w->n = 0;
    w_u8(w, 'R');
    w_u32(w, relid);
    w_str(w, "postbox");
    w_str(w, "outbox");
    w_u8(w, 'd');
    w_u16(w, (unsigned)ncols);
    for (int i = 0; i < ncols; i++) {
        w_u8(w, i == 0);
        w_str(w, cols[i]);
        w_u32(w, 25);
        w_u32(w, 0xffffffffu);
    }
}

static const char *const cols_v1[] = {"id", "event_id", "aggregate_type", "aggregate_id", "event_type",
                                      "payload", "headers", "destination", "created_at", "published_at",
                                      "attempts", "next_attempt_at", "last_error"};

static void insert_v1(wire_t *w, uint32_t relid, const char *id, const char *agg)
{
    w->n = 0;
    w_u8(w, 'I');
    w_u32(w, relid);
    w_u8(w, 'N');
    w_u16(w, 13);
    w_text(w, id);
    w_text(w, "6f1c2a9e-0000-4000-8000-000000000042");
    w_text(w, "order");
    w_text(w, agg);
    w_text(w, "order.paid.v1");
    w_text(w, "{\"amount\": 5}");
    w_text(w, "{\"trace\": \"t1\"}");
    w_u8(w, 'n');
    w_text(w, "2026-11-30 11:03:34.123456+00");
    w_u8(w, 'n');
    w_text(w, "0");
    w_text(w, "2026-11-30 11:03:34.123456+00");
    w_u8(w, 'n');
}

static void begin_commit_and_message(void **state)
{
    (void)state;
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    pb_error_t err;
    pb_pgo_msg_t m;
    wire_t w = {.n = 0};
    w_u8(&w, 'B');
    w_u64(&w, 0x1600000100ULL);
    w_u64(&w, 123456);
    w_u32(&w, 777);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_BEGIN);
    assert_true(m.u.begin.final_lsn == 0x1600000100ULL);
    assert_int_equal(m.u.begin.xid, 777);

    w.n = 0;
    w_u8(&w, 'C');
    w_u8(&w, 0);
    w_u64(&w, 0x1600000100ULL);
    w_u64(&w, 0x1600000180ULL);
    w_u64(&w, 123456);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_COMMIT);
    assert_true(m.u.commit.end_lsn == 0x1600000180ULL);

    const char *json = "{\"event_id\":\"e1\",\"aggregate_type\":\"order\",\"aggregate_id\":\"7\","
                       "\"event_type\":\"order.paid.v1\",\"payload\":{\"a\":1},\"headers\":{\"h\":\"x\"},"
                       "\"destination\":null,\"created_at_us\":1700000000000000}";
    w.n = 0;
    w_u8(&w, 'M');
    w_u8(&w, 1);
    w_u64(&w, 0x1600000140ULL);
    w_str(&w, "postbox");
    w_u32(&w, (uint32_t)strlen(json));
    memcpy(w.b + w.n, json, strlen(json));
    w.n += strlen(json);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_MESSAGE);
    assert_true(m.u.message.transactional);
    assert_string_equal(m.u.message.prefix, "postbox");
    pb_cdc_event_t e;
    assert_int_equal(pb_cdc_event_from_message(m.u.message.content, m.u.message.len, &e, &err), PB_OK);
    assert_string_equal(e.ev.event_id, "e1");
    assert_string_equal(e.ev.aggregate_id, "7");
    assert_string_equal(e.ev.payload, "{\"a\":1}");
    assert_string_equal(e.ev.headers, "{\"h\":\"x\"}");
    assert_null(e.ev.destination);
    assert_true(e.ev.created_at_us == 1700000000000000LL);
    assert_int_equal(e.ev.id, 0);
    pb_cdc_event_free(&e);

    /* not a postbox event */
    assert_int_equal(pb_cdc_event_from_message("[1,2]", 5, &e, &err), PB_FATAL);
    assert_int_equal(pb_cdc_event_from_message("{\"event_id\":\"x\"}", 16, &e, &err), PB_FATAL);
    pb_pgo_decoder_free(&dec);
}

/* An emitted message as PostgreSQL's jsonb text writes it: the payload and headers reach the
 * event as written (0.1 and 1.50 are not rewritten, integers and exponents beyond int64 and
 * double are kept, a key-like string inside the payload is not taken for a member), and the
 * strings are decoded. */
static void message_payload_passes_through(void **state)
{
    (void)state;
    pb_error_t err;
    pb_cdc_event_t e;
    const char *json =
        "{\"sequence\": 12, \"payload\": {\"amount\": 0.1, \"price\": 1.50, \"big\": "
        "123456789012345678901234567890, \"tiny\": 1e-400, \"huge\": 1e400, \"note\": "
        "\"a } \\\" ] \\\\\", \"event_id\": \"not this one\", \"list\": [[], {}, [1, [2]]]}, "
        "\"headers\": {\"trace\": \"t-\\u00e9\"}, \"event_id\": \"e2\", \"event_type\": "
        "\"deposit.v1\", \"destination\": \"q.\\\"x\\\"\", \"aggregate_id\": \"acct-\\u00e9\", "
        "\"created_at_us\": 1700000000000001, \"aggregate_type\": \"account\"}";
    assert_int_equal(pb_cdc_event_from_message(json, strlen(json), &e, &err), PB_OK);
    assert_string_equal(e.ev.event_id, "e2");
    assert_string_equal(e.ev.aggregate_type, "account");
    assert_string_equal(e.ev.aggregate_id, "acct-\xc3\xa9");
    assert_string_equal(e.ev.event_type, "deposit.v1");
    assert_string_equal(e.ev.destination, "q.\"x\"");
    assert_string_equal(e.ev.payload,
                        "{\"amount\": 0.1, \"price\": 1.50, \"big\": "
                        "123456789012345678901234567890, \"tiny\": 1e-400, \"huge\": 1e400, "
                        "\"note\": \"a } \\\" ] \\\\\", \"event_id\": \"not this one\", \"list\": "
                        "[[], {}, [1, [2]]]}");
    assert_int_equal(e.ev.payload_len, strlen(e.ev.payload));
    assert_string_equal(e.ev.headers, "{\"trace\": \"t-\\u00e9\"}");
    assert_true(e.ev.created_at_us == 1700000000000001LL);
    assert_int_equal(e.ev.sequence, 12);
    pb_cdc_event_free(&e);

    /* a scalar payload; no headers object; no destination */
    const char *scalar = "{\"event_id\": \"e3\", \"aggregate_type\": \"t\", \"aggregate_id\": "
                         "\"1\", \"event_type\": \"x\", \"payload\": 42, \"headers\": null}";
    assert_int_equal(pb_cdc_event_from_message(scalar, strlen(scalar), &e, &err), PB_OK);
    assert_string_equal(e.ev.payload, "42");
    assert_null(e.ev.headers);
    assert_null(e.ev.destination);
    assert_int_equal(e.ev.sequence, 0);
    pb_cdc_event_free(&e);

    /* broken structure: refused, never read past the end */
    const char *bad[] = {
        "{\"event_id\": \"e\", \"aggregate_type\": \"t\", \"aggregate_id\": \"1\", "
        "\"event_type\": \"x\", \"payload\": {\"a\": [1, 2}}",
        "{\"event_id\": \"e\", \"aggregate_type\": \"t\", \"aggregate_id\": \"1\", "
        "\"event_type\": \"x\", \"payload\": {\"a\": \"unterminated}",
        "{\"event_id\": \"e\", \"aggregate_type\": \"t\", \"aggregate_id\": \"1\", "
        "\"event_type\": \"x\", \"payload\": ",
        "{\"event_id\": 5, \"aggregate_type\": \"t\", \"aggregate_id\": \"1\", "
        "\"event_type\": \"x\", \"payload\": {}}",
        "{\"event_id\": \"e\\u0000\", \"aggregate_type\": \"t\", \"aggregate_id\": \"1\", "
        "\"event_type\": \"x\", \"payload\": {}}",
        "{\"event_id\" \"e\"}",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(pb_cdc_event_from_message(bad[i], strlen(bad[i]), &e, &err), PB_FATAL);
}

static void relation_then_insert_maps_by_name(void **state)
{
    (void)state;
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    pb_error_t err;
    pb_pgo_msg_t m;
    wire_t w;
    relation(&w, 16385, cols_v1, 13);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_RELATION);
    const pb_pgo_relation_t *rel = pb_pgo_relation_lookup(&dec, 16385);
    assert_non_null(rel);
    assert_string_equal(rel->relname, "outbox");
    pb_cdc_outbox_map_t map;
    assert_int_equal(pb_cdc_outbox_map(rel, &map, &err), PB_OK);

    insert_v1(&w, 16385, "42", "A-1");
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_INSERT);
    pb_cdc_event_t e;
    assert_int_equal(pb_cdc_event_from_insert(&map, &m, &e, &err), PB_OK);
    assert_int_equal(e.ev.id, 42);
    assert_string_equal(e.ev.aggregate_id, "A-1");
    assert_string_equal(e.ev.event_type, "order.paid.v1");
    assert_string_equal(e.ev.payload, "{\"amount\": 5}");
    assert_int_equal(e.ev.payload_len, 13);
    assert_string_equal(e.ev.headers, "{\"trace\": \"t1\"}");
    assert_null(e.ev.destination);
    assert_true(e.ev.created_at_us == 1796036614123456LL);
    pb_cdc_event_free(&e);

    /* the table is altered: a column added in the middle of the relation's list */
    const char *cols_v2[14];
    for (int i = 0, j = 0; i < 14; i++)
        cols_v2[i] = i == 5 ? "note" : cols_v1[j++];
    relation(&w, 16385, cols_v2, 14);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    rel = pb_pgo_relation_lookup(&dec, 16385);
    assert_int_equal(rel->ncols, 14);
    assert_int_equal(pb_cdc_outbox_map(rel, &map, &err), PB_OK);
    assert_int_equal(map.payload, 6);
    pb_pgo_decoder_free(&dec);
}

static void bad_input_is_an_error(void **state)
{
    (void)state;
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    pb_error_t err;
    pb_pgo_msg_t m;
    wire_t w;
    /* insert before any relation */
    insert_v1(&w, 999, "1", "x");
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "before its Relation"));
    /* every truncation of a valid relation and insert fails cleanly */
    relation(&w, 16385, cols_v1, 13);
    wire_t full = w;
    for (size_t cut = 0; cut < full.n; cut++)
        assert_int_equal(pb_pgo_decode(&dec, (const char *)full.b, cut, &m, &err), PB_FATAL);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)full.b, full.n, &m, &err), PB_OK);
    insert_v1(&w, 16385, "1", "x");
    full = w;
    for (size_t cut = 0; cut < full.n; cut++)
        assert_int_equal(pb_pgo_decode(&dec, (const char *)full.b, cut, &m, &err), PB_FATAL);
    /* unknown message type */
    w.n = 0;
    w_u8(&w, 'Z');
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_FATAL);
    /* a relation missing a required column cannot be mapped */
    const char *cols_bad[] = {"id", "event_id", "aggregate_type", "aggregate_id", "payload"};
    relation(&w, 20000, cols_bad, 5);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    pb_cdc_outbox_map_t map;
    assert_int_equal(pb_cdc_outbox_map(pb_pgo_relation_lookup(&dec, 20000), &map, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, "event_type"));
    pb_pgo_decoder_free(&dec);
}

static void parses_timestamps(void **state)
{
    (void)state;
    int64_t us;
    assert_true(pb_parse_timestamptz("2000-01-01 00:00:00+00", 22, &us));
    assert_true(us == 946684800000000LL);
    assert_true(pb_parse_timestamptz("2000-01-01 02:00:00.5+02", 24, &us));
    assert_true(us == 946684800500000LL);
    assert_true(pb_parse_timestamptz("1999-12-31 19:30:00-04:30", 25, &us));
    assert_true(us == 946684800000000LL);
    assert_false(pb_parse_timestamptz("yesterday", 9, &us));
    /* a leap day, a date past 2038, an offset with seconds, microseconds */
    assert_true(pb_parse_timestamptz("2024-02-29 12:00:00+00", 22, &us));
    assert_true(us == 1709208000000000LL);
    assert_true(pb_parse_timestamptz("2100-03-01 00:00:00.000001+00", 29, &us));
    assert_true(us == 4107542400000001LL);
    assert_true(pb_parse_timestamptz("1970-01-01 05:30:15+05:30:15", 28, &us));
    assert_true(us == 0);
    assert_true(pb_parse_timestamptz("1969-12-31 23:59:59.75+00", 25, &us));
    assert_true(us == -250000LL);
    /* what PostgreSQL never writes for a timestamptz, or writes for a date before the era */
    assert_false(pb_parse_timestamptz("2024-02-29 12:00:00+00 BC", 25, &us));
    assert_false(pb_parse_timestamptz("2024-13-01 12:00:00+00", 22, &us));
    assert_false(pb_parse_timestamptz("2024-02-29 12:00:00.+00", 23, &us));
    assert_false(pb_parse_timestamptz("2024-02-29 12:00", 16, &us));
    assert_false(pb_parse_timestamptz("2024-02-29 12:00:00+0", 21, &us));
}

/* Schema version 16: available_at and expires_at, from an outbox row (timestamptz text, NULL
 * for none) and from a postbox.emit message (unix microseconds, absent for none); a time before
 * 1970 is long due (available_at) or long past (expires_at). */
static void times_of_an_event(void **state)
{
    (void)state;
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    pb_error_t err;
    pb_pgo_msg_t m;
    wire_t w;
    const char *cols[15];
    for (int i = 0; i < 13; i++)
        cols[i] = cols_v1[i];
    cols[13] = "available_at";
    cols[14] = "expires_at";
    relation(&w, 16400, cols, 15);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    pb_cdc_outbox_map_t map;
    assert_int_equal(pb_cdc_outbox_map(pb_pgo_relation_lookup(&dec, 16400), &map, &err), PB_OK);
    assert_int_equal(map.available_at, 13);
    assert_int_equal(map.expires_at, 14);

    const char *times[3][2] = {{"2026-12-02 09:00:00+00", NULL},
                               {NULL, "2026-11-30 11:03:35.5+00"},
                               {NULL, "1969-12-31 23:59:59+00"}};
    int64_t want[3][2] = {{1796202000000000LL, 0}, {0, 1796036615500000LL}, {0, 1}};
    for (int k = 0; k < 3; k++) {
        insert_v1(&w, 16400, "7", "A-1");
        w.b[6] = 0, w.b[7] = 15; /* 15 columns */
        for (int c = 0; c < 2; c++) {
            if (times[k][c])
                w_text(&w, times[k][c]);
            else
                w_u8(&w, 'n');
        }
        assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
        pb_cdc_event_t e;
        assert_int_equal(pb_cdc_event_from_insert(&map, &m, &e, &err), PB_OK);
        assert_true(e.ev.available_at_us == want[k][0]);
        assert_true(e.ev.expires_at_us == want[k][1]);
        pb_cdc_event_free(&e);
    }
    pb_pgo_decoder_free(&dec);

    const char *json = "{\"event_id\":\"e1\",\"aggregate_type\":\"order\",\"aggregate_id\":\"7\","
                       "\"event_type\":\"t.v1\",\"payload\":{},\"available_at_us\":1796202000000000,"
                       "\"expires_at_us\":1796205600000000}";
    pb_cdc_event_t e;
    assert_int_equal(pb_cdc_event_from_message(json, strlen(json), &e, &err), PB_OK);
    assert_true(e.ev.available_at_us == 1796202000000000LL);
    assert_true(e.ev.expires_at_us == 1796205600000000LL);
    pb_cdc_event_free(&e);
    json = "{\"event_id\":\"e1\",\"aggregate_type\":\"order\",\"aggregate_id\":\"7\","
           "\"event_type\":\"t.v1\",\"payload\":{},\"expires_at_us\":-20}";
    assert_int_equal(pb_cdc_event_from_message(json, strlen(json), &e, &err), PB_OK);
    assert_true(e.ev.available_at_us == 0);
    assert_true(e.ev.expires_at_us == 1);
    pb_cdc_event_free(&e);
}


/* v1 (a message as outside a stream block) with xid inserted after its type byte, as inside one */
static void with_stream_xid(wire_t *out, const wire_t *v1, uint32_t xid)
{
    out->n = 0;
    w_u8(out, v1->b[0]);
    w_u32(out, xid);
    memcpy(out->b + out->n, v1->b + 1, v1->n - 1);
    out->n += v1->n - 1;
}

/* Protocol 2 with streaming: the bracket messages of a streamed transaction, and the xid that
 * the changes carry inside a stream block (and only there). */
static void decodes_streamed_transactions(void **state)
{
    (void)state;
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    pb_error_t err;
    pb_pgo_msg_t m;
    wire_t w;
    /* Stream Start: xid 700, first segment */
    w.n = 0;
    w_u8(&w, 'S');
    w_u32(&w, 700);
    w_u8(&w, 1);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_STREAM_START);
    assert_int_equal(m.u.stream_start.xid, 700);
    assert_true(m.u.stream_start.first_segment);
    assert_true(dec.in_stream);
    /* a Relation inside the block: xid 700 after the type byte */
    relation(&w, 16385, cols_v1, 13);
    wire_t with_xid;
    with_stream_xid(&with_xid, &w, 700);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)with_xid.b, with_xid.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_RELATION);
    assert_int_equal(m.xid, 700);
    assert_int_equal(m.u.relation.relid, 16385);
    /* an Insert of subtransaction 701 */
    insert_v1(&w, 16385, "42", "agg-1");
    with_stream_xid(&with_xid, &w, 701);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)with_xid.b, with_xid.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_INSERT);
    assert_int_equal(m.xid, 701);
    assert_int_equal(m.u.insert.relid, 16385);
    assert_int_equal(m.u.insert.cols[0].len, 2);
    assert_memory_equal(m.u.insert.cols[0].data, "42", 2);
    /* every truncation of it fails cleanly, the xid included */
    for (size_t cut = 0; cut < with_xid.n; cut++)
        assert_int_equal(pb_pgo_decode(&dec, (const char *)with_xid.b, cut, &m, &err), PB_FATAL);
    assert_true(dec.in_stream); /* a bad change does not end the block */
    /* a transactional Message inside the block */
    w.n = 0;
    w_u8(&w, 'M');
    w_u32(&w, 700);
    w_u8(&w, 1);
    w_u64(&w, 0x1234);
    w_str(&w, "postbox");
    w_u32(&w, 2);
    w_u8(&w, '{');
    w_u8(&w, '}');
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_MESSAGE);
    assert_int_equal(m.xid, 700);
    assert_true(m.u.message.transactional);
    assert_string_equal(m.u.message.prefix, "postbox");
    assert_int_equal(m.u.message.len, 2);
    /* Stream Stop */
    w.n = 0;
    w_u8(&w, 'E');
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_STREAM_STOP);
    assert_false(dec.in_stream);
    /* outside the block the same Insert has no xid: read as version 1 */
    insert_v1(&w, 16385, "43", "agg-1");
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.xid, 0);
    assert_memory_equal(m.u.insert.cols[0].data, "43", 2);
    /* Stream Abort of subtransaction 701 */
    w.n = 0;
    w_u8(&w, 'A');
    w_u32(&w, 700);
    w_u32(&w, 701);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_STREAM_ABORT);
    assert_int_equal(m.u.stream_abort.xid, 700);
    assert_int_equal(m.u.stream_abort.subxid, 701);
    /* a later block: not the first segment */
    w.n = 0;
    w_u8(&w, 'S');
    w_u32(&w, 700);
    w_u8(&w, 0);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_false(m.u.stream_start.first_segment);
    w.n = 0;
    w_u8(&w, 'E');
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    /* Stream Commit */
    w.n = 0;
    w_u8(&w, 'c');
    w_u32(&w, 700);
    w_u8(&w, 0);
    w_u64(&w, 0x100000010ULL);
    w_u64(&w, 0x100000040ULL);
    w_u64(&w, 777);
    assert_int_equal(pb_pgo_decode(&dec, (const char *)w.b, w.n, &m, &err), PB_OK);
    assert_int_equal(m.kind, PB_PGO_STREAM_COMMIT);
    assert_int_equal(m.u.stream_commit.xid, 700);
    assert_true(m.u.stream_commit.commit_lsn == 0x100000010ULL);
    assert_true(m.u.stream_commit.end_lsn == 0x100000040ULL);
    assert_true(m.u.stream_commit.commit_time == 777);
    pb_pgo_decoder_free(&dec);
}

/* Decoding the first len bytes of w fails with an error containing text. */
static void decode_fails(pb_pgo_decoder_t *dec, const wire_t *w, size_t len, const char *text)
{
    pb_pgo_msg_t m;
    pb_error_t err;
    assert_int_equal(pb_pgo_decode(dec, (const char *)w->b, len, &m, &err), PB_FATAL);
    assert_non_null(strstr(err.msg, text));
}

/* Stream messages cut short, out of place or with a zero xid: a clear error naming them. */
static void bad_stream_messages_are_errors(void **state)
{
    (void)state;
    pb_pgo_decoder_t dec;
    pb_pgo_decoder_init(&dec);
    pb_error_t err;
    pb_pgo_msg_t m;
    wire_t start = {.n = 0}, stop = {.n = 0}, commit = {.n = 0}, abort_ = {.n = 0}, w;
    w_u8(&start, 'S');
    w_u32(&start, 900);
    w_u8(&start, 1);
    w_u8(&stop, 'E');
    w_u8(&commit, 'c');
    w_u32(&commit, 900);
    w_u8(&commit, 0);
    w_u64(&commit, 1);
    w_u64(&commit, 2);
    w_u64(&commit, 3);
    w_u8(&abort_, 'A');
    w_u32(&abort_, 900);
    w_u32(&abort_, 900);
    /* truncated (outside a block, where Start, Commit and Abort belong) */
    for (size_t cut = 1; cut < start.n; cut++) {
        decode_fails(&dec, &start, cut, "truncated Stream Start");
        assert_false(dec.in_stream);
    }
    for (size_t cut = 1; cut < commit.n; cut++) {
        decode_fails(&dec, &commit, cut, "truncated Stream Commit");
    }
    for (size_t cut = 1; cut < abort_.n; cut++) {
        decode_fails(&dec, &abort_, cut, "truncated Stream Abort");
    }
    /* out of place */
    decode_fails(&dec, &stop, stop.n, "Stream Stop outside a stream block");
    assert_int_equal(pb_pgo_decode(&dec, (const char *)start.b, start.n, &m, &err), PB_OK);
    decode_fails(&dec, &start, start.n, "Stream Start inside a stream block");
    decode_fails(&dec, &commit, commit.n, "Stream Commit inside a stream block");
    decode_fails(&dec, &abort_, abort_.n, "Stream Abort inside a stream block");
    w.n = 0;
    w_u8(&w, 'B');
    w_u64(&w, 1);
    w_u64(&w, 2);
    w_u32(&w, 3);
    decode_fails(&dec, &w, w.n, "Begin inside a stream block");
    /* a change in a block with xid 0, or too short to hold its xid */
    w.n = 0;
    w_u8(&w, 'I');
    w_u32(&w, 0);
    decode_fails(&dec, &w, w.n, "xid 0");
    decode_fails(&dec, &w, 3, "no xid");
    assert_int_equal(pb_pgo_decode(&dec, (const char *)stop.b, stop.n, &m, &err), PB_OK);
    /* zero xids in the bracket messages */
    w.n = 0;
    w_u8(&w, 'A');
    w_u32(&w, 900);
    w_u32(&w, 0);
    decode_fails(&dec, &w, w.n, "subtransaction xid 0");
    w.n = 0;
    w_u8(&w, 'S');
    w_u32(&w, 0);
    w_u8(&w, 1);
    decode_fails(&dec, &w, w.n, "Stream Start message with xid 0");
    assert_false(dec.in_stream);
    pb_pgo_decoder_free(&dec);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(begin_commit_and_message),
        cmocka_unit_test(message_payload_passes_through),
        cmocka_unit_test(relation_then_insert_maps_by_name),
        cmocka_unit_test(bad_input_is_an_error),
        cmocka_unit_test(parses_timestamps),
        cmocka_unit_test(times_of_an_event),
        cmocka_unit_test(decodes_streamed_transactions),
        cmocka_unit_test(bad_stream_messages_are_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
