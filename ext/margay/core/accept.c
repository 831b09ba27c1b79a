/*
 * core/accept.c - taking in client sockets, from the listeners or from
 * another worker.
 */
#include "core/accept.h"
#include "core/board.h"
#include "core/conn.h"
#include "core/health.h"
#include "core/listeners.h"
#include "core/loop.h"
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#define ACCEPT_BATCH 64   /* a cluster worker's most for its free threads */
#define ACCEPT_DRAIN 1024 /* a single process's most per event: the backlog as it stands */
#define ACCEPT_QUEUE_UNKNOWN ACCEPT_BATCH /* a backlog the system does not measure (unix sockets) */
#define EARLY_EVERY_US 1000 /* mg_accept_early: at most this often per worker */

/* How many connections wait in a TCP listener's backlog (Linux reports its accept queue's
 * length as tcpi_unacked); -1 where the system does not say. */
static int queued(const mg_listener *l) {
#if defined(__linux__) && defined(TCP_INFO)
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (!l->is_unix && getsockopt(l->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0) return (int)ti.tcpi_unacked;
#else
  (void)l;
#endif
  return -1;
}

static void no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* Whether this cluster worker serves kept-alive clients beyond what its threads take at once:
 * it holds more connections kept alive after a response than it has threads. Only those: a
 * client taken in whose request has not arrived yet (its data follows the handshake by a few
 * microseconds, and the accepting thread may look first), one sending its head slowly, or one
 * answered and closing is not a kept-alive load; counted, they would turn a stream of new
 * connections into the even share, each worker taking clients beyond its threads. */
static int kept_alive_load(mg_engine *e) {
  return atomic_load(&e->kept_alive) > e->cfg.max_threads;
}

/* How many clients a cluster worker takes now: as many as it has threads waiting (this one
 * included) beyond the clients it took and no thread has reached yet (core/conn.h, unread).
 * The others stay in the backlog, which every worker takes from, so the backlog is the
 * cluster's one first come, first served queue: a client taken by a worker with no thread for
 * it would wait behind that worker's queue while another worker's thread frees up and finds
 * the backlog empty. 0 when every waiting thread has an unread client to reach. */
static int free_share(mg_engine *e) {
  int n = atomic_load(&e->idle_waiters) - atomic_load(&e->unread);
  return n < 0 ? 0 : n > ACCEPT_BATCH ? ACCEPT_BATCH : n;
}

/* How many clients to take at a listener's event. A single process takes the backlog as it
 * stands, up to ACCEPT_DRAIN: the listener's event has one place in the ready list, and after a
 * partial batch it goes to the back again, so clients left in the backlog would wait one more
 * pass over the ready connections per batch. Taken now, each waits one pass at most: its
 * request joins the ready list behind what became ready before it was accepted.
 * A cluster worker (it counts its waiting threads and its connections on the shared board)
 * keeps the backlog one queue for the whole cluster: it takes clients for its free threads
 * only (free_share). Kept-alive clients change that: a worker busy with them reaches the
 * listener once per pass over their requests and would take one client per pass, so while it
 * holds more than its threads it takes its even share of the connections (those the serving
 * workers hold plus the backlog), and each worker's pass stays as long as the others'. This
 * thread is free, so it always takes at least one client (served at once, or after older ones:
 * serve_first): silent connections, which stay unread, never stop a worker's accepting.
 * A draining cluster worker takes only that one: a worker may be killed mid-drain, and a client
 * it accepted but has not read dies with it, while one left in the backlog is taken by another
 * worker (the listener is shared). */
static int batch_size(mg_engine *e, const mg_listener *l) {
  if (!e->board_slots) return ACCEPT_DRAIN;
  if (mg_health_closing(e)) return 1;
  int batch;
  if (kept_alive_load(e)) {
    int q = queued(l);
    batch = mg_board_accept_share(e, q < 0 ? ACCEPT_QUEUE_UNKNOWN : q);
  } else {
    batch = free_share(e);
  }
  return batch < 1 ? 1 : batch;
}

/* Accepts up to +batch+ clients from listener +li+ and registers each for reading (they join
 * the ready list in the order they arrived). Returns the first one's fd, or -1. */
static int take(mg_engine *e, int li, int batch) {
  int first = -1;
  mg_listener *l = &e->listeners[li];
  for (int i = 0; i < batch; i++) {
    if (atomic_load(&e->stopping)) return first; /* what is still queued is left to the backlog */
    if (atomic_load(&e->nconns) >= e->cfg.max_connections) {
      atomic_store(&e->accept_paused, MG_PAUSED_AT_LIMIT);
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
        atomic_store(&e->accept_paused, MG_PAUSED_NO_FDS);
        return first;
      }
      break; /* EAGAIN or a listener error */
    }
    if (fd >= e->max_fds) { close(fd); continue; }
    if (!l->is_unix) no_delay(fd);
    if (mg_conn_start(e, fd, li, (struct sockaddr *)&peer, plen, 0) == 0 && first < 0) first = fd;
  }
  return first;
}

/* A listener's event: a batch (batch_size), then the listener is armed again. */
static int accept_some(mg_engine *e, int li) {
  int first = take(e, li, batch_size(e, &e->listeners[li]));
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
 * of connections that became ready after it: test/wire/fairness_test.rb saw a requeued
 * pipelining client go first again) besides waking a thread for nothing. The next arming registers it anew (an epoll_ctl each
 * way: the epoll_wait this saves made up for it). */
static mg_conn *claim(mg_engine *e, int fd) {
  mg_conn *c = e->conns[fd];
  if (!mg_conn_claim_armed(c, atomic_load(&c->state))) return NULL;
  mg_ev_disarm(e->ev, fd);
  return c;
}

/* Whether the thread at a listener's event serves the first client it takes at once. A single
 * process does. A cluster worker does only while no client it took earlier waits unread for a
 * thread: mg_accept_early registers clients behind a listener's event queued before them, so at
 * that event the backlog's head is newer than they are, and served first it would make the
 * oldest wait one more service time. Then the new client joins the ready list like the others
 * and this thread goes on to the next event, the oldest. */
static int serve_first(mg_engine *e) {
  return !e->board_slots || atomic_load(&e->unread) == 0;
}

mg_conn *mg_accept_batch(mg_engine *e, int li) {
  mg_listeners_enter(e);
  int now = serve_first(e);
  int first = accept_some(e, li);
  mg_listeners_leave(e);
  return first >= 0 && now ? claim(e, first) : NULL;
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
  int li = -1; /* a plain listener of its kind: TLS connections never move (mg_conn_movable) */
  for (int i = 0; i < e->nlisteners; i++) if (e->listeners[i].is_unix == is_unix && !e->listeners[i].tls) { li = i; break; }
  for (int i = 0; i < e->nlisteners && li < 0; i++) if (!e->listeners[i].tls) li = i;
  if (li < 0) { close(fd); return -1; }
  if (!is_unix) no_delay(fd);
  return mg_conn_start(e, fd, li, (struct sockaddr *)&peer, plen, kept_alive);
}

/* A cluster worker whose threads are all busy reaches a listener's event once per pass over its
 * ready connections, and clients arriving meanwhile would wait in the backlog for that pass. So
 * a thread back from a request first looks at each TCP backlog (at most every EARLY_EVERY_US
 * per worker) and takes what batch_size would take at the listener's event: its free threads'
 * clients (this one included), or with kept-alive clients its even share. They are registered
 * behind what is already ready. (Unix sockets do not say how many wait: their clients are taken at the
 * listener's event.) Not while draining: then a worker holds no client it has no thread for. */
void mg_accept_early(mg_engine *e) {
  if (!e->board_slots || mg_health_closing(e) || atomic_load(&e->accept_paused)) return;
  int64_t now = mg_now_us(), last = atomic_load(&e->early_accept_us);
  if (now - last < EARLY_EVERY_US || !atomic_compare_exchange_strong(&e->early_accept_us, &last, now)) return;
  mg_listeners_enter(e);
  for (int li = 0; li < e->nlisteners; li++) {
    int q = queued(&e->listeners[li]);
    if (q <= 0) continue;
    int n = kept_alive_load(e) ? mg_board_accept_share(e, q) : free_share(e);
    if (n > 0) take(e, li, n < q ? n : q);
  }
  mg_listeners_leave(e);
}

int mg_accept_starved(mg_engine *e) {
  if (atomic_load(&e->idle_waiters) > 0 || atomic_load(&e->stopping)) return 0;
  if (atomic_load(&e->unread) > 0 || mg_loop_stashed(e) > 0) return 1;
  int q = 0;
  mg_listeners_enter(e);
  for (int li = 0; li < e->nlisteners && q <= 0 && !atomic_load(&e->stopping); li++) q = queued(&e->listeners[li]);
  mg_listeners_leave(e);
  return q > 0;
}
