/*
 * ruby/tls.c - Margay::Native::TLSContext.new(options): a context with the house policy
 * (core/tls_ctx.c) from the options Margay::TLS validated (lib/margay/process/tls.rb). Freed with
 * the object; the sessions made from it keep their own reference.
 * Margay::Native::TLSSession: a hijacked TLS connection's session, the non-blocking primitives
 * Server::TLSSocket (lib/margay/server/tls_socket.rb) builds an IO on; the socket itself is a
 * Ruby Socket's. Each call holds the GVL: an SSL is never used by two threads at once.
 */
#include "ruby/tls.h"
#include <errno.h>

typedef struct {
  mg_tls_ctx *ctx;
} tls_context;

static ID id_options; /* @options: what the context was made of, read again by #reload */

static void context_free(void *p) {
  tls_context *t = p;
  mg_tls_ctx_free(t->ctx);
  xfree(t);
}

static const rb_data_type_t context_type = {
  "Margay::Native::TLSContext",
  {NULL, context_free, NULL},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE context_alloc(VALUE klass) {
  tls_context *t;
  return TypedData_Make_Struct(klass, tls_context, &context_type, t);
}

mg_tls_ctx *mg_rb_tls_context(VALUE obj) {
  tls_context *t = rb_check_typeddata(obj, &context_type);
  if (!t->ctx) rb_raise(rb_eArgError, "TLS context not initialized");
  return t->ctx;
}

/* options[name] as a C string (nil: NULL). The Strings stay referenced by +options+ for the
 * duration of initialize. */
static const char *text(VALUE options, const char *name) {
  VALUE v = rb_hash_aref(options, rb_str_new_cstr(name));
  if (NIL_P(v)) return NULL;
  return StringValueCStr(v);
}

static long number(VALUE options, const char *name, long otherwise) {
  VALUE v = rb_hash_aref(options, rb_str_new_cstr(name));
  return NIL_P(v) ? otherwise : NUM2LONG(v);
}

/* The mg_tls_options of +options+ (see context_initialize); its strings and +sni+ (allocated
 * here: free it) stay valid while +options+ is referenced. */
static mg_tls_options read_options(VALUE options, mg_tls_sni **sni) {
  Check_Type(options, T_HASH);
  mg_tls_options o = {0};
  o.cert = text(options, "cert");
  o.key = text(options, "key");
  o.cert_pem = text(options, "cert_pem");
  o.key_pem = text(options, "key_pem");
  o.key_password = text(options, "key_password");
  o.ca = text(options, "ca");
  o.verify = (int)number(options, "verify", 0);
  o.verify_flags = (unsigned long)number(options, "verification_flags", 0);
  o.cipher_filter = text(options, "ssl_cipher_filter");
  o.ciphersuites = text(options, "ssl_ciphersuites");
  o.cache_size = number(options, "cache_size", -1);
  o.cache_timeout = number(options, "cache_timeout", 0);
  o.alpn_h2 = RTEST(rb_hash_aref(options, rb_str_new_cstr("http2")));
  if (!(o.cert || o.cert_pem) || !(o.key || o.key_pem)) rb_raise(rb_eArgError, "a certificate and a key are needed");
  *sni = NULL;
  VALUE list = rb_hash_aref(options, rb_str_new_cstr("sni"));
  if (NIL_P(list)) return o;
  Check_Type(list, T_ARRAY);
  long n = RARRAY_LEN(list);
  for (long i = 0; i < n; i++) { /* checked before anything is allocated: a raise leaks nothing */
    VALUE e = RARRAY_AREF(list, i);
    Check_Type(e, T_ARRAY);
    if (RARRAY_LEN(e) != 5) rb_raise(rb_eArgError, "an sni entry is [name, cert, key, cert_pem, key_pem]");
    for (int k = 0; k < 5; k++) {
      VALUE v = RARRAY_AREF(e, k);
      if (!NIL_P(v)) StringValueCStr(v);
    }
  }
  *sni = n ? xcalloc((size_t)n, sizeof **sni) : NULL;
  for (long i = 0; i < n; i++) {
    VALUE e = RARRAY_AREF(list, i);
    const char **f[5] = {&(*sni)[i].name, &(*sni)[i].cert, &(*sni)[i].key, &(*sni)[i].cert_pem, &(*sni)[i].key_pem};
    for (int k = 0; k < 5; k++) {
      VALUE v = RARRAY_AREF(e, k);
      *f[k] = NIL_P(v) ? NULL : RSTRING_PTR(v);
    }
  }
  o.sni = *sni;
  o.nsni = (size_t)n;
  return o;
}

/* TLSContext.new(options): a Hash with String keys: "cert", "key" (file paths) or "cert_pem",
 * "key_pem" (PEM text), "key_password", "ca", "verify" (0 none, 1 peer, 2 force_peer),
 * "verification_flags" (Integer), "ssl_cipher_filter", "ssl_ciphersuites", "cache_size"
 * (-1: no session cache), "cache_timeout", "http2" (true: ALPN h2 and http/1.1), "sni" (an
 * Array of [host name, cert, key, cert_pem, key_pem], nil where not given). Raises ArgumentError
 * with OpenSSL's reason. */
static VALUE context_initialize(VALUE self, VALUE options) {
  tls_context *t = rb_check_typeddata(self, &context_type);
  if (t->ctx) rb_raise(rb_eArgError, "TLS context already initialized");
  mg_tls_sni *sni;
  mg_tls_options o = read_options(options, &sni);
  char err[512];
  t->ctx = mg_tls_ctx_new(&o, err, sizeof err);
  xfree(sni);
  RB_GC_GUARD(options);
  if (!t->ctx) rb_raise(rb_eArgError, "%s", err);
  rb_ivar_set(self, id_options, rb_obj_freeze(rb_hash_dup(options))); /* for #reload */
  return self;
}

/* TLSContext#reload -> self: the certificate and key files given to new (its "cert", "key" and
 * "sni"; PEM text and "key_password" as they were) read again, for the handshakes from now on.
 * Raises ArgumentError, the certificates in use unchanged, when one cannot be used. */
static VALUE context_reload(VALUE self) {
  mg_tls_ctx *ctx = mg_rb_tls_context(self);
  VALUE options = rb_ivar_get(self, id_options);
  mg_tls_sni *sni;
  mg_tls_options o = read_options(options, &sni);
  char err[512];
  int r = mg_tls_ctx_reload(ctx, &o, err, sizeof err);
  xfree(sni);
  RB_GC_GUARD(options);
  if (r != 0) rb_raise(rb_eArgError, "%s", err);
  return self;
}

/* ---- a hijacked connection's session ---- */

typedef struct {
  mg_tls tls;
  int fd; /* the socket (owned by Ruby's Socket); -1 once the session is closed */
} tls_session;

static void session_release(tls_session *t) {
  mg_tls_free(&t->tls);
  t->fd = -1;
}

static void session_free(void *p) {
  session_release(p);
  xfree(p);
}

static const rb_data_type_t session_type = {
  "Margay::Native::TLSSession",
  {NULL, session_free, NULL},
  0, 0, RUBY_TYPED_FREE_IMMEDIATELY
};

static VALUE cSession, sym_wait_readable, sym_wait_writable;

VALUE mg_rb_tls_session(mg_tls *tls, int fd) {
  tls_session *t;
  VALUE obj = TypedData_Make_Struct(cSession, tls_session, &session_type, t);
  t->tls = *tls;
  t->fd = fd;
  tls->ssl = NULL;
  tls->state = MG_TLS_OFF;
  return obj;
}

static tls_session *open_session(VALUE self) {
  tls_session *t = rb_check_typeddata(self, &session_type);
  if (t->fd < 0) rb_raise(rb_eIOError, "closed stream");
  return t;
}

/* What a failed read or write returns: the symbol to wait for, or it raises. */
static VALUE would_block(tls_session *t, const char *what) {
  if (errno == EAGAIN) return t->tls.want_out ? sym_wait_writable : sym_wait_readable;
  rb_syserr_fail(errno, what);
  return Qnil;
}

/* TLSSession#read_nonblock(maxlen) -> String, nil (the peer closed), :wait_readable or
 * :wait_writable. */
static VALUE session_read_nonblock(VALUE self, VALUE maxlen) {
  tls_session *t = open_session(self);
  long len = NUM2LONG(maxlen);
  if (len <= 0) return rb_str_new(NULL, 0);
  VALUE buf = rb_str_buf_new(len);
  ssize_t n = mg_tls_read(&t->tls, RSTRING_PTR(buf), (size_t)len);
  if (n > 0) {
    rb_str_set_len(buf, n);
    return buf;
  }
  if (n == 0) return Qnil;
  return would_block(t, "Margay::Native::TLSSession#read_nonblock");
}

/* TLSSession#write_nonblock(string) -> bytes written (at most a record's), :wait_writable or
 * :wait_readable. After a wait, call again with the same bytes first. */
static VALUE session_write_nonblock(VALUE self, VALUE data) {
  tls_session *t = open_session(self);
  StringValue(data);
  if (RSTRING_LEN(data) == 0) return INT2FIX(0);
  ssize_t n = mg_tls_write(&t->tls, RSTRING_PTR(data), (size_t)RSTRING_LEN(data));
  if (n > 0) return LONG2NUM(n);
  return would_block(t, "Margay::Native::TLSSession#write_nonblock");
}

/* TLSSession#pending? -> whether input waits inside the session: decrypted bytes, or records
 * read ahead (the socket's readiness does not show them). */
static VALUE session_pending(VALUE self) { return mg_tls_pending(&open_session(self)->tls) ? Qtrue : Qfalse; }

static VALUE session_fileno(VALUE self) { return INT2FIX(open_session(self)->fd); }

/* TLSSession#close_notify: one non-blocking close_notify (nothing more will be written). */
static VALUE session_close_notify(VALUE self) {
  mg_tls_shutdown(&open_session(self)->tls);
  return Qnil;
}

/* TLSSession#close: frees the session (the socket stays open; no close_notify: #close_notify). */
static VALUE session_close(VALUE self) {
  session_release(rb_check_typeddata(self, &session_type));
  return Qnil;
}

static VALUE session_closed(VALUE self) {
  return ((tls_session *)rb_check_typeddata(self, &session_type))->fd < 0 ? Qtrue : Qfalse;
}

void mg_tls_init(VALUE mNative) {
  VALUE c = rb_define_class_under(mNative, "TLSContext", rb_cObject);
  rb_define_alloc_func(c, context_alloc);
  rb_define_method(c, "initialize", context_initialize, 1);
  rb_define_method(c, "reload", context_reload, 0);
  id_options = rb_intern("@options");
  rb_define_const(mNative, "TLS", mg_tls_available() ? Qtrue : Qfalse);
  cSession = rb_define_class_under(mNative, "TLSSession", rb_cObject);
  rb_undef_alloc_func(cSession);
  rb_define_method(cSession, "read_nonblock", session_read_nonblock, 1);
  rb_define_method(cSession, "write_nonblock", session_write_nonblock, 1);
  rb_define_method(cSession, "pending?", session_pending, 0);
  rb_define_method(cSession, "fileno", session_fileno, 0);
  rb_define_method(cSession, "close_notify", session_close_notify, 0);
  rb_define_method(cSession, "close", session_close, 0);
  rb_define_method(cSession, "closed?", session_closed, 0);
  sym_wait_readable = ID2SYM(rb_intern("wait_readable"));
  sym_wait_writable = ID2SYM(rb_intern("wait_writable"));
  rb_define_const(mNative, "OPENSSL_VERSION", rb_obj_freeze(rb_str_new_cstr(mg_tls_library())));
}
