/*
 * core/h2_req.c - HTTP/2 streams' requests (see core/h2.h, core/h2_priv.h): the callbacks that
 * copy each stream's fields and body out of the session into an mg_h2_req (max_header_size,
 * max_headers and max_body_size answered early with 431 and 413), and the engine's queue of
 * complete requests that any loop thread takes. Under the connection's h2_lock, without the GVL.
 */
#include "core/h2.h"

#ifdef MG_HAVE_H2

#include "core/h2_priv.h"
#include "core/health.h"
#include "core/timing.h"
#include "http/status.h"
#include <stdio.h>
#include "core/tempfile.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
  q->arrival_ns = q->head_ns = mg_wall_ns();
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
  q->ready_ns = mg_wall_ns();
  pthread_mutex_lock(&e->h2_lock);
  q->next = NULL;
  if (e->h2_tail) e->h2_tail->next = q; else e->h2_head = q;
  e->h2_tail = q;
  atomic_fetch_add(&e->h2_ready, 1);
  pthread_mutex_unlock(&e->h2_lock);
  atomic_fetch_add(&e->requests, 1);
}

/* The answer to a request that waited for a thread longer than queue_timeout: 503 and when to
 * come back (as core/timing.c sheds an HTTP/1 one; the connection's other streams go on). */
static void shed(mg_h2 *h, mg_h2_stream *st) {
  char page[512];
  size_t n = mg_status_page(page, sizeof page, 503);
  const char *body = strstr(page, "\r\n\r\n");
  size_t blen = body ? n - (size_t)(body + 4 - page) : 0;
  mg_h2_nv retry = {"retry-after", "1", 11, 1};
  h2_answer(h, st, 503, &retry, body ? body + 4 : "", blen);
  atomic_fetch_add(&h->e->shed, 1);
  atomic_fetch_sub(&h->e->requests, 1); /* counted when it was queued; it never ran */
}

/* A thread takes +q+: its queue time is counted (the histogram, margay.queue_time), and it is
 * shed past queue_timeout. 1 when the app gets it; 0 when its stream is gone or it was shed. */
static int req_admit(mg_engine *e, mg_h2_req *q) {
  mg_conn *c = q->c;
  pthread_mutex_lock(&c->h2_lock);
  mg_h2 *h = c->h2;
  mg_h2_stream *st = h ? &h->slots[q->slot] : NULL;
  if (!st || st->seq != q->seq || st->state != ST_APP) {
    pthread_mutex_unlock(&c->h2_lock);
    atomic_fetch_add(&e->abandoned, 1); /* reset by its client before a thread took it */
    atomic_fetch_sub(&e->requests, 1);
    return 0;
  }
  st->untaken = 0;
  h->untaken--;
  int64_t now = mg_wall_ns();
  q->taken_ns = now;
  mg_histogram_observe(&e->queue_hist, now - q->arrival_ns);
  if (e->cfg.queue_timeout_ns > 0 && now - q->ready_ns > e->cfg.queue_timeout_ns) {
    shed(h, st);
    mg_h2_unlock(e, c); /* writes the 503, or kicks the loop to */
    return 0;
  }
  st->taken_mono_ns = mg_mono_ns();
  /* the answers held for the connection's queued streams: this was the last, they go out now */
  if (h->untaken == 0 && atomic_load_explicit(&c->h2_held_ns, memory_order_relaxed)) mg_h2_unlock(e, c);
  else pthread_mutex_unlock(&c->h2_lock);
  return 1;
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
    if (req_admit(e, q)) return q;
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

/* ---- callbacks (under h2_lock, from nghttp2_session_mem_recv) ---- */

int h2_on_begin_headers(nghttp2_session *s, const nghttp2_frame *frame, void *ud) {
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
  if (!st->req) { h2_stream_clear(h, st); return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; }
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
int h2_on_header(nghttp2_session *s, const nghttp2_frame *frame, const uint8_t *name, size_t nlen,
                 const uint8_t *value, size_t vlen, uint8_t flags, void *ud) {
  (void)s; (void)flags;
  mg_h2 *h = ud;
  mg_h2_stream *st = h2_stream_of(h, frame->hd.stream_id);
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

/* A tunnel's bytes, kept for the app's reads: the connection's window is given back now, the
 * stream's as the app reads (mg_h2_tunnel_read), so the stream's window bounds what waits here. */
static int tunnel_data(mg_h2 *h, mg_h2_stream *st, const uint8_t *data, size_t len) {
  nghttp2_session_consume_connection(h->s, len);
  if (st->ioff > 0) {
    memmove(st->in, st->in + st->ioff, st->ilen - st->ioff);
    st->ilen -= st->ioff;
    st->ioff = 0;
  }
  if (mg_grow(&st->in, &st->icap, st->ilen + len, 16384) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  memcpy(st->in + st->ilen, data, len);
  st->ilen += len;
  pthread_cond_broadcast(&h->c->h2_input);
  return 0;
}

int h2_on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len, void *ud) {
  (void)flags;
  mg_h2 *h = ud;
  mg_h2_stream *st = h2_stream_of(h, id);
  if (st && st->tunnel && st->state == ST_APP) return tunnel_data(h, st, data, len);
  /* every other stream's bytes are taken (or dropped) here: their windows given back at once */
  nghttp2_session_consume(s, id, len);
  if (!st || st->state != ST_RECV) return 0;
  if (st->req->btotal + len > h->e->cfg.max_body) {
    answer_early(h, st, "413"); /* max_body_size */
    return 0;
  }
  if (req_body(h->e, st->req, data, len) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  return 0;
}

/* The stream +id+'s request is complete: to the engine's queue, for Ruby. */
int h2_request_done(mg_h2 *h, int32_t id) {
  mg_h2_stream *st = h2_stream_of(h, id);
  if (!st || st->state != ST_RECV) return 0;
  mg_h2_req *q = st->req;
  if (q->method < 0) return 0; /* nghttp2 resets a request without its pseudo-fields */
  if (q->bfd >= 0 && lseek(q->bfd, 0, SEEK_SET) != 0) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  const mg_h2_field *m = &q->fields[q->method];
  st->head_request = m->value_len == 4 && memcmp(q->buf + m->value, "HEAD", 4) == 0;
  if (q->path >= 0) {
    const mg_h2_field *p = &q->fields[q->path];
    if (mg_health_is_probe(h->e, q->buf + m->value, m->value_len, q->buf + p->value, p->value_len)) {
      /* health_check_path: answered here, never handed to the app nor counted in its requests */
      int ready = mg_health_ready(h->e);
      return h2_answer(h, st, ready ? 200 : 503, NULL, ready ? "ready\n" : "not ready\n", ready ? 6 : 10) == 0
                 ? 0 : NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
  }
  mg_conn *c = h->c;
  memcpy(q->remote, c->proxy_addr[0] ? c->proxy_addr : mg_conn_peer_text(c), sizeof q->remote);
  st->req = NULL;
  st->state = ST_APP;
  h->receiving--;
  h->in_app++;
  st->untaken = 1;
  h->untaken++;
  c->requests++;
  queue_push(h->e, q);
  return 0;
}

int h2_headers_done(mg_h2 *h, int32_t id) {
  mg_h2_stream *st = h2_stream_of(h, id);
  if (!st || st->state != ST_RECV) return 0;
  const mg_h2_req *q = st->req;
  if (q->method < 0 || q->protocol < 0) return 0;
  const mg_h2_field *m = &q->fields[q->method];
  if (m->value_len != 7 || memcmp(q->buf + m->value, "CONNECT", 7) != 0) return 0;
  st->tunnel = 1;
  return h2_request_done(h, id);
}

int h2_stream_ended(mg_h2 *h, int32_t id) {
  mg_h2_stream *st = h2_stream_of(h, id);
  if (st && st->tunnel) {
    st->in_eof = 1;
    pthread_cond_broadcast(&h->c->h2_input);
    return 0;
  }
  return h2_request_done(h, id);
}

#endif
