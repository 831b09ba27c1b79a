/*
 * core/spare.c - each thread keeps up to SPARE_KEPT blocks of each kind that connections gave
 * back, so a request on a kept-alive connection costs no allocator call for its read buffer
 * or its head, and an idle connection holds neither. Threads come and go (the pool grows and
 * shrinks): a thread's blocks are freed by its key's destructor when it exits.
 */
#include "core/spare.h"
#include "http/parser.h"
#include <pthread.h>
#include <stdlib.h>

#define SPARE_KEPT 4

typedef struct {
  void *blocks[MG_SPARE_KINDS][SPARE_KEPT];
  int count[MG_SPARE_KINDS];
} spares;

static const size_t spare_size[MG_SPARE_KINDS] = { MG_SPARE_RBUF_SIZE, sizeof(mg_request) };

static pthread_key_t spare_key;
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static __thread spares *mine; /* this thread's, once it gave a block back */

static void spares_free(void *arg) {
  spares *s = arg;
  mine = NULL; /* runs in the exiting thread: a block given back after this starts a new set */
  for (int k = 0; k < MG_SPARE_KINDS; k++)
    for (int i = 0; i < s->count[k]; i++) free(s->blocks[k][i]);
  free(s);
}

static void spare_key_make(void) { pthread_key_create(&spare_key, spares_free); }

void *mg_spare_take(mg_spare_kind kind) {
  spares *s = mine;
  if (s && s->count[kind] > 0) return s->blocks[kind][--s->count[kind]];
  return malloc(spare_size[kind]);
}

void mg_spare_give(mg_spare_kind kind, void *p) {
  if (!p) return;
  spares *s = mine;
  if (!s) {
    pthread_once(&spare_once, spare_key_make);
    s = calloc(1, sizeof *s);
    if (!s || pthread_setspecific(spare_key, s) != 0) { free(s); free(p); return; }
    mine = s;
  }
  if (s->count[kind] < SPARE_KEPT) s->blocks[kind][s->count[kind]++] = p;
  else free(p);
}
