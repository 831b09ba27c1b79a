/*
 * ruby/tls.h - Margay::Native::TLSContext: a TLS listener's context (core/tls.h) as a Ruby
 * object, made once in the process that binds (a cluster's master, before it forks).
 */
#ifndef MARGAY_RUBY_TLS_H
#define MARGAY_RUBY_TLS_H

#include <ruby.h>
#include "core/tls.h"

/* Define Native::TLSContext, Native::TLS (true when built with OpenSSL) and
 * Native::OPENSSL_VERSION. */
void mg_tls_init(VALUE mNative);
/* A Native::TLSSession that takes over +tls+'s session (left OFF) on socket +fd+ (a hijack). */
VALUE mg_rb_tls_session(mg_tls *tls, int fd);
/* The context of a Native::TLSContext (raises TypeError for anything else). */
mg_tls_ctx *mg_rb_tls_context(VALUE obj);

#endif
