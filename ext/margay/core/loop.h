/*
 * core/loop.h - the event loop, run without the GVL by every thread that waits in
 * Engine#next_request.
 */
#ifndef MARGAY_CORE_LOOP_H
#define MARGAY_CORE_LOOP_H

#include <stdint.h>
#include "core/conn.h"

enum mg_wait_result { MG_WAIT_READY = 1, MG_WAIT_TIMEOUT = 2, MG_WAIT_STOP = 3, MG_WAIT_INTR = 4 };

typedef struct {
  mg_engine *e;
  mg_conn *conn;         /* out: the connection with a complete request (MG_WAIT_READY), owned */
  int64_t idle_ms;       /* return MG_WAIT_TIMEOUT after this long without work; <0: never */
  int result;
} mg_wait_args;

/* Wait for events and handle them until a request is complete, the engine stops, +idle_ms+
 * pass, or a signal interrupts (for rb_thread_call_without_gvl2: +args+ is an mg_wait_args). */
void *mg_wait_nogvl(void *args);

#endif
