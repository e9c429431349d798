/*
 * h2hb: a small gRPC unary load generator in C (libnghttp2), for bench/service.py.
 *
 * A Python gRPC client spends 140-220 us of CPU per call on this machine, about as much as
 * the server it measures, and both share the same two cores; this one spends about 35 us,
 * so the measured rate is the server's.
 *
 *   h2hb HOST PORT PATH SECONDS CONNECTIONS REQFILE [INTERVAL_MS]
 *
 * REQFILE holds one serialized request per member: [uint32 little-endian length][bytes].
 * Member i uses connection i % CONNECTIONS (HTTP/2 multiplexes the members of a connection)
 * and has at most one call outstanding: without INTERVAL_MS, when a call completes the member
 * sends its next one at once (the server's saturation rate); with INTERVAL_MS, each member
 * sends a call every INTERVAL_MS (measured from the previous send, or at once if the answer
 * came later), like a consumer's heartbeat interval: a fixed offered rate of
 * members / INTERVAL_MS. Until SECONDS have passed. Every response is checked: HTTP 200, grpc-status 0, and
 * field 1 of the response message (error_code) absent or 0; the first failure stops the run.
 * Prints one JSON line: calls, failures, seconds, per_s, client_cpu_us, p50_ms, p99_ms, error.
 * Every loop is bounded: the run ends SECONDS + 30 s after it starts whatever happens.
 */
#include "h2client.h"

#include <stdlib.h>
#include <sys/epoll.h>

#define HIST_US 2000000 /* latency histogram: 1 us buckets up to 2 s */

struct member {
    struct h2conn *conn;
    uint8_t *frame; /* 5-byte gRPC prefix + message */
    size_t frame_len, sent;
    double t0, due; /* due: when the next call goes out (interval mode; 0: none waiting) */
    int http_status, grpc_status;
    uint8_t resp[4096];
    size_t resp_len;
};

static char g_authority[300], g_path[512];
static double g_stop_at, g_hard_stop;
static long g_calls, g_failures, g_submitted;
static char g_error[512];
static double g_interval; /* seconds between a member's sends; 0: back to back */
static uint32_t *g_hist;
static long g_hist_over;

static void fail(const char *msg) {
    if (!g_failures) snprintf(g_error, sizeof g_error, "%s", msg);
    g_failures++;
}

/* error_code (field 1, varint) of a protobuf message; -999 if malformed */
static long error_code(const uint8_t *p, size_t n) {
    const uint8_t *end = p + n;
    while (p < end) {
        uint64_t key, v;
        if (!read_varint(&p, end, &key)) return -999;
        if (key == (1 << 3 | 0)) return read_varint(&p, end, &v) ? (int32_t)v : -999;
        if (!skip_field(&p, end, key & 7)) return -999;
    }
    return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
    (void)s; (void)id; (void)ud;
    struct member *m = src->ptr;
    size_t left = m->frame_len - m->sent, n = left < len ? left : len;
    memcpy(buf, m->frame + m->sent, n);
    m->sent += n;
    if (m->sent == m->frame_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static void submit(struct member *m) {
    nghttp2_nv hdrs[] = {
#define NV(k, v) {(uint8_t *)(k), (uint8_t *)(v), sizeof(k) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE}
        NV(":method", "POST"), NV(":scheme", "http"), NV(":authority", g_authority), NV(":path", g_path),
        NV("content-type", "application/grpc"), NV("te", "trailers"),
#undef NV
    };
    nghttp2_data_provider prd;
    prd.source.ptr = m;
    prd.read_callback = read_body;
    m->sent = 0;
    m->resp_len = 0;
    m->http_status = 0;
    m->grpc_status = -1;
    m->t0 = now_s();
    g_submitted++;
    if (nghttp2_submit_request(m->conn->session, NULL, hdrs, sizeof hdrs / sizeof hdrs[0], &prd, m) < 0)
        fail("nghttp2_submit_request failed");
}

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
    if (m->resp_len + len > sizeof m->resp) { fail("response larger than 4 KiB"); return 0; }
    memcpy(m->resp + m->resp_len, data, len);
    m->resp_len += len;
    return 0;
}

static int on_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
    (void)ud;
    struct member *m = nghttp2_session_get_stream_user_data(s, id);
    if (!m) return 0;
    double t = now_s();
    long us = (long)((t - m->t0) * 1e6);
    if (us >= 0 && us < HIST_US) g_hist[us]++; else g_hist_over++;
    g_calls++;
    char msg[256];
    if (code != NGHTTP2_NO_ERROR) {
        snprintf(msg, sizeof msg, "stream reset, HTTP/2 error %u", code); fail(msg);
    } else if (m->http_status != 200) {
        snprintf(msg, sizeof msg, "HTTP status %d", m->http_status); fail(msg);
    } else if (m->grpc_status != 0) {
        snprintf(msg, sizeof msg, "grpc-status %d", m->grpc_status); fail(msg);
    } else if (m->resp_len < 5) {
        fail("no response message");
    } else {
        uint32_t n = (uint32_t)m->resp[1] << 24 | m->resp[2] << 16 | m->resp[3] << 8 | m->resp[4];
        long ec = n + 5 == m->resp_len ? error_code(m->resp + 5, n) : -999;
        if (ec) { snprintf(msg, sizeof msg, "error_code %ld in a response", ec); fail(msg); }
    }
    if (t < g_stop_at && !g_failures) {
        if (g_interval > 0) m->due = m->t0 + g_interval > t ? m->t0 + g_interval : t;
        else submit(m);
    }
    return 0;
}

/* Interval mode: send the calls that are due; the seconds until the next one is (-1: none). */
static double send_due(struct member *members, int nmem, double t) {
    double next = -1;
    for (int i = 0; i < nmem; i++) {
        struct member *m = &members[i];
        if (m->due <= 0) continue;
        if (m->due <= t) {
            m->due = 0;
            submit(m);
            nghttp2_session_send(m->conn->session);
        } else if (next < 0 || m->due - t < next) {
            next = m->due - t;
        }
    }
    return next;
}

int main(int argc, char **argv) {
    if (argc != 7 && argc != 8) {
        fprintf(stderr, "usage: h2hb HOST PORT PATH SECONDS CONNECTIONS REQFILE [INTERVAL_MS]\n");
        return 2;
    }
    const char *host = argv[1], *port = argv[2];
    double seconds = atof(argv[4]);
    int nconn = atoi(argv[5]);
    g_interval = argc == 8 ? atof(argv[7]) / 1000 : 0;
    snprintf(g_authority, sizeof g_authority, "%s:%s", host, port);
    snprintf(g_path, sizeof g_path, "%s", argv[3]);
    if (nconn < 1 || seconds <= 0) { fprintf(stderr, "h2hb: bad CONNECTIONS or SECONDS\n"); return 2; }

    FILE *f = fopen(argv[6], "rb");
    if (!f) { perror("h2hb: REQFILE"); return 2; }
    struct member *members = NULL;
    int nmem = 0;
    uint32_t len;
    while (fread(&len, 4, 1, f) == 1 && nmem < 100000) {
        members = realloc(members, sizeof *members * (nmem + 1));
        struct member *m = &members[nmem];
        memset(m, 0, sizeof *m);
        m->frame_len = len + 5;
        m->frame = malloc(m->frame_len);
        m->frame[0] = 0;
        m->frame[1] = len >> 24; m->frame[2] = len >> 16; m->frame[3] = len >> 8; m->frame[4] = len;
        if (fread(m->frame + 5, 1, len, f) != len) { fprintf(stderr, "h2hb: truncated REQFILE\n"); return 2; }
        nmem++;
    }
    fclose(f);
    if (!nmem) { fprintf(stderr, "h2hb: no requests\n"); return 2; }
    g_hist = calloc(HIST_US, sizeof *g_hist);

    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, h2_on_send);
    nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_close);

    int ep = epoll_create1(0);
    struct h2conn *conns = calloc(nconn, sizeof *conns);
    for (int i = 0; i < nconn; i++) {
        conns[i].fd = connect_to(host, port);
        if (conns[i].fd < 0) { fprintf(stderr, "h2hb: cannot connect to %s:%s\n", host, port); return 1; }
        if (h2_session_start(&conns[i], cbs)) { fprintf(stderr, "h2hb: nghttp2 session failed\n"); return 1; }
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &conns[i]};
        epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
    }
    double cpu0 = cpu_s();
    double t0 = now_s();
    g_stop_at = t0 + seconds;
    g_hard_stop = t0 + seconds + 30;
    for (int i = 0; i < nmem; i++) {
        members[i].conn = &conns[i % nconn];
        submit(&members[i]);
    }
    for (int i = 0; i < nconn; i++) nghttp2_session_send(conns[i].session);

    struct epoll_event evs[256];
    for (long round = 0; round < 1000000000L; round++) {
        double t = now_s();
        if (g_failures) break;
        if (t >= g_stop_at && g_calls >= g_submitted) break; /* every member's last call answered */
        if (t > g_hard_stop) { fail("hard time limit reached"); break; }
        int wait_ms = 100;
        if (g_interval > 0) {
            double next = send_due(members, nmem, t);
            if (next >= 0 && next * 1000 < wait_ms) wait_ms = (int)(next * 1000) + 1; /* never spin */
        }
        int n = epoll_wait(ep, evs, 256, wait_ms);
        for (int k = 0; k < n; k++) {
            struct h2conn *c = evs[k].data.ptr;
            const char *problem = h2_pump(c);
            if (problem) fail(problem);
        }
    }
    double elapsed = now_s() - t0;
    double cpu = cpu_s() - cpu0;
    long seen = 0, p50 = -1, p99 = -1;
    for (long us = 0; us < HIST_US; us++) {
        seen += g_hist[us];
        if (p50 < 0 && seen * 2 >= g_calls) p50 = us;
        if (p99 < 0 && seen * 100 >= g_calls * 99) { p99 = us; break; }
    }
    printf("{\"calls\": %ld, \"failures\": %ld, \"seconds\": %.3f, \"per_s\": %.1f, \"client_cpu_us\": %.1f, "
           "\"p50_ms\": %.3f, \"p99_ms\": %.3f, \"members\": %d, \"connections\": %d, \"error\": \"%s\"}\n",
           g_calls, g_failures, elapsed, g_calls / elapsed, g_calls ? cpu / g_calls * 1e6 : 0.0, p50 / 1e3,
           p99 < 0 ? 2000.0 : p99 / 1e3, nmem, nconn, g_error);
    return g_failures ? 1 : 0;
}
