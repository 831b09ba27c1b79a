/*
 * test/ext/ev/poll_reuse.c - the poll backend (ext/margay/ev/poll.c) with poll(2) scripted, so
 * that what happens between the leader's poll() and its look at the results is exact: built and
 * run by test/ext/ev/poll_backend_test.rb. Exits 0 when every check holds, 1 with a message.
 */
#include <poll.h>
int scripted_poll(struct pollfd *fds, nfds_t n, int timeout_ms);
#define poll scripted_poll /* poll.c's calls reach the script below, not the C library */
#include "ev/poll.c"
#undef poll
#include "ev/wake.c" /* poll.c's wake fd (a pipe here: no HAVE_EVENTFD) */

#include <stdio.h>

enum { FD = 5 };
static const uint64_t OLD_DATA = 0x100000005, NEW_DATA = 0x200000005;

static mg_ev *ev;
static int scene;
static int failures;

/* Scene 1: while the leader polls, the connection on FD closes and a new one, accepted on the
 * same number, registers (new data). poll() then reports the old socket's half-close on FD.
 * Scene 2: the next poll reports the new connection's first bytes. */
int scripted_poll(struct pollfd *fds, nfds_t n, int timeout_ms) {
  (void)timeout_ms;
  for (nfds_t i = 0; i < n; i++) {
    if (fds[i].fd != FD) continue;
    if (scene == 1) mg_ev_arm(ev, FD, MG_EV_IN, NEW_DATA);
    fds[i].revents = scene == 1 ? (POLLIN | POLLRDHUP) : POLLIN;
    return 1;
  }
  return 0;
}

static void check(int ok, const char *what) {
  if (!ok) {
    fprintf(stderr, "FAIL: %s\n", what);
    failures++;
  }
}

int main(void) {
  ev = mg_ev_poll_new(64);
  check(ev != NULL, "mg_ev_poll_new");
  if (!ev) return 1;
  mg_ev_event out = {0, 0};

  mg_ev_arm(ev, FD, MG_EV_IN, OLD_DATA);
  scene = 1;
  int found = mg_ev_wait(ev, &out, 100);
  check(found == 0, "the old socket's revents are not handed out under the new registration");

  scene = 2;
  out = (mg_ev_event){0, 0};
  found = mg_ev_wait(ev, &out, 100);
  check(found == 1, "the new registration is still armed and reported on the next poll");
  check(out.data == NEW_DATA, "its event carries the new registration's data");
  check(out.events == MG_EV_IN, "its event says readable only: no half-close of its own");

  mg_ev_free(ev);
  if (failures) return 1;
  puts("ok");
  return 0;
}
