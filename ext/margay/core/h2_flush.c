/*
 * core/h2_flush.c - the HTTP/2 flusher: the bound on how long an answer held for one write
 * (core/h2_respond.c) may wait. A thread that answers a run of one connection's streams holds
 * their frames in the connection's output queue and writes them once, when it takes the last
 * of the run (or a pump does before); the flusher thread writes them itself once the oldest
 * has waited MG_H2_HOLD_NS, when that thread went into a slow app call meanwhile (or any other
 * wait). It writes under the connection's h2_lock, as a response call does, and never arms a
 * connection: output the socket does not take is kicked to the loop (mg_h2_kick).
 *
 * No work while nothing is held: the thread waits on flush_cond without a deadline, and only a
 * hold that finds it so signals it. Connections are listed when their hold starts (never
 * unlisted by their holder: an entry whose hold ended is dropped at the flusher's next look).
 * Connection structs are never freed while the engine lives, so a listed one is always safe to
 * look at; its c->h2_held_ns says whether (and since when) it holds anything. Started by
 * Engine#start, joined by Engine#close: no native thread is left when a mold forks.
 */
#include "core/h2.h"

#ifdef MG_HAVE_H2

#include "core/h2_priv.h"
#include <errno.h>
#include <stdint.h>

/* Connections written in one pass before the list is looked at again. */
#define FLUSH_PASS 64

void h2_flush_list(mg_engine *e, mg_conn *c) {
  pthread_mutex_lock(&e->flush_lock);
  if (!c->h2_flush_listed) {
    c->h2_flush_listed = 1;
    c->h2_flush_next = NULL;
    if (e->flush_tail) e->flush_tail->h2_flush_next = c; else e->flush_head = c;
    e->flush_tail = c;
    /* a flusher waiting with a deadline wakes before this one's: every hold listed began earlier */
    if (e->flush_idle) pthread_cond_signal(&e->flush_cond);
  }
  pthread_mutex_unlock(&e->flush_lock);
}

/* Write what +c+ holds if its hold began MG_H2_HOLD_NS ago; a hold begun since the flusher
 * looked is listed again. */
static void flush_conn(mg_engine *e, mg_conn *c) {
  pthread_mutex_lock(&c->h2_lock);
  int64_t since = atomic_load(&c->h2_held_ns);
  if (!c->h2 || !since) { pthread_mutex_unlock(&c->h2_lock); return; }
  if (mg_mono_ns() - since < MG_H2_HOLD_NS) {
    h2_flush_list(e, c);
    pthread_mutex_unlock(&c->h2_lock);
    return;
  }
  c->h2->ended = 0; /* not an answer's end: mg_h2_unlock writes (and kicks what is left) */
  mg_h2_unlock(e, c);
}

static void *flush_main(void *arg) {
  mg_engine *e = arg;
  mg_conn *due[FLUSH_PASS];
  pthread_mutex_lock(&e->flush_lock);
  while (!e->flush_stop) {
    if (!e->flush_head) {
      e->flush_idle = 1;
      pthread_cond_wait(&e->flush_cond, &e->flush_lock);
      e->flush_idle = 0;
      continue;
    }
    int64_t now = mg_mono_ns(), next = INT64_MAX;
    int ndue = 0;
    mg_conn *prev = NULL;
    for (mg_conn *c = e->flush_head, *following; c; c = following) {
      following = c->h2_flush_next;
      int64_t since = atomic_load(&c->h2_held_ns);
      int ripe = since && now - since >= MG_H2_HOLD_NS;
      if (since && (!ripe || ndue == FLUSH_PASS)) { /* stays */
        if (since + MG_H2_HOLD_NS < next) next = since + MG_H2_HOLD_NS;
        prev = c;
        continue;
      }
      if (prev) prev->h2_flush_next = following; else e->flush_head = following;
      if (e->flush_tail == c) e->flush_tail = prev;
      c->h2_flush_next = NULL;
      c->h2_flush_listed = 0;
      if (ripe) due[ndue++] = c;
    }
    if (ndue) {
      pthread_mutex_unlock(&e->flush_lock);
      for (int i = 0; i < ndue; i++) flush_conn(e, due[i]);
      pthread_mutex_lock(&e->flush_lock);
      continue;
    }
    if (next == INT64_MAX) continue; /* every entry was stale: the list is empty now */
    struct timespec at = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
    pthread_cond_timedwait(&e->flush_cond, &e->flush_lock, &at);
  }
  pthread_mutex_unlock(&e->flush_lock);
  return NULL;
}

int mg_h2_flush_start(mg_engine *e) {
  if (atomic_load(&e->flush_running)) return 0;
  e->flush_stop = 0;
  int err = pthread_create(&e->flush_thread, NULL, flush_main, e);
  if (err) { errno = err; return -1; }
  atomic_store(&e->flush_running, 1);
  return 0;
}

void mg_h2_flush_stop(mg_engine *e) {
  if (!atomic_load(&e->flush_running)) return;
  atomic_store(&e->flush_running, 0); /* no answer is held from now on */
  pthread_mutex_lock(&e->flush_lock);
  e->flush_stop = 1;
  pthread_cond_signal(&e->flush_cond);
  pthread_mutex_unlock(&e->flush_lock);
  pthread_join(e->flush_thread, NULL);
}

#else

int mg_h2_flush_start(mg_engine *e) { (void)e; return 0; }
void mg_h2_flush_stop(mg_engine *e) { (void)e; }

#endif
