/*
 * core/accept.c - taking in client sockets, from the listeners or from
 * another worker.
 */
#include "core/accept.h"
#include "core/board.h"
#include "core/conn.h"
#include "core/listeners.h"
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BATCH 64   /* at most per event while another worker has a thread waiting */
#define ACCEPT_DRAIN 1024 /* at most per event otherwise: the backlog as it stands */

static void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A cluster worker (it counts its waiting threads on the shared board) takes
 * no more new clients at once than it has threads waiting, this one included
 * (at most ACCEPT_BATCH), while another worker has a thread waiting: that
 * worker gets the rest, instead of one worker taking a whole burst of
 * connections (a load generator's, or a proxy's pool) and keeping them.
 * Otherwise (a single process, or every worker busy) it takes the backlog as
 * it stands, up to ACCEPT_DRAIN: the listener's event has one place in the
 * ready list, and after a partial batch it goes to the back again, so the
 * clients still in the backlog waited one more pass over the ready
 * connections per batch while the connections accepted before them were served
 * again and again (a load generator opening 256 connections at once: the first
 * requests of the last 64 waited up to four passes). Taken now, each waits one pass at
 * most: its request joins the ready list behind what became ready before it
 * was accepted. Returns the first connection accepted (its fd), or -1. */
static int accept_some(mg_engine *e, int li) {
  int first = -1;
  mg_listener *l = &e->listeners[li];
  int batch = ACCEPT_DRAIN;
  if (mg_board_others_idle(e)) {
    batch = atomic_load(&e->idle_waiters);
    if (batch < 1) batch = 1;
    if (batch > ACCEPT_BATCH) batch = ACCEPT_BATCH;
  }
  for (int i = 0; i < batch; i++) {
    if (atomic_load(&e->stopping)) return first; /* what is still queued is left to the backlog */
    if (atomic_load(&e->nconns) >= e->cfg.max_connections) {
      atomic_store(&e->accept_paused, 1);
      /* a connection may have closed meanwhile */
      if (atomic_load(&e->nconns) < e->cfg.max_connections) mg_listeners_resume(e);
      return first;
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
        return first;
      }
      break; /* EAGAIN or a listener error */
    }
    if (fd >= e->max_fds) { close(fd); continue; }
    if (!l->is_unix) no_delay(fd);
    if (mg_conn_start(e, fd, li, (struct sockaddr *)&peer, plen, 0) == 0 && first < 0) first = fd;
  }
  if (!atomic_load(&e->accept_paused)) mg_listeners_arm(e, li);
  return first;
}

/* The listener's event stood in the ready list where its oldest pending connection arrived;
 * that connection's first request (usually sent with the handshake) is about as old, so this
 * thread takes it now instead of sending it to the back of the ready list behind everything
 * that became ready while the listener waited its turn (the others of the batch go there).
 * Taken like an event would take it: a compare-and-swap from ARMED (or ARMING); if another
 * thread got its event first, or it changed hands meanwhile, the swap fails. Once taken, its
 * registration is dropped: an event already queued for it would otherwise stay in the ready
 * list where it stands, and the connection's next arming would inherit that old place (ahead
 * of connections that became ready after it: test/margay/fairness_test.rb saw a requeued
 * pipelining client go first again) besides waking a thread for nothing. The next arming registers it anew (an epoll_ctl each
 * way: the epoll_wait this saves made up for it). */
static mg_conn *claim(mg_engine *e, int fd) {
  mg_conn *c = e->conns[fd];
  uint64_t s = atomic_load(&c->state);
  int st = mg_state_st(s);
  if (st != MG_ARMED && st != MG_ARMING) return NULL;
  if (!atomic_compare_exchange_strong(&c->state, &s, (mg_state_gen(s) << 8) | MG_OWNED)) return NULL;
  mg_ev_disarm(e->ev, fd);
  return c;
}

mg_conn *mg_accept_batch(mg_engine *e, int li) {
  mg_listeners_enter(e);
  int first = accept_some(e, li);
  mg_listeners_leave(e);
  return first >= 0 ? claim(e, first) : NULL;
}

int mg_accept_adopted(mg_engine *e, int fd, int kept_alive) {
  if (fd < 0 || fd >= e->max_fds || atomic_load(&e->stopping)) { close(fd); return -1; }
  struct sockaddr_storage peer;
  socklen_t plen = sizeof peer;
  if (getpeername(fd, (struct sockaddr *)&peer, &plen) != 0) { close(fd); return -1; }
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) { close(fd); return -1; }
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  int is_unix = peer.ss_family == AF_UNIX;
  int li = 0;
  for (int i = 0; i < e->nlisteners; i++) if (e->listeners[i].is_unix == is_unix) { li = i; break; }
  if (!is_unix) no_delay(fd);
  return mg_conn_start(e, fd, li, (struct sockaddr *)&peer, plen, kept_alive);
}
