/*
 * core/h2.c - HTTP/2 sessions with libnghttp2 (see core/h2.h). The loop thread that owns the
 * connection reads and feeds the session; requests go to the engine's queue; Ruby threads answer
 * their streams under the connection's h2_lock. Without the GVL in the loop, with it from the
 * response calls (never blocking: non-blocking writes, the rest left to the loop).
 */
#include "core/h2.h"
#include "core/health.h"
#include "core/tempfile.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int mg_h2_preface(const mg_conn *c) {
  char buf[sizeof preface - 1];
  ssize_t n = recv(c->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  /* "PRI" is no HTTP/1 method (RFC 9113 3.4): nghttp2 checks the rest of the preface */
  return n >= 3 && memcmp(buf, preface, (size_t)n) == 0;
}

#ifndef MG_HAVE_H2

int mg_h2_available(void) { return 0; }
const char *mg_h2_library(void) { return ""; }
void mg_h2_begin(mg_engine *e, mg_conn *c) { mg_conn_close(e, c); }
void mg_h2_event(mg_engine *e, mg_conn *c) { mg_conn_close(e, c); }
void mg_h2_end(mg_conn *c) { (void)c; }
void mg_h2_kick(mg_engine *e, mg_conn *c) { (void)e; (void)c; }
void mg_h2_stop_all(mg_engine *e) { (void)e; }
mg_h2_req *mg_h2_take(mg_engine *e) { (void)e; return NULL; }
void mg_h2_req_free(mg_h2_req *q) { (void)q; }
void mg_h2_drop_all(mg_engine *e) { (void)e; }
mg_h2_stream *mg_h2_lock_stream(mg_engine *e, int fd, int slot, uint64_t seq, mg_conn **c) {
  (void)e; (void)fd; (void)slot; (void)seq; *c = NULL;
  return NULL;
}
void mg_h2_unlock(mg_engine *e, mg_conn *c) { (void)e; (void)c; }
int mg_h2_respond_head(mg_conn *c, mg_h2_stream *s, int status, const mg_h2_nv *nv, size_t n, int body) {
  (void)c; (void)s; (void)status; (void)nv; (void)n; (void)body;
  return -1;
}
int mg_h2_write(mg_conn *c, mg_h2_stream *s, const char *data, size_t len) { (void)c; (void)s; (void)data; (void)len; return -1; }
int mg_h2_finish(mg_conn *c, mg_h2_stream *s) { (void)c; (void)s; return -1; }
int mg_h2_send_file(mg_conn *c, mg_h2_stream *s, int fd, uint64_t len) { (void)c; (void)s; (void)len; close(fd); return -1; }
void mg_h2_reset(mg_conn *c, mg_h2_stream *s) { (void)c; (void)s; }
size_t mg_h2_backlog(const mg_h2_stream *s) { (void)s; return 0; }
size_t mg_h2_queued(const mg_conn *c) { (void)c; return 0; }
int mg_h2_started(const mg_h2_stream *s) { (void)s; return 0; }
int mg_h2_head_request(const mg_h2_stream *s) { (void)s; return 0; }
long mg_h2_req_peer_der(mg_h2_req *q, unsigned char **der) { (void)q; *der = NULL; return 0; }

#else

#include <nghttp2/nghttp2.h>

enum { ST_FREE = 0, ST_RECV, ST_APP, ST_ANSWERED };

struct mg_h2_stream {
  uint64_t seq;          /* 0: a free slot */
  int32_t id;
  int state;
  mg_h2_req *req;        /* while its request is received (then the engine's queue owns it) */
  size_t field_bytes;    /* the header list's size as RFC 9113 counts it (name + value + 32) */
  int head_request;
  int started;           /* the response head was submitted */
  /* the response body: bytes waiting to be framed, or a file */
  char *out;
  size_t olen, ooff, ocap;
  int ofd;
  off_t opos;
  uint64_t oleft;
  int eof;               /* no more bytes will come */
  int deferred;          /* nghttp2 was told to wait for bytes (resume when some come) */
};

typedef struct mg_h2 {
  nghttp2_session *s;
  mg_engine *e;
  mg_conn *c;
  mg_h2_stream slots[MG_H2_SLOTS];
  int in_app;            /* streams handed to Ruby and not answered yet */
  int receiving;         /* streams whose request is not complete */
  int dead;              /* the socket failed or the peer left: close */
  int calm;              /* a limit was passed: GOAWAY ENHANCE_YOUR_CALM, then close */
  int continuations;     /* CONTINUATION frames of the header block being received */
  int empties;           /* frames in a row that carried nothing (CVE-2019-9518) */
  size_t queued;         /* response body bytes waiting in its streams' memory for the client */
  int waiting;           /* output waits for the client (socket or flow control) */
  uint64_t body_sent;    /* response body bytes framed (the client's windows let them go) */
  uint64_t sent_seen, body_seen; /* c->out.sent and body_sent when progress was last seen */
  int64_t progress_ms;   /* ... and when */
  double resets;         /* the rapid-reset bucket */
  int64_t resets_ms;
} mg_h2;

int mg_h2_available(void) { return 1; }

const char *mg_h2_library(void) {
  nghttp2_info *info = nghttp2_version(0);
  return info ? info->version_str : "";
}

static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- requests ---- */

void mg_h2_req_free(mg_h2_req *q) {
  if (!q) return;
  if (q->bfd >= 0) close(q->bfd);
  free(q->buf);
  free(q->fields);
  free(q->body);
  free(q);
}

static mg_h2_req *req_new(mg_h2 *h, int slot) {
  mg_h2_req *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  mg_conn *c = h->c;
  q->c = c;
  q->fd = c->fd;
  q->slot = slot;
  q->seq = h->slots[slot].seq;
  q->listener = c->listener;
  q->tls = c->tls.ssl != NULL;
  q->method = q->path = q->scheme = q->authority = q->protocol = -1;
  q->bfd = -1;
  q->arrival_ns = q->head_ns = wall_ns();
  return q;
}

static int req_add(mg_h2_req *q, const uint8_t *name, size_t nlen, const uint8_t *value, size_t vlen) {
  if (mg_grow(&q->buf, &q->cap, q->len + nlen + vlen, 1024) != 0) return -1;
  if (q->nfields == q->fcap) {
    size_t cap = q->fcap ? q->fcap * 2 : 16;
    mg_h2_field *f = realloc(q->fields, cap * sizeof *f);
    if (!f) return -1;
    q->fields = f;
    q->fcap = cap;
  }
  mg_h2_field *f = &q->fields[q->nfields];
  f->name = (uint32_t)q->len;
  f->name_len = (uint32_t)nlen;
  memcpy(q->buf + q->len, name, nlen);
  q->len += nlen;
  f->value = (uint32_t)q->len;
  f->value_len = (uint32_t)vlen;
  memcpy(q->buf + q->len, value, vlen);
  q->len += vlen;
  int i = (int)q->nfields++;
  if (nlen > 1 && name[0] == ':') {
    if (nlen == 7 && memcmp(name, ":method", 7) == 0) q->method = i;
    else if (nlen == 5 && memcmp(name, ":path", 5) == 0) q->path = i;
    else if (nlen == 7 && memcmp(name, ":scheme", 7) == 0) q->scheme = i;
    else if (nlen == 10 && memcmp(name, ":authority", 10) == 0) q->authority = i;
    else if (nlen == 9 && memcmp(name, ":protocol", 9) == 0) q->protocol = i;
  }
  return 0;
}

static int req_body(mg_engine *e, mg_h2_req *q, const uint8_t *data, size_t n) {
  q->btotal += n;
  return mg_spool(e->cfg.tmpdir, e->cfg.body_buffer_size, &q->body, &q->blen, &q->bcap, &q->bfd, (const char *)data, n);
}

static void queue_push(mg_engine *e, mg_h2_req *q) {
  q->ready_ns = wall_ns();
  pthread_mutex_lock(&e->h2_lock);
  q->next = NULL;
  if (e->h2_tail) e->h2_tail->next = q; else e->h2_head = q;
  e->h2_tail = q;
  atomic_fetch_add(&e->h2_ready, 1);
  pthread_mutex_unlock(&e->h2_lock);
  atomic_fetch_add(&e->requests, 1);
}

/* Whether +q+'s stream still waits for its answer. */
static int req_live(mg_h2_req *q) {
  mg_conn *c = q->c;
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  int live = h && h->slots[q->slot].seq == q->seq && h->slots[q->slot].state == ST_APP;
  pthread_mutex_unlock(&c->h2_lock);
  return live;
}

mg_h2_req *mg_h2_take(mg_engine *e) {
  while (atomic_load(&e->h2_ready) > 0) {
    pthread_mutex_lock(&e->h2_lock);
    mg_h2_req *q = e->h2_head;
    if (q) {
      e->h2_head = q->next;
      if (!e->h2_head) e->h2_tail = NULL;
      atomic_fetch_sub(&e->h2_ready, 1);
    }
    pthread_mutex_unlock(&e->h2_lock);
    if (!q) return NULL;
    if (req_live(q)) {
      q->taken_ns = wall_ns();
      return q;
    }
    atomic_fetch_add(&e->abandoned, 1); /* reset by its client before a thread took it */
    atomic_fetch_sub(&e->requests, 1);
    mg_h2_req_free(q);
  }
  return NULL;
}

void mg_h2_drop_all(mg_engine *e) {
  pthread_mutex_lock(&e->h2_lock);
  mg_h2_req *q = e->h2_head;
  e->h2_head = e->h2_tail = NULL;
  atomic_store(&e->h2_ready, 0);
  pthread_mutex_unlock(&e->h2_lock);
  while (q) {
    mg_h2_req *next = q->next;
    mg_h2_req_free(q);
    q = next;
  }
}

/* ---- streams ---- */

static void stream_clear(mg_h2 *h, mg_h2_stream *st) {
  if (st->state == ST_RECV) { mg_h2_req_free(st->req); h->receiving--; }
  h->queued -= st->olen - st->ooff;
  if (st->state == ST_APP) h->in_app--;
  if (st->ofd >= 0) close(st->ofd);
  free(st->out);
  memset(st, 0, sizeof *st);
  st->ofd = -1;
}

static mg_h2_stream *stream_of(mg_h2 *h, int32_t id) {
  mg_h2_stream *st = nghttp2_session_get_stream_user_data(h->s, id);
  return st && st->id == id && st->seq ? st : NULL;
}

/* ---- callbacks (under h2_lock, from nghttp2_session_mem_recv/mem_send) ---- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *ud) {
  mg_h2 *h = ud;
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  int slot = -1;
  for (int i = 0; i < MG_H2_SLOTS; i++)
    if (h->slots[i].seq == 0) { slot = i; break; }
  if (slot < 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the stream is reset */
  mg_h2_stream *st = &h->slots[slot];
  st->seq = ++h->c->h2_seq;
  st->id = frame->hd.stream_id;
  st->state = ST_RECV;
  st->ofd = -1;
  st->req = req_new(h, slot);
  h->receiving++;
  if (!st->req) { stream_clear(h, st); return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; }
  nghttp2_session_set_stream_user_data(s, frame->hd.stream_id, st);
  return 0;
}

/* Answer a stream the engine refuses (431, 413) before its request is complete: what more the
 * client sends for it is dropped. */
static void answer_early(mg_h2 *h, mg_h2_stream *st, const char *status) {
  nghttp2_nv nv[] = {{(uint8_t *)":status", (uint8_t *)status, 7, 3, NGHTTP2_NV_FLAG_NONE},
                     {(uint8_t *)"content-length", (uint8_t *)"0", 14, 1, NGHTTP2_NV_FLAG_NONE}};
  mg_h2_req_free(st->req);
  st->req = NULL;
  st->state = ST_ANSWERED;
  h->receiving--;
  nghttp2_submit_response(h->s, st->id, nv, 2, NULL);
}

/* max_header_size and max_headers, enforced here: nghttp2 only advertises the first
 * (SETTINGS_MAX_HEADER_LIST_SIZE). Past either the stream is answered 431 (what more of its
 * header block comes is decoded, as HPACK needs, and dropped); the other streams go on. */
static int on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  (void)s; (void)flags;
  mg_h2 *h = ud;
  mg_h2_stream *st = stream_of(h, frame->hd.stream_id);
  if (!st || st->state != ST_RECV) return 0;
  st->field_bytes += nlen + vlen + 32;
  if (st->field_bytes > h->e->cfg.max_head || st->req->nfields >= h->e->cfg.max_headers + 5) {
    answer_early(h, st, "431");
    return 0;
  }
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0; /* trailers: counted, not kept */
  if (req_add(st->req, name, nlen, value, vlen) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud) {
  (void)s; (void)flags;
  mg_h2 *h = ud;
  mg_h2_stream *st = stream_of(h, id);
  if (!st || st->state != ST_RECV) return 0;
  if (st->req->btotal + len > h->e->cfg.max_body) {
    answer_early(h, st, "413"); /* max_body_size */
    return 0;
  }
  if (req_body(h->e, st->req, data, len) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  return 0;
}

/* The reset bucket: one token per stream closed before its answer, whoever reset it: the client
 * (rapid reset, CVE-2023-44487) or the server for a rule the client broke on purpose
 * (MadeYouReset, CVE-2025-8671). Either way the app may already be at work on it. */
static int reset_allowed(mg_h2 *h) {
  int64_t now = mg_now_ms();
  h->resets += (double)(now - h->resets_ms) * MG_H2_RESET_RATE / 1000.0;
  if (h->resets > MG_H2_RESET_BURST) h->resets = MG_H2_RESET_BURST;
  h->resets_ms = now;
  if (h->resets < 1) return 0;
  h->resets -= 1;
  return 1;
}

/* Empty-frame flood (CVE-2019-9518): frames that carry nothing and end nothing, MG_H2_MAX_EMPTY
 * in a row, end the connection. 0, or the callback's failure. */
static int empty_frame(mg_h2 *h, int empty) {
  if (!empty) { h->empties = 0; return 0; }
  if (++h->empties <= MG_H2_MAX_EMPTY) return 0;
  h->calm = 1;
  return NGHTTP2_ERR_CALLBACK_FAILURE;
}

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *frame, void *ud) {
  (void)s;
  mg_h2 *h = ud;
  if (frame->hd.type != NGHTTP2_CONTINUATION) h->continuations = 0;
  if (frame->hd.type == NGHTTP2_DATA &&
      empty_frame(h, frame->hd.length <= frame->data.padlen && !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) != 0)
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
    return 0;
  mg_h2_stream *st = stream_of(h, frame->hd.stream_id);
  if (!st || st->state != ST_RECV) return 0;
  mg_h2_req *q = st->req;
  if (q->method < 0) return 0; /* nghttp2 resets a request without its pseudo-fields */
  if (q->bfd >= 0 && lseek(q->bfd, 0, SEEK_SET) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const mg_h2_field *m = &q->fields[q->method];
  st->head_request = m->value_len == 4 && memcmp(q->buf + m->value, "HEAD", 4) == 0;
  mg_conn *c = h->c;
  memcpy(q->remote, c->proxy_addr[0] ? c->proxy_addr : mg_conn_peer_text(c), sizeof q->remote);
  st->req = NULL;
  st->state = ST_APP;
  h->receiving--;
  h->in_app++;
  c->requests++;
  queue_push(h->e, q);
  return 0;
}

/* CONTINUATION flood (CVE-2024-27316 and kin): a header block in more frames than any
 * max_header_size needs ends the connection. */
static int on_begin_frame(nghttp2_session *s, const nghttp2_frame_hd *hd, void *ud) {
  (void)s;
  mg_h2 *h = ud;
  if (hd->type == NGHTTP2_CONTINUATION && ++h->continuations > MG_H2_MAX_CONTINUATIONS) {
    h->calm = 1;
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  /* an empty header block fragment (HEADERS or CONTINUATION without payload) */
  if (hd->type == NGHTTP2_HEADERS)
    return empty_frame(h, hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM));
  if (hd->type == NGHTTP2_CONTINUATION)
    return empty_frame(h, hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_HEADERS));
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t code, void *ud) {
  (void)code;
  mg_h2 *h = ud;
  mg_h2_stream *st = stream_of(h, id);
  if (st && (st->state == ST_RECV || st->state == ST_APP) && !h->calm && !reset_allowed(h)) {
    h->calm = 1;
    nghttp2_session_terminate_session(s, NGHTTP2_ENHANCE_YOUR_CALM);
  }
  if (st) stream_clear(h, st);
  nghttp2_session_set_stream_user_data(s, id, NULL);
  return 0;
}

static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  (void)s; (void)id;
  mg_h2 *h = ud;
  mg_h2_stream *st = src->ptr;
  if (st->ofd >= 0) {
    size_t want = st->oleft < len ? (size_t)st->oleft : len;
    ssize_t n = want ? pread(st->ofd, buf, want, st->opos) : 0;
    if (n <= 0 && want) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the file shrank */
    st->opos += n;
    st->oleft -= (uint64_t)n;
    if (st->oleft == 0) { *flags |= NGHTTP2_DATA_FLAG_EOF; close(st->ofd); st->ofd = -1; }
    h->body_sent += (uint64_t)n;
    return n;
  }
  size_t avail = st->olen - st->ooff;
  if (avail == 0 && !st->eof) { st->deferred = 1; return NGHTTP2_ERR_DEFERRED; }
  size_t n = avail < len ? avail : len;
  memcpy(buf, st->out + st->ooff, n);
  st->ooff += n;
  h->queued -= n;
  h->body_sent += n;
  if (st->ooff == st->olen) {
    st->ooff = st->olen = 0;
    if (st->ocap > MG_H2_KEEP_BUFFER) { free(st->out); st->out = NULL; st->ocap = 0; } /* drained: give it back */
  }
  if (st->eof && st->olen == 0) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

/* ---- the socket ---- */

static ssize_t sock_read(mg_conn *c, void *buf, size_t len) {
  if (c->tls.ssl) return mg_tls_read(&c->tls, buf, len);
  for (;;) {
    ssize_t n = recv(c->fd, buf, len, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    return n;
  }
}

/* Write what is queued and what the session has to send, as far as the socket takes it:
 * 1 all sent, 0 the socket is full, -1 it failed. */
static int pump(mg_h2 *h) {
  mg_conn *c = h->c;
  for (;;) {
    int r = mg_out_flush(&c->out, c->fd, &c->tls);
    if (r <= 0) return r;
    size_t batch = 0;
    ssize_t n = 0;
    const uint8_t *data;
    while (batch < MG_H2_OUT_BATCH && (n = nghttp2_session_mem_send(h->s, &data)) > 0) {
      mg_out_queue(&c->out, (const char *)data, (size_t)n);
      batch += (size_t)n;
    }
    if (n < 0) return -1;
    if (batch == 0) return 1;
  }
}

static int out_pending(const mg_conn *c) { return c->out.head != NULL; }

/* Whether response bytes wait in the streams (in memory, or a file's rest) for the client. */
static int backlogged(const mg_h2 *h) {
  if (h->queued) return 1;
  for (int i = 0; i < MG_H2_SLOTS; i++)
    if (h->slots[i].seq && h->slots[i].ofd >= 0) return 1;
  return 0;
}

void mg_h2_end(mg_conn *c) {
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  c->h2 = NULL;
  if (h) {
    for (int i = 0; i < MG_H2_SLOTS; i++)
      if (h->slots[i].seq) stream_clear(h, &h->slots[i]);
    nghttp2_session_del(h->s);
    free(h);
  }
  pthread_mutex_unlock(&c->h2_lock);
}

void mg_h2_kick(mg_engine *e, mg_conn *c) {
  atomic_store(&c->h2_kick, 1);
  uint64_t s = atomic_load(&c->state);
  if (mg_state_st(s) != MG_ARMED) return; /* its owner looks at the kick after it arms */
  if (!atomic_compare_exchange_strong(&c->state, &s, (mg_state_gen(s) << 8) | MG_OWNED)) return;
  atomic_store(&c->h2_kick, 0);
  mg_conn_arm(e, c, MG_EV_OUT); /* ready at once for a loop thread: it writes, or closes */
}

static void close_conn(mg_engine *e, mg_conn *c) {
  mg_h2_end(c);
  mg_conn_close(e, c);
}

/* After an event: close, or hand the connection back to the loop with its deadline. Called with
 * h2_lock held; releases it. */
static void settle(mg_engine *e, mg_conn *c, mg_h2 *h) {
  int pending = out_pending(c);
  int done = h->dead || (!nghttp2_session_want_read(h->s) && !nghttp2_session_want_write(h->s) && !pending) ||
             (c->h2_goaway && h->in_app == 0 && h->receiving == 0 && !pending && !nghttp2_session_want_write(h->s));
  int calm = h->calm;
  int64_t now = mg_now_ms();
  /* output waits for the client (the socket, or its flow-control windows: a zero window, a
   * dribble): write_timeout since the client last made progress, whatever else it sends. With
   * body bytes waiting for its windows, progress is MG_H2_MIN_PROGRESS of them let go (PING
   * ACKs read, or windows opened a byte at a time, are none); else any byte the socket took. */
  int waiting = pending || backlogged(h);
  int progress = !h->waiting ||
                 (backlogged(h) ? h->body_sent - h->body_seen >= MG_H2_MIN_PROGRESS : c->out.sent != h->sent_seen);
  if (waiting && progress) { h->sent_seen = c->out.sent; h->body_seen = h->body_sent; h->progress_ms = now; }
  h->waiting = waiting;
  if (waiting) c->deadline_ms = h->progress_ms + e->cfg.write_timeout_ms;
  else if (h->receiving) c->deadline_ms = now + e->cfg.body_timeout_ms;
  else if (h->in_app) c->deadline_ms = 0;
  else c->deadline_ms = now + e->cfg.keepalive_timeout_ms;
  pthread_mutex_unlock(&c->h2_lock);
  if (done && calm) { /* a flood's GOAWAY is out: the client still sending must not reset it away */
    mg_h2_end(c);
    mg_conn_begin_close(e, c);
    return;
  }
  if (done) { close_conn(e, c); return; }
  mg_conn_arm(e, c, pending ? (MG_EV_IN | MG_EV_OUT) : MG_EV_IN);
  /* a response call that kicked meanwhile found the connection owned: take it up now */
  if (atomic_load(&c->h2_kick)) mg_h2_kick(e, c);
}

/* GOAWAY NO_ERROR naming the last stream taken: no new stream; those under way are answered,
 * then the connection closes. Under h2_lock. */
static void goaway(mg_conn *c, mg_h2 *h) {
  if (c->h2_goaway) return;
  nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->s), NGHTTP2_NO_ERROR, NULL, 0);
  c->h2_goaway = 1;
}

#define READ_CHUNK 16384
#define READ_BUDGET (1024 * 1024)

void mg_h2_event(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c));
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  if (!h) { pthread_mutex_unlock(&c->h2_lock); mg_conn_close(e, c); return; }
  atomic_store(&c->h2_kick, 0);
  /* up to READ_BUDGET a turn: past it the connection is armed again behind the other ready ones
   * (its input is still there) */
  size_t budget = READ_BUDGET;
  while (!h->dead && !h->calm && budget > 0 && nghttp2_session_want_read(h->s)) {
    uint8_t buf[READ_CHUNK];
    ssize_t n = sock_read(c, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) { h->dead = 1; break; }
    budget -= (size_t)n < budget ? (size_t)n : budget;
    ssize_t r = nghttp2_session_mem_recv(h->s, buf, (size_t)n);
    if (r < 0) {
      /* a callback refused (a flood), nghttp2 found a flood (PING or SETTINGS ACKs the client does
       * not read), or the input is not HTTP/2: GOAWAY, then close */
      if (r == NGHTTP2_ERR_FLOODED) h->calm = 1;
      nghttp2_session_terminate_session(h->s, h->calm ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
      h->calm = 1;
    }
  }
  /* a graceful stop, a drain (every connection closes after its answers), or
   * max_keepalive_requests streams served: no new stream, then the connection closes */
  if (mg_health_closing(e) || c->requests >= e->cfg.max_keepalive_requests) goaway(c, h);
  if (!h->dead && pump(h) < 0) h->dead = 1;
  if (h->calm && !out_pending(c)) h->dead = 1; /* its GOAWAY is out */
  int ready = atomic_load(&e->h2_ready);
  settle(e, c, h);
  if (ready > 1) mg_engine_wake(e); /* the other threads in the loop take the rest */
}

void mg_h2_stop_all(mg_engine *e) {
  int hw = atomic_load(&e->hiwater);
  for (int fd = 0; fd < hw; fd++) {
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    pthread_mutex_lock(&c->h2_lock);
    mg_h2 *h = c->h2;
    int kick = 0;
    if (h && !h->dead && !c->h2_goaway) {
      goaway(c, h);
      if (pump(h) < 0) h->dead = 1;
      kick = 1; /* its owner decides whether it closes now */
    }
    pthread_mutex_unlock(&c->h2_lock);
    if (kick) mg_h2_kick(e, c);
  }
}

void mg_h2_begin(mg_engine *e, mg_conn *c) {
  mg_h2 *h = calloc(1, sizeof *h);
  nghttp2_session_callbacks *cb = NULL;
  nghttp2_option *opt = NULL;
  if (!h || nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&opt) != 0) goto fail;
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_option_set_max_outbound_ack(opt, 1000);  /* PING / SETTINGS floods */
  nghttp2_option_set_max_settings(opt, 32);
  h->e = e;
  h->c = c;
  h->resets = MG_H2_RESET_BURST;
  h->resets_ms = mg_now_ms();
  for (int i = 0; i < MG_H2_SLOTS; i++) h->slots[i].ofd = -1;
  if (nghttp2_session_server_new2(&h->s, cb, h, opt) != 0) goto fail;
  nghttp2_session_callbacks_del(cb);
  nghttp2_option_del(opt);
  nghttp2_settings_entry iv[] = {
    {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, MG_H2_MAX_STREAMS},
    {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, (uint32_t)e->cfg.max_head},
    {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
  };
  nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
  pthread_mutex_lock(&c->h2_lock);
  c->h2 = h;
  c->h2_goaway = 0;
  c->phase = MG_PH_H2;
  pthread_mutex_unlock(&c->h2_lock);
  mg_h2_event(e, c);
  return;
fail:
  if (cb) nghttp2_session_callbacks_del(cb);
  if (opt) nghttp2_option_del(opt);
  free(h);
  mg_conn_close(e, c);
}

/* ---- responses (with the GVL, from any Ruby thread) ---- */

mg_h2_stream *mg_h2_lock_stream(mg_engine *e, int fd, int slot, uint64_t seq, mg_conn **cp) {
  *cp = NULL;
  if (fd < 0 || fd >= e->max_fds || slot < 0 || slot >= MG_H2_SLOTS || !e->conns[fd]) return NULL;
  mg_conn *c = e->conns[fd];
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  if (!h || h->dead || h->slots[slot].seq != seq || h->slots[slot].state != ST_APP) {
    pthread_mutex_unlock(&c->h2_lock);
    return NULL;
  }
  *cp = c;
  return &h->slots[slot];
}

void mg_h2_unlock(mg_engine *e, mg_conn *c) {
  mg_h2 *h = c->h2;
  int kick = 0;
  if (h && !h->dead) {
    if (pump(h) < 0) h->dead = 1;
    /* a backlog the loop has not seen yet: its settle starts the write timeout */
    kick = h->dead || out_pending(c) || (c->h2_goaway && h->in_app == 0) || (!h->waiting && backlogged(h));
  }
  pthread_mutex_unlock(&c->h2_lock);
  if (kick) mg_h2_kick(e, c);
}

static void answered(mg_h2 *h, mg_h2_stream *st) {
  if (st->state == ST_APP) { st->state = ST_ANSWERED; h->in_app--; }
}

int mg_h2_respond_head(mg_conn *c, mg_h2_stream *st, int status, const mg_h2_nv *nv, size_t n, int body) {
  mg_h2 *h = c->h2;
  nghttp2_nv *v = malloc((n + 1) * sizeof *v);
  if (!v) return -1;
  char code[4] = {(char)('0' + status / 100 % 10), (char)('0' + status / 10 % 10), (char)('0' + status % 10), 0};
  v[0] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)code, 7, 3, NGHTTP2_NV_FLAG_NONE};
  for (size_t i = 0; i < n; i++)
    v[i + 1] = (nghttp2_nv){(uint8_t *)nv[i].name, (uint8_t *)nv[i].value, nv[i].name_len, nv[i].value_len, NGHTTP2_NV_FLAG_NONE};
  body = body && !st->head_request;
  nghttp2_data_provider prd = {.source.ptr = st, .read_callback = read_body};
  int r = nghttp2_submit_response(h->s, st->id, v, n + 1, body ? &prd : NULL);
  free(v);
  if (r != 0) return -1;
  st->started = 1;
  if (!body) { st->eof = 1; answered(h, st); }
  return 0;
}

static void resume(mg_h2 *h, mg_h2_stream *st) {
  if (st->deferred) {
    st->deferred = 0;
    nghttp2_session_resume_data(h->s, st->id);
  }
}

int mg_h2_write(mg_conn *c, mg_h2_stream *st, const char *data, size_t len) {
  if (st->eof || st->head_request) return 0;
  if (st->ooff > 0 && st->ooff == st->olen) st->ooff = st->olen = 0;
  if (st->olen + len > st->ocap) {
    if (st->ooff) { /* move what is left to the front first */
      memmove(st->out, st->out + st->ooff, st->olen - st->ooff);
      st->olen -= st->ooff;
      st->ooff = 0;
    }
    if (mg_grow(&st->out, &st->ocap, st->olen + len, 16384) != 0) return -1;
  }
  memcpy(st->out + st->olen, data, len);
  st->olen += len;
  c->h2->queued += len;
  resume(c->h2, st);
  return 0;
}

int mg_h2_finish(mg_conn *c, mg_h2_stream *st) {
  st->eof = 1;
  answered(c->h2, st);
  resume(c->h2, st);
  return 0;
}

int mg_h2_send_file(mg_conn *c, mg_h2_stream *st, int fd, uint64_t len) {
  if (st->head_request || len == 0) { close(fd); return mg_h2_finish(c, st); }
  st->ofd = fd;
  st->opos = 0;
  st->oleft = len;
  st->eof = 1;
  answered(c->h2, st);
  resume(c->h2, st);
  return 0;
}

void mg_h2_reset(mg_conn *c, mg_h2_stream *st) {
  answered(c->h2, st);
  nghttp2_submit_rst_stream(c->h2->s, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_INTERNAL_ERROR);
}

size_t mg_h2_backlog(const mg_h2_stream *st) { return st->olen - st->ooff; }
size_t mg_h2_queued(const mg_conn *c) { return c->h2 ? c->h2->queued : 0; }
int mg_h2_started(const mg_h2_stream *st) { return st->started; }
int mg_h2_head_request(const mg_h2_stream *st) { return st->head_request; }
long mg_h2_req_peer_der(mg_h2_req *q, unsigned char **der) {
  mg_conn *c = q->c;
  long n = 0;
  *der = NULL;
  pthread_mutex_lock(&c->h2_lock);
  if (c->h2 && c->h2->slots[q->slot].seq == q->seq) n = mg_tls_peer_der(&c->tls, der);
  pthread_mutex_unlock(&c->h2_lock);
  return n;
}

#endif
