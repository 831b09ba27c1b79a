/*
 * ev/poll.c - portable poll(2) backend. One thread at a time polls (the
 * leader); others queue on the leader mutex. Arming an fd while the leader
 * is inside poll() signals a wake fd (ev/wake.h) so that it re-reads the
 * armed set. Slower than epoll with many connections, but needs only POSIX.
 */
#include "ev/ev.h"
#include "ev/wake.h"
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>

/* Where the system has it (Linux), a peer's closed sending side is reported as on epoll. */
#ifdef POLLRDHUP
#define MG_POLL_IN (POLLIN | POLLRDHUP)
#else
#define MG_POLL_IN POLLIN
#define POLLRDHUP 0
#endif

typedef struct {
  uint64_t data;
  uint32_t events; /* 0: disarmed */
  int persistent;
} poll_entry;

typedef struct {
  mg_ev base;
  pthread_mutex_t lock;   /* guards table, maxfd, polling */
  pthread_mutex_t leader; /* one poller at a time */
  poll_entry *table;
  int max_fds, maxfd;
  int polling;
  int rr; /* where the next scan of poll's results starts (round robin) */
  mg_wake ctl; /* wakes the leader to re-read the armed set */
  struct pollfd *pfds; /* leader's scratch */
  int *fds;
  uint64_t *datas; /* each polled fd's registration when the poll began */
} mg_ev_poll;

static void poke(mg_ev_poll *p) {
  if (p->polling) {
    mg_wake_signal(&p->ctl);
  }
}

static int pl_arm(mg_ev *ev, int fd, uint32_t events, uint64_t data, int persistent) {
  mg_ev_poll *p = (mg_ev_poll *)ev;
  if (fd < 0 || fd >= p->max_fds) { errno = EBADF; return -1; }
  pthread_mutex_lock(&p->lock);
  p->table[fd].data = data;
  p->table[fd].events = events;
  p->table[fd].persistent = persistent;
  if (fd > p->maxfd) p->maxfd = fd;
  poke(p);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

static int pl_disarm(mg_ev *ev, int fd) {
  mg_ev_poll *p = (mg_ev_poll *)ev;
  if (fd < 0 || fd >= p->max_fds) return 0;
  pthread_mutex_lock(&p->lock);
  p->table[fd].events = 0;
  poke(p);
  pthread_mutex_unlock(&p->lock);
  return 0;
}

static int pl_wait(mg_ev *ev, mg_ev_event *out, int timeout_ms) {
  mg_ev_poll *p = (mg_ev_poll *)ev;
  int found = 0;
  /* A look without waiting (timeout 0, taken with the GVL held) never queues behind the
   * leader's poll: nothing is ready for it then. */
  if (timeout_ms == 0) {
    if (pthread_mutex_trylock(&p->leader) != 0) return 0;
  } else {
    pthread_mutex_lock(&p->leader);
  }
  pthread_mutex_lock(&p->lock);
  int n = 0;
  p->pfds[n].fd = p->ctl.rd;
  p->pfds[n].events = POLLIN;
  p->fds[n++] = -1;
  for (int fd = 0; fd <= p->maxfd; fd++) {
    uint32_t e = p->table[fd].events;
    if (!e) continue;
    p->pfds[n].fd = fd;
    p->pfds[n].events = (short)(((e & MG_EV_IN) ? MG_POLL_IN : 0) | ((e & MG_EV_OUT) ? POLLOUT : 0));
    p->pfds[n].revents = 0;
    p->datas[n] = p->table[fd].data;
    p->fds[n++] = fd;
  }
  p->polling = 1;
  pthread_mutex_unlock(&p->lock);

  int rc = poll(p->pfds, (nfds_t)n, timeout_ms);
  int saved = errno;

  pthread_mutex_lock(&p->lock);
  p->polling = 0;
  if (rc > 0) {
    if (p->pfds[0].revents) mg_wake_drain(&p->ctl);
    /* Start where the last scan stopped: a low fd that is always ready (a
     * listener under a connection flood) must not win every time. */
    for (int k = 0; k < n - 1 && !found; k++) {
      int i = 1 + (p->rr + k) % (n - 1);
      short re = p->pfds[i].revents;
      if (!re) continue;
      poll_entry *en = &p->table[p->fds[i]];
      /* Disarmed meanwhile, or the fd now belongs to another registration (closed and reused by
       * a new connection while we polled): these revents are the old socket's. The new one is
       * polled next time (poll is level-triggered, so nothing is lost). */
      if (!en->events || en->data != p->datas[i]) continue;
      out->data = en->data;
      out->events = 0;
      if (re & (POLLIN | POLLRDHUP)) out->events |= MG_EV_IN;
      if (re & (POLLRDHUP | POLLHUP)) out->events |= MG_EV_HUP;
      if (re & POLLOUT) out->events |= MG_EV_OUT;
      if (re & (POLLERR | POLLHUP | POLLNVAL)) out->events |= MG_EV_ERR | MG_EV_IN;
      if (!en->persistent) en->events = 0;
      found = 1;
      p->rr = i; /* i - 1 was taken: start after it next time */
    }
  }
  pthread_mutex_unlock(&p->lock);
  pthread_mutex_unlock(&p->leader);
  if (rc < 0) { errno = saved; return -1; }
  return found;
}

static void pl_free(mg_ev *ev) {
  mg_ev_poll *p = (mg_ev_poll *)ev;
  mg_wake_close(&p->ctl);
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->leader);
  free(p->table);
  free(p->pfds);
  free(p->fds);
  free(p->datas);
  free(p);
}

/* One event per wait: the leader hands out what it found one at a time. */
static int pl_wait_many(mg_ev *ev, mg_ev_event *out, int max, int timeout_ms) {
  (void)max;
  return pl_wait(ev, out, timeout_ms);
}

static const struct mg_ev_ops poll_ops = {"poll", pl_arm, pl_disarm, pl_wait, pl_free, pl_wait_many};

mg_ev *mg_ev_poll_new(int max_fds) {
  mg_ev_poll *p = calloc(1, sizeof(*p));
  if (!p) return NULL;
  p->max_fds = max_fds;
  p->maxfd = -1;
  p->table = calloc((size_t)max_fds, sizeof(poll_entry));
  p->pfds = calloc((size_t)max_fds + 1, sizeof(struct pollfd));
  p->fds = calloc((size_t)max_fds + 1, sizeof(int));
  p->datas = calloc((size_t)max_fds + 1, sizeof(uint64_t));
  if (!p->table || !p->pfds || !p->fds || !p->datas || mg_wake_open(&p->ctl) != 0) {
    free(p->table); free(p->pfds); free(p->fds); free(p->datas); free(p);
    errno = ENOMEM;
    return NULL;
  }
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_init(&p->leader, NULL);
  p->base.ops = &poll_ops;
  return &p->base;
}
