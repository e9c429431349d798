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
 */
#include "h2client.h"

#include <stdlib.h>
#include <sys/epoll.h>

#define PATH "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"
#define MAX_TOPICS 64
#define HIST_MS 600000 /* latency histograms: 1 ms buckets up to 600 s */
#define MAX_CODES 64

enum { ERR_NONE = 0, ERR_LOAD = 14, ERR_NOT_AVAILABLE = 15, ERR_NOT_COORDINATOR = 16,
       ERR_UNKNOWN_MEMBER = 25, ERR_FENCED = 110 };

struct topic {
    int kind; /* 0 storm, 1 probe */
    char name[256];
    uint8_t id[16];
    int partitions, base; /* base: first global partition index */
};

struct group {
    char id[256];
    int kind, first, count; /* members [first, first + count) */
    int partitions;         /* total partitions of its topics */
    int covered, multi;     /* partitions owned by >= 1 / >= 2 members */
    int joined;             /* members whose first join has been answered */
    double converged_at;    /* 0 = not converged now */
};

struct member {
    struct group *g;
    int conn;
    char id[24];
    int epoch, hb_ms, ever_joined;
    int *owned, n_owned, cap_owned; /* sorted global partition indexes */
    int acked;      /* the server has seen (and answered) the current owned set */
    int send_owned; /* the next request carries the owned set */
    int full;       /* the next request carries every field */
    int backoff_ms, times_fenced;
    /* the call in flight */
    int inflight, carrying_owned, was_join, timed_out;
    int32_t stream;
    double t0;
    uint8_t *req; size_t req_len, req_cap, sent;
    uint8_t *resp; size_t resp_len, resp_cap;
    int http_status, grpc_status;
    double next_at;
};

struct conn {
    struct h2conn h;
    int alive, dirty;
    double reconnect_at;
};

/* ---------------------------------------------------------------- globals */

static char g_host[256] = "127.0.0.1", g_port[256] = "0", g_authority[520];
static struct topic g_topics[MAX_TOPICS];
static int g_ntopics, g_total_partitions;
static int *g_owners; /* per global partition: how many members own it */
static struct group g_storm, g_probe;
static struct member *g_members;
static int g_nmembers, g_nconn = 8;
static struct conn *g_conns;
static nghttp2_session_callbacks *g_cbs;
static int g_epoll;
static double g_join_rate, g_request_timeout = 30.0, g_settle = 10.0, g_max_seconds = 600.0;
static int g_rebalance_timeout_ms = 300000, g_probe_interval_ms = 50;
static double g_t_storm; /* 0 until the storm starts */
static unsigned long long g_rng = 0x9E3779B97F4A7C15ULL;

/* counters */
static long g_calls, g_probe_calls, g_errors_by_code[MAX_CODES][2], g_unanswered_by[16];
static long g_fenced_responses, g_unknown_responses, g_members_fenced, g_retriable;
static long g_storm_hist[HIST_MS + 1], g_probe_hist[HIST_MS + 1];
static double g_probe_max, g_storm_max, g_last_join_answered, g_last_join_sent;
static char g_fatal[512];
static const char *UNANSWERED_NAMES[16] = {
    "client deadline", "connection lost", "HTTP status not 200", "no response message",
    "malformed response", "grpc-status 1 CANCELLED", "grpc-status 4 DEADLINE_EXCEEDED",
    "grpc-status 8 RESOURCE_EXHAUSTED", "grpc-status 14 UNAVAILABLE", "other grpc-status",
    "RST_STREAM CANCEL", "RST_STREAM REFUSED_STREAM", "other RST_STREAM", NULL};

/* timeline: one sample per second of the storm */
#define MAX_SAMPLES 4000
struct sample { double t; int joined, at_epoch, epoch, covered, inflight; long calls; double probe_max; };
static struct sample g_samples[MAX_SAMPLES];
static int g_nsamples;
static double g_sample_probe_max;

/* ---------------------------------------------------------------- small helpers */

static double rnd(void) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (g_rng >> 11) * (1.0 / 9007199254740992.0);
}

static void fatal(const char *msg) {
    if (!g_fatal[0]) snprintf(g_fatal, sizeof g_fatal, "%s", msg);
}

static void count_code(int code, int retriable) {
    for (int i = 0; i < MAX_CODES; i++) {
        if (g_errors_by_code[i][1] == 0 || g_errors_by_code[i][0] == code) {
            g_errors_by_code[i][0] = code;
            g_errors_by_code[i][1]++;
            break;
        }
    }
    if (retriable) g_retriable++;
}

static void reserve(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t n = *cap ? *cap : 256;
    while (n < need) n *= 2;
    *buf = realloc(*buf, n);
    *cap = n;
}

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

static int topic_of_partition(int gp) {
    for (int t = g_ntopics - 1; t >= 0; t--)
        if (gp >= g_topics[t].base) return t;
    return -1;
}

static int find_topic(const uint8_t *id, size_t len) {
    if (len != 16) return -1;
    for (int t = 0; t < g_ntopics; t++)
        if (!memcmp(g_topics[t].id, id, 16)) return t;
    return -1;
}

/* ---------------------------------------------------------------- scheduling (binary heap) */

struct due { double t; int m; };
static struct due *g_heap;
static int g_heap_n, g_heap_cap;

static void schedule(int m, double t) {
    g_members[m].next_at = t;
    if (g_heap_n == g_heap_cap) {
        g_heap_cap = g_heap_cap ? 2 * g_heap_cap : 1024;
        g_heap = realloc(g_heap, sizeof *g_heap * g_heap_cap);
    }
    int i = g_heap_n++;
    while (i > 0 && g_heap[(i - 1) / 2].t > t) { g_heap[i] = g_heap[(i - 1) / 2]; i = (i - 1) / 2; }
    g_heap[i].t = t;
    g_heap[i].m = m;
}

static int pop_due(double now) {
    while (g_heap_n > 0 && g_heap[0].t <= now) {
        struct due top = g_heap[0], last = g_heap[--g_heap_n];
        int i = 0;
        for (;;) {
            int c = 2 * i + 1;
            if (c >= g_heap_n) break;
            if (c + 1 < g_heap_n && g_heap[c + 1].t < g_heap[c].t) c++;
            if (last.t <= g_heap[c].t) break;
            g_heap[i] = g_heap[c];
            i = c;
        }
        if (g_heap_n > 0) g_heap[i] = last;
        if (g_members[top.m].next_at == top.t) return top.m; /* else: superseded */
    }
    return -1;
}

/* ---------------------------------------------------------------- ownership bookkeeping */

static void own(struct group *g, int gp, int delta) {
    int before = g_owners[gp], after = before + delta;
    g_owners[gp] = after;
    if (before == 0 && after == 1) g->covered++;
    if (before == 1 && after == 0) g->covered--;
    if (before == 1 && after == 2) g->multi++;
    if (before == 2 && after == 1) g->multi--;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Replace the member's owned set by ``next`` (sorted, n entries). Returns 1 if it changed. */
static int set_owned(struct member *m, int *next, int n) {
    if (n == m->n_owned && (!n || !memcmp(next, m->owned, sizeof(int) * n))) return 0;
    for (int i = 0; i < m->n_owned; i++) own(m->g, m->owned[i], -1);
    for (int i = 0; i < n; i++) own(m->g, next[i], +1);
    if (n > m->cap_owned) { m->cap_owned = n; m->owned = realloc(m->owned, sizeof(int) * n); }
    if (n) memcpy(m->owned, next, sizeof(int) * n);
    m->n_owned = n;
    return 1;
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
    m->carrying_owned = carry;
    m->was_join = m->epoch == 0;
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
    m->timed_out = 0;
    m->t0 = now;
    m->next_at = 0;
    int32_t id = nghttp2_submit_request(c->h.session, NULL, hdrs, sizeof hdrs / sizeof hdrs[0], &prd, m);
    if (id < 0) { /* e.g. the server sent GOAWAY: a new connection */
        lose_conn(m->conn, now);
        schedule(mi, now + 0.05);
        return;
    }
    m->stream = id;
    m->inflight = 1;
    c->dirty = 1;
    if (m->was_join && m->g == &g_storm && !m->ever_joined) g_last_join_sent = now;
}

/* ---------------------------------------------------------------- responses */

/* Parse TopicPartitions items of an Assignment's assigned list into global indexes. */
static int parse_assignment(const uint8_t *p, const uint8_t *end, int **out, int *n, int *cap) {
    *n = 0;
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
        int first_unpacked = *n;
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
                if (*n == *cap) { *cap = *cap ? 2 * *cap : 64; *out = realloc(*out, sizeof(int) * *cap); }
                (*out)[(*n)++] = (int)v;
            } else if (!skip_field(&q, qend, k & 7)) {
                return 0;
            }
        }
        int t = find_topic(tid, tid_len);
        if (t < 0) return 0;
        for (int i = first_unpacked; i < *n; i++) {
            if ((*out)[i] < 0 || (*out)[i] >= g_topics[t].partitions) return 0;
            (*out)[i] += g_topics[t].base;
        }
        while (parts && parts < parts_end) {
            uint64_t v;
            if (!read_varint(&parts, parts_end, &v) || v >= (uint64_t)g_topics[t].partitions) return 0;
            if (*n == *cap) { *cap = *cap ? 2 * *cap : 64; *out = realloc(*out, sizeof(int) * *cap); }
            (*out)[(*n)++] = g_topics[t].base + (int)v;
        }
    }
    return 1;
}

struct response {
    int error_code, member_epoch, hb_ms, has_assignment;
    char member_id[64];
    char message[256];
};

static int *g_tmp;
static int g_tmp_n, g_tmp_cap;

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
                if (!parse_assignment(p, p + v, &g_tmp, &g_tmp_n, &g_tmp_cap)) return 0;
            }
            p += v;
        } else if (!skip_field(&p, end, wt)) {
            return 0;
        }
    }
    return 1;
}

static void retry_later(int mi, double now) {
    struct member *m = &g_members[mi];
    m->backoff_ms = m->backoff_ms ? (m->backoff_ms * 2 > 1000 ? 1000 : m->backoff_ms * 2) : 100;
    m->full = 1;
    schedule(mi, now + m->backoff_ms * (0.8 + 0.4 * rnd()) / 1000.0);
}

static void unanswered(int mi, int why, double now) {
    g_unanswered_by[why]++;
    retry_later(mi, now);
}

static void record_latency(struct member *m, double now) {
    double ms = (now - m->t0) * 1e3;
    long b = ms < HIST_MS ? (long)ms : HIST_MS;
    if (m->g == &g_probe) {
        if (g_t_storm && m->t0 >= g_t_storm) {
            g_probe_hist[b]++;
            g_probe_calls++;
            if (ms > g_probe_max) g_probe_max = ms;
            if (ms > g_sample_probe_max) g_sample_probe_max = ms;
        }
    } else {
        g_storm_hist[b]++;
        g_calls++;
        if (ms > g_storm_max) g_storm_max = ms;
    }
}

static void on_answer(int mi, double now) {
    struct member *m = &g_members[mi];
    int mlen = m->resp_len >= 5 ? (int)((uint32_t)m->resp[1] << 24 | m->resp[2] << 16 | m->resp[3] << 8 | m->resp[4]) : -1;
    struct response r;
    if (m->resp_len < 5) { unanswered(mi, 3, now); return; }
    if (m->resp[0] != 0 || (size_t)mlen + 5 != m->resp_len || !parse_response(m->resp + 5, mlen, &r)) {
        unanswered(mi, 4, now);
        return;
    }
    if (r.error_code == ERR_FENCED || r.error_code == ERR_UNKNOWN_MEMBER) {
        if (r.error_code == ERR_FENCED) g_fenced_responses++; else g_unknown_responses++;
        count_code(r.error_code, 0);
        if (!m->times_fenced++) g_members_fenced++;
        set_owned(m, NULL, 0);
        m->epoch = 0;
        m->full = 1;
        m->acked = 0;
        m->send_owned = 0;
        schedule(mi, now);
        return;
    }
    if (r.error_code == ERR_LOAD || r.error_code == ERR_NOT_AVAILABLE || r.error_code == ERR_NOT_COORDINATOR) {
        count_code(r.error_code, 1);
        retry_later(mi, now);
        return;
    }
    if (r.error_code != ERR_NONE) {
        char msg[512];
        count_code(r.error_code, 0);
        snprintf(msg, sizeof msg, "error_code %d for member %s at epoch %d: %s", r.error_code, m->id, m->epoch, r.message);
        fatal(msg);
        return;
    }
    if (r.member_id[0] && strcmp(r.member_id, m->id)) { fatal("the response names another member id"); return; }
    if (r.member_epoch <= 0) { fatal("a successful heartbeat answered a member epoch <= 0"); return; }
    m->backoff_ms = 0;
    m->full = 0;
    if (m->carrying_owned) { m->send_owned = 0; m->acked = 1; }
    if (!m->ever_joined) {
        m->ever_joined = 1;
        m->g->joined++;
        if (m->g == &g_storm) g_last_join_answered = now;
    }
    m->epoch = r.member_epoch;
    if (r.hb_ms > 0) m->hb_ms = r.hb_ms;
    int changed = 0;
    if (r.has_assignment) {
        qsort(g_tmp, g_tmp_n, sizeof(int), cmp_int);
        for (int i = 0; i < g_tmp_n; i++) {
            int t = topic_of_partition(g_tmp[i]);
            if (t < 0 || g_topics[t].kind != m->g->kind || (i && g_tmp[i] == g_tmp[i - 1])) {
                fatal("an assignment names a partition twice or outside the member's subscription");
                return;
            }
        }
        changed = set_owned(m, g_tmp, g_tmp_n);
    }
    if (changed) { /* reconciled at once; acknowledge now */
        m->acked = 0;
        m->send_owned = 1;
        schedule(mi, now);
    } else if (m->g == &g_probe) {
        double at = m->t0 + g_probe_interval_ms / 1000.0;
        schedule(mi, at > now ? at : now);
    } else {
        schedule(mi, now + m->hb_ms / 1000.0);
    }
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
    m->inflight = 0;
    m->stream = 0;
    record_latency(m, now);
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
            m->inflight = 0;
            m->stream = 0;
            record_latency(m, now);
            unanswered(mi, 1, now);
        }
    }
}

/* ---------------------------------------------------------------- convergence */

static int max_epoch(const struct group *g) {
    int e = 0;
    for (int i = g->first; i < g->first + g->count; i++)
        if (g_members[i].epoch > e) e = g_members[i].epoch;
    return e;
}

static int at_epoch(const struct group *g, int e) {
    int n = 0;
    for (int i = g->first; i < g->first + g->count; i++) {
        const struct member *m = &g_members[i];
        if (m->ever_joined && m->epoch == e && m->acked && !(m->inflight && m->was_join)) n++;
    }
    return n;
}

/* Every member owns P/N partitions, rounded down or up: what the uniform assignor gives a
 * homogeneous group. Without it, members that joined after the last target computation (at
 * its epoch, with nothing) would look settled next to old members still owning everything. */
static int balanced(const struct group *g) {
    int low = g->partitions / g->count, high = low + (g->partitions % g->count != 0);
    for (int i = g->first; i < g->first + g->count; i++)
        if (g_members[i].n_owned < low || g_members[i].n_owned > high) return 0;
    return 1;
}

static int converged(struct group *g) {
    if (g->joined < g->count || g->covered != g->partitions || g->multi || !balanced(g)) return 0;
    return at_epoch(g, max_epoch(g)) == g->count;
}

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
        for (int k = 0; k < 5000; k++) { /* bounded; the rest go on the next round */
            int mi = pop_due(now);
            if (mi < 0) break;
            if (!g_members[mi].inflight) send_request(mi, now);
        }
        flush_dirty(now);
        double wait_ms = 10;
        if (g_heap_n > 0) {
            double d = (g_heap[0].t - now) * 1e3;
            if (d < wait_ms) wait_ms = d < 0 ? 0 : d;
        }
        int n = epoll_wait(g_epoll, evs, 256, (int)wait_ms);
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

static int probe_ready(double now) { (void)now; return converged(&g_probe); }

static double g_next_sample;

static int storm_done(double now) {
    struct group *g = &g_storm;
    if (now >= g_next_sample && g_nsamples < MAX_SAMPLES) {
        struct sample *s = &g_samples[g_nsamples++];
        int inflight = 0;
        for (int i = g->first; i < g->first + g->count; i++) inflight += g_members[i].inflight;
        s->t = now - g_t_storm;
        s->joined = g->joined;
        s->epoch = max_epoch(g);
        s->at_epoch = at_epoch(g, s->epoch);
        s->covered = g->covered;
        s->inflight = inflight;
        s->calls = g_calls;
        s->probe_max = g_sample_probe_max;
        g_sample_probe_max = 0;
        g_next_sample += 1.0;
    }
    if (converged(g)) {
        if (!g->converged_at) g->converged_at = now;
        return now - g->converged_at >= g_settle;
    }
    g->converged_at = 0;
    return 0;
}

/* ---------------------------------------------------------------- spec and output */

static int hexval(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; }

static int read_spec(const char *path, int *storm_members, int *probe_members) {
    FILE *f = fopen(path, "r");
    if (!f) { perror("h2storm: SPECFILE"); return -1; }
    char line[1024];
    for (int lines = 0; lines < 10000 && fgets(line, sizeof line, f); lines++) {
        char key[64], a[256], b[256], c[256];
        int d = 0, n = sscanf(line, "%63s %255s %255s %255s %d", key, a, b, c, &d);
        if (n < 2) continue;
        if (!strcmp(key, "host")) snprintf(g_host, sizeof g_host, "%s", a);
        else if (!strcmp(key, "port")) snprintf(g_port, sizeof g_port, "%s", a);
        else if (!strcmp(key, "group")) snprintf(g_storm.id, sizeof g_storm.id, "%s", a);
        else if (!strcmp(key, "probe_group")) snprintf(g_probe.id, sizeof g_probe.id, "%s", a);
        else if (!strcmp(key, "members")) *storm_members = atoi(a);
        else if (!strcmp(key, "probe_members")) *probe_members = atoi(a);
        else if (!strcmp(key, "connections")) g_nconn = atoi(a);
        else if (!strcmp(key, "join_rate")) g_join_rate = atof(a);
        else if (!strcmp(key, "rebalance_timeout_ms")) g_rebalance_timeout_ms = atoi(a);
        else if (!strcmp(key, "request_timeout_ms")) g_request_timeout = atoi(a) / 1000.0;
        else if (!strcmp(key, "settle_ms")) g_settle = atoi(a) / 1000.0;
        else if (!strcmp(key, "max_seconds")) g_max_seconds = atof(a);
        else if (!strcmp(key, "probe_interval_ms")) g_probe_interval_ms = atoi(a);
        else if (!strcmp(key, "topic") && n == 5 && g_ntopics < MAX_TOPICS && strlen(c) == 32 && d > 0) {
            struct topic *t = &g_topics[g_ntopics++];
            t->kind = !strcmp(a, "probe");
            snprintf(t->name, sizeof t->name, "%s", b);
            for (int i = 0; i < 16; i++) {
                int hi = hexval(c[2 * i]), lo = hexval(c[2 * i + 1]);
                if (hi < 0 || lo < 0) { fclose(f); return -1; }
                t->id[i] = (uint8_t)(hi << 4 | lo);
            }
            t->partitions = d;
            t->base = g_total_partitions;
            g_total_partitions += d;
            if (t->kind) g_probe.partitions += d; else g_storm.partitions += d;
        } else { fprintf(stderr, "h2storm: bad spec line: %s", line); fclose(f); return -1; }
    }
    fclose(f);
    return 0;
}

/* The text with quotes, backslashes and control characters replaced (for a JSON string). */
static const char *json_safe(char *s) {
    for (char *p = s; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    return s;
}

static double percentile(const long *hist, long total, double q) {
    if (!total) return 0;
    long seen = 0;
    for (long ms = 0; ms <= HIST_MS; ms++) {
        seen += hist[ms];
        if (seen >= q * total) return ms + 1; /* upper edge of the 1 ms bucket */
    }
    return HIST_MS;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: h2storm SPECFILE\n"); return 2; }
    int storm_members = 0, probe_members = 3;
    if (read_spec(argv[1], &storm_members, &probe_members)) return 2;
    if (storm_members < 1 || probe_members < 1 || g_nconn < 1 || !g_storm.partitions || !g_probe.partitions ||
        !g_storm.id[0] || !g_probe.id[0]) {
        fprintf(stderr, "h2storm: the spec needs members, connections, group, probe_group and topics\n");
        return 2;
    }
    snprintf(g_authority, sizeof g_authority, "%s:%s", g_host, g_port);
    g_owners = calloc(g_total_partitions, sizeof(int));
    g_nmembers = storm_members + probe_members;
    g_members = calloc(g_nmembers, sizeof *g_members);
    g_storm.kind = 0; g_storm.first = 0; g_storm.count = storm_members;
    g_probe.kind = 1; g_probe.first = storm_members; g_probe.count = probe_members;
    g_rng ^= (unsigned long long)getpid() << 20;
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (int i = 0; i < g_nmembers; i++) {
        struct member *m = &g_members[i];
        m->g = i < storm_members ? &g_storm : &g_probe;
        m->conn = i < storm_members ? i % g_nconn : g_nconn; /* the probe has its own connection */
        for (int k = 0; k < 22; k++) m->id[k] = b64[(int)(rnd() * 64)];
        m->full = 1;
        m->hb_ms = 5000;
    }

    nghttp2_session_callbacks_new(&g_cbs);
    nghttp2_session_callbacks_set_send_callback(g_cbs, h2_on_send);
    nghttp2_session_callbacks_set_on_header_callback(g_cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(g_cbs, on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(g_cbs, on_close);
    g_epoll = epoll_create1(0);
    g_conns = calloc(g_nconn + 1, sizeof *g_conns);
    for (int i = 0; i < g_nconn + 1; i++)
        if (open_conn(i)) { fprintf(stderr, "h2storm: cannot connect to %s:%s\n", g_host, g_port); return 1; }

    /* 1. The probe group joins and settles. */
    double t = now_s();
    for (int i = g_probe.first; i < g_probe.first + g_probe.count; i++) schedule(i, t);
    if (!run(probe_ready, t + 60)) {
        fprintf(stderr, "h2storm: the probe group did not settle within 60 s: %s\n", g_fatal);
        return 1;
    }
    for (int i = g_probe.first; i < g_probe.first + g_probe.count; i++) schedule(i, now_s());

    /* 2. The storm. */
    double cpu0 = cpu_s();
    g_t_storm = now_s();
    g_next_sample = g_t_storm;
    for (int i = 0; i < storm_members; i++) schedule(i, g_t_storm + (g_join_rate > 0 ? i / g_join_rate : 0));
    int ok = run(storm_done, g_t_storm + g_max_seconds);
    double end = now_s(), cpu = cpu_s() - cpu0;

    int epoch = max_epoch(&g_storm);
    long unanswered_total = 0;
    for (int i = 0; UNANSWERED_NAMES[i]; i++) unanswered_total += g_unanswered_by[i];
    printf("{\"converged\": %s, \"seconds\": %.3f, \"last_join_sent_s\": %.3f, \"last_join_s\": %.3f, "
           "\"converged_at_s\": %.3f, \"epoch\": %d, \"members\": %d, \"joined\": %d, \"at_epoch\": %d, "
           "\"partitions\": %d, \"covered\": %d, \"owned_twice\": %d, \"calls\": %ld, \"call_p99_ms\": %.0f, "
           "\"call_max_ms\": %.0f, \"members_fenced\": %ld, \"fenced_member_epoch\": %ld, \"unknown_member_id\": %ld, "
           "\"retriable_errors\": %ld, \"unanswered\": %ld, \"probe_calls\": %ld, \"probe_p50_ms\": %.0f, "
           "\"probe_p99_ms\": %.0f, \"probe_max_ms\": %.1f, \"client_cpu_s\": %.2f, \"connections\": %d, "
           "\"error\": \"%s\", ",
           ok ? "true" : "false", end - g_t_storm, g_last_join_sent ? g_last_join_sent - g_t_storm : -1.0,
           g_last_join_answered ? g_last_join_answered - g_t_storm : -1.0,
           ok ? g_storm.converged_at - g_t_storm : -1.0, epoch, storm_members, g_storm.joined,
           at_epoch(&g_storm, epoch), g_storm.partitions, g_storm.covered, g_storm.multi, g_calls,
           percentile(g_storm_hist, g_calls, 0.99), g_storm_max, g_members_fenced, g_fenced_responses,
           g_unknown_responses, g_retriable, unanswered_total, g_probe_calls,
           percentile(g_probe_hist, g_probe_calls, 0.50), percentile(g_probe_hist, g_probe_calls, 0.99),
           g_probe_max, cpu, g_nconn, json_safe(g_fatal));
    printf("\"unanswered_by\": {");
    for (int i = 0, first = 1; UNANSWERED_NAMES[i]; i++)
        if (g_unanswered_by[i]) { printf("%s\"%s\": %ld", first ? "" : ", ", UNANSWERED_NAMES[i], g_unanswered_by[i]); first = 0; }
    printf("}, \"errors_by_code\": {");
    for (int i = 0; i < MAX_CODES && g_errors_by_code[i][1]; i++)
        printf("%s\"%ld\": %ld", i ? ", " : "", g_errors_by_code[i][0], g_errors_by_code[i][1]);
    printf("}, \"timeline\": [");
    for (int i = 0; i < g_nsamples; i++) {
        struct sample *s = &g_samples[i];
        printf("%s[%.0f, %d, %d, %d, %d, %d, %ld, %.1f]", i ? ", " : "", s->t, s->joined, s->epoch, s->at_epoch,
               s->covered, s->inflight, s->calls, s->probe_max);
    }
    printf("]}\n");
    return g_fatal[0] ? 1 : 0;
}
