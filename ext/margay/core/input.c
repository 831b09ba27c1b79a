/*
 * core/input.c - a connection's input: reading the socket, framing the head
 * and the body, storing the body (memory, then an unlinked tempfile), and the
 * interim 100 Continue. Runs without the GVL; a thread returns to Ruby only
 * with a complete request.
 */
#include "core/input.h"
#include "core/h2.h"
#include "core/spare.h"
#include "core/tempfile.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define READ_CHUNK 65536
#define READ_BUDGET (1024 * 1024) /* bytes read from one connection per event */

void mg_input_error(mg_engine *e, mg_conn *c, int status) {
  /* An interim response may precede any final one, and dropping it could
   * leave a torn status line on the wire. */
  mg_conn_simple_response(c, status);
  c->rlen = 0;
  mg_conn_complete(e, c); /* never 1: the error page closes the connection */
}

static int error_out(mg_engine *e, mg_conn *c, int status) {
  mg_input_error(e, c, status);
  return MG_IN_DONE;
}

static int body_store(mg_engine *e, mg_conn *c, const char *data, size_t n) {
  return mg_spool(e->cfg.tmpdir, e->cfg.body_buffer_size, &c->bmem, &c->blen, &c->bcap, &c->bfd, data, n);
}

static void drop_input(mg_conn *c, size_t at, size_t n) {
  memmove(c->rbuf + at, c->rbuf + at + n, c->rlen - at - n);
  c->rlen -= n;
}

static int start_body(mg_engine *e, mg_conn *c) {
  mg_request *r = c->req;
  c->minor = r->minor;
  c->head_request = r->method.len == 4 && memcmp(c->rbuf + r->method.off, "HEAD", 4) == 0;
  c->keep_alive = r->keep_alive;
  if (r->chunked) {
    c->body_left = -1;
    mg_chunked_init(&c->chunked, e->cfg.max_body, e->cfg.max_chunk_ext, e->cfg.max_head);
  } else if (r->content_length > 0) {
    if ((uint64_t)r->content_length > e->cfg.max_body) return 413;
    c->body_left = r->content_length;
  } else {
    c->body_left = 0;
  }
  if (c->body_left != 0 && r->expect_continue && c->rlen == r->head_len) {
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    mg_out_queue(&c->out, cont, sizeof cont - 1);
    c->sent_continue = 1;
    if (mg_out_flush(&c->out, c->fd, &c->tls) < 0) return -1;
  }
  return 0;
}

/* The PROXY v1 line a connection starts with (proxy_protocol): its address is kept for every
 * request, the line dropped. MG_IN_READY once taken, MG_IN_AGAIN while incomplete; anything but
 * a valid line within its 107 bytes closes the connection (no answer: the peer is not speaking
 * the protocol it was configured for, and guessing is what the spec forbids). */
static int take_proxy_line(mg_engine *e, mg_conn *c) {
  mg_proxy px;
  long r = mg_proxy_parse(c->rbuf, c->rlen, &px);
  if (r == 0) return MG_IN_AGAIN;
  if (r < 0) { mg_conn_close(e, c); return MG_IN_DONE; }
  memcpy(c->proxy_addr, px.addr, sizeof c->proxy_addr);
  drop_input(c, 0, (size_t)r);
  c->proxy_pending = 0;
  return MG_IN_READY;
}

/* Frame what is buffered. Returns MG_IN_READY, MG_IN_AGAIN, or MG_IN_DONE after an error. */
static int process_input(mg_engine *e, mg_conn *c) {
  if (!c->head_done) {
    if (c->rlen == 0) return MG_IN_AGAIN;
    if (c->phase == MG_PH_IDLE) {
      c->phase = MG_PH_HEAD;
      c->arrival_ns = c->rx_ns;
      c->deadline_ms = mg_now_ms() + e->cfg.header_timeout_ms;
    }
    if (c->proxy_pending) {
      int pr = take_proxy_line(e, c);
      if (pr != MG_IN_READY) return pr;
      if (c->rlen == 0) return MG_IN_AGAIN;
    }
    /* h2c with prior knowledge: a plain connection of an http2 listener whose first bytes are the
     * preface (until they tell, more is read, within header_timeout) */
    if (c->requests == 0 && !c->tls.ssl && e->listeners[c->listener].h2) {
      int h2 = mg_h2_preface(c->rbuf, c->rlen);
      if (h2 < 0) return MG_IN_AGAIN;
      if (h2 > 0) { mg_h2_begin(e, c); return MG_IN_DONE; }
    }
    /* Re-parse only when a line ended or a limit may be crossed: bounded work per byte.
     * A request line that never ends is parsed once it is longer than the target limit (414). */
    if (c->rlen <= e->cfg.max_head && !memchr(c->rbuf + c->scanned, '\n', c->rlen - c->scanned)) {
      int line_open = c->scanned == 0 || !memchr(c->rbuf, '\n', c->scanned);
      c->scanned = c->rlen;
      if (!(line_open && c->rlen > e->cfg.max_target + 32)) return MG_IN_AGAIN;
    }
    mg_limits lim = {e->cfg.max_target, e->cfg.max_head, e->cfg.max_headers,
                     e->cfg.methods[0] ? e->cfg.methods : NULL};
    if (!c->req && !(c->req = mg_spare_take(MG_SPARE_HEAD))) return error_out(e, c, 500);
    long r = mg_parse_head(c->rbuf, c->rlen, &lim, c->req);
    if (r < 0) return error_out(e, c, (int)-r);
    if (r == 0) {
      if (c->rlen > e->cfg.max_head) return error_out(e, c, 431);
      c->scanned = c->rlen;
      return MG_IN_AGAIN;
    }
    c->head_done = 1;
    c->head_ns = c->rx_ns;
    atomic_fetch_add(&e->requests, 1);
    int st = start_body(e, c);
    if (st < 0) { mg_conn_close(e, c); return MG_IN_DONE; }
    if (st > 0) return error_out(e, c, st);
  }
  size_t at = c->req->head_len;
  if (c->body_left > 0) {
    size_t avail = c->rlen - at;
    size_t take = avail < (uint64_t)c->body_left ? avail : (size_t)c->body_left;
    if (body_store(e, c, c->rbuf + at, take) < 0) return error_out(e, c, 500);
    drop_input(c, at, take);
    c->body_left -= (int64_t)take;
    c->btotal += take;
  } else if (c->body_left < 0) {
    size_t consumed = 0, produced = 0;
    int r = mg_chunked_decode(&c->chunked, c->rbuf + at, c->rlen - at, &consumed, &produced);
    if (r < 0) return error_out(e, c, -r);
    if (body_store(e, c, c->rbuf + at, produced) < 0) return error_out(e, c, 500);
    c->btotal += produced;
    drop_input(c, at, consumed);
    if (r == MG_CHUNKED_DONE) c->body_left = 0;
  }
  if (c->body_left != 0) {
    c->phase = MG_PH_BODY;
    c->deadline_ms = mg_now_ms() + e->cfg.body_timeout_ms;
    return MG_IN_AGAIN;
  }
  if (c->bfd >= 0) lseek(c->bfd, 0, SEEK_SET);
  if (c->rlen > c->req->head_len) c->pipelines = 1; /* the next request is already here */
  c->phase = MG_PH_APP;
  c->ready_ns = c->rx_ns;
  c->deadline_ms = 0;
  return MG_IN_READY;
}

static int ensure_room(mg_engine *e, mg_conn *c) {
  size_t want = c->head_done ? c->req->head_len + READ_CHUNK : e->cfg.max_head + 1;
  size_t cap = c->rcap;
  /* a body is read READ_CHUNK at a time (not into what is left of the head's buffer) */
  if (c->rlen < cap && !(c->head_done && cap < want)) return 1;
  if (cap >= want) return 0;
  cap = c->head_done ? want : (cap ? cap * 2 : MG_SPARE_RBUF_SIZE);
  if (cap > want) cap = want;
  char *b = cap == MG_SPARE_RBUF_SIZE && !c->rbuf ? mg_spare_take(MG_SPARE_RBUF) : realloc(c->rbuf, cap);
  if (!b) return -1;
  c->rbuf = b; c->rcap = cap;
  return 1;
}

/* Read into +buf+: the socket, or the TLS session over it (then the data's arrival is the time
 * it was decrypted: the kernel's stamp is on the records, not on the request's bytes). */
static ssize_t receive(mg_conn *c, char *buf, size_t len) {
  if (!c->tls.ssl) return mg_timing_recv(c->fd, buf, len, &c->rx_ns);
  ssize_t n = mg_tls_read(&c->tls, buf, len);
  if (n > 0) c->rx_ns = mg_wall_ns();
  return n;
}

/* What a TLS listener's client hears when it speaks plain HTTP (its first byte is not a TLS
 * handshake record): an answer it can read, then the close. */
static const char plain_to_tls[] =
  "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\ncontent-length: 51\r\nconnection: close\r\n\r\n"
  "This port speaks HTTPS: send the request over TLS.\n";

int mg_input_handshake(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c) && mg_conn_handshaking(c));
  switch (mg_tls_handshake(&c->tls, c->fd)) {
  case MG_TLS_DONE:
    if (mg_tls_alpn_h2(&c->tls)) { mg_h2_begin(e, c); return MG_IN_DONE; }
    return mg_input_read(e, c); /* a TLS 1.3 client may have sent its request with its Finished */
  case MG_TLS_WANT_IN:
    mg_conn_arm(e, c, MG_EV_IN);
    return MG_IN_AGAIN;
  case MG_TLS_WANT_OUT:
    mg_conn_arm(e, c, MG_EV_OUT);
    return MG_IN_AGAIN;
  case MG_TLS_PLAIN:
    mg_tls_free(&c->tls);
    c->keep_alive = 0;
    mg_out_queue(&c->out, plain_to_tls, sizeof plain_to_tls - 1);
    mg_conn_complete(e, c); /* never 1: the answer closes the connection */
    return MG_IN_DONE;
  default:
    mg_conn_close(e, c);
    return MG_IN_DONE;
  }
}

/* Up to READ_BUDGET bytes per turn: a client that sends as fast as the
 * connection is read (a large upload on loopback) then goes to the back of the
 * ready list instead of keeping this thread until its whole body is in, so
 * concurrent uploads progress in turn. */
int mg_input_read(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c));
  size_t budget = READ_BUDGET;
  for (;;) {
    int room = ensure_room(e, c);
    if (room < 0) { mg_conn_close(e, c); return MG_IN_DONE; }
    if (room == 0) {
      /* buffer full: the head is over its limit, or a body chunk waits to be framed */
      int r = process_input(e, c);
      if (r != MG_IN_AGAIN) return r;
      if (ensure_room(e, c) <= 0) return error_out(e, c, 431);
      continue;
    }
    size_t space = c->rcap - c->rlen;
    ssize_t n = receive(c, c->rbuf + c->rlen, space);
    if (n > 0) {
      c->rlen += (size_t)n;
      if ((size_t)n == space) c->pipelines = 1; /* more may follow: maybe requests sent back to back */
      int r = process_input(e, c);
      if (r != MG_IN_AGAIN) return r;
      /* the socket is drained (a TLS read returns one record at most: it reads on until EAGAIN) */
      if ((size_t)n < space && !c->tls.ssl) break;
      if ((size_t)n >= budget) break; /* its turn is over: re-armed, still readable */
      budget -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    /* EOF or error: nothing left to answer (a half-sent request is abandoned) */
    mg_conn_close(e, c);
    return MG_IN_DONE;
  }
  mg_conn_arm(e, c, MG_EV_IN);
  return MG_IN_AGAIN;
}

int mg_input_continue(mg_engine *e, mg_conn *c) {
  int r = process_input(e, c);
  if (r == MG_IN_AGAIN) mg_conn_arm(e, c, MG_EV_IN);
  return r == MG_IN_READY;
}

void mg_input_consume_head(mg_conn *c) {
  drop_input(c, 0, c->req->head_len);
  c->head_done = 0;
  c->scanned = 0;
}
