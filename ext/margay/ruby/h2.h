/*
 * ruby/h2.h - HTTP/2 streams for Ruby (ruby/h2.c, ruby/h2_body.c): tokens, [token, env], and
 * the Engine's response methods for a stream's token. A stream's token is a negative Integer (an
 * HTTP/1 request's is positive): the Engine's methods hand such a token here.
 */
#ifndef MARGAY_RUBY_H2_H
#define MARGAY_RUBY_H2_H

#include "ruby/engine.h"

struct mg_h2_req;

/* Whether +token+ names an HTTP/2 stream. */
static inline int mg_rb_h2_token_p(VALUE token) { return FIXNUM_P(token) && FIX2LONG(token) < 0; }
VALUE mg_rb_h2_token(const struct mg_h2_req *q);
/* [token, env] for a request taken from the engine's queue (freed here, whatever happens); with
 * *state set (nil returned) when building the env raised. */
VALUE mg_rb_h2_request(mg_rb_engine *rb, struct mg_h2_req *q, int *state);

VALUE mg_rb_h2_respond(mg_engine *e, VALUE token, VALUE status, VALUE headers, VALUE body);
VALUE mg_rb_h2_respond_file(mg_engine *e, VALUE token, VALUE status, VALUE headers, VALUE path);
VALUE mg_rb_h2_stream_start(mg_engine *e, VALUE token, VALUE status, VALUE headers);
VALUE mg_rb_h2_stream_write(mg_engine *e, VALUE token, VALUE data);
VALUE mg_rb_h2_stream_finish(mg_engine *e, VALUE token);
VALUE mg_rb_h2_flush(mg_engine *e, VALUE token);
VALUE mg_rb_h2_tunnel_read(mg_engine *e, VALUE token, VALUE maxlen);
VALUE mg_rb_h2_started(mg_engine *e, VALUE token);
VALUE mg_rb_h2_error_response(mg_engine *e, VALUE token, int status);
VALUE mg_rb_h2_early_hints(mg_engine *e, VALUE token, VALUE headers);
VALUE mg_rb_h2_abort(mg_engine *e, VALUE token);

/* Margay::Native::H2 and NGHTTP2_VERSION. */
void mg_rb_h2_init(VALUE mNative);

#endif
