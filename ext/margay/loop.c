/*
 * loop.c - the event loop, run without the GVL by every thread that waits in
 * Engine#next_request (leader/follower: no hand-off per request). A thread
 * takes one event, does the I/O it calls for (accept, read and parse, body
 * framing, finishing a queued response, lingering close), and returns to Ruby
 * only with a complete request; the same thread then runs the application.
 */
#include "engine.h"
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SWEEP_INTERVAL_MS 250
#define LINGER_MS 2000
#define READ_CHUNK 65536
#define READ_BUDGET (1024 * 1024) /* bytes read from one connection per event */
#define ACCEPT_BATCH 64
#define RECLAIM_PER_SWEEP 64

enum { IN_READY, IN_AGAIN, IN_DONE /* connection handled (closed or writing) */ };

int64_t mg_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t conn_gen(mg_conn *c) { return mg_state_gen(atomic_load(&c->state)); }


void mg_engine_wake(mg_engine *e) {
  uint64_t one = 1;
  ssize_t w = write(e->wake_fd[1], &one, e->wake_fd[0] == e->wake_fd[1] ? sizeof one : 1);
  (void)w;
}

/* ---- arming ---- */

/* Hand the connection back to the event loop. Every hand-back starts a new
 * generation: whoever looked at the connection while it was ARMED before (the
 * sweeper, detach_idle) and decided on what it saw then fails its
 * compare-and-swap instead of acting on fields that changed meanwhile, and a
 * token Ruby kept from before no longer matches. fd and generation are taken
 * before the connection is published: once it is, another thread may close
 * it and accept may reuse the fd. The state is ARMING until epoll_ctl is
 * done, so that only an event (never the sweeper) can take it meanwhile. */
static void arm(mg_engine *e, mg_conn *c, uint32_t events) {
  int fd = c->fd;
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

void mg_conn_arm_read(mg_engine *e, mg_conn *c) { arm(e, c, MG_EV_IN); }

/* Every use of a listener fd by the loop happens between these two, so that
 * Engine#stop can wait until none is under way and Ruby may then close the
 * listeners (the counter goes up before `stopping` is looked at, and stop
 * sets `stopping` before it looks at the counter). */
static void listener_enter(mg_engine *e) { atomic_fetch_add(&e->listener_users, 1); }
static void listener_leave(mg_engine *e) { atomic_fetch_sub(&e->listener_users, 1); }

/* Arm listener +li+ unless the engine is stopping. Engine#stop sets stopping
 * before it disarms the listeners, so looking again after arming closes the
 * race with a concurrent stop: either this thread sees the flag and disarms,
 * or its arm came first and the stop's disarm undoes it. Without this a
 * stopping worker could keep accepting for as long as clients keep coming. */
static void arm_listener(mg_engine *e, int li) {
  listener_enter(e);
  if (!atomic_load(&e->stopping)) {
    int fd = e->listeners[li].fd;
    mg_ev_arm(e->ev, fd, MG_EV_IN, MG_DATA_LISTENER | (uint64_t)li);
    if (atomic_load(&e->stopping)) mg_ev_disarm(e->ev, fd);
  }
  listener_leave(e);
}

static void arm_listeners(mg_engine *e) {
  for (int i = 0; i < e->nlisteners; i++) arm_listener(e, i);
}

static void resume_accept(mg_engine *e) {
  int paused = atomic_exchange(&e->accept_paused, 0);
  if (paused) arm_listeners(e);
}

/* ---- request state ---- */

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
  if (c->spill_fd >= 0) { close(c->spill_fd); c->spill_fd = -1; } /* queued segments hold their own fds */
  c->spill_end = 0;
  c->head_request = 0;
}

/* Take a connection out of the engine and return its fd, still open: the
 * struct is FREE (a new generation) and may be reused once the fd is closed. */
int mg_conn_forget(mg_engine *e, mg_conn *c) {
  int fd = c->fd;
  mg_ev_disarm(e->ev, fd);
  mg_conn_free_out(c);
  mg_conn_reset_request(c);
  free(c->rbuf); c->rbuf = NULL; c->rlen = c->rcap = 0;
  free(c->bmem); c->bmem = NULL; c->bcap = 0;
  c->phase = MG_PH_IDLE;
  c->fd = -1;
  uint64_t gen = conn_gen(c);
  atomic_store(&c->state, ((gen + 1) << 8) | MG_FREE);
  int left = atomic_fetch_sub(&e->nconns, 1) - 1;
  mg_board_count(e, MG_BOARD_CONNS, -1);
  if (left == 0 && atomic_load(&e->stopping)) mg_engine_wake(e);
  if (atomic_load(&e->accept_paused) == 1) resume_accept(e); /* also after a hand-over or hijack */
  return fd;
}

void mg_conn_close(mg_engine *e, mg_conn *c) {
  /* Last: once the fd is closed, accept() may hand out the same number and
   * another thread reuses this struct, so nothing may touch it after close. */
  close(mg_conn_forget(e, c));
}

static void begin_close(mg_engine *e, mg_conn *c) {
  shutdown(c->fd, SHUT_WR);
  c->phase = MG_PH_LINGER;
  c->deadline_ms = mg_now_ms() + LINGER_MS;
  arm(e, c, MG_EV_IN);
}

static void linger_read(mg_engine *e, mg_conn *c) {
  char buf[16384];
  for (int i = 0; i < 64; i++) {
    ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) { arm(e, c, MG_EV_IN); return; }
    break; /* EOF or error */
  }
  mg_conn_close(e, c);
}

/* Called once the queued response is on the wire. */
void mg_conn_after_response(mg_engine *e, mg_conn *c, int *continue_now) {
  *continue_now = 0;
  if (!c->keep_alive) { begin_close(e, c); return; }
  c->requests++;
  mg_conn_reset_request(c);
  c->phase = MG_PH_IDLE;
  if (c->rlen > 0) { *continue_now = 1; return; } /* pipelined request already buffered */
  if (c->rcap > 16384) { free(c->rbuf); c->rbuf = NULL; c->rcap = 0; }
  c->deadline_ms = mg_now_ms() + e->cfg.keepalive_timeout_ms;
  arm(e, c, MG_EV_IN);
}

/* Queue and send what the response needs; continue in the event loop if the
 * socket is full. Returns IN_DONE, or IN_AGAIN/IN_READY for a pipelined request. */
static int finish_output(mg_engine *e, mg_conn *c);
int mg_conn_complete(mg_engine *e, mg_conn *c);

void mg_simple_response(mg_engine *e, mg_conn *c, int status) {
  char buf[512];
  char date[64];
  const char *reason = mg_reason(status);
  size_t dlen = mg_date_header(date);
  int n = snprintf(buf, sizeof buf,
                   "HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %zu\r\n"
                   "connection: close\r\n%.*s\r\n%s\n",
                   status, reason, strlen(reason) + 1, (int)dlen, date, reason);
  c->keep_alive = 0;
  mg_conn_queue(c, buf, (size_t)n);
}

/* ---- input ---- */

static int error_out(mg_engine *e, mg_conn *c, int status) {
  /* Output still pending (an interim 100 Continue, possibly half written)
   * stays queued ahead of the error: an interim response may precede any
   * final one, and dropping it could leave a torn status line on the wire. */
  mg_simple_response(e, c, status);
  c->rlen = 0;
  return finish_output(e, c);
}

static int body_store(mg_engine *e, mg_conn *c, const char *data, size_t n) {
  if (!n) return 0;
  if (c->bfd < 0 && c->blen + n > e->cfg.body_buffer_size) {
    int fd = mg_open_tempfile(e);
    if (fd < 0) return -1;
    c->bfd = fd;
    if (c->blen && write(fd, c->bmem, c->blen) != (ssize_t)c->blen) return -1;
    c->blen = 0;
  }
  if (c->bfd >= 0) {
    while (n) {
      ssize_t w = write(c->bfd, data, n);
      if (w < 0) { if (errno == EINTR) continue; return -1; }
      data += w; n -= (size_t)w;
    }
    return 0;
  }
  if (c->blen + n > c->bcap) {
    size_t cap = c->bcap ? c->bcap : 4096;
    while (cap < c->blen + n) cap *= 2;
    char *m = realloc(c->bmem, cap);
    if (!m) return -1;
    c->bmem = m; c->bcap = cap;
  }
  memcpy(c->bmem + c->blen, data, n);
  c->blen += n;
  return 0;
}

static void drop_input(mg_conn *c, size_t at, size_t n) {
  memmove(c->rbuf + at, c->rbuf + at + n, c->rlen - at - n);
  c->rlen -= n;
}

static int start_body(mg_engine *e, mg_conn *c) {
  mg_request *r = &c->req;
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
    mg_conn_queue(c, cont, sizeof cont - 1);
    c->sent_continue = 1;
    if (mg_conn_flush(e, c) < 0) return -1;
  }
  return 0;
}

/* Frame what is buffered. Returns IN_READY, IN_AGAIN, or IN_DONE after an error. */
static int process_input(mg_engine *e, mg_conn *c) {
  if (!c->head_done) {
    if (c->rlen == 0) return IN_AGAIN;
    if (c->phase == MG_PH_IDLE) {
      c->phase = MG_PH_HEAD;
      c->deadline_ms = mg_now_ms() + e->cfg.header_timeout_ms;
    }
    /* Re-parse only when a line ended or a limit may be crossed: bounded work per byte.
     * A request line that never ends is parsed once it is longer than the target limit (414). */
    if (c->rlen <= e->cfg.max_head && !memchr(c->rbuf + c->scanned, '\n', c->rlen - c->scanned)) {
      int line_open = c->scanned == 0 || !memchr(c->rbuf, '\n', c->scanned);
      c->scanned = c->rlen;
      if (!(line_open && c->rlen > e->cfg.max_target + 32)) return IN_AGAIN;
    }
    mg_limits lim = {e->cfg.max_target, e->cfg.max_head, e->cfg.max_headers};
    long r = mg_parse_head(c->rbuf, c->rlen, &lim, &c->req);
    if (r < 0) return error_out(e, c, (int)-r);
    if (r == 0) {
      if (c->rlen > e->cfg.max_head) return error_out(e, c, 431);
      c->scanned = c->rlen;
      return IN_AGAIN;
    }
    c->head_done = 1;
    atomic_fetch_add(&e->requests, 1);
    int st = start_body(e, c);
    if (st < 0) { mg_conn_close(e, c); return IN_DONE; }
    if (st > 0) return error_out(e, c, st);
  }
  size_t at = c->req.head_len;
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
    return IN_AGAIN;
  }
  if (c->bfd >= 0) lseek(c->bfd, 0, SEEK_SET);
  c->phase = MG_PH_APP;
  c->deadline_ms = 0;
  return IN_READY;
}

static int ensure_room(mg_engine *e, mg_conn *c) {
  size_t want = c->head_done ? c->req.head_len + READ_CHUNK : e->cfg.max_head + 1;
  size_t cap = c->rcap;
  /* a body is read READ_CHUNK at a time (not into what is left of the head's buffer) */
  if (c->rlen < cap && !(c->head_done && cap < want)) return 1;
  if (cap >= want) return 0;
  cap = c->head_done ? want : (cap ? cap * 2 : 4096);
  if (cap > want) cap = want;
  char *b = realloc(c->rbuf, cap);
  if (!b) return -1;
  c->rbuf = b; c->rcap = cap;
  return 1;
}

/* Read what the socket has and frame it, up to READ_BUDGET bytes per turn:
 * a client that sends as fast as the connection is read (a large upload on
 * loopback) then goes to the back of the ready list instead of keeping this
 * thread until its whole body is in, so concurrent uploads progress in turn. */
static int read_input(mg_engine *e, mg_conn *c) {
  size_t budget = READ_BUDGET;
  for (;;) {
    int room = ensure_room(e, c);
    if (room < 0) { mg_conn_close(e, c); return IN_DONE; }
    if (room == 0) {
      /* buffer full: the head is over its limit, or a body chunk waits to be framed */
      int r = process_input(e, c);
      if (r != IN_AGAIN) return r;
      if (ensure_room(e, c) <= 0) return error_out(e, c, 431);
      continue;
    }
    size_t space = c->rcap - c->rlen;
    ssize_t n = recv(c->fd, c->rbuf + c->rlen, space, MSG_DONTWAIT);
    if (n > 0) {
      c->rlen += (size_t)n;
      int r = process_input(e, c);
      if (r != IN_AGAIN) return r;
      if ((size_t)n < space) break; /* the socket is drained */
      if ((size_t)n >= budget) break; /* its turn is over: re-armed, still readable */
      budget -= (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    /* EOF or error: nothing left to answer (a half-sent request is abandoned) */
    mg_conn_close(e, c);
    return IN_DONE;
  }
  arm(e, c, MG_EV_IN);
  return IN_AGAIN;
}

static int finish_output(mg_engine *e, mg_conn *c) {
  if (!mg_conn_complete(e, c)) return IN_DONE;
  int r = process_input(e, c);
  if (r == IN_AGAIN) arm(e, c, MG_EV_IN);
  return r == IN_READY ? IN_READY : IN_DONE;
}

int mg_conn_complete(mg_engine *e, mg_conn *c) {
  int r = mg_conn_flush(e, c);
  if (r < 0) { mg_conn_close(e, c); return 0; }
  if (r == 0) {
    c->phase = MG_PH_WRITE;
    c->deadline_ms = mg_now_ms() + e->cfg.write_timeout_ms;
    arm(e, c, MG_EV_OUT);
    return 0;
  }
  int cont;
  mg_conn_after_response(e, c, &cont);
  return cont;
}

int mg_conn_continue(mg_engine *e, mg_conn *c) {
  int r = process_input(e, c);
  if (r == IN_AGAIN) arm(e, c, MG_EV_IN);
  return r == IN_READY;
}

void mg_conn_consume_head(mg_conn *c) {
  drop_input(c, 0, c->req.head_len);
  c->head_done = 0;
  c->scanned = 0;
}

/* ---- accept ---- */

/* Take charge of connected socket +fd+: a new connection (requests 0, the
 * header timeout runs) or one adopted from another worker (+kept_alive+: an
 * idle keep-alive connection, the keep-alive timeout runs; else a new one).
 * Returns 0, or -1 if it was closed. */
int mg_conn_start(mg_engine *e, int fd, int li, const struct sockaddr *peer, socklen_t plen, int kept_alive) {
  mg_conn *c = e->conns[fd];
  if (!c) {
    c = calloc(1, sizeof *c);
    if (!c) { close(fd); return -1; }
    c->bfd = -1;
    c->spill_fd = -1;
    e->conns[fd] = c;
  }
  uint64_t gen = mg_state_gen(atomic_load(&c->state)) + 1;
  atomic_store(&c->state, (gen << 8) | MG_OWNED);
  c->fd = fd;
  c->listener = li;
  c->requests = kept_alive ? 1 : 0;
  c->rlen = 0;
  mg_conn_reset_request(c);
  c->phase = MG_PH_IDLE;
  c->keep_alive = 0;
  if (plen > sizeof c->peer) plen = sizeof c->peer;
  memcpy(&c->peer, peer, plen);
  c->peer_len = plen;
  c->deadline_ms = mg_now_ms() + (kept_alive ? e->cfg.keepalive_timeout_ms : e->cfg.header_timeout_ms);
  atomic_fetch_add(&e->nconns, 1);
  mg_board_count(e, MG_BOARD_CONNS, 1);
  int hw = atomic_load(&e->hiwater);
  while (fd + 1 > hw && !atomic_compare_exchange_weak(&e->hiwater, &hw, fd + 1)) {}
  arm(e, c, MG_EV_IN);
  return 0;
}

/* Whether the client of idle connection +c+ has sent bytes the engine has
 * not read yet (its next request, waiting in the kernel). */
static int has_pending_input(const mg_conn *c) {
  char b;
  return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

/* Idle connections mg_detach_idle(pending_only) looks into per call (a
 * MSG_PEEK and, if nothing waits, an epoll_ctl each): it runs every 5 ms while
 * the worker is saturated, so a worker holding thousands of idle connections
 * looks at them in turns (from where the previous call stopped) instead of
 * spending its time on them. */
#define PEEK_PER_CALL 64

/* Hand over idle connections: keep-alive ones waiting for their next request
 * and new ones that have not sent their first (nothing buffered either way),
 * or with +pending_only+ just those whose next request already waits in the
 * kernel. Each leaves the engine with its fd still open. Up to +max+ fds are
 * written to +out+, and to +kept_alive+ whether each had served a request
 * (its new worker runs the keep-alive timeout, or the header timeout for a
 * new one); returns how many. */
int mg_detach_idle(mg_engine *e, int *out, int *kept_alive, int max, int pending_only) {
  int n = 0, peeked = 0;
  int hw = atomic_load(&e->hiwater);
  int start = pending_only && hw > 0 ? e->detach_cursor % hw : 0;
  for (int i = 0; i < hw && n < max && peeked < PEEK_PER_CALL; i++) {
    int fd = (start + i) % hw;
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    uint64_t s = atomic_load(&c->state);
    if (mg_state_st(s) != MG_ARMED || c->phase != MG_PH_IDLE || c->rlen != 0) continue;
    uint64_t owned = (mg_state_gen(s) << 8) | MG_OWNED;
    if (!atomic_compare_exchange_strong(&c->state, &s, owned)) continue;
    if (pending_only) {
      peeked++;
      e->detach_cursor = fd + 1;
      if (!has_pending_input(c)) {
        arm(e, c, MG_EV_IN); /* not now: back to the loop */
        continue;
      }
    }
    kept_alive[n] = c->requests > 0;
    out[n++] = mg_conn_forget(e, c);
  }
  return n;
}

/* Accept what the listener has queued, up to ACCEPT_BATCH. A cluster worker
 * (it counts its waiting threads on the shared board) takes no more new
 * clients at once than it has threads waiting, this one included, while
 * another worker has a thread waiting: that worker gets the rest, instead of
 * one worker taking a whole burst of connections (a load generator's, or a
 * proxy's pool) and keeping them. When every worker is busy the full batch is
 * taken: a saturated cluster would otherwise accept one client per pass over
 * its ready connections and leave the others in the backlog for seconds. */
static void accept_some(mg_engine *e, int li) {
  mg_listener *l = &e->listeners[li];
  int batch = ACCEPT_BATCH;
  if (mg_board_others_idle(e)) {
    batch = atomic_load(&e->idle_waiters);
    if (batch < 1) batch = 1;
    if (batch > ACCEPT_BATCH) batch = ACCEPT_BATCH;
  }
  for (int i = 0; i < batch; i++) {
    if (atomic_load(&e->stopping)) return; /* what is still queued is left to the backlog */
    if (atomic_load(&e->nconns) >= e->cfg.max_connections) {
      atomic_store(&e->accept_paused, 1);
      /* a connection may have closed meanwhile */
      if (atomic_load(&e->nconns) < e->cfg.max_connections) resume_accept(e);
      return;
    }
    struct sockaddr_storage peer;
    socklen_t plen = sizeof peer;
    int fd;
#ifdef HAVE_ACCEPT4
    fd = accept4(l->fd, (struct sockaddr *)&peer, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
#else
    fd = accept(l->fd, (struct sockaddr *)&peer, &plen);
    if (fd >= 0) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
#endif
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        /* out of descriptors: stop accepting briefly instead of spinning */
        atomic_store(&e->resume_accept_ms, mg_now_ms() + 100);
        atomic_store(&e->accept_paused, 2);
        return;
      }
      break; /* EAGAIN or a listener error */
    }
    if (fd >= e->max_fds) { close(fd); continue; }
    if (!l->is_unix) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    mg_conn_start(e, fd, li, (struct sockaddr *)&peer, plen, 0);
  }
  if (!atomic_load(&e->accept_paused)) arm_listener(e, li);
}

static void accept_batch(mg_engine *e, int li) {
  listener_enter(e);
  accept_some(e, li);
  listener_leave(e);
}

/* ---- timeouts ---- */

static void expire(mg_engine *e, mg_conn *c) {
  switch (c->phase) {
  case MG_PH_HEAD:
  case MG_PH_BODY:
    error_out(e, c, 408);
    break;
  default: /* idle keep-alive, stalled writer, lingering close */
    mg_conn_close(e, c);
  }
}

static void sweep(mg_engine *e, int64_t now) {
  if (pthread_mutex_trylock(&e->sweep_lock) != 0) return;
  atomic_store(&e->next_sweep_ms, now + SWEEP_INTERVAL_MS);
  int stopping = atomic_load(&e->stopping);
  int hw = atomic_load(&e->hiwater);
  /* At the connection limit, make room for new clients by closing idle
   * connections (see below). */
  int reclaim = atomic_load(&e->accept_paused) == 1 ? RECLAIM_PER_SWEEP : 0;
  for (int fd = 0; fd < hw; fd++) {
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    uint64_t s = atomic_load(&c->state);
    if (mg_state_st(s) != MG_ARMED) continue;
    int kept_alive = c->phase == MG_PH_IDLE && c->requests > 0;
    /* connections that have sent nothing for 2 s since they were accepted (a
     * flood's, a browser's speculative preconnect) */
    int silent = c->phase == MG_PH_IDLE && c->requests == 0 && c->rlen == 0 &&
                 now - (c->deadline_ms - e->cfg.header_timeout_ms) >= 2000;
    /* On stop, idle keep-alive connections close at once; a connection that was
     * accepted but has not sent its first request yet is still answered if it
     * sends one within 2 s (it need not hold up the stop until header_timeout). */
    int idle_stop = stopping && (kept_alive || silent);
    int forced = stopping == 2;
    /* at the limit: keep-alive connections idle for 1 s, and silent ones */
    int reclaimed = reclaim > 0 && ((kept_alive && now - (c->deadline_ms - e->cfg.keepalive_timeout_ms) >= 1000) || silent);
    if (!idle_stop && !forced && !reclaimed && !(c->deadline_ms && now >= c->deadline_ms)) continue;
    uint64_t owned = (mg_state_gen(s) << 8) | MG_OWNED;
    if (!atomic_compare_exchange_strong(&c->state, &s, owned)) continue;
    if (reclaimed) reclaim--;
    if (forced || idle_stop || reclaimed) mg_conn_close(e, c); else expire(e, c);
  }
  if (atomic_load(&e->accept_paused) == 2 && now >= atomic_load(&e->resume_accept_ms)) resume_accept(e);
  pthread_mutex_unlock(&e->sweep_lock);
}

/* ---- the wait loop ---- */

static int handle_conn(mg_engine *e, mg_conn *c, uint32_t events) {
  switch (c->phase) {
  case MG_PH_WRITE:
    c->deadline_ms = mg_now_ms() + e->cfg.write_timeout_ms;
    return finish_output(e, c);
  case MG_PH_LINGER:
    linger_read(e, c);
    return IN_DONE;
  default:
    return read_input(e, c);
  }
}

void *mg_wait_nogvl(void *p) {
  mg_wait_args *a = p;
  mg_engine *e = a->e;
  int64_t start = mg_now_ms();
  atomic_fetch_add(&e->idle_waiters, 1);
  mg_board_count(e, MG_BOARD_WAITING, 1);
  a->conn = NULL;
  for (;;) {
    int stopping = atomic_load(&e->stopping);
    if (stopping && atomic_load(&e->nconns) == 0) {
      mg_engine_wake(e); /* pass it on to the next waiting thread */
      a->result = MG_WAIT_STOP;
      break;
    }
    int64_t now = mg_now_ms();
    if (now >= atomic_load(&e->next_sweep_ms)) sweep(e, now);
    int timeout = SWEEP_INTERVAL_MS;
    if (a->idle_ms >= 0) {
      int64_t left = start + a->idle_ms - now;
      if (left <= 0) { a->result = MG_WAIT_TIMEOUT; break; }
      if (left < timeout) timeout = (int)left;
    }
    mg_ev_event ev;
    int n = mg_ev_wait(e->ev, &ev, timeout);
    if (n < 0) { a->result = MG_WAIT_INTR; break; } /* EINTR: Ruby checks interrupts and calls again */
    if (n == 0) continue;
    if (ev.data & MG_DATA_WAKE) {
      uint64_t v;
      ssize_t r = read(e->wake_fd[0], &v, sizeof v);
      (void)r;
      continue;
    }
    if (ev.data & MG_DATA_LISTENER) { accept_batch(e, (int)(ev.data & 0xff)); continue; }
    int fd = (int)(uint32_t)ev.data;
    uint64_t gen = ev.data >> 32;
    if (fd < 0 || fd >= e->max_fds || !e->conns[fd]) continue;
    mg_conn *c = e->conns[fd];
    uint64_t cur = atomic_load(&c->state);
    int st = mg_state_st(cur);
    if ((mg_state_gen(cur) & MG_GEN_MASK) != (gen & MG_GEN_MASK) || (st != MG_ARMED && st != MG_ARMING)) continue;
    uint64_t expect = cur;
    if (!atomic_compare_exchange_strong(&c->state, &expect, (mg_state_gen(cur) << 8) | MG_OWNED)) continue;
    if (handle_conn(e, c, ev.events) == IN_READY) {
      a->conn = c;
      a->result = MG_WAIT_READY;
      break;
    }
  }
  mg_board_count(e, MG_BOARD_WAITING, -1);
  if (atomic_fetch_sub(&e->idle_waiters, 1) == 1) atomic_store(&e->all_busy_since_ms, mg_now_ms());
  return NULL;
}
