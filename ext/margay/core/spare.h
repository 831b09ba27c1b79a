/*
 * core/spare.h - the blocks a connection needs only while it has a request in hand (its read
 * buffer and its parsed head), kept by each thread for the next request rather than by each
 * idle connection. A kept-alive connection between requests holds neither (core/conn.c).
 */
#ifndef MARGAY_CORE_SPARE_H
#define MARGAY_CORE_SPARE_H

#include <stddef.h>

/* The kinds of block, each of one size. */
typedef enum {
  MG_SPARE_RBUF, /* a first read buffer: MG_SPARE_RBUF_SIZE bytes */
  MG_SPARE_HEAD, /* a parsed request head: sizeof(mg_request) */
  MG_SPARE_KINDS
} mg_spare_kind;

#define MG_SPARE_RBUF_SIZE 4096

/* A block of +kind+: one this thread kept, else a new one (malloc). NULL: no memory. */
void *mg_spare_take(mg_spare_kind kind);
/* Done with +p+ (a block of +kind+, or NULL): this thread keeps a few for its next requests and
 * frees the rest; what it keeps is freed when it exits. */
void mg_spare_give(mg_spare_kind kind, void *p);

#endif
