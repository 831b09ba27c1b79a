/*
 * ev/epoll.c - epoll backend: EPOLLONESHOT registrations shared by every
 * waiting thread; the kernel wakes one waiter per event.
 */
#include "ev/ev.h"
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef HAVE_EPOLL_CREATE1
#include <sys/epoll.h>

typedef struct {
  mg_ev base;
  int epfd;
  unsigned char *registered; /* per fd: added to the epoll set */
  int max_fds;
} mg_ev_epoll;

static uint32_t to_epoll(uint32_t events, int persistent) {
  uint32_t e = persistent ? 0 : EPOLLONESHOT;
  if (events & MG_EV_IN) e |= EPOLLIN | EPOLLRDHUP;
  if (events & MG_EV_OUT) e |= EPOLLOUT;
  return e;
}

static int ep_arm(mg_ev *ev, int fd, uint32_t events, uint64_t data, int persistent) {
  mg_ev_epoll *ep = (mg_ev_epoll *)ev;
  struct epoll_event e;
  e.events = to_epoll(events, persistent);
  e.data.u64 = data;
  if (fd < 0 || fd >= ep->max_fds) { errno = EBADF; return -1; }
  if (ep->registered[fd]) {
    if (epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &e) == 0) return 0;
    if (errno != ENOENT) return -1;
  }
  if (epoll_ctl(ep->epfd, EPOLL_CTL_ADD, fd, &e) == 0) { ep->registered[fd] = 1; return 0; }
  if (errno == EEXIST && epoll_ctl(ep->epfd, EPOLL_CTL_MOD, fd, &e) == 0) { ep->registered[fd] = 1; return 0; }
  return -1;
}

static int ep_disarm(mg_ev *ev, int fd) {
  mg_ev_epoll *ep = (mg_ev_epoll *)ev;
  if (fd < 0 || fd >= ep->max_fds) return 0;
  /* No shortcut on registered[fd]: another thread may be arming this fd right
   * now (a listener re-armed after an accept batch while Engine#stop disarms
   * it); the kernel's answer is the truth, ENOENT meaning nothing to do. */
  ep->registered[fd] = 0;
  struct epoll_event e = {0};
  if (epoll_ctl(ep->epfd, EPOLL_CTL_DEL, fd, &e) == 0 || errno == ENOENT || errno == EBADF) return 0;
  return -1;
}

static void from_epoll(const struct epoll_event *e, mg_ev_event *out) {
  out->data = e->data.u64;
  out->events = 0;
  if (e->events & (EPOLLIN | EPOLLRDHUP)) out->events |= MG_EV_IN;
  if (e->events & (EPOLLRDHUP | EPOLLHUP)) out->events |= MG_EV_HUP;
  if (e->events & EPOLLOUT) out->events |= MG_EV_OUT;
  if (e->events & (EPOLLERR | EPOLLHUP)) out->events |= MG_EV_ERR | MG_EV_IN;
}

static int ep_wait(mg_ev *ev, mg_ev_event *out, int timeout_ms) {
  mg_ev_epoll *ep = (mg_ev_epoll *)ev;
  struct epoll_event e;
  int n = epoll_wait(ep->epfd, &e, 1, timeout_ms);
  if (n <= 0) return n;
  from_epoll(&e, out);
  return 1;
}

#define MG_EP_MANY 64

static int ep_wait_many(mg_ev *ev, mg_ev_event *out, int max, int timeout_ms) {
  mg_ev_epoll *ep = (mg_ev_epoll *)ev;
  struct epoll_event e[MG_EP_MANY];
  int n = epoll_wait(ep->epfd, e, max < MG_EP_MANY ? max : MG_EP_MANY, timeout_ms);
  for (int i = 0; i < n; i++) from_epoll(&e[i], &out[i]);
  return n;
}

static void ep_free(mg_ev *ev) {
  mg_ev_epoll *ep = (mg_ev_epoll *)ev;
  close(ep->epfd);
  free(ep->registered);
  free(ep);
}

static const struct mg_ev_ops epoll_ops = {"epoll", ep_arm, ep_disarm, ep_wait, ep_free, ep_wait_many};

mg_ev *mg_ev_epoll_new(int max_fds) {
  mg_ev_epoll *ep = calloc(1, sizeof(*ep));
  if (!ep) return NULL;
  ep->registered = calloc((size_t)max_fds, 1);
  ep->max_fds = max_fds;
  ep->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (!ep->registered || ep->epfd < 0) {
    int saved = errno;
    if (ep->epfd >= 0) close(ep->epfd);
    free(ep->registered);
    free(ep);
    errno = saved;
    return NULL;
  }
  ep->base.ops = &epoll_ops;
  return &ep->base;
}
#else
mg_ev *mg_ev_epoll_new(int max_fds) { (void)max_fds; errno = ENOSYS; return NULL; }
#endif

mg_ev *mg_ev_new(int kind, int max_fds) {
  if (kind == MG_EV_POLL) return mg_ev_poll_new(max_fds);
  mg_ev *ev = mg_ev_epoll_new(max_fds);
  if (ev || kind == MG_EV_EPOLL) return ev;
  return mg_ev_poll_new(max_fds);
}

/* Fiber mode: the epoll fd behind +ev+, or -1 when +ev+ is not this backend. */
int mg_ev_epoll_fd(const mg_ev *ev) {
#ifdef HAVE_EPOLL_CREATE1
  if (ev->ops == &epoll_ops) return ((const mg_ev_epoll *)ev)->epfd;
#else
  (void)ev;
#endif
  return -1;
}
