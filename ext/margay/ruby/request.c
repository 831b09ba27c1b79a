/*
 * ruby/request.c - the requests Ruby holds. A Ruby thread holds a connection only between
 * #next_request (or FiberWaits#wait) handing it over and the response call (#respond,
 * #respond_file, #stream_finish, #abort, #hijack) that gives it back. A token names that hold:
 * fd, generation and request number, so a stale token raises instead of touching another
 * request. #next_request waits for work without the GVL.
 */
#include "ruby/request.h"
#include "ruby/h2.h"
#include "ruby/tls.h"
#include "core/input.h"
#include "core/loop.h"
#include <ruby/thread.h>

static ID id_timeout;

/* fd (20 bits: max_fds is at most 2^20), the request's number on the connection (20 bits) and
 * the connection's generation (22 bits; it changes on every hand-back to the event loop): 62
 * bits in all, so that a token stays a Fixnum. */
#define TOKEN_FD_BITS 20
#define TOKEN_REQ_BITS 20
#define TOKEN_GEN_MASK ((1ULL << 22) - 1)
#define TOKEN_REQ_MASK ((1ULL << TOKEN_REQ_BITS) - 1)

VALUE mg_request_token(mg_conn *c) {
  uint64_t gen = mg_state_gen(atomic_load(&c->state)) & TOKEN_GEN_MASK;
  uint64_t t = (gen << (TOKEN_FD_BITS + TOKEN_REQ_BITS)) | (((uint64_t)c->requests & TOKEN_REQ_MASK) << TOKEN_FD_BITS) |
               (uint64_t)c->fd;
  return ULL2NUM(t);
}

/* The connection +token+ names, if its request still holds it: owned (by the calling thread: no
 * other owner can have the same generation and request), and in +phase+ (the application's, or
 * idle for a continue token). */
static mg_conn *mg_rb_token_lookup(mg_engine *e, VALUE token, int phase) {
  uint64_t t = NUM2ULL(token);
  int fd = (int)(t & ((1ULL << TOKEN_FD_BITS) - 1));
  if (fd >= e->max_fds || !e->conns[fd]) return NULL;
  mg_conn *c = e->conns[fd];
  uint64_t s = atomic_load(&c->state);
  if (mg_state_st(s) != MG_OWNED || (mg_state_gen(s) & TOKEN_GEN_MASK) != (t >> (TOKEN_FD_BITS + TOKEN_REQ_BITS)) ||
      ((uint64_t)c->requests & TOKEN_REQ_MASK) != ((t >> TOKEN_FD_BITS) & TOKEN_REQ_MASK) || c->phase != phase)
    return NULL;
  return c;
}

mg_conn *mg_rb_request_conn(mg_engine *e, VALUE token) {
  mg_conn *c = mg_rb_token_lookup(e, token, MG_PH_APP);
  if (!c) rb_raise(mg_eClientGone, "the connection is no longer held by this request");
  return c;
}

typedef struct { mg_rb_engine *rb; mg_conn *c; } build_args;

static VALUE mg_rb_build(VALUE p) {
  build_args *b = (build_args *)p;
  mg_rb_engine *rb = b->rb;
  mg_env_objects o = {rb->hijack_class, rb->hints_class, rb->self, mg_request_token(b->c), Qnil};
  VALUE env = mg_env_build(rb->env_template, &rb->servers[b->c->listener], &rb->core.cfg, b->c, &o);
  mg_input_consume_head(b->c);
  return NIL_P(o.hijack) ? rb_assoc_new(o.token, env) : rb_ary_new_from_args(3, o.token, env, o.hijack);
}

VALUE mg_request_build(mg_rb_engine *rb, mg_conn *c, int *state) {
  build_args b = {rb, c};
  *state = 0;
  VALUE out = rb_protect(mg_rb_build, (VALUE)&b, state);
  return *state ? Qnil : out;
}

/* [token, env] for the complete request on +c+ (owned by this thread). */
static VALUE mg_rb_ready(mg_rb_engine *rb, mg_conn *c) {
  assert(mg_conn_owned(c) && c->phase == MG_PH_APP);
  int state;
  VALUE out = mg_request_build(rb, c, &state);
  if (state) { mg_conn_close(&rb->core, c); rb_jump_tag(state); }
  return out;
}

/* [token, env] for an HTTP/2 stream's request taken from the engine's queue. */
static VALUE mg_rb_h2_ready(mg_rb_engine *rb, struct mg_h2_req *q) {
  int state;
  VALUE out = mg_rb_h2_request(rb, q, &state);
  if (state) rb_jump_tag(state);
  return out;
}

/* When the calling thread last got the GVL back from the blocking wait: it takes ready work
 * without releasing the GVL (mg_loop_try) for at most MG_GVL_TURN_US after that. */
static _Thread_local int64_t gvl_since_us;

/*
 * Engine#next_request(continue_token = nil, idle_ms = nil)
 *   -> [token, env] ([token, env, hijack]: #request_objects), :timeout (idle_ms passed without
 *      work), or nil (stopped)
 * Waits without the GVL. continue_token: the token #respond returned, when a
 * pipelined request is already buffered on that connection: it is served at once while the
 * thread's turn on the connection lasts (MG_TURN_MS since it took it from the event loop),
 * else requeued behind the other ready connections and pending accepts. Ready work is taken
 * first without releasing the GVL (for MG_GVL_TURN_US after the thread last waited).
 */
static VALUE engine_next_request(int argc, VALUE *argv, VALUE self) {
  VALUE cont, idle;
  rb_scan_args(argc, argv, "02", &cont, &idle);
  mg_rb_engine *rb = mg_rb_engine_get(self);
  mg_engine *e = &rb->core;
  if (!NIL_P(cont)) {
    mg_conn *c = mg_rb_token_lookup(e, cont, MG_PH_IDLE);
    if (c && !mg_loop_turn_left(c)) mg_loop_requeue(e, c);
    else if (c && mg_input_continue(e, c) && mg_timing_admit(e, c)) return mg_rb_ready(rb, c);
  }
  /* Ready work first, keeping the GVL: no hand-off, no wake of another thread (core/loop.h). */
  mg_conn *c;
  struct mg_h2_req *q;
  if (mg_now_us() - gvl_since_us < MG_GVL_TURN_US && mg_loop_try(e, &c, &q)) return q ? mg_rb_h2_ready(rb, q) : mg_rb_ready(rb, c);
  mg_wait_args a = {.e = e, .idle_ms = NIL_P(idle) ? -1 : NUM2LL(idle)};
  for (;;) {
    a.result = MG_WAIT_INTR;
    atomic_store(&a.interrupted, 0);
    rb_thread_call_without_gvl2(mg_wait_nogvl, &a, mg_loop_unblock, &a);
    gvl_since_us = mg_now_us();
    if (a.result == MG_WAIT_READY) {
      mg_loop_got_gvl(e);
      return a.h2req ? mg_rb_h2_ready(rb, a.h2req) : mg_rb_ready(rb, a.conn);
    }
    if (a.result == MG_WAIT_TIMEOUT) return ID2SYM(id_timeout);
    if (a.result == MG_WAIT_STOP) return Qnil;
    rb_thread_check_ints(); /* interrupted: signals, Thread#raise, or a closed engine */
    if (e->closed) return Qnil;
  }
}

/*
 * Engine#request_objects(hijack_class, early_hints_class)
 * From now on the env of every plain HTTP/1.x request (ruby/env.h) comes with its rack.hijack,
 * rack.early_hints and rack.response_finished, made by the engine, and #next_request (and
 * FiberWaits#wait) hands it over as [token, env, hijack]; any other as [token, env].
 */
static VALUE engine_request_objects(VALUE self, VALUE hijack_class, VALUE hints_class) {
  Check_Type(hijack_class, T_CLASS);
  Check_Type(hints_class, T_CLASS);
  mg_rb_engine *rb = mg_rb_engine_get(self);
  rb->hijack_class = hijack_class;
  rb->hints_class = hints_class;
  return Qnil;
}

/* Engine#abort(token): drop a connection whose response cannot be completed.
 * A no-op once the response was handed to the event loop (the token is stale
 * then: the connection may be another thread's by now). A continue token
 * (a pipelined request buffered, nobody else owns it) is dropped as well. */
static VALUE engine_abort(VALUE self, VALUE token) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_abort(e, token);
  mg_conn *c = mg_rb_token_lookup(e, token, MG_PH_APP);
  if (c) mg_timing_done(e, c);
  if (!c) c = mg_rb_token_lookup(e, token, MG_PH_IDLE);
  if (c) mg_conn_close(e, c);
  return Qnil;
}

/* Engine#hijack(token) -> [fd, buffered_input]: the socket leaves the engine. On a TLS
 * connection [Native::TLSSession, buffered_input]: the session goes with it (the socket alone
 * would give the app ciphertext). */
static VALUE engine_hijack(VALUE self, VALUE token) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) rb_raise(mg_eInvalidResponse, "no hijack on HTTP/2 (rack.hijack? is false)");
  mg_conn *c = mg_rb_request_conn(e, token);
  VALUE rest = rb_str_new(c->rbuf, (long)c->rlen);
  VALUE session = c->tls.ssl ? mg_rb_tls_session(&c->tls, c->fd) : Qnil; /* before forget frees it */
  mg_timing_done(e, c);
  int fd = mg_conn_forget(e, c);
  return rb_assoc_new(NIL_P(session) ? INT2FIX(fd) : session, rest);
}

/* Engine#error_response(token, status): a plain-text error, then close. */
static VALUE engine_error_response(VALUE self, VALUE token, VALUE status) {
  mg_engine *e = mg_rb_engine_core(self);
  if (mg_rb_h2_token_p(token)) return mg_rb_h2_error_response(e, token, NUM2INT(status));
  mg_conn *c = mg_rb_request_conn(e, token);
  mg_conn_simple_response(c, NUM2INT(status));
  c->resp_started = 1;
  mg_timing_done(e, c);
  mg_conn_complete(e, c);
  return Qnil;
}

void mg_request_init(VALUE cEngine) {
  id_timeout = rb_intern("timeout");
  rb_define_method(cEngine, "next_request", engine_next_request, -1);
  rb_define_method(cEngine, "request_objects", engine_request_objects, 2);
  rb_define_method(cEngine, "abort", engine_abort, 1);
  rb_define_method(cEngine, "hijack", engine_hijack, 1);
  rb_define_method(cEngine, "error_response", engine_error_response, 2);
}
