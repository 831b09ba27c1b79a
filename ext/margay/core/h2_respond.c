/*
 * core/h2_respond.c - the response side of HTTP/2 streams (see core/h2.h, core/h2_priv.h): the
 * calls Ruby threads make (with the GVL, never blocking) on a stream they lock by its token, the
 * wait for a stream's client (mg_h2_await, without the GVL), and the data source nghttp2 frames a
 * body from (bytes queued in memory, or a file).
 */
#include "core/h2.h"

#ifdef MG_HAVE_H2

#include "core/h2_priv.h"
#include "core/health.h"
#include "core/tempfile.h"
#include "core/timing.h"
#include "http/status.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* nghttp2's data source of a stream's body: the bytes queued in memory, then the file's (a
 * spilled stream queues nothing in memory while its file has bytes left); deferred while there
 * are none and the body is not finished (mg_h2_write and mg_h2_spill resume it). */
static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
                         nghttp2_data_source *src, void *ud) {
  (void)s; (void)id;
  mg_h2 *h = ud;
  mg_h2_stream *st = src->ptr;
  if (st->ofd >= 0 && st->olen == st->ooff) {
    if (st->oleft == 0 && !st->eof) { st->deferred = 1; return NGHTTP2_ERR_DEFERRED; }
    size_t want = st->oleft < len ? (size_t)st->oleft : len;
    ssize_t n = want ? pread(st->ofd, buf, want, st->opos) : 0;
    if (n <= 0 && want) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* the file shrank */
    st->opos += n;
    st->oleft -= (uint64_t)n;
    if (st->oleft == 0 && st->eof) { *flags |= NGHTTP2_DATA_FLAG_EOF; close(st->ofd); st->ofd = -1; }
    h->body_sent += (uint64_t)n;
    return n;
  }
  size_t avail = st->olen - st->ooff;
  if (avail == 0 && !st->eof) { st->deferred = 1; return NGHTTP2_ERR_DEFERRED; }
  size_t n = avail < len ? avail : len;
  if (n) memcpy(buf, st->out + st->ooff, n); /* none: the end alone, and a drained buffer may be freed (NULL) */
  st->ooff += n;
  h->queued -= n;
  h->body_sent += n;
  if (st->ooff == st->olen) {
    st->ooff = st->olen = 0;
    if (st->ocap > MG_H2_KEEP_BUFFER) { free(st->out); st->out = NULL; st->ocap = 0; } /* drained: give it back */
  }
  if (st->eof && st->olen == 0 && st->ofd < 0) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
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

ssize_t mg_h2_tunnel_read(mg_conn *c, mg_h2_stream *st, char *buf, size_t max) {
  size_t avail = st->ilen - st->ioff;
  if (avail == 0) return st->tunnel && !st->in_eof ? -1 : 0;
  size_t n = avail < max ? avail : max;
  memcpy(buf, st->in + st->ioff, n);
  st->ioff += n;
  if (st->ioff == st->ilen) {
    st->ioff = st->ilen = 0;
    if (st->icap > MG_H2_KEEP_BUFFER) { free(st->in); st->in = NULL; st->icap = 0; }
  }
  nghttp2_session_consume_stream(c->h2->s, st->id, n); /* its WINDOW_UPDATE goes out at the unlock */
  return (ssize_t)n;
}

void mg_h2_unlock(mg_engine *e, mg_conn *c) {
  mg_h2 *h = c->h2;
  int kick = 0;
  if (h && !h->dead) {
    /* An answer completed while other streams of this connection wait in the engine's queue:
     * its frames are held in c->out, to go out with the answers completed meanwhile in one
     * record and one write (where each answer was one). The thread that takes the last of those
     * streams writes them before the app runs it (req_admit), as does any pump before (the
     * connection's next event, another response call); and if none has MG_H2_HOLD_NS after the
     * first was held (the holder went into a slow app call), the flusher thread does. */
    int hold = h->ended && h->untaken > 0 && c->out.bytes < MG_H2_HOLD_MAX && atomic_load(&e->flush_running);
    h->ended = 0;
    if (hold) {
      if (h2_frame(h) < 0) h->dead = 1;
      else if (!atomic_load_explicit(&c->h2_held_ns, memory_order_relaxed)) {
        atomic_store(&c->h2_held_ns, mg_mono_ns());
        h2_flush_list(e, c);
      }
    } else if (h2_pump(h) < 0) {
      h->dead = 1;
    }
    /* a backlog the loop has not seen yet: its settle starts the write timeout; a drain begun
     * since the connection's last event: its GOAWAY goes out at the next (else none would come
     * while the client only waits for its answers) */
    kick = h->dead || (h2_out_pending(c) && !hold) || (c->h2_goaway && h->in_app == 0) ||
           (!h->waiting && h2_backlogged(h)) || (!c->h2_goaway && mg_health_closing(e));
  }
  pthread_mutex_unlock(&c->h2_lock);
  if (kick) mg_h2_kick(e, c);
}

void mg_h2_await(mg_engine *e, int fd, int slot, uint64_t seq, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN}; /* a reused or closed fd: a wake-up for nothing */
  int input = poll(&p, 1, ms) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
  mg_conn *c;
  if (!mg_h2_lock_stream(e, fd, slot, seq, &c)) return;
  /* the stream is there, so this is its connection; armed (a loop thread owning it reads the
   * input itself), with input in the socket or in its TLS session */
  int mine = (input || mg_tls_pending(&c->tls)) && mg_conn_claim_armed(c, atomic_load(&c->state));
  pthread_mutex_unlock(&c->h2_lock);
  if (mine) mg_h2_event(e, c);
}

/* The stream's response is complete (or reset): the thread's time on it counts in the duration
 * histogram, as an HTTP/1 response's does (core/timing.h). */
static void answered(mg_h2 *h, mg_h2_stream *st) {
  if (st->state == ST_APP) { st->state = ST_ANSWERED; h->in_app--; h->ended = 1; }
  if (st->taken_mono_ns) {
    mg_histogram_observe(&h->e->duration_hist, mg_mono_ns() - st->taken_mono_ns);
    st->taken_mono_ns = 0;
  }
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

int mg_h2_early_hints(mg_conn *c, mg_h2_stream *st, const mg_h2_nv *nv, size_t n) {
  if (st->started) return 1;
  nghttp2_nv *v = malloc((n + 1) * sizeof *v);
  if (!v) return -1;
  v[0] = (nghttp2_nv){(uint8_t *)":status", (uint8_t *)"103", 7, 3, NGHTTP2_NV_FLAG_NONE};
  for (size_t i = 0; i < n; i++)
    v[i + 1] = (nghttp2_nv){(uint8_t *)nv[i].name, (uint8_t *)nv[i].value, nv[i].name_len, nv[i].value_len, NGHTTP2_NV_FLAG_NONE};
  /* a HEADERS frame without END_STREAM before the response's: nghttp2 sends it as is (RFC 9113 8.1) */
  int r = nghttp2_submit_headers(c->h2->s, NGHTTP2_FLAG_NONE, st->id, NULL, v, n + 1, NULL);
  free(v);
  return r < 0 ? -1 : 0;
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

int mg_h2_spill(mg_conn *c, mg_h2_stream *st, const char *data, size_t len) {
  if (st->eof || st->head_request) return 0;
  if (st->ofd < 0) {
    if ((st->ofd = mg_open_tempfile(c->h2->e->cfg.tmpdir)) < 0) return -1;
    st->opos = 0;
    st->oleft = 0;
  }
  /* a full disk: -1, and what was written past the end is written over by the next try */
  if (mg_write_at(st->ofd, data, len, st->opos + (off_t)st->oleft) != 0) return -1;
  st->oleft += len;
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

size_t mg_h2_backlog(const mg_h2_stream *st) { return st->olen - st->ooff + (st->ofd >= 0 ? (size_t)st->oleft : 0); }
uint64_t mg_h2_spilled(const mg_h2_stream *st) { return st->ofd >= 0 ? (uint64_t)st->opos + st->oleft : 0; }
uint64_t mg_h2_spill_left(const mg_h2_stream *st) { return st->ofd >= 0 ? st->oleft : 0; }
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

int h2_answer(mg_h2 *h, mg_h2_stream *st, int status, const mg_h2_nv *extra, const char *body, size_t blen) {
  char len[24], date[64];
  int ll = snprintf(len, sizeof len, "%zu", blen);
  size_t dl = mg_date_header(date); /* "date: ...\r\n" */
  mg_h2_nv nv[] = {{"content-type", "text/plain", 12, 10}, {"content-length", len, 14, (size_t)ll},
                   {"cache-control", "no-store", 13, 8}, {"date", date + 6, 4, dl - 8}, {"", "", 0, 0}};
  size_t n = 4;
  if (extra) nv[n++] = *extra;
  int follows = blen > 0 && !st->head_request;
  if (st->state == ST_RECV) { /* the request stays with the stream: nobody takes it */
    mg_h2_req_free(st->req);
    st->req = NULL;
    st->state = ST_ANSWERED;
    h->receiving--;
  }
  int r = mg_h2_respond_head(h->c, st, status, nv, n, follows);
  if (r == 0 && follows) r = mg_h2_write(h->c, st, body, blen);
  if (r == 0 && follows) r = mg_h2_finish(h->c, st);
  return r;
}

#endif
