/*
 * h2storm: a join storm against one consumer group, in C (libnghttp2), for bench/storm.py.
 *
 *   h2storm SPECFILE
 *
 * N members join one group at once (or at JOIN_RATE per second) and then behave like Kafka's
 * Java consumer (ConsumerMembershipManager / ConsumerHeartbeatRequestManager, 4.x):
 *
 * - one heartbeat in flight per member; the join sends every field (epoch 0, a client-made
 *   member id, the subscribed topic names, rebalance.timeout = max.poll.interval.ms 300 s, an
 *   empty owned list); later heartbeats send only group, member id and epoch, plus the owned
 *   partitions when they changed since the last one the server saw;
 * - a response carrying an assignment that differs from what the member owns is reconciled at
 *   once (revoked partitions dropped, new ones taken) and acknowledged by an immediate
 *   heartbeat carrying the new owned set; otherwise the next heartbeat goes out
 *   heartbeat_interval_ms after the response;
 * - FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: the member loses its partitions and re-joins at
 *   once with epoch 0 and the same member id; COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
 *   COORDINATOR_LOAD_IN_PROGRESS and calls that end without an answer: retried after a back-off
 *   of retry.backoff.ms (100 ms) doubling to retry.backoff.max.ms (1 s), +-20% jitter, with
 *   every field sent again; any other error code stops the run (it is a bug to report);
 * - request.timeout.ms (30 s): a call unanswered by then is reset (RST_STREAM CANCEL) by the
 *   client and counted as "client deadline".
 *
 * A small unrelated probe group (its own connection) is joined and reconciled first; during
 * the storm its members heartbeat every PROBE_INTERVAL_MS (measured from each send) and their
 * latency is recorded. The storm converges when every member has joined, all are at the same
 * epoch, each has had its owned set acknowledged, and every partition of the group is owned
 * by exactly one member. The run ends SETTLE_MS after convergence (if it stays converged), or
 * MAX_SECONDS after the storm began. Every response is decoded and checked.
 *
 * SPECFILE: "key value..." lines: host, port, group, members, connections, join_rate,
 * rebalance_timeout_ms, request_timeout_ms, settle_ms, max_seconds, probe_group,
 * probe_members, probe_interval_ms, and one "topic GROUPKIND NAME HEXID PARTITIONS" line per
 * topic (GROUPKIND: storm or probe). Prints one JSON object.
 *
 * The member model (spec, behaviour on answers, convergence, output) is storm.h, shared with
 * kafkastorm.c (the same storm over the Kafka protocol); this file is the gRPC transport.
 */
#include "h2client.h"

#define STORM_NAME "h2storm"
#define STORM_MEMBER_TRANSPORT                                                                   \
    int32_t stream;                                                                              \
    uint8_t *req; size_t req_len, req_cap, sent;                                                 \
    uint8_t *resp; size_t resp_len, resp_cap;                                                    \
    int http_status, grpc_status;
#include "storm.h"

#include <sys/epoll.h>

#define PATH "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"

struct conn {
    struct h2conn h;
    int alive, dirty;
    double reconnect_at;
};

static char g_authority[520];
static struct conn *g_conns;
static nghttp2_session_callbacks *g_cbs;
static const char *UNANSWERED_NAMES[MAX_CAUSES] = {
    "client deadline", "connection lost", "HTTP status not 200", "no response message",
    "malformed response", "grpc-status 1 CANCELLED", "grpc-status 4 DEADLINE_EXCEEDED",
    "grpc-status 8 RESOURCE_EXHAUSTED", "grpc-status 14 UNAVAILABLE", "other grpc-status",
    "RST_STREAM CANCEL", "RST_STREAM REFUSED_STREAM", "other RST_STREAM", NULL};

static void put_varint(uint8_t **p, uint64_t v) {
    while (v >= 0x80) { *(*p)++ = (uint8_t)(v | 0x80); v >>= 7; }
    *(*p)++ = (uint8_t)v;
}

static int varint_len(uint64_t v) { int n = 1; while (v >= 0x80) { v >>= 7; n++; } return n; }

static void put_bytes_field(uint8_t **p, int field, const void *data, size_t len) {
    put_varint(p, (uint64_t)field << 3 | 2);
    put_varint(p, len);
    memcpy(*p, data, len);
    *p += len;
}

/* ---------------------------------------------------------------- requests */

static void build_request(struct member *m) {
    struct group *g = m->g;
    int carry = m->full || m->send_owned;
    size_t need = 64 + strlen(g->id) + 10 * (size_t)m->n_owned + 40 * (size_t)g_ntopics;
    for (int t = 0; t < g_ntopics; t++) need += strlen(g_topics[t].name) + 4;
    reserve(&m->req, &m->req_cap, need);
    uint8_t *p = m->req + 5; /* the gRPC prefix is written last */
    put_bytes_field(&p, 1, g->id, strlen(g->id));
    put_bytes_field(&p, 2, m->id, strlen(m->id));
    if (m->epoch) { put_varint(&p, 3 << 3 | 0); put_varint(&p, (uint64_t)(int64_t)m->epoch); }
    if (m->full) {
        put_varint(&p, 6 << 3 | 0);
        put_varint(&p, (uint64_t)g_rebalance_timeout_ms);
        size_t names = 0;
        for (int t = 0; t < g_ntopics; t++)
            if (g_topics[t].kind == g->kind) {
                size_t l = strlen(g_topics[t].name);
                names += 1 + varint_len(l) + l;
            }
        put_varint(&p, 7 << 3 | 2);
        put_varint(&p, names);
        for (int t = 0; t < g_ntopics; t++)
            if (g_topics[t].kind == g->kind) put_bytes_field(&p, 1, g_topics[t].name, strlen(g_topics[t].name));
    }
    if (carry) {
        /* TopicPartitionsList { items: TopicPartitions { topic_id, packed partitions } } */
        uint8_t *list = p + 6; /* room for the list's tag and a length of up to 5 bytes */
        uint8_t *q = list;
        for (int i = 0; i < m->n_owned;) {
            int t = topic_of_partition(m->owned[i]), j = i;
            size_t packed = 0;
            while (j < m->n_owned && m->owned[j] < g_topics[t].base + g_topics[t].partitions) {
                packed += varint_len(m->owned[j] - g_topics[t].base);
                j++;
            }
            size_t item = 2 + 16 + 1 + varint_len(packed) + packed;
            put_varint(&q, 1 << 3 | 2);
            put_varint(&q, item);
            put_bytes_field(&q, 1, g_topics[t].id, 16);
            put_varint(&q, 2 << 3 | 2);
            put_varint(&q, packed);
            for (int k = i; k < j; k++) put_varint(&q, m->owned[k] - g_topics[t].base);
            i = j;
        }
        size_t len = q - list;
        put_varint(&p, 10 << 3 | 2);
        put_varint(&p, len);
        memmove(p, list, len);
        p += len;
    }
    size_t n = p - (m->req + 5);
    m->req[0] = 0;
    m->req[1] = n >> 24; m->req[2] = n >> 16; m->req[3] = n >> 8; m->req[4] = n;
    m->req_len = n + 5;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
    (void)s; (void)id; (void)ud;
    struct member *m = src->ptr;
    size_t left = m->req_len - m->sent, n = left < len ? left : len;
    memcpy(buf, m->req + m->sent, n);
    m->sent += n;
    if (m->sent == m->req_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void lose_conn(int i, double now);

static void send_request(int mi, double now) {
    struct member *m = &g_members[mi];
    struct conn *c = &g_conns[m->conn];
    if (!c->alive) { schedule(mi, now + 0.05); return; }
    build_request(m);
    nghttp2_nv hdrs[] = {
#define NV(k, v) {(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
        NV(":method", "POST"), NV(":scheme", "http"), NV(":authority", g_authority), NV(":path", PATH),
        NV("content-type", "application/grpc"), NV("te", "trailers"), NV("client-id", "h2storm"),
#undef NV
    };
    nghttp2_data_provider prd;
    prd.source.ptr = m;
    prd.read_callback = read_body;
    m->sent = 0;
    m->resp_len = 0;
    m->http_status = 0;
    m->grpc_status = -1;
    int32_t id = nghttp2_submit_request(c->h.session, NULL, hdrs, sizeof hdrs / sizeof hdrs[0], &prd, m);
    if (id < 0) { /* e.g. the server sent GOAWAY: a new connection */
        lose_conn(m->conn, now);
        schedule(mi, now + 0.05);
        return;
    }
    m->stream = id;
    sending(m, now);
    c->dirty = 1;
}

/* ---------------------------------------------------------------- responses */

/* Parse TopicPartitions items of an Assignment's assigned list into global indexes (g_tmp). */
static int parse_assignment(const uint8_t *p, const uint8_t *end) {
    g_tmp_n = 0;
    while (p < end) {
        uint64_t key, len;
        if (!read_varint(&p, end, &key)) return 0;
        if (key != (1 << 3 | 2)) { if (!skip_field(&p, end, key & 7)) return 0; continue; }
        if (!read_varint(&p, end, &len) || len > (uint64_t)(end - p)) return 0;
        const uint8_t *q = p, *qend = p + len;
        p += len;
        const uint8_t *tid = NULL;
        size_t tid_len = 0;
        const uint8_t *parts = NULL, *parts_end = NULL;
        int first_unpacked = g_tmp_n;
        while (q < qend) {
            uint64_t k, v;
            if (!read_varint(&q, qend, &k)) return 0;
            if (k == (1 << 3 | 2)) {
                if (!read_varint(&q, qend, &v) || v > (uint64_t)(qend - q)) return 0;
                tid = q; tid_len = v; q += v;
            } else if (k == (2 << 3 | 2)) {
                if (!read_varint(&q, qend, &v) || v > (uint64_t)(qend - q)) return 0;
                parts = q; parts_end = q + v; q += v;
            } else if (k == (2 << 3 | 0)) { /* unpacked: topic id may come later; stash raw */
                if (!read_varint(&q, qend, &v)) return 0;
                tmp_push((int)v);
            } else if (!skip_field(&q, qend, k & 7)) {
                return 0;
            }
        }
        int t = find_topic(tid, tid_len);
        if (t < 0) return 0;
        for (int i = first_unpacked; i < g_tmp_n; i++) {
            if (g_tmp[i] < 0 || g_tmp[i] >= g_topics[t].partitions) return 0;
            g_tmp[i] += g_topics[t].base;
        }
        while (parts && parts < parts_end) {
            uint64_t v;
            if (!read_varint(&parts, parts_end, &v) || v >= (uint64_t)g_topics[t].partitions) return 0;
            tmp_push(g_topics[t].base + (int)v);
        }
    }
    return 1;
}

static int parse_response(const uint8_t *p, size_t len, struct response *r) {
    const uint8_t *end = p + len;
    memset(r, 0, sizeof *r);
    g_tmp_n = 0;
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return 0;
        unsigned field = key >> 3, wt = key & 7;
        if (wt == 0 && (field == 1 || field == 4 || field == 5 || field == 7)) {
            if (!read_varint(&p, end, &v)) return 0;
            if (field == 1) r->error_code = (int32_t)v;
            if (field == 4) r->member_epoch = (int32_t)v;
            if (field == 5) r->hb_ms = (int32_t)v;
        } else if (wt == 2 && (field == 2 || field == 3 || field == 6)) {
            if (!read_varint(&p, end, &v) || v > (uint64_t)(end - p)) return 0;
            if (field == 2) snprintf(r->message, sizeof r->message, "%.*s", (int)v, (const char *)p);
            if (field == 3) snprintf(r->member_id, sizeof r->member_id, "%.*s", (int)v, (const char *)p);
            if (field == 6) {
                r->has_assignment = 1;
                if (!parse_assignment(p, p + v)) return 0;
            }
            p += v;
        } else if (!skip_field(&p, end, wt)) {
            return 0;
        }
    }
    return 1;
}

/* A call that ended with grpc-status 0: its message decoded and handled. */
static void on_answer(int mi, double now) {
    struct member *m = &g_members[mi];
    int mlen = m->resp_len >= 5 ? (int)((uint32_t)m->resp[1] << 24 | m->resp[2] << 16 | m->resp[3] << 8 | m->resp[4]) : -1;
    struct response r;
    if (m->resp_len < 5) { unanswered(mi, 3, now); return; }
    if (m->resp[0] != 0 || (size_t)mlen + 5 != m->resp_len || !parse_response(m->resp + 5, mlen, &r)) {
        unanswered(mi, 4, now);
        return;
    }
    on_response(mi, &r, now);
}

/* ---------------------------------------------------------------- nghttp2 callbacks */

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
    (void)flags; (void)ud;
    struct member *m = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
    if (!m) return 0;
    char v[32];
    size_t k = vlen < sizeof v - 1 ? vlen : sizeof v - 1;
    memcpy(v, value, k);
    v[k] = 0;
    if (nlen == 7 && !memcmp(name, ":status", 7)) m->http_status = atoi(v);
    else if (nlen == 11 && !memcmp(name, "grpc-status", 11)) m->grpc_status = atoi(v);
    return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud) {
    (void)flags; (void)ud;
    struct member *m = nghttp2_session_get_stream_user_data(s, id);
    if (!m) return 0;
    if (m->resp_len + len > (64u << 20)) return 0; /* larger than 64 MiB: reported as malformed */
    reserve(&m->resp, &m->resp_cap, m->resp_len + len);
    memcpy(m->resp + m->resp_len, data, len);
    m->resp_len += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
    (void)ud;
    struct member *m = nghttp2_session_get_stream_user_data(s, id);
    if (!m || !m->inflight || m->stream != id) return 0;
    double now = now_s();
    int mi = (int)(m - g_members);
    m->stream = 0;
    if (m->timed_out) unanswered(mi, 0, now);
    else if (code == NGHTTP2_CANCEL) unanswered(mi, 10, now);
    else if (code == NGHTTP2_REFUSED_STREAM) unanswered(mi, 11, now);
    else if (code != NGHTTP2_NO_ERROR) unanswered(mi, 12, now);
    else if (m->http_status != 200) unanswered(mi, 2, now);
    else if (m->grpc_status == 1) unanswered(mi, 5, now);
    else if (m->grpc_status == 4) unanswered(mi, 6, now);
    else if (m->grpc_status == 8) unanswered(mi, 7, now);
    else if (m->grpc_status == 14) unanswered(mi, 8, now);
    else if (m->grpc_status != 0) unanswered(mi, 9, now);
    else on_answer(mi, now);
    return 0;
}

/* ---------------------------------------------------------------- connections */

static int open_conn(int i) {
    struct conn *c = &g_conns[i];
    c->h.fd = connect_to(g_host, g_port);
    if (c->h.fd < 0) return -1;
    if (h2_session_start(&c->h, g_cbs)) return -1;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)i};
    epoll_ctl(g_epoll, EPOLL_CTL_ADD, c->h.fd, &ev);
    c->alive = 1;
    c->dirty = 1;
    return 0;
}

static void lose_conn(int i, double now) {
    struct conn *c = &g_conns[i];
    epoll_ctl(g_epoll, EPOLL_CTL_DEL, c->h.fd, NULL);
    close(c->h.fd);
    nghttp2_session_del(c->h.session);
    c->alive = 0;
    c->reconnect_at = now + 0.1;
    for (int mi = 0; mi < g_nmembers; mi++) {
        struct member *m = &g_members[mi];
        if (m->conn == i && m->inflight) {
            m->stream = 0;
            unanswered(mi, 1, now);
        }
    }
}

/* ---------------------------------------------------------------- deadlines */

static void inflight_deadlines(double now) {
    for (int mi = 0; mi < g_nmembers; mi++) {
        struct member *m = &g_members[mi];
        if (m->inflight && !m->timed_out && now - m->t0 > g_request_timeout) {
            m->timed_out = 1;
            struct conn *c = &g_conns[m->conn];
            nghttp2_submit_rst_stream(c->h.session, NGHTTP2_FLAG_NONE, m->stream, NGHTTP2_CANCEL);
            c->dirty = 1;
        }
    }
}

/* ---------------------------------------------------------------- the event loop */

static void flush_dirty(double now) {
    for (int i = 0; i < g_nconn + 1; i++) {
        struct conn *c = &g_conns[i];
        if (c->alive && c->dirty) {
            c->dirty = 0;
            if (nghttp2_session_send(c->h.session) < 0) lose_conn(i, now);
        }
    }
}

/* Run until ``done`` says so or ``until`` passes. Returns 1 if done. */
static int run(int (*done)(double), double until) {
    struct epoll_event evs[256];
    double last_check = 0, last_deadlines = 0;
    for (long round = 0; round < 2000000000L; round++) {
        double now = now_s();
        if (g_fatal[0]) return 0;
        if (now > until) return 0;
        for (int i = 0; i < g_nconn + 1; i++)
            if (!g_conns[i].alive && now >= g_conns[i].reconnect_at && open_conn(i)) g_conns[i].reconnect_at = now + 0.5;
        send_due(now, send_request);
        flush_dirty(now);
        int n = epoll_wait(g_epoll, evs, 256, (int)due_in_ms(now, 10));
        now = now_s();
        for (int k = 0; k < n; k++) {
            int i = (int)evs[k].data.u32;
            if (!g_conns[i].alive) continue;
            if (h2_pump(&g_conns[i].h)) lose_conn(i, now);
        }
        flush_dirty(now);
        if (now - last_deadlines > 0.1) { inflight_deadlines(now); last_deadlines = now; }
        if (now - last_check > 0.005) {
            last_check = now;
            if (done(now)) return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int bad = storm_setup(argc, argv);
    if (bad) return bad;
    snprintf(g_authority, sizeof g_authority, "%s:%s", g_host, g_port);

    nghttp2_session_callbacks_new(&g_cbs);
    nghttp2_session_callbacks_set_send_callback(g_cbs, h2_on_send);
    nghttp2_session_callbacks_set_on_header_callback(g_cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g_cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(g_cbs, on_close);
    g_epoll = epoll_create1(0);
    g_conns = calloc(g_nconn + 1, sizeof *g_conns);
    for (int i = 0; i < g_nconn + 1; i++)
        if (open_conn(i)) { fprintf(stderr, "h2storm: cannot connect to %s:%s\n", g_host, g_port); return 1; }

    return storm_phases(run);
}
