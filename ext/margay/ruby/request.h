/*
 * ruby/request.h - the requests Ruby holds: the tokens that name them, and their hand-over
 * from the engine to Ruby as [token, env] ([token, env, hijack] for a plain request once
 * Engine#request_objects was called: ruby/env.h).
 */
#ifndef MARGAY_RUBY_REQUEST_H
#define MARGAY_RUBY_REQUEST_H

#include "ruby/engine.h"

/* The token naming the request connection +c+ (owned by the caller) serves now. */
VALUE mg_request_token(mg_conn *c);
/* The connection +token+ names; raises Margay::ClientGone unless its request still holds it. */
mg_conn *mg_rb_request_conn(mg_engine *e, VALUE token);
/* [token, env] (or [token, env, hijack]) for the complete request on +c+ (owned by the
 * caller), its head consumed. Never raises: *state is rb_protect's (nonzero: nothing built,
 * the caller closes +c+ and rethrows). */
VALUE mg_request_build(mg_rb_engine *rb, mg_conn *c, int *state);
/* Define Engine#next_request, #request_objects, #abort, #hijack and #error_response. */
void mg_request_init(VALUE cEngine);

#endif
