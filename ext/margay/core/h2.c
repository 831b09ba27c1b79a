/*
 * core/h2.c - HTTP/2 sessions with libnghttp2 (see core/h2.h): a session's setup, its socket, the
 * events of the loop thread that owns the connection (read, feed the session, write, arm again or
 * close), the limits' callbacks, GOAWAY, and the stubs without libnghttp2. The requests the
 * session's callbacks build are core/h2_req.c's; the response calls Ruby threads make under the
 * connection's h2_lock are core/h2_respond.c's (shared structs: core/h2_priv.h).
 */
#include "core/h2.h"
#include "core/health.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int mg_h2_preface(const char *buf, size_t len) {
  size_t n = len < sizeof preface - 1 ? len : sizeof preface - 1;
  if (memcmp(buf, preface, n) != 0) return 0;
  return n == sizeof preface - 1 ? 1 : -1;
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
void mg_h2_await(mg_engine *e, int fd, int slot, uint64_t seq, int ms) { (void)e; (void)fd; (void)slot; (void)seq; usleep((useconds_t)ms * 1000); }
int mg_h2_respond_head(mg_conn *c, mg_h2_stream *s, int status, const mg_h2_nv *nv, size_t n, int body) {
  (void)c; (void)s; (void)status; (void)nv; (void)n; (void)body;
  return -1;
}
int mg_h2_early_hints(mg_conn *c, mg_h2_stream *s, const mg_h2_nv *nv, size_t n) {
  (void)c; (void)s; (void)nv; (void)n;
  return -1;
}
int mg_h2_write(mg_conn *c, mg_h2_stream *s, const char *data, size_t len) { (void)c; (void)s; (void)data; (void)len; return -1; }
int mg_h2_spill(mg_conn *c, mg_h2_stream *s, const char *data, size_t len) { (void)c; (void)s; (void)data; (void)len; return -1; }
int mg_h2_finish(mg_conn *c, mg_h2_stream *s) { (void)c; (void)s; return -1; }
int mg_h2_send_file(mg_conn *c, mg_h2_stream *s, int fd, uint64_t len) { (void)c; (void)s; (void)len; close(fd); return -1; }
void mg_h2_reset(mg_conn *c, mg_h2_stream *s) { (void)c; (void)s; }
ssize_t mg_h2_tunnel_read(mg_conn *c, mg_h2_stream *s, char *buf, size_t max) {
  (void)c; (void)s; (void)buf; (void)max;
  return 0;
}
size_t mg_h2_backlog(const mg_h2_stream *s) { (void)s; return 0; }
uint64_t mg_h2_spilled(const mg_h2_stream *s) { (void)s; return 0; }
uint64_t mg_h2_spill_left(const mg_h2_stream *s) { (void)s; return 0; }
size_t mg_h2_queued(const mg_conn *c) { (void)c; return 0; }
int mg_h2_started(const mg_h2_stream *s) { (void)s; return 0; }
int mg_h2_head_request(const mg_h2_stream *s) { (void)s; return 0; }
long mg_h2_req_peer_der(mg_h2_req *q, unsigned char **der) { (void)q; *der = NULL; return 0; }

#else

#include "core/h2_priv.h"

int mg_h2_available(void) { return 1; }

const char *mg_h2_library(void) {
  nghttp2_info *info = nghttp2_version(0);
  return info ? info->version_str : "";
}

/* ---- streams ---- */

void h2_stream_clear(mg_h2 *h, mg_h2_stream *st) {
  if (st->state == ST_RECV) { mg_h2_req_free(st->req); h->receiving--; }
  h->queued -= st->olen - st->ooff;
  if (st->state == ST_APP) h->in_app--;
  if (st->untaken) h->untaken--;
  if (st->ofd >= 0) close(st->ofd);
  free(st->out);
  free(st->in);
  if (st->tunnel) pthread_cond_broadcast(&h->c->h2_input); /* a read waiting finds it gone */
  memset(st, 0, sizeof *st);
  st->ofd = -1;
}

mg_h2_stream *h2_stream_of(mg_h2 *h, int32_t id) {
  mg_h2_stream *st = nghttp2_session_get_stream_user_data(h->s, id);
  return st && st->id == id && st->seq ? st : NULL;
}

/* ---- the limits' callbacks (under h2_lock, from nghttp2_session_mem_recv) ---- */

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
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) return h2_stream_ended(h, frame->hd.stream_id);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
    return h2_headers_done(h, frame->hd.stream_id);
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
  mg_h2_stream *st = h2_stream_of(h, id);
  if (st && (st->state == ST_RECV || st->state == ST_APP) && !h->calm && !reset_allowed(h)) {
    h->calm = 1;
    nghttp2_session_terminate_session(s, NGHTTP2_ENHANCE_YOUR_CALM);
  }
  if (st) h2_stream_clear(h, st);
  nghttp2_session_set_stream_user_data(s, id, NULL);
  return 0;
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

ssize_t h2_frame(mg_h2 *h) {
  size_t batch = 0;
  ssize_t n = 0;
  const uint8_t *data;
  while (batch < MG_H2_OUT_BATCH && (n = nghttp2_session_mem_send(h->s, &data)) > 0) {
    mg_out_queue(&h->c->out, (const char *)data, (size_t)n);
    batch += (size_t)n;
  }
  return n < 0 ? -1 : (ssize_t)batch;
}

int h2_pump(mg_h2 *h) {
  mg_conn *c = h->c;
  atomic_store_explicit(&c->h2_held_ns, 0, memory_order_relaxed); /* what was held goes out now */
  h->ended = 0;
  for (;;) {
    int r = mg_out_flush(&c->out, c->fd, &c->tls);
    if (r <= 0) return r;
    ssize_t batch = h2_frame(h);
    if (batch < 0) return -1;
    if (batch == 0) return 1;
  }
}

int h2_backlogged(const mg_h2 *h) {
  if (h->queued) return 1;
  for (int i = 0; i < MG_H2_SLOTS; i++)
    if (h->slots[i].seq && h->slots[i].ofd >= 0 && h->slots[i].oleft > 0) return 1;
  return 0;
}

void mg_h2_end(mg_conn *c) {
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  c->h2 = NULL;
  atomic_store(&c->h2_held_ns, 0); /* nothing held is left to write */
  if (h) {
    for (int i = 0; i < MG_H2_SLOTS; i++)
      if (h->slots[i].seq) h2_stream_clear(h, &h->slots[i]);
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
  /* Ready at once for a loop thread (it writes, or closes; its settle sets the deadline), unless
   * the socket is full: then no event comes until the client reads, and the write timeout runs
   * from now (a deadline set earlier, 0 while streams were in the app, would keep it open). */
  int64_t due = mg_now_ms() + e->cfg.write_timeout_ms;
  if (!c->deadline_ms || c->deadline_ms > due) c->deadline_ms = due;
  mg_conn_arm(e, c, MG_EV_OUT);
}

static void close_conn(mg_engine *e, mg_conn *c) {
  mg_h2_end(c);
  mg_conn_close(e, c);
}

/* After an event: close, or hand the connection back to the loop with its deadline. Called with
 * h2_lock held; releases it. */
static void settle(mg_engine *e, mg_conn *c, mg_h2 *h) {
  int pending = h2_out_pending(c);
  int done = h->dead || (!nghttp2_session_want_read(h->s) && !nghttp2_session_want_write(h->s) && !pending) ||
             (c->h2_goaway && h->in_app == 0 && h->receiving == 0 && !pending && !nghttp2_session_want_write(h->s));
  int calm = h->calm;
  int64_t now = mg_now_ms();
  /* output waits for the client (the socket, or its flow-control windows: a zero window, a
   * dribble): write_timeout since the client last made progress, whatever else it sends. With
   * body bytes waiting for its windows, progress is MG_H2_MIN_PROGRESS of them let go (PING
   * ACKs read, or windows opened a byte at a time, are none); else any byte the socket took. */
  int waiting = pending || h2_backlogged(h);
  int progress = !h->waiting ||
                 (h2_backlogged(h) ? h->body_sent - h->body_seen >= MG_H2_MIN_PROGRESS : c->out.sent != h->sent_seen);
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

/* Input for the session. A refusal (a callback's: a flood; nghttp2's: PING or SETTINGS ACKs the
 * client does not read, or input that is not HTTP/2) ends the session: GOAWAY, then close. */
static void feed(mg_h2 *h, const uint8_t *buf, size_t n) {
  ssize_t r = nghttp2_session_mem_recv(h->s, buf, n);
  if (r >= 0) return;
  if (r == NGHTTP2_ERR_FLOODED) h->calm = 1;
  nghttp2_session_terminate_session(h->s, h->calm ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
  h->calm = 1;
}

void mg_h2_event(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c));
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  if (!h) { pthread_mutex_unlock(&c->h2_lock); mg_conn_close(e, c); return; }
  atomic_store(&c->h2_kick, 0);
  /* h2c: the preface and what came with it, read by core/input.c before it told HTTP/2 */
  if (c->rlen > 0) {
    feed(h, (const uint8_t *)c->rbuf, c->rlen);
    c->rlen = 0;
    mg_conn_release_buffers(c); /* HTTP/2 reads into its own buffer */
  }
  /* up to READ_BUDGET a turn: past it the connection is armed again behind the other ready ones
   * (its input is still there) */
  size_t budget = READ_BUDGET;
  while (!h->dead && !h->calm && budget > 0 && nghttp2_session_want_read(h->s)) {
    uint8_t buf[READ_CHUNK];
    ssize_t n = sock_read(c, buf, sizeof buf);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) { h->dead = 1; break; }
    budget -= (size_t)n < budget ? (size_t)n : budget;
    feed(h, buf, (size_t)n);
  }
  /* a graceful stop, a drain (every connection closes after its answers), or
   * max_keepalive_requests streams served: no new stream, then the connection closes */
  if (mg_health_closing(e) || c->requests >= e->cfg.max_keepalive_requests) goaway(c, h);
  if (!h->dead && h2_pump(h) < 0) h->dead = 1;
  if (h->calm && !h2_out_pending(c)) h->dead = 1; /* its GOAWAY is out */
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
      if (h2_pump(h) < 0) h->dead = 1;
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
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, h2_on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, h2_on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, h2_on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_option_set_max_outbound_ack(opt, 1000);  /* PING / SETTINGS floods */
  nghttp2_option_set_max_settings(opt, 32);
  /* windows given back by h2_on_data, a tunnel's stream window as the app reads */
  nghttp2_option_set_no_auto_window_update(opt, 1);
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
    {NGHTTP2_SETTINGS_ENABLE_CONNECT_PROTOCOL, 1}, /* sent only on an extended_connect listener */
  };
  size_t niv = sizeof iv / sizeof iv[0] - (e->listeners[c->listener].h2_connect ? 0 : 1);
  nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, niv);
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

#endif
