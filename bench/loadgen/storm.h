/*
 * storm.h: the join-storm model shared by h2storm.c (gRPC) and kafkastorm.c (Kafka protocol):
 * the spec file, the members' Java-consumer behaviour, ownership bookkeeping, convergence, the
 * probe's latency and the JSON result. The transport (how a heartbeat goes out and how its
 * answer comes back) stays in each generator, which provides:
 *
 *   STORM_NAME                  the generator's name, for messages
 *   STORM_MEMBER_TRANSPORT      extra fields of struct member (may be empty)
 *   UNANSWERED_NAMES            NULL-terminated names of the causes of calls without an answer
 *                               (index 0: the client's request timeout, 1: the connection lost)
 *
 * and calls storm_setup, opens its connections, then storm_phases with its event loop, which
 * sends the requests of the members due (send_due; sending() for each) and calls on_response() for every
 * decoded answer and unanswered() for every call without one. See h2storm.c for the member
 * behaviour.
 */
#ifndef KIP848_STORM_H
#define KIP848_STORM_H

#include "netutil.h"

#include <stdlib.h>

#define MAX_TOPICS 64
#define HIST_MS 600000 /* latency histograms: 1 ms buckets up to 600 s */
#define MAX_CODES 64
#define MAX_CAUSES 16

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
    double t0;
    double next_at;
    STORM_MEMBER_TRANSPORT
};

/* What a generator decoded from one answer; the assignment (if any) is in g_tmp. */
struct response {
    int error_code, member_epoch, hb_ms, has_assignment;
    char member_id[64];
    char message[256];
};

/* ---------------------------------------------------------------- globals */

static const char *UNANSWERED_NAMES[MAX_CAUSES];
static char g_host[256] = "127.0.0.1", g_port[256] = "0";
static struct topic g_topics[MAX_TOPICS];
static int g_ntopics, g_total_partitions;
static int *g_owners; /* per global partition: how many members own it */
static struct group g_storm, g_probe;
static struct member *g_members;
static int g_nmembers, g_nconn = 8;
static int g_epoll;
static double g_join_rate, g_request_timeout = 30.0, g_settle = 10.0, g_max_seconds = 600.0;
static int g_rebalance_timeout_ms = 300000, g_probe_interval_ms = 50;
static double g_t_storm; /* 0 until the storm starts */
static unsigned long long g_rng = 0x9E3779B97F4A7C15ULL;

/* counters */
static long g_calls, g_probe_calls, g_errors_by_code[MAX_CODES][2], g_unanswered_by[MAX_CAUSES];
static long g_fenced_responses, g_unknown_responses, g_members_fenced, g_retriable;
static long g_storm_hist[HIST_MS + 1], g_probe_hist[HIST_MS + 1];
static double g_probe_max, g_storm_max, g_last_join_answered, g_last_join_sent;
static char g_fatal[512];

/* timeline: one sample per second of the storm */
#define MAX_SAMPLES 4000
struct sample { double t; int joined, at_epoch, epoch, covered, inflight; long calls; double probe_max; };
static struct sample g_samples[MAX_SAMPLES];
static int g_nsamples;
static double g_sample_probe_max;

/* the assignment of the answer being handled: global partition indexes */
static int *g_tmp;
static int g_tmp_n, g_tmp_cap;

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

static void tmp_push(int gp) {
    if (g_tmp_n == g_tmp_cap) { g_tmp_cap = g_tmp_cap ? 2 * g_tmp_cap : 64; g_tmp = realloc(g_tmp, sizeof(int) * g_tmp_cap); }
    g_tmp[g_tmp_n++] = gp;
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

/* Send the requests of the members due now (5,000 at most; the rest on the next call). */
static void send_due(double now, void (*send)(int mi, double now)) {
    for (int k = 0; k < 5000; k++) {
        int mi = pop_due(now);
        if (mi < 0) break;
        if (!g_members[mi].inflight) send(mi, now);
    }
}

/* Milliseconds until the next member is due, at most ``cap``. */
static double due_in_ms(double now, double cap) {
    if (g_heap_n > 0) {
        double d = (g_heap[0].t - now) * 1e3;
        if (d < cap) return d < 0 ? 0 : d;
    }
    return cap;
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

/* ---------------------------------------------------------------- answers */

/* Called by the generator when a request goes out. */
static void sending(struct member *m, double now) {
    m->carrying_owned = m->full || m->send_owned;
    m->was_join = m->epoch == 0;
    m->timed_out = 0;
    m->t0 = now;
    m->next_at = 0;
    m->inflight = 1;
    if (m->was_join && m->g == &g_storm && !m->ever_joined) g_last_join_sent = now;
}

static void retry_later(int mi, double now) {
    struct member *m = &g_members[mi];
    m->backoff_ms = m->backoff_ms ? (m->backoff_ms * 2 > 1000 ? 1000 : m->backoff_ms * 2) : 100;
    m->full = 1;
    schedule(mi, now + m->backoff_ms * (0.8 + 0.4 * rnd()) / 1000.0);
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

/* The call in flight ended without an answer (cause: an index of UNANSWERED_NAMES). */
static void unanswered(int mi, int why, double now) {
    struct member *m = &g_members[mi];
    m->inflight = 0;
    record_latency(m, now);
    g_unanswered_by[why]++;
    retry_later(mi, now);
}

/* The call in flight was answered with ``r`` (its assignment, if any, in g_tmp). */
static void on_response(int mi, const struct response *r, double now) {
    struct member *m = &g_members[mi];
    m->inflight = 0;
    record_latency(m, now);
    if (r->error_code == ERR_FENCED || r->error_code == ERR_UNKNOWN_MEMBER) {
        if (r->error_code == ERR_FENCED) g_fenced_responses++; else g_unknown_responses++;
        count_code(r->error_code, 0);
        if (!m->times_fenced++) g_members_fenced++;
        set_owned(m, NULL, 0);
        m->epoch = 0;
        m->full = 1;
        m->acked = 0;
        m->send_owned = 0;
        schedule(mi, now);
        return;
    }
    if (r->error_code == ERR_LOAD || r->error_code == ERR_NOT_AVAILABLE || r->error_code == ERR_NOT_COORDINATOR) {
        count_code(r->error_code, 1);
        retry_later(mi, now);
        return;
    }
    if (r->error_code != ERR_NONE) {
        char msg[512];
        count_code(r->error_code, 0);
        snprintf(msg, sizeof msg, "error_code %d for member %s at epoch %d: %s", r->error_code, m->id, m->epoch, r->message);
        fatal(msg);
        return;
    }
    if (r->member_id[0] && strcmp(r->member_id, m->id)) { fatal("the response names another member id"); return; }
    if (r->member_epoch <= 0) { fatal("a successful heartbeat answered a member epoch <= 0"); return; }
    m->backoff_ms = 0;
    m->full = 0;
    if (m->carrying_owned) { m->send_owned = 0; m->acked = 1; }
    if (!m->ever_joined) {
        m->ever_joined = 1;
        m->g->joined++;
        if (m->g == &g_storm) g_last_join_answered = now;
    }
    m->epoch = r->member_epoch;
    if (r->hb_ms > 0) m->hb_ms = r->hb_ms;
    int changed = 0;
    if (r->has_assignment) {
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
    if (!f) { perror(STORM_NAME ": SPECFILE"); return -1; }
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
        } else { fprintf(stderr, STORM_NAME ": bad spec line: %s", line); fclose(f); return -1; }
    }
    fclose(f);
    return 0;
}

/* Read the spec and make the members (storm members first, then the probe's; member i of the
 * storm uses connection i % connections). Returns 0, or 2 after printing why not. */
static int storm_setup(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: " STORM_NAME " SPECFILE\n"); return 2; }
    int storm_members = 0, probe_members = 3;
    if (read_spec(argv[1], &storm_members, &probe_members)) return 2;
    if (storm_members < 1 || probe_members < 1 || g_nconn < 1 || !g_storm.partitions || !g_probe.partitions ||
        !g_storm.id[0] || !g_probe.id[0]) {
        fprintf(stderr, STORM_NAME ": the spec needs members, connections, group, probe_group and topics\n");
        return 2;
    }
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
        m->conn = i < storm_members ? i % g_nconn : g_nconn; /* the generator may change the probe's */
        for (int k = 0; k < 22; k++) m->id[k] = b64[(int)(rnd() * 64)];
        m->full = 1;
        m->hb_ms = 5000;
    }
    return 0;
}


/* The text with quotes, backslashes and control characters replaced (for a JSON string). */
static const char *json_safe(char *s) {
    for (char *p = s; *p; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20) *p = '\'';
    return s;
}

/* The upper edge of the 1 ms bucket holding the q-quantile, but never above the maximum seen. */
static double percentile(const long *hist, long total, double q, double max) {
    if (!total) return 0;
    long seen = 0;
    for (long ms = 0; ms <= HIST_MS; ms++) {
        seen += hist[ms];
        if (seen >= q * total) return ms + 1 < max ? ms + 1 : max;
    }
    return HIST_MS < max ? HIST_MS : max;
}

/* The JSON result (one line); ``ok``: the storm converged and settled. */
static void storm_print(int ok, double end, double cpu) {
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
           ok ? g_storm.converged_at - g_t_storm : -1.0, epoch, g_storm.count, g_storm.joined,
           at_epoch(&g_storm, epoch), g_storm.partitions, g_storm.covered, g_storm.multi, g_calls,
           percentile(g_storm_hist, g_calls, 0.99, g_storm_max), g_storm_max, g_members_fenced, g_fenced_responses,
           g_unknown_responses, g_retriable, unanswered_total, g_probe_calls,
           percentile(g_probe_hist, g_probe_calls, 0.50, g_probe_max),
           percentile(g_probe_hist, g_probe_calls, 0.99, g_probe_max),
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
}

/* The run, once the generator's connections are up: the probe group joins and settles (60 s
 * at most), then every storm member joins (at once, or at join_rate per second) and the storm
 * runs until it has converged and settled or max_seconds have passed; prints the result.
 * ``run`` is the generator's event loop: run(done, until) returns 1 once done(now) says so. */
static int storm_phases(int (*run)(int (*done)(double), double until)) {
    double t = now_s();
    for (int i = g_probe.first; i < g_probe.first + g_probe.count; i++) schedule(i, t);
    if (!run(probe_ready, t + 60)) {
        fprintf(stderr, STORM_NAME ": the probe group did not settle within 60 s: %s\n", g_fatal);
        return 1;
    }
    for (int i = g_probe.first; i < g_probe.first + g_probe.count; i++) schedule(i, now_s());

    double cpu0 = cpu_s();
    g_t_storm = now_s();
    g_next_sample = g_t_storm;
    for (int i = 0; i < g_storm.count; i++) schedule(i, g_t_storm + (g_join_rate > 0 ? i / g_join_rate : 0));
    int ok = run(storm_done, g_t_storm + g_max_seconds);
    storm_print(ok, now_s(), cpu_s() - cpu0);
    return g_fatal[0] ? 1 : 0;
}

#endif
