/*
 * ruby/env.h - the Rack env of a request (with the GVL).
 */
#ifndef MARGAY_RUBY_ENV_H
#define MARGAY_RUBY_ENV_H

#include <ruby.h>
#include "core/conn.h"

/* SERVER_NAME and SERVER_PORT of a listener (frozen Strings), for requests that name no host. */
typedef struct {
  VALUE server_name;
  VALUE server_port;
  VALUE tls;       /* the listener's Native::TLSContext, or nil: its requests are https */
} mg_env_server;

/* A plain request's callables (Engine#request_objects), made with its env: rack.hijack (an
 * instance of hijack_class with @engine, @token and @env), rack.early_hints (of hints_class, with
 * @engine and @token) and rack.response_finished ([]). A request is plain unless it has an Upgrade
 * field, a client certificate or its body in a tempfile: the request handler looks at those
 * itself (and makes the callables) for any request the engine did not. */
typedef struct {
  VALUE hijack_class, hints_class; /* Qnil: none asked for */
  VALUE engine, token;
  VALUE hijack; /* out: the rack.hijack made, or Qnil (none: not a plain request) */
} mg_env_objects;

void mg_env_init(void);
/* The env of the request whose head +c+ holds: a copy of +env_template+ plus the request's
 * keys, rack.input (the body) included; REMOTE_ADDR as +cfg+ says; +o+'s callables if it is plain. */
VALUE mg_env_build(VALUE env_template, const mg_env_server *server, const mg_settings *cfg, mg_conn *c,
                   mg_env_objects *o);
/* The env of an HTTP/2 stream's request (core/h2.h), by the same rules: SERVER_PROTOCOL HTTP/2,
 * :authority as HTTP_HOST, cookie crumbs joined with "; ", rack.hijack? false. The body's
 * tempfile goes to Ruby (q->bfd is -1 afterwards). */
struct mg_h2_req;
VALUE mg_env_build_h2(VALUE env_template, const mg_env_server *server, const mg_settings *cfg, struct mg_h2_req *q);

#endif
