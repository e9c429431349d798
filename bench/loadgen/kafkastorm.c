/*
 * kafkastorm: h2storm's join storm over the Kafka protocol, in C (libc only), for bench/storm.py.
 *
 *   kafkastorm SPECFILE
 *
 * The same spec file, members, probe, convergence and JSON as h2storm.c (the model is storm.h:
 * read h2storm.c's header for the member behaviour, Kafka's Java consumer); here the members
 * speak the Kafka protocol to `kip848 serve --kafka-listen`:
 *
 * - ConsumerGroupHeartbeat (api key 68) version 1, what librdkafka sends (the version is taken
 *   from the listener's ApiVersions answer: the highest of 0..1 it offers), request header v2
 *   (client id "kafkastorm"), flexible encoding (compact strings and arrays, unsigned varints,
 *   empty tagged fields), topic ids as UUIDs. The join carries every field (epoch 0, the
 *   client-made member id, rebalance timeout, subscribed topic names, an empty owned list);
 *   later heartbeats carry group, member id and epoch, with the rebalance timeout -1 and the
 *   nullable fields null, plus the owned partitions when they changed.
 * - Connections: `connections` storm connections (member i uses connection i % connections;
 *   bench/storm.py gives every member its own, as Java consumers have) and one connection per
 *   probe member. Members sharing a connection pipeline their requests (one per member in
 *   flight); the listener answers a connection's requests one at a time, in order, so every
 *   response must carry the correlation id of the oldest request outstanding on its
 *   connection. Each connection first sends ApiVersions v3 and checks the answer (error 0, key
 *   68 offered), as Kafka clients do; the members' heartbeats wait for it.
 * - request.timeout.ms: a call unanswered by then closes its connection, as Kafka's
 *   NetworkClient does ("client deadline"); the other calls in flight on it end as "connection
 *   lost" and are retried after the back-off; the connection is opened again after 50 ms
 *   (reconnect.backoff.ms) and starts with ApiVersions again.
 * - Every response is decoded and checked: its size, correlation id, every field of the body
 *   (error code and message, member id, epoch, heartbeat interval, the assignment's topic ids
 *   and partitions) and that it ends where its size says. A response that does not decode, or
 *   answers out of order, stops the run (it is a bug to report).
 *
 * The file-descriptor limit is raised (soft to hard) when the connections need it. Connections
 * are opened before the probe settles, at most 64 connecting at once (the listener's accept
 * backlog is small), and the run waits up to 60 s for all of them.
 */
#define STORM_NAME "kafkastorm"
#define STORM_MEMBER_TRANSPORT int32_t corr;
#include "storm.h"

#include <sys/epoll.h>

#define API_VERSIONS 18
#define HEARTBEAT 68
#define CLIENT_ID "kafkastorm"
#define MAX_FRAME (64 << 20)
#define CONNECTING_MAX 64

static const char *UNANSWERED_NAMES[MAX_CAUSES] = {"client deadline", "connection lost", NULL};

enum { DEAD, CONNECTING, HANDSHAKE, READY };

struct conn {
    int fd, state, want_out, dirty;
    double reconnect_at;
    uint8_t *out; size_t out_len, out_sent, out_cap;
    uint8_t *in; size_t in_len, in_cap;
    int *fifo; int32_t *fifo_corr; int head, n, cap; /* requests in flight, oldest first; -1 = ApiVersions */
    int32_t next_corr;
};

static struct conn *g_conns;
static int g_total_conns, g_ready, g_connecting;
static int *g_dirty, g_ndirty;
static struct sockaddr_storage g_addr;
static socklen_t g_addr_len;
static int g_hb_version = -1;

/* ---------------------------------------------------------------- encoding */

static uint8_t *put_i16(uint8_t *p, int v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; return p + 2; }
static uint8_t *put_i32(uint8_t *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = u >> 24; p[1] = u >> 16; p[2] = u >> 8; p[3] = (uint8_t)u;
    return p + 4;
}
static uint8_t *put_uvarint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) { *p++ = (uint8_t)(v | 0x80); v >>= 7; }
    *p++ = (uint8_t)v;
    return p;
}
static uint8_t *put_compact_string(uint8_t *p, const char *s) {
    size_t n = strlen(s);
    p = put_uvarint(p, n + 1);
    memcpy(p, s, n);
    return p + n;
}

/* Room for ``need`` more bytes at the end of the connection's output; returns where. */
static uint8_t *out_room(struct conn *c, size_t need) {
    reserve(&c->out, &c->out_cap, c->out_len + need);
    return c->out + c->out_len;
}

/* Request header v2 after the 4-byte size: api key, version, correlation id, client id
 * (a nullable int16-length string even in flexible versions), no tagged fields. */
static uint8_t *put_header(uint8_t *p, int key, int version, int32_t corr) {
    p = put_i16(p, key);
    p = put_i16(p, version);
    p = put_i32(p, corr);
    p = put_i16(p, (int)strlen(CLIENT_ID));
    memcpy(p, CLIENT_ID, strlen(CLIENT_ID));
    p += strlen(CLIENT_ID);
    *p++ = 0;
    return p;
}

static void push_inflight(struct conn *c, int who, int32_t corr) {
    int at = (c->head + c->n++) % c->cap;
    c->fifo[at] = who;
    c->fifo_corr[at] = corr;
}

static void mark_dirty(int ci) {
    struct conn *c = &g_conns[ci];
    if (!c->dirty) { c->dirty = 1; g_dirty[g_ndirty++] = ci; }
}

/* Finish a frame started at ``start`` (its 4-byte size first) ending at ``p``. */
static void end_frame(struct conn *c, uint8_t *start, uint8_t *p) {
    put_i32(start, (int32_t)(p - start - 4));
    c->out_len += (size_t)(p - start);
}

static void send_api_versions(int ci) {
    struct conn *c = &g_conns[ci];
    uint8_t *start = out_room(c, 64), *p = start + 4;
    int32_t corr = c->next_corr++;
    p = put_header(p, API_VERSIONS, 3, corr);
    p = put_compact_string(p, "kafkastorm"); /* client_software_name */
    p = put_compact_string(p, "1.0");        /* client_software_version */
    *p++ = 0;
    end_frame(c, start, p);
    push_inflight(c, -1, corr);
    mark_dirty(ci);
}

static void lose_conn(int ci, double now, int timed_out_member);

static void send_request(int mi, double now) {
    struct member *m = &g_members[mi];
    struct conn *c = &g_conns[m->conn];
    if (c->state != READY) { schedule(mi, now + 0.05); return; }
    struct group *g = m->g;
    int carry = m->full || m->send_owned;
    size_t need = 64 + strlen(CLIENT_ID) + strlen(g->id) + strlen(m->id) + 4 * (size_t)m->n_owned + 32 * (size_t)g_ntopics;
    for (int t = 0; t < g_ntopics; t++) need += strlen(g_topics[t].name) + 8;
    uint8_t *start = out_room(c, need), *p = start + 4;
    int32_t corr = c->next_corr++;
    p = put_header(p, HEARTBEAT, g_hb_version, corr);
    p = put_compact_string(p, g->id);
    p = put_compact_string(p, m->id);
    p = put_i32(p, m->epoch);
    *p++ = 0; /* instance id: null */
    *p++ = 0; /* rack id: null */
    p = put_i32(p, m->full ? g_rebalance_timeout_ms : -1);
    if (m->full) {
        int n = 0;
        for (int t = 0; t < g_ntopics; t++) n += g_topics[t].kind == g->kind;
        p = put_uvarint(p, (uint64_t)n + 1);
        for (int t = 0; t < g_ntopics; t++)
            if (g_topics[t].kind == g->kind) p = put_compact_string(p, g_topics[t].name);
    } else {
        *p++ = 0; /* subscribed topic names: null (unchanged) */
    }
    if (g_hb_version >= 1) *p++ = 0; /* subscribed topic regex: null */
    *p++ = 0;                         /* server assignor: null */
    if (carry) {
        int topics = 0;
        for (int i = 0; i < m->n_owned; topics++) {
            int t = topic_of_partition(m->owned[i]);
            while (i < m->n_owned && m->owned[i] < g_topics[t].base + g_topics[t].partitions) i++;
        }
        p = put_uvarint(p, (uint64_t)topics + 1);
        for (int i = 0; i < m->n_owned;) {
            int t = topic_of_partition(m->owned[i]), j = i;
            while (j < m->n_owned && m->owned[j] < g_topics[t].base + g_topics[t].partitions) j++;
            memcpy(p, g_topics[t].id, 16);
            p += 16;
            p = put_uvarint(p, (uint64_t)(j - i) + 1);
            for (int k = i; k < j; k++) p = put_i32(p, m->owned[k] - g_topics[t].base);
            *p++ = 0; /* tagged fields */
            i = j;
        }
    } else {
        *p++ = 0; /* owned partitions: null (unchanged) */
    }
    *p++ = 0; /* tagged fields */
    end_frame(c, start, p);
    push_inflight(c, mi, corr);
    m->corr = corr;
    sending(m, now);
    mark_dirty(m->conn);
}

/* ---------------------------------------------------------------- decoding */

struct reader { const uint8_t *p, *end; int ok; };

static int need(struct reader *r, size_t n) {
    if (r->ok && (size_t)(r->end - r->p) >= n) return 1;
    r->ok = 0;
    return 0;
}
static int get_i8(struct reader *r) { return need(r, 1) ? (int8_t)*r->p++ : 0; }
static int get_i16(struct reader *r) {
    if (!need(r, 2)) return 0;
    int v = (int16_t)(r->p[0] << 8 | r->p[1]);
    r->p += 2;
    return v;
}
static int32_t get_i32(struct reader *r) {
    if (!need(r, 4)) return 0;
    uint32_t v = (uint32_t)r->p[0] << 24 | (uint32_t)r->p[1] << 16 | (uint32_t)r->p[2] << 8 | r->p[3];
    r->p += 4;
    return (int32_t)v;
}
static uint64_t get_uvarint(struct reader *r) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (!need(r, 1)) return 0;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    r->ok = 0;
    return 0;
}
/* A compact nullable string into ``out`` (cut to its size); returns 0 for null. */
static int get_compact_string(struct reader *r, char *out, size_t size) {
    uint64_t n = get_uvarint(r);
    out[0] = 0;
    if (!r->ok || n == 0) return 0;
    if (!need(r, n - 1)) return 0;
    snprintf(out, size, "%.*s", (int)(n - 1), (const char *)r->p);
    r->p += n - 1;
    return 1;
}
/* Tagged fields: skipped (none is defined for these versions, but a server may send any). */
static void skip_tags(struct reader *r) {
    uint64_t n = get_uvarint(r);
    for (uint64_t i = 0; r->ok && i < n; i++) {
        get_uvarint(r); /* tag */
        uint64_t size = get_uvarint(r);
        if (need(r, size)) r->p += size;
    }
}

/* A ConsumerGroupHeartbeat response body (after the header) into ``out``; its assignment in
 * g_tmp. Returns 0 if it does not decode or names unknown topics or partitions. */
static int parse_heartbeat(struct reader *r, struct response *out) {
    memset(out, 0, sizeof *out);
    g_tmp_n = 0;
    get_i32(r); /* throttle time */
    out->error_code = get_i16(r);
    get_compact_string(r, out->message, sizeof out->message);
    get_compact_string(r, out->member_id, sizeof out->member_id);
    out->member_epoch = get_i32(r);
    out->hb_ms = get_i32(r);
    int present = get_i8(r);
    if (present != -1 && present != 1) return 0;
    if (present == 1) {
        out->has_assignment = 1;
        uint64_t topics = get_uvarint(r);
        if (topics == 0) return 0; /* a non-nullable array */
        for (uint64_t k = 0; r->ok && k + 1 < topics; k++) {
            if (!need(r, 16)) return 0;
            int t = find_topic(r->p, 16);
            r->p += 16;
            if (t < 0) return 0;
            uint64_t parts = get_uvarint(r);
            if (parts == 0) return 0;
            for (uint64_t i = 0; r->ok && i + 1 < parts; i++) {
                int32_t v = get_i32(r);
                if (v < 0 || v >= g_topics[t].partitions) return 0;
                tmp_push(g_topics[t].base + v);
            }
            skip_tags(r);
        }
        skip_tags(r);
    }
    skip_tags(r);
    return r->ok && r->p == r->end;
}

/* An ApiVersions v3 response body: error 0 and key 68 offered; picks the heartbeat version. */
static int parse_api_versions(struct reader *r) {
    int error = get_i16(r), lo = -1, hi = -1;
    uint64_t keys = get_uvarint(r);
    for (uint64_t k = 0; r->ok && k + 1 < keys; k++) {
        int key = get_i16(r), kmin = get_i16(r), kmax = get_i16(r);
        skip_tags(r);
        if (key == HEARTBEAT) { lo = kmin; hi = kmax; }
    }
    get_i32(r); /* throttle time */
    skip_tags(r);
    if (!r->ok || r->p != r->end) { fatal("an ApiVersions response that does not decode"); return 0; }
    if (error) {
        char msg[128];
        snprintf(msg, sizeof msg, "ApiVersions answered error_code %d", error);
        fatal(msg);
        return 0;
    }
    int version = hi > 1 ? 1 : hi;
    if (hi < 0 || version < lo) { fatal("the listener offers no ConsumerGroupHeartbeat version 0 or 1"); return 0; }
    if (g_hb_version < 0) g_hb_version = version;
    return 1;
}

/* One response frame (after its size) of connection ``ci``. */
static void on_frame(int ci, const uint8_t *frame, size_t len, double now) {
    struct conn *c = &g_conns[ci];
    char msg[256];
    if (!c->n) { fatal("a response with no request outstanding on its connection"); return; }
    int who = c->fifo[c->head];
    int32_t expected = c->fifo_corr[c->head];
    c->head = (c->head + 1) % c->cap;
    c->n--;
    struct reader r = {frame, frame + len, 1};
    int32_t corr = get_i32(&r);
    if (!r.ok || corr != expected) {
        snprintf(msg, sizeof msg, "a response with correlation id %d where %d (the oldest outstanding) was due", corr, expected);
        fatal(msg);
        return;
    }
    if (who < 0) { /* ApiVersions: response header v0, no tagged fields */
        if (parse_api_versions(&r) && c->state == HANDSHAKE) { c->state = READY; g_ready++; }
        return;
    }
    skip_tags(&r); /* response header v1 */
    struct response resp;
    struct member *m = &g_members[who];
    if (!parse_heartbeat(&r, &resp)) {
        snprintf(msg, sizeof msg, "a ConsumerGroupHeartbeat response of %zu bytes for member %s that does not decode", len, m->id);
        m->inflight = 0;
        fatal(msg);
        return;
    }
    on_response(who, &resp, now);
}

/* ---------------------------------------------------------------- connections */

static void watch(int ci, int out) {
    struct conn *c = &g_conns[ci];
    struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0), .data.u32 = (uint32_t)ci};
    epoll_ctl(g_epoll, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = out;
}

static void open_conn(int ci, double now) {
    struct conn *c = &g_conns[ci];
    int fd = socket(g_addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (fd < 0) { c->reconnect_at = now + 0.5; return; }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&g_addr, g_addr_len) && errno != EINPROGRESS) {
        close(fd);
        c->reconnect_at = now + 0.5;
        return;
    }
    c->fd = fd;
    c->state = CONNECTING;
    g_connecting++;
    c->out_len = c->out_sent = c->in_len = 0;
    c->head = c->n = 0;
    struct epoll_event ev = {.events = EPOLLOUT, .data.u32 = (uint32_t)ci};
    epoll_ctl(g_epoll, EPOLL_CTL_ADD, fd, &ev);
    c->want_out = 1;
}

/* The connection is closed; its calls in flight end without an answer (``timed_out_member``:
 * the one whose request timeout closed it, or -1). */
static void lose_conn(int ci, double now, int timed_out_member) {
    struct conn *c = &g_conns[ci];
    if (c->state == DEAD) return;
    epoll_ctl(g_epoll, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->state == READY) g_ready--;
    if (c->state == CONNECTING) g_connecting--;
    c->state = DEAD;
    c->reconnect_at = now + 0.05; /* reconnect.backoff.ms */
    for (; c->n > 0; c->n--, c->head = (c->head + 1) % c->cap) {
        int mi = c->fifo[c->head];
        if (mi >= 0 && g_members[mi].inflight) unanswered(mi, mi == timed_out_member ? 0 : 1, now);
    }
}

static void flush_conn(int ci, double now) {
    struct conn *c = &g_conns[ci];
    while (c->out_sent < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent, MSG_NOSIGNAL);
        if (n > 0) { c->out_sent += (size_t)n; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out) watch(ci, 1);
            return;
        }
        lose_conn(ci, now, -1);
        return;
    }
    c->out_len = c->out_sent = 0;
    if (c->want_out) watch(ci, 0);
}

static void flush_dirty(double now) {
    for (int k = 0; k < g_ndirty; k++) {
        int ci = g_dirty[k];
        g_conns[ci].dirty = 0;
        if (g_conns[ci].state >= HANDSHAKE) flush_conn(ci, now);
    }
    g_ndirty = 0;
}

static void on_event(int ci, uint32_t events, double now) {
    struct conn *c = &g_conns[ci];
    if (c->state == CONNECTING) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err || (events & (EPOLLERR | EPOLLHUP))) { lose_conn(ci, now, -1); c->reconnect_at = now + 0.5; return; }
        g_connecting--;
        c->state = HANDSHAKE;
        watch(ci, 0);
        send_api_versions(ci);
        return;
    }
    if (events & EPOLLOUT) flush_conn(ci, now);
    if (c->state == DEAD || !(events & (EPOLLIN | EPOLLERR | EPOLLHUP))) return;
    for (int j = 0; j < 16; j++) { /* bounded; the rest on the next round */
        reserve(&c->in, &c->in_cap, c->in_len + 65536);
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
        if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) { lose_conn(ci, now, -1); return; }
        if (r < 0) break;
        c->in_len += (size_t)r;
        size_t pos = 0;
        while (c->in_len - pos >= 4) {
            int32_t size = (int32_t)((uint32_t)c->in[pos] << 24 | (uint32_t)c->in[pos + 1] << 16 |
                                     (uint32_t)c->in[pos + 2] << 8 | c->in[pos + 3]);
            if (size < 4 || size > MAX_FRAME) { fatal("a response frame with a size below 4 or above 64 MiB"); return; }
            if (c->in_len - pos - 4 < (size_t)size) break;
            on_frame(ci, c->in + pos + 4, (size_t)size, now);
            if (g_fatal[0]) return;
            pos += 4 + (size_t)size;
        }
        if (pos) { memmove(c->in, c->in + pos, c->in_len - pos); c->in_len -= pos; }
        if ((size_t)r < 65536) break;
    }
}

/* ---------------------------------------------------------------- the event loop */

static void inflight_deadlines(double now) {
    for (int mi = 0; mi < g_nmembers; mi++) {
        struct member *m = &g_members[mi];
        if (m->inflight && now - m->t0 > g_request_timeout) lose_conn(m->conn, now, mi);
    }
}

/* Run until ``done`` says so or ``until`` passes. Returns 1 if done. */
static int run(int (*done)(double), double until) {
    struct epoll_event evs[512];
    double last_check = 0, last_deadlines = 0;
    for (long round = 0; round < 2000000000L; round++) {
        double now = now_s();
        if (g_fatal[0]) return 0;
        if (now > until) return 0;
        for (int ci = 0, opened = 0; ci < g_total_conns && opened < CONNECTING_MAX && g_connecting < CONNECTING_MAX; ci++)
            if (g_conns[ci].state == DEAD && now >= g_conns[ci].reconnect_at) { open_conn(ci, now); opened++; }
        send_due(now, send_request);
        flush_dirty(now);
        int n = epoll_wait(g_epoll, evs, 512, (int)due_in_ms(now, 10));
        now = now_s();
        for (int k = 0; k < n && !g_fatal[0]; k++) {
            int ci = (int)evs[k].data.u32;
            if (g_conns[ci].state != DEAD) on_event(ci, evs[k].events, now);
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

static int all_ready(double now) { (void)now; return g_ready == g_total_conns; }

/* Enough file descriptors for every connection (soft limit raised towards the hard one). */
static int raise_fd_limit(int conns) {
    struct rlimit rl;
    rlim_t want = (rlim_t)conns + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return -1;
    if (rl.rlim_cur >= want) return 0;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) rl.rlim_max = want; /* root only */
    rl.rlim_cur = want;
    return setrlimit(RLIMIT_NOFILE, &rl);
}

int main(int argc, char **argv) {
    int bad = storm_setup(argc, argv);
    if (bad) return bad;
    if (g_nconn > g_storm.count) g_nconn = g_storm.count;
    g_total_conns = g_nconn + g_probe.count;
    for (int i = g_probe.first; i < g_probe.first + g_probe.count; i++) g_members[i].conn = g_nconn + (i - g_probe.first);
    if (raise_fd_limit(g_total_conns)) {
        fprintf(stderr, "kafkastorm: cannot raise the open-file limit to %d (ulimit -n)\n", g_total_conns + 64);
        return 2;
    }
    struct addrinfo hints = {0}, *res;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(g_host, g_port, &hints, &res)) { fprintf(stderr, "kafkastorm: cannot resolve %s:%s\n", g_host, g_port); return 2; }
    memcpy(&g_addr, res->ai_addr, res->ai_addrlen);
    g_addr_len = res->ai_addrlen;
    freeaddrinfo(res);

    g_epoll = epoll_create1(0);
    g_conns = calloc(g_total_conns, sizeof *g_conns);
    g_dirty = calloc(g_total_conns, sizeof *g_dirty);
    int *per_conn = calloc(g_total_conns, sizeof(int));
    for (int i = 0; i < g_nmembers; i++) per_conn[g_members[i].conn]++;
    for (int ci = 0; ci < g_total_conns; ci++) {
        struct conn *c = &g_conns[ci];
        c->cap = per_conn[ci] + 2; /* one call per member, plus ApiVersions */
        c->fifo = calloc(c->cap, sizeof(int));
        c->fifo_corr = calloc(c->cap, sizeof(int32_t));
        c->next_corr = 1;
    }
    free(per_conn);

    /* 0. Every connection open and past ApiVersions. */
    if (!run(all_ready, now_s() + 60)) {
        fprintf(stderr, "kafkastorm: %d of %d connections to %s:%s ready within 60 s: %s\n", g_ready, g_total_conns,
                g_host, g_port, g_fatal);
        return 1;
    }

    return storm_phases(run);
}
