/*
 * h2client.h: the HTTP/2 client plumbing shared by the load generators (h2hb.c, h2storm.c).
 *
 * Plain TCP (h2c, prior knowledge, netutil.h) with libnghttp2, non-blocking sockets driven by one epoll
 * loop; every function here is static so each generator is a single translation unit.
 */
#ifndef KIP848_H2CLIENT_H
#define KIP848_H2CLIENT_H

#include "netutil.h"

#include <nghttp2/nghttp2.h>

struct h2conn {
    int fd;
    nghttp2_session *session;
};

/* One protobuf varint; returns 0 if it runs past ``end`` or is longer than 10 bytes. */
static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (int shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return 1;
    }
    return 0;
}

/* Skip one field of wire type ``wt``; returns 0 if malformed. */
static int skip_field(const uint8_t **p, const uint8_t *end, unsigned wt) {
    uint64_t v;
    switch (wt) {
    case 0: return read_varint(p, end, &v);
    case 1: if (end - *p < 8) return 0; *p += 8; return 1;
    case 2: if (!read_varint(p, end, &v) || v > (uint64_t)(end - *p)) return 0; *p += v; return 1;
    case 5: if (end - *p < 4) return 0; *p += 4; return 1;
    default: return 0;
    }
}

/* nghttp2 send callback; the session's user data is the ``struct h2conn``. */
static ssize_t h2_on_send(nghttp2_session *s, const uint8_t *data, size_t len, int flags, void *ud) {
    (void)s; (void)flags;
    struct h2conn *c = ud;
    ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
    if (n < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? NGHTTP2_ERR_WOULDBLOCK : NGHTTP2_ERR_CALLBACK_FAILURE;
    return n;
}

/* A client session on a connected socket, with our settings (many streams, 1 MiB windows). */
static int h2_session_start(struct h2conn *c, nghttp2_session_callbacks *cbs) {
    if (nghttp2_session_client_new(&c->session, cbs, c)) return -1;
    nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 1000},
                                   {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20}};
    nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, 2);
    nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, 1 << 24);
    return 0;
}

/* Read what the socket has (bounded) into the session, then flush what it wants to send.
 * Returns NULL, or a description of what went wrong with the connection. */
static const char *h2_pump(struct h2conn *c) {
    static uint8_t buf[65536];
    for (int j = 0; j < 64; j++) {
        ssize_t r = recv(c->fd, buf, sizeof buf, 0);
        if (r > 0) {
            if (nghttp2_session_mem_recv(c->session, buf, (size_t)r) < 0) return "HTTP/2 protocol error";
            if ((size_t)r < sizeof buf) break;
        } else if (r == 0) {
            return "server closed the connection";
        } else {
            if (errno != EAGAIN && errno != EWOULDBLOCK) return "recv failed";
            break;
        }
    }
    if (nghttp2_session_send(c->session) < 0) return "HTTP/2 send failed";
    return NULL;
}

#endif
