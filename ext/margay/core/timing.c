/*
 * core/timing.c - a request's times, the queue-time and duration histograms and load shedding
 * (see core/timing.h). Per request: one recvmsg in place of a recv (the kernel's stamp comes
 * with the data), two clock reads when a thread takes it, one when it is answered, and a few
 * atomic adds.
 */
#include "core/timing.h"
#include "core/conn.h"
#include "http/status.h"
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>

const double mg_hist_bounds[MG_HIST_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25,
                                                0.5,   0.75, 1,     2.5,   5,    7.5, 10};

void mg_histogram_observe(mg_histogram *h, int64_t ns) {
  if (ns < 0) ns = 0;
  double s = (double)ns / 1e9;
  int i = 0;
  while (i < MG_HIST_BUCKETS && s > mg_hist_bounds[i]) i++;
  atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&h->sum_ns, (uint64_t)ns, memory_order_relaxed);
}

void mg_timing_listen(int fd) {
#ifdef SO_TIMESTAMPNS
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
#else
  (void)fd;
#endif
}

/* recvmsg(2) of +len+ bytes with +flags+; *stamp: the kernel's receive stamp of the data read
 * (or peeked), 0 when it gave none. */
static ssize_t stamped_recv(int fd, void *buf, size_t len, int flags, int64_t *stamp) {
  *stamp = 0;
#ifdef SO_TIMESTAMPNS
  union {
    char buf[CMSG_SPACE(sizeof(struct timespec))];
    struct cmsghdr align;
  } control;
  struct iovec iov = {buf, len};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  ssize_t n = recvmsg(fd, &msg, flags);
  if (n <= 0) return n;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
      struct timespec ts;
      memcpy(&ts, CMSG_DATA(cm), sizeof ts);
      if (ts.tv_sec) *stamp = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    }
  }
  return n;
#else
  return recv(fd, buf, len, flags);
#endif
}

ssize_t mg_timing_recv(int fd, void *buf, size_t len, int64_t *rx_ns) {
  int64_t stamp;
  ssize_t n = stamped_recv(fd, buf, len, MSG_DONTWAIT, &stamp);
  if (n > 0) *rx_ns = stamp ? stamp : mg_wall_ns();
  return n;
}

/* The answer to a shed request: 503 and when to come back. One second: the queue was over its
 * limit a moment ago, a client coming back sooner finds it as long, and a burst is over within
 * seconds or needs more capacity, which a longer wait does not bring. The connection closes: a
 * balancer opens the next one wherever it sees fit, and requests its client pipelined behind
 * this one (they waited as long) go with it. */
static void shed(mg_engine *e, mg_conn *c) {
  char buf[512];
  size_t n = mg_status_page_with(buf, sizeof buf, 503, "retry-after: 1\r\n");
  c->keep_alive = 0;
  mg_out_queue(&c->out, buf, n);
  c->resp_started = 1;
  atomic_fetch_add(&e->shed, 1);
  atomic_fetch_sub(&e->requests, 1); /* counted when its head completed; it never ran */
  mg_conn_complete(e, c);            /* never 1: the response closes the connection */
}

int mg_timing_admit(mg_engine *e, mg_conn *c) {
  int64_t now = mg_wall_ns();
  c->taken_ns = now;
  c->taken_mono_ns = mg_mono_ns();
  mg_histogram_observe(&e->queue_hist, now - c->arrival_ns);
  if (e->cfg.queue_timeout_ns > 0 && now - c->ready_ns > e->cfg.queue_timeout_ns) {
    c->taken_mono_ns = 0;
    shed(e, c);
    return 0;
  }
  return 1;
}

void mg_timing_done(mg_engine *e, mg_conn *c) {
  if (!c->taken_mono_ns) return;
  mg_histogram_observe(&e->duration_hist, mg_mono_ns() - c->taken_mono_ns);
  c->taken_mono_ns = 0;
}

/* When the oldest bytes waiting unread on +fd+ arrived (the kernel's stamp of its first queued
 * segment, read with MSG_PEEK: nothing is consumed), or 0 when it does not say. */
static int64_t first_unread_stamp(int fd) {
  char byte;
  int64_t stamp;
  return stamped_recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT, &stamp) > 0 ? stamp : 0;
}

/* The connection's fields are read while it is ARMED (no thread owns it; core/conn.h) and kept
 * only if its state has not changed meanwhile, as mg_balance_detach_idle does. */
int mg_timing_backlog(mg_engine *e, int64_t *oldest_ns) {
  if (oldest_ns) *oldest_ns = 0;
  if (atomic_load(&e->idle_waiters) > 0) return 0;
  int n = 0, hw = atomic_load(&e->hiwater);
  for (int fd = 0; fd < hw && fd < e->max_fds; fd++) {
    mg_conn *c = e->conns[fd];
    if (!c) continue;
    uint64_t s = atomic_load(&c->state);
    if (mg_state_st(s) != MG_ARMED) continue;
    int phase = c->phase, waiting = 0;
    int64_t since = 0;
    if (phase == MG_PH_IDLE && (c->rlen > 0 || c->tls_held)) {
      /* requeued: its next request is buffered (mg_loop_requeue), or its TLS session holds it
       * (mg_conn_arm), read with the last one */
      waiting = 1;
      since = c->rx_ns;
    } else if (phase == MG_PH_IDLE || phase == MG_PH_HEAD || phase == MG_PH_BODY) {
      int unread = 0;
      waiting = ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0;
      if (waiting && oldest_ns) since = phase == MG_PH_IDLE ? first_unread_stamp(c->fd) : c->arrival_ns;
    }
    if (!waiting || atomic_load(&c->state) != s) continue;
    n++;
    if (oldest_ns && since > 0 && (*oldest_ns == 0 || since < *oldest_ns)) *oldest_ns = since;
  }
  return n;
}
