/*
 * ev/wake.c - the wake fd (see wake.h): the engine's wake of its poller, a fiber-mode thread's
 * mailbox and the poll(2) backend's control channel.
 */
#include "ev/wake.h"
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>
#ifdef HAVE_SYS_EVENTFD_H
#include <sys/eventfd.h>
#endif

int mg_wake_open(mg_wake *w) {
  *w = MG_WAKE_NONE;
#ifdef HAVE_EVENTFD
  w->rd = w->wr = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (w->rd >= 0) return 0;
#endif
  int fds[2];
  if (pipe(fds) != 0) { *w = MG_WAKE_NONE; return -1; }
  for (int i = 0; i < 2; i++) {
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  }
  w->rd = fds[0];
  w->wr = fds[1];
  return 0;
}

void mg_wake_close(mg_wake *w) {
  if (w->rd >= 0) close(w->rd);
  if (w->wr >= 0 && w->wr != w->rd) close(w->wr);
  *w = MG_WAKE_NONE;
}

void mg_wake_signal(const mg_wake *w) {
  uint64_t one = 1;
  ssize_t n = write(w->wr, &one, w->rd == w->wr ? sizeof one : 1);
  (void)n;
}

void mg_wake_drain(const mg_wake *w) {
  char buf[64];
  if (w->rd == w->wr) { ssize_t n = read(w->rd, buf, sizeof(uint64_t)); (void)n; return; } /* resets the count */
  while (read(w->rd, buf, sizeof buf) > 0) {}
}
