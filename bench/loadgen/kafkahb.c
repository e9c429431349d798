/*
 * kafkahb: a Kafka-protocol request load generator in C, for bench/kafka.py.
 *
 * A Python Kafka client spends as much CPU per request as the listener it measures, and both
 * share the machine's two cores; this one spends a few microseconds per request, so the
 * measured rate is the server's.
 *
 *   kafkahb HOST PORT SECONDS CONNECTIONS REQFILE
 *
 * REQFILE holds one complete request frame per member ([uint32 little-endian length][frame],
 * the frame with its own int32 size, api key, version and correlation id); the correlation id
 * (bytes 8..11) is rewritten for every send. Member i uses connection i % CONNECTIONS (several
 * members of one connection pipeline their requests, as Kafka allows) and always has exactly
 * one request outstanding: when its response arrives, the member sends its next one, until
 * SECONDS have passed. Every response is checked: it answers the oldest outstanding request of
 * its connection (correlation id), and the int16 error code at byte ERROR_AT of the response
 * (after the size) is 0 — for ConsumerGroupHeartbeat v1: correlation id (4), header tagged
 * fields (1), throttle_time_ms (4), so 9. The first failure stops the run.
 * Prints one JSON line: calls, failures, seconds, per_s, client_cpu_us, p50_ms, p99_ms, error.
 * Every loop is bounded: the run ends SECONDS + 30 s after it starts whatever happens.
 *
 *   kafkahb HOST PORT SECONDS CONNECTIONS REQFILE [ERROR_AT]   (default 9)
 */
#include "netutil.h"

#include <stdlib.h>
#include <sys/epoll.h>

#define HIST_US 2000000 /* latency histogram: 1 us buckets up to 2 s */
#define MAX_MEMBERS 100000

struct conn;

struct member {
    struct conn *conn;
    uint8_t *frame;
    size_t frame_len;
    double t0;
};

struct conn {
    int fd;
    int want_out;
    uint8_t *out; /* bytes not yet written */
    size_t out_len, out_cap;
    uint8_t *in; /* bytes read, not yet a whole frame */
    size_t in_len, in_cap;
    int *fifo; /* outstanding members, in send order (a ring) */
    int32_t *cids;
    size_t head, count, cap;
    int32_t next_cid;
};

static double g_stop_at, g_hard_stop;
static long g_calls, g_failures;
static char g_error[512];
static uint32_t *g_hist;
static long g_hist_over;
static struct member *g_members;
static int g_ep;
static size_t g_error_at = 9;

static void fail(const char *msg) {
    if (!g_failures) snprintf(g_error, sizeof g_error, "%s", msg);
    g_failures++;
}

static void grow(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 4096;
    while (c < need) c *= 2;
    *buf = realloc(*buf, c);
    *cap = c;
}

static void flush_out(struct conn *c) {
    size_t done = 0;
    for (int j = 0; j < 64 && done < c->out_len; j++) {
        ssize_t n = send(c->fd, c->out + done, c->out_len - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        } else {
            fail("send failed");
            return;
        }
    }
    memmove(c->out, c->out + done, c->out_len - done);
    c->out_len -= done;
    int want = c->out_len > 0;
    if (want != c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN | (want ? EPOLLOUT : 0), .data.ptr = c};
        epoll_ctl(g_ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = want;
    }
}

static void submit(int idx) {
    struct member *m = &g_members[idx];
    struct conn *c = m->conn;
    int32_t cid = c->next_cid++ & 0x7fffffff;
    grow(&c->out, &c->out_cap, c->out_len + m->frame_len);
    uint8_t *p = c->out + c->out_len;
    memcpy(p, m->frame, m->frame_len);
    p[8] = cid >> 24; p[9] = cid >> 16; p[10] = cid >> 8; p[11] = cid;
    c->out_len += m->frame_len;
    if (c->count == c->cap) { fail("too many outstanding requests"); return; }
    size_t slot = (c->head + c->count) % c->cap;
    c->fifo[slot] = idx;
    c->cids[slot] = cid;
    c->count++;
    m->t0 = now_s();
}

static void on_response(struct conn *c, const uint8_t *frame, size_t len) {
    char msg[256];
    if (!c->count) { fail("a response nobody asked for"); return; }
    int idx = c->fifo[c->head];
    int32_t want = c->cids[c->head];
    c->head = (c->head + 1) % c->cap;
    c->count--;
    double t = now_s();
    long us = (long)((t - g_members[idx].t0) * 1e6);
    if (us >= 0 && us < HIST_US) g_hist[us]++; else g_hist_over++;
    g_calls++;
    int32_t cid = len >= 4 ? (int32_t)((uint32_t)frame[0] << 24 | frame[1] << 16 | frame[2] << 8 | frame[3]) : -1;
    if (cid != want) {
        snprintf(msg, sizeof msg, "correlation id %d answers %d", cid, want); fail(msg); return;
    }
    if (len < g_error_at + 2) { fail("response too short"); return; }
    int16_t ec = (int16_t)(frame[g_error_at] << 8 | frame[g_error_at + 1]);
    if (ec) { snprintf(msg, sizeof msg, "error_code %d in a response", ec); fail(msg); return; }
    if (t < g_stop_at) submit(idx);
}

static void pump_in(struct conn *c) {
    for (int j = 0; j < 64; j++) {
        grow(&c->in, &c->in_cap, c->in_len + 65536);
        ssize_t r = recv(c->fd, c->in + c->in_len, 65536, 0);
        if (r > 0) {
            c->in_len += (size_t)r;
            if (r < 65536) break;
        } else if (r == 0) {
            fail("server closed the connection"); return;
        } else {
            if (errno != EAGAIN && errno != EWOULDBLOCK) fail("recv failed");
            break;
        }
    }
    size_t pos = 0;
    while (c->in_len - pos >= 4 && !g_failures) {
        const uint8_t *p = c->in + pos;
        int32_t size = (int32_t)((uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]);
        if (size < 0) { fail("negative frame size"); return; }
        if (c->in_len - pos - 4 < (size_t)size) break;
        on_response(c, p + 4, (size_t)size);
        pos += 4 + (size_t)size;
    }
    memmove(c->in, c->in + pos, c->in_len - pos);
    c->in_len -= pos;
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: kafkahb HOST PORT SECONDS CONNECTIONS REQFILE [ERROR_AT]\n");
        return 2;
    }
    const char *host = argv[1], *port = argv[2];
    double seconds = atof(argv[3]);
    int nconn = atoi(argv[4]);
    if (argc == 7) g_error_at = (size_t)atoi(argv[6]);
    if (nconn < 1 || seconds <= 0) { fprintf(stderr, "kafkahb: bad CONNECTIONS or SECONDS\n"); return 2; }

    FILE *f = fopen(argv[5], "rb");
    if (!f) { perror("kafkahb: REQFILE"); return 2; }
    int nmem = 0;
    uint32_t len;
    while (fread(&len, 4, 1, f) == 1 && nmem < MAX_MEMBERS) {
        g_members = realloc(g_members, sizeof *g_members * (nmem + 1));
        struct member *m = &g_members[nmem];
        memset(m, 0, sizeof *m);
        m->frame_len = len;
        m->frame = malloc(len);
        if (len < 12 || fread(m->frame, 1, len, f) != len) { fprintf(stderr, "kafkahb: bad REQFILE\n"); return 2; }
        nmem++;
    }
    fclose(f);
    if (!nmem) { fprintf(stderr, "kafkahb: no requests\n"); return 2; }
    if (nconn > nmem) nconn = nmem;
    g_hist = calloc(HIST_US, sizeof *g_hist);

    g_ep = epoll_create1(0);
    struct conn *conns = calloc(nconn, sizeof *conns);
    for (int i = 0; i < nconn; i++) {
        struct conn *c = &conns[i];
        c->fd = connect_to(host, port);
        if (c->fd < 0) { fprintf(stderr, "kafkahb: cannot connect to %s:%s\n", host, port); return 1; }
        c->cap = (size_t)(nmem / nconn + 2);
        c->fifo = calloc(c->cap, sizeof *c->fifo);
        c->cids = calloc(c->cap, sizeof *c->cids);
        c->next_cid = 1;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(g_ep, EPOLL_CTL_ADD, c->fd, &ev);
    }
    double cpu0 = cpu_s();
    double t0 = now_s();
    g_stop_at = t0 + seconds;
    g_hard_stop = t0 + seconds + 30;
    for (int i = 0; i < nmem; i++) {
        g_members[i].conn = &conns[i % nconn];
        submit(i);
    }
    for (int i = 0; i < nconn; i++) flush_out(&conns[i]);

    struct epoll_event evs[256];
    for (long round = 0; round < 1000000000L; round++) {
        double t = now_s();
        if (g_failures) break;
        long outstanding = 0;
        for (int i = 0; i < nconn; i++) outstanding += (long)conns[i].count;
        if (t >= g_stop_at && !outstanding) break; /* every member's last request answered */
        if (t > g_hard_stop) { fail("hard time limit reached"); break; }
        int n = epoll_wait(g_ep, evs, 256, 100);
        for (int k = 0; k < n; k++) {
            struct conn *c = evs[k].data.ptr;
            if (evs[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) pump_in(c);
            flush_out(c);
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
