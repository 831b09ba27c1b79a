/*
 * ev/wake.h - a wake fd: one thread signals it, a thread blocked in poll/epoll on its read end
 * wakes. An eventfd where the system has one (both ends the same fd), else a non-blocking pipe.
 * Level-triggered: a signal no one has drained yet wakes the next waiter at once.
 */
#ifndef MARGAY_EV_WAKE_H
#define MARGAY_EV_WAKE_H

typedef struct {
  int rd; /* what the waiter polls and drains */
  int wr; /* what a signal writes (== rd for an eventfd) */
} mg_wake;

/* Nothing open: what mg_wake_close leaves, and safe to close again. */
#define MG_WAKE_NONE ((mg_wake){-1, -1})

/* Open +w+ (non-blocking, close-on-exec); -1 with errno on failure (+w+ left MG_WAKE_NONE). */
int mg_wake_open(mg_wake *w);
void mg_wake_close(mg_wake *w);
/* Wake the waiter (any thread, async-signal-safe). A full pipe already wakes it. */
void mg_wake_signal(const mg_wake *w);
/* Take every signal so far: the read end is quiet until the next one. */
void mg_wake_drain(const mg_wake *w);

#endif
