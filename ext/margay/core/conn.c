/*
 * core/conn.c - a connection's lifecycle: taking charge of a socket, arming
 * it (handing it back to the event loop), completing a response and keeping
 * the connection alive or closing it (with a lingering close), forgetting it
 * (hand-over, hijack). Runs without the GVL, and with it for the Ruby calls
 * that end a request.
 */
#include "core/conn.h"
#include "core/board.h"
#include "core/h2.h"
#include "core/listeners.h"
#include "core/spare.h"
#include "http/status.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#define LINGER_MS 2000

static uint64_t conn_gen(mg_conn *c) { return mg_state_gen(atomic_load(&c->state)); }

int mg_conn_start(mg_engine *e, int fd, int li, const struct sockaddr *peer, socklen_t plen, int kept_alive) {
  mg_conn *c = e->conns[fd];
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c) { close(fd); return -1; }
    c->bfd = -1;
    c->out.spill_fd = -1;
    pthread_mutex_init(&c->h2_lock, NULL);
    pthread_cond_init(&c->h2_input, NULL);
    e->conns[fd] = c;
  }
  assert(mg_state_st(atomic_load(&c->state)) == MG_FREE); /* the fd was closed or handed on with it */
  uint64_t gen = mg_state_gen(atomic_load(&c->state)) + 1;
  atomic_store(&c->state, (gen << 8) | MG_OWNED);
  c->fd = fd;
  c->listener = li;
  c->requests = kept_alive ? 1 : 0;
  c->kept_alive = kept_alive;
  c->rlen = 0;
  c->pipelines = 0;
  mg_conn_reset_request(c);
  c->phase = MG_PH_IDLE;
  c->keep_alive = 0;
  if (plen > sizeof c->peer) plen = sizeof c->peer;
  memcpy(&c->peer, peer, plen);
  c->peer_len = plen;
  c->proxy_pending = e->cfg.proxy_protocol && !kept_alive; /* adopted kept alive: read already */
  c->proxy_addr[0] = '\0';
  c->peer_text[0] = '\0';
  c->deadline_ms = mg_now_ms() + (kept_alive ? e->cfg.keepalive_timeout_ms : e->cfg.header_timeout_ms);
  /* the handshake counts against header_timeout: a client stalling in it is closed by the sweep */
  if (e->listeners[li].tls && mg_tls_begin(&c->tls, e->listeners[li].tls, fd) != 0) {
    atomic_store(&c->state, ((gen + 1) << 8) | MG_FREE);
    close(fd);
    return -1;
  }
  atomic_fetch_add(&e->nconns, 1);
  if (kept_alive) atomic_fetch_add(&e->kept_alive, 1);
  mg_board_count(e, MG_BOARD_CONNS, 1);
  c->unread = 1;
  atomic_fetch_add(&e->unread, 1);
  mg_board_count(e, MG_BOARD_UNREAD, 1);
  int hw = atomic_load(&e->hiwater);
  while (fd + 1 > hw && !atomic_compare_exchange_weak(&e->hiwater, &hw, fd + 1)) {}
  mg_conn_arm(e, c, MG_EV_IN);
  return 0;
}

/* Every hand-back starts a new generation: whoever looked at the connection
 * while it was ARMED before (the sweeper, detach_idle) and decided on what it
 * saw then fails its compare-and-swap instead of acting on fields that changed
 * meanwhile, and a token Ruby kept from before no longer matches. fd and
 * generation are taken before the connection is published: once it is,
 * another thread may close it and accept may reuse the fd. The state is
 * ARMING until epoll_ctl is done, so that only an event (never the sweeper)
 * can take it meanwhile. */
void mg_conn_arm(mg_engine *e, mg_conn *c, uint32_t events) {
  assert(mg_conn_owned(c));
  int fd = c->fd;
  int input = events == MG_EV_IN && c->phase != MG_PH_LINGER;
  c->tls_held = input && mg_tls_pending(&c->tls);
  if (input && (c->tls.want_out || c->tls_held)) events = MG_EV_OUT;
  uint64_t gen = conn_gen(c) + 1;
  atomic_store(&c->state, (gen << 8) | MG_ARMING);
  int failed = mg_ev_arm(e->ev, fd, events, mg_conn_data(fd, gen)) != 0;
  uint64_t expect = (gen << 8) | MG_ARMING;
  if (!failed) {
    atomic_compare_exchange_strong(&c->state, &expect, (gen << 8) | MG_ARMED); /* lost: an event took it */
  } else if (atomic_compare_exchange_strong(&c->state, &expect, (gen << 8) | MG_OWNED)) {
    mg_conn_close(e, c); /* cannot watch it: only for a dead fd or no memory */
  }
}

void mg_conn_reset_request(mg_conn *c) {
  c->head_done = 0;
  c->scanned = 0;
  c->body_left = 0;
  c->blen = 0;
  c->btotal = 0;
  if (c->bfd >= 0) { close(c->bfd); c->bfd = -1; }
  if (c->bcap > 262144) { free(c->bmem); c->bmem = NULL; c->bcap = 0; }
  c->sent_continue = 0;
  c->resp_chunked = 0;
  c->resp_started = 0;
  c->stream_left = -1;
  mg_out_end_spill(&c->out);
  c->head_request = 0;
}

void mg_conn_reached(mg_engine *e, mg_conn *c) {
  if (!c->unread) return;
  c->unread = 0;
  atomic_fetch_sub(&e->unread, 1);
  mg_board_count(e, MG_BOARD_UNREAD, -1);
}

/* The struct is FREE (a new generation) afterwards and may be reused once the
 * fd is closed. */
int mg_conn_forget(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c));
  int fd = c->fd;
  mg_h2_end(c); /* first: no response call touches the socket or its TLS session after this */
  mg_ev_disarm(e->ev, fd);
  mg_tls_free(&c->tls);
  mg_out_free(&c->out);
  mg_conn_reset_request(c);
  c->rlen = 0;
  mg_conn_release_buffers(c);
  if (c->kept_alive) { c->kept_alive = 0; atomic_fetch_sub(&e->kept_alive, 1); }
  c->phase = MG_PH_IDLE;
  c->fd = -1;
  uint64_t gen = conn_gen(c);
  atomic_store(&c->state, ((gen + 1) << 8) | MG_FREE);
  mg_conn_reached(e, c);
  int left = atomic_fetch_sub(&e->nconns, 1) - 1;
  mg_board_count(e, MG_BOARD_CONNS, -1);
  if (left == 0 && atomic_load(&e->stopping)) mg_engine_wake(e);
  if (atomic_load(&e->accept_paused) == MG_PAUSED_AT_LIMIT) mg_listeners_resume(e); /* also after a hand-over or hijack */
  return fd;
}

void mg_conn_release_buffers(mg_conn *c) {
  assert(c->rlen == 0);
  if (c->rcap == MG_SPARE_RBUF_SIZE) mg_spare_give(MG_SPARE_RBUF, c->rbuf);
  else free(c->rbuf);
  c->rbuf = NULL; c->rcap = 0;
  mg_spare_give(MG_SPARE_HEAD, c->req);
  c->req = NULL;
  free(c->bmem); c->bmem = NULL; c->bcap = 0; c->blen = 0;
}

const char *mg_conn_peer_text(mg_conn *c) {
  if (c->peer_text[0]) return c->peer_text;
  const char *ip = NULL;
  if (c->peer.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&c->peer;
    ip = inet_ntop(AF_INET, &a->sin_addr, c->peer_text, sizeof c->peer_text);
  } else if (c->peer.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&c->peer;
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) ip = inet_ntop(AF_INET, a->sin6_addr.s6_addr + 12, c->peer_text, sizeof c->peer_text);
    else ip = inet_ntop(AF_INET6, &a->sin6_addr, c->peer_text, sizeof c->peer_text);
  }
  if (!ip) snprintf(c->peer_text, sizeof c->peer_text, "127.0.0.1"); /* Unix sockets, like Puma */
  return c->peer_text;
}

int mg_conn_has_pending_input(const mg_conn *c) {
  char b;
  return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

void mg_conn_close(mg_engine *e, mg_conn *c) {
  /* Last: once the fd is closed, accept() may hand out the same number and
   * another thread reuses this struct, so nothing may touch it after close. */
  mg_h2_end(c); /* before the TLS session's close_notify: response calls use the session too */
  mg_tls_shutdown(&c->tls);
  close(mg_conn_forget(e, c));
}

void mg_conn_close_all(mg_engine *e) {
  if (!e->conns) return;
  mg_h2_drop_all(e);
  e->handshakes = e->handshakes_tail = NULL; /* owned connections, closed below */
  atomic_store(&e->nhandshakes, 0);
  for (int fd = 0; fd < e->max_fds; fd++) {
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    uint64_t s = atomic_load(&c->state);
    if (mg_state_st(s) != MG_FREE) {
      atomic_store(&c->state, (mg_state_gen(s) << 8) | MG_OWNED); /* no loop thread runs now */
      mg_conn_close(e, c);
    }
    free(c->rbuf);
    free(c->req);
    free(c->bmem);
    pthread_mutex_destroy(&c->h2_lock);
    pthread_cond_destroy(&c->h2_input);
    free(c);
    e->conns[fd] = NULL;
  }
}

/* Shut our side, then read and discard what the client still sends for a
 * short while, so that closing does not turn into a reset that destroys the
 * response before the client read it (RFC 9112 9.6). */
void mg_conn_begin_close(mg_engine *e, mg_conn *c) {
  mg_tls_shutdown(&c->tls);
  shutdown(c->fd, SHUT_WR);
  c->phase = MG_PH_LINGER;
  c->deadline_ms = mg_now_ms() + LINGER_MS;
  mg_conn_arm(e, c, MG_EV_IN);
}

void mg_conn_linger(mg_engine *e, mg_conn *c) {
  char buf[16384];
  for (int i = 0; i < 64; i++) {
    ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { mg_conn_arm(e, c, MG_EV_IN); return; }
    break; /* EOF or error */
  }
  mg_conn_close(e, c);
}

/* Called once the queued response is on the wire. */
static void after_response(mg_engine *e, mg_conn *c, int *continue_now) {
  *continue_now = 0;
  if (!c->keep_alive) { mg_conn_begin_close(e, c); return; }
  c->requests++;
  if (!c->kept_alive) { c->kept_alive = 1; atomic_fetch_add(&e->kept_alive, 1); }
  mg_conn_reset_request(c);
  c->phase = MG_PH_IDLE;
  if (c->rlen > 0) { *continue_now = 1; return; } /* pipelined request already buffered */
  mg_conn_release_buffers(c); /* nothing to read: idle, it holds no buffer */
  c->deadline_ms = mg_now_ms() + e->cfg.keepalive_timeout_ms;
  mg_conn_arm(e, c, MG_EV_IN);
}

void mg_conn_simple_response(mg_conn *c, int status) {
  char buf[512];
  size_t n = mg_status_page(buf, sizeof buf, status);
  c->keep_alive = 0;
  mg_out_queue(&c->out, buf, n);
}

int mg_conn_complete(mg_engine *e, mg_conn *c) {
  assert(mg_conn_owned(c));
  int r = mg_out_flush(&c->out, c->fd, &c->tls);
  if (r < 0) { mg_conn_close(e, c); return 0; }
  if (r == 0) {
    c->phase = MG_PH_WRITE;
    c->deadline_ms = mg_now_ms() + e->cfg.write_timeout_ms;
    mg_conn_arm(e, c, MG_EV_OUT);
    return 0;
  }
  int cont;
  after_response(e, c, &cont);
  return cont;
}
