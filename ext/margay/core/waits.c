/*
 * core/waits.c - a fiber-mode thread's private wait set (see waits.h): its fibers' fds, its
 * mailbox, and the engine's shared set nested in it, so that one epoll_wait covers "a fiber's
 * fd is ready", "another thread unblocked a fiber" and "a request may be taken".
 */
#include "core/waits.h"
#include "core/accept.h"
#include "core/loop.h"
#include "core/sweep.h"
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

int mg_waits_cap_claim(mg_waits_cap *cap) {
  int n = atomic_load(&cap->count);
  while (n < cap->max)
    if (atomic_compare_exchange_weak(&cap->count, &n, n + 1)) return 1;
  return 0;
}

int mg_waits_cap_release(mg_waits_cap *cap) {
  return atomic_fetch_sub(&cap->count, 1) >= cap->max;
}

#if defined(HAVE_EPOLL_CREATE1) && defined(HAVE_EVENTFD)
#include <sys/epoll.h>

/* Tags above any fd (fds are ints): the nested shared set and the mailbox. */
#define TAG_SHARED (1ULL << 40)
#define TAG_MAILBOX (1ULL << 41)

struct mg_waits {
  mg_engine *e;
  mg_waits_cap *cap;
  int epfd;
  mg_wake mailbox;
  int shared_fd;
  int shared_on; /* the shared set's registration listens (the thread may take a request) */
  int npending;  /* responses queued by this thread's fibers, sent by its next wait */
  mg_conn *pending[MG_WAITS_PENDING];
};

mg_waits *mg_waits_new(mg_engine *e, int shared_fd, mg_waits_cap *cap) {
  if (shared_fd < 0) { errno = ENOSYS; return NULL; }
  mg_waits *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->e = e;
  w->cap = cap;
  w->shared_fd = shared_fd;
  w->epfd = epoll_create1(EPOLL_CLOEXEC);
  int mailbox_failed = mg_wake_open(&w->mailbox);
  struct epoll_event mb = {.events = EPOLLIN, .data.u64 = TAG_MAILBOX};
  struct epoll_event sh = {.events = 0, .data.u64 = TAG_SHARED}; /* off until the first wait that may take */
  if (w->epfd < 0 || mailbox_failed || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->mailbox.rd, &mb) != 0 ||
      epoll_ctl(w->epfd, EPOLL_CTL_ADD, shared_fd, &sh) != 0) {
    int saved = errno;
    mg_waits_free(w);
    errno = saved;
    return NULL;
  }
  return w;
}

void mg_waits_free(mg_waits *w) {
  if (!w) return;
  if (w->epfd >= 0) close(w->epfd);
  mg_wake_close(&w->mailbox);
  free(w);
}

int mg_waits_arm(mg_waits *w, int fd, uint32_t events) {
  struct epoll_event e = {.events = EPOLLONESHOT, .data.u64 = (uint64_t)(uint32_t)fd};
  if (events & MG_WAITS_IN) e.events |= EPOLLIN | EPOLLRDHUP;
  if (events & MG_WAITS_PRI) e.events |= EPOLLPRI;
  if (events & MG_WAITS_OUT) e.events |= EPOLLOUT;
  if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &e) == 0) return 0;
  if (errno != ENOENT) return -1;
  return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &e);
}

int mg_waits_disarm(mg_waits *w, int fd) {
  struct epoll_event e = {0};
  /* EPERM: an fd epoll cannot hold (a regular file), never in the set */
  if (epoll_ctl(w->epfd, EPOLL_CTL_DEL, fd, &e) == 0 || errno == ENOENT || errno == EBADF || errno == EPERM) return 0;
  return -1;
}

int mg_waits_defer(mg_waits *w, mg_conn *c) {
  if (w->npending >= MG_WAITS_PENDING) return 0;
  w->pending[w->npending++] = c;
  return 1;
}

int mg_waits_pending(const mg_waits *w) { return w->npending; }

mg_engine *mg_waits_engine(const mg_waits *w) { return w->e; }

void mg_waits_finish(mg_waits *w) {
  mg_engine *e = w->e;
  for (int i = 0; i < w->npending; i++) {
    mg_conn *c = w->pending[i];
    /* a pipelined request already buffered goes behind the others, as at the end of a turn */
    if (mg_conn_complete(e, c)) mg_loop_requeue(e, c);
  }
  w->npending = 0;
}

void mg_waits_poke(mg_waits *w) {
  mg_wake_signal(&w->mailbox);
}

/* Listen to the shared set only while the thread may take a request: it is level-triggered,
 * so a thread at its cap would otherwise wake at once, again and again. */
static int shared_listen(mg_waits *w, int on) {
  if (w->shared_on == on) return 0;
  struct epoll_event e = {.events = on ? EPOLLIN : 0, .data.u64 = TAG_SHARED};
  if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, w->shared_fd, &e) != 0) return -1;
  w->shared_on = on;
  return 0;
}

static uint32_t from_epoll(uint32_t ev) {
  uint32_t out = 0;
  if (ev & (EPOLLIN | EPOLLRDHUP)) out |= MG_WAITS_IN;
  if (ev & EPOLLPRI) out |= MG_WAITS_PRI;
  if (ev & EPOLLOUT) out |= MG_WAITS_OUT;
  if (ev & (EPOLLERR | EPOLLHUP)) out |= MG_WAITS_ERR;
  return out;
}

/* Take events from the shared set (it showed work) until a->take requests are complete or it
 * has none left; a bounded number of events, so the thread's own fibers are not kept waiting.
 * One event per epoll_wait, straight from the backend and not through mg_loop_take's stash: in
 * fiber mode no thread runs mg_wait_nogvl or mg_loop_try, so the stash stays empty, and events
 * stashed here would be invisible to the other fiber threads (they wake on the shared set's
 * readiness, which a stashed event no longer shows). */
static void take_requests(mg_waits_args *a) {
  mg_engine *e = a->w->e;
  int claimed = 0; /* a slot of the cap held for the next request */
  for (int i = 0; i < 4 * a->take && a->nconns < a->take; i++) {
    mg_ev_event ev;
    mg_conn *c;
    if (!claimed && !(claimed = mg_waits_cap_claim(a->w->cap))) break;
    if (mg_ev_wait(e->ev, &ev, 0) <= 0) break;
    if (mg_loop_dispatch(e, &ev, &c)) {
      a->conns[a->nconns++] = c;
      claimed = 0; /* the request's now: released when its fiber ends */
    } else if (mg_loop_deferred()) {
      break; /* a TLS handshake, left to a wait without the GVL */
    }
  }
  if (claimed) mg_waits_cap_release(a->w->cap);
}

void *mg_waits_wait(void *p) {
  mg_waits_args *a = p;
  mg_waits *w = a->w;
  mg_engine *e = w->e;
  int64_t start = mg_now_ms();
  a->result = MG_WAITS_DONE;
  a->mailbox = 0;
  a->nready = 0;
  a->nconns = 0;
  a->shared = 0;
  if (a->take > MG_WAITS_TAKE) a->take = MG_WAITS_TAKE;
  if (!a->look) mg_waits_finish(w); /* the responses first: their clients wait for them */
  if (a->take) {
    /* counted like a thread in next_request: it would take a request now */
    mg_loop_enter(e);
    mg_accept_early(e);
  }
  if (shared_listen(w, a->take > 0) != 0) {
    a->result = MG_WAITS_FAIL;
    a->err = errno;
    goto out;
  }
  for (;;) {
    int64_t now = mg_now_ms();
    if (a->report_stop && atomic_load(&e->stopping) && atomic_load(&e->nconns) == 0) {
      mg_engine_wake(e); /* pass it on, as mg_wait_nogvl does */
      a->result = MG_WAITS_STOP;
      break;
    }
    if (now >= atomic_load(&e->next_sweep_ms)) mg_sweep(e, now);
    int timeout = MG_SWEEP_INTERVAL_MS;
    if (a->timeout_ms >= 0) {
      int64_t left = start + a->timeout_ms - now;
      if (left < 0) left = 0;
      if (left < timeout) timeout = (int)left;
    }
    struct epoll_event evs[MG_WAITS_BATCH];
    int n = epoll_wait(w->epfd, evs, MG_WAITS_BATCH, timeout);
    if (n < 0) {
      if (errno == EINTR) { a->result = MG_WAITS_INTR; break; }
      a->result = MG_WAITS_FAIL;
      a->err = errno;
      break;
    }
    int shared = 0;
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64;
      if (tag == TAG_SHARED) {
        shared = 1;
      } else if (tag == TAG_MAILBOX) {
        mg_wake_drain(&w->mailbox);
        a->mailbox = 1;
      } else {
        a->ready[a->nready].fd = (int)tag;
        a->ready[a->nready].events = from_epoll(evs[i].events);
        a->nready++;
      }
    }
    if (shared && a->take) {
      if (a->look) a->shared = 1;
      else take_requests(a);
    }
    if (a->nready || a->mailbox || a->nconns || a->shared) break;
    if (timeout == 0 || (a->timeout_ms >= 0 && mg_now_ms() - start >= a->timeout_ms)) break;
  }
out:
  if (a->take) {
    mg_loop_leave(e);
  }
  return NULL;
}

void *mg_waits_work(void *p) {
  mg_waits_args *a = p;
  mg_engine *e = a->w->e;
  mg_waits_finish(a->w);
  if (!a->shared || !a->take) return NULL;
  mg_loop_enter(e);
  mg_accept_early(e);
  take_requests(a);
  mg_loop_leave(e);
  return NULL;
}

#else /* no epoll or eventfd: fiber mode is not available (Ruby refuses it with one line) */
mg_waits *mg_waits_new(mg_engine *e, int shared_fd, mg_waits_cap *cap) { (void)e; (void)shared_fd; (void)cap; errno = ENOSYS; return NULL; }
void mg_waits_free(mg_waits *w) { (void)w; }
int mg_waits_arm(mg_waits *w, int fd, uint32_t events) { (void)w; (void)fd; (void)events; errno = ENOSYS; return -1; }
int mg_waits_disarm(mg_waits *w, int fd) { (void)w; (void)fd; return 0; }
void mg_waits_poke(mg_waits *w) { (void)w; }
void *mg_waits_wait(void *p) { mg_waits_args *a = p; a->result = MG_WAITS_FAIL; a->err = ENOSYS; return NULL; }
void *mg_waits_work(void *p) { (void)p; return NULL; }
int mg_waits_defer(mg_waits *w, mg_conn *c) { (void)w; (void)c; return 0; }
int mg_waits_pending(const mg_waits *w) { (void)w; return 0; }
mg_engine *mg_waits_engine(const mg_waits *w) { (void)w; return NULL; }
void mg_waits_finish(mg_waits *w) { (void)w; }
#endif
