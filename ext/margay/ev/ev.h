/*
 * ev/ev.h - the event loop interface: one-shot readiness notification shared by
 * many threads. Two backends: epoll (Linux, default) and poll(2) (portable,
 * also run by the test suite). A registration delivers at most one event and
 * is then disarmed until armed again, so the thread that receives an event owns
 * that fd until it re-arms it. A "persistent" registration (the wake fd) is
 * level-triggered and never disarmed.
 */
#ifndef MARGAY_EV_H
#define MARGAY_EV_H

#include <stdint.h>

/* MG_EV_HUP is only reported, never armed: with MG_EV_IN, the peer has closed its sending side
 * (EPOLLRDHUP, POLLRDHUP) by the time the event was taken. */
enum { MG_EV_IN = 1, MG_EV_OUT = 2, MG_EV_ERR = 4, MG_EV_HUP = 8 };
enum { MG_EV_AUTO = 0, MG_EV_EPOLL = 1, MG_EV_POLL = 2 };

typedef struct mg_ev mg_ev;

typedef struct {
  uint64_t data;
  uint32_t events;
} mg_ev_event;

struct mg_ev_ops {
  const char *name;
  int (*arm)(mg_ev *ev, int fd, uint32_t events, uint64_t data, int persistent);
  int (*disarm)(mg_ev *ev, int fd); /* forget fd entirely (before close) */
  int (*wait)(mg_ev *ev, mg_ev_event *out, int timeout_ms); /* 1 event, 0 timeout, -1 errno */
  void (*free)(mg_ev *ev);
  /* Up to +max+ events at once (the poll backend gives one); 0 timeout, -1 errno. */
  int (*wait_many)(mg_ev *ev, mg_ev_event *out, int max, int timeout_ms);
};

struct mg_ev {
  const struct mg_ev_ops *ops;
};

/* NULL with errno set on failure; kind MG_EV_EPOLL where unavailable fails with ENOSYS. */
mg_ev *mg_ev_new(int kind, int max_fds);
mg_ev *mg_ev_epoll_new(int max_fds);
mg_ev *mg_ev_poll_new(int max_fds);

static inline int mg_ev_arm(mg_ev *ev, int fd, uint32_t events, uint64_t data) {
  return ev->ops->arm(ev, fd, events, data, 0);
}
static inline int mg_ev_arm_persistent(mg_ev *ev, int fd, uint64_t data) {
  return ev->ops->arm(ev, fd, MG_EV_IN, data, 1);
}
static inline int mg_ev_disarm(mg_ev *ev, int fd) { return ev->ops->disarm(ev, fd); }
static inline int mg_ev_wait(mg_ev *ev, mg_ev_event *out, int timeout_ms) {
  return ev->ops->wait(ev, out, timeout_ms);
}
static inline void mg_ev_free(mg_ev *ev) { ev->ops->free(ev); }
static inline int mg_ev_wait_many(mg_ev *ev, mg_ev_event *out, int max, int timeout_ms) {
  return ev->ops->wait_many(ev, out, max, timeout_ms);
}

/* Fiber mode: the epoll backend's own epoll fd, which a thread's private set nests
 * (core/waits.c); -1 for any other backend. */
int mg_ev_epoll_fd(const mg_ev *ev);

#endif
