/*
 * ruby/tls.c - Margay::Native::TLSContext.new(options): a context with the house policy
 * (core/tls.c) from the options Margay::TLS validated (lib/margay/process/tls.rb). Freed with
 * the object; the sessions made from it keep their own reference.
 */
#include "ruby/tls.h"

typedef struct {
  mg_tls_ctx *ctx;
} tls_context;

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

/* TLSContext.new(options): a Hash with String keys: "cert", "key" (file paths) or "cert_pem",
 * "key_pem" (PEM text), "key_password", "ca", "verify" (0 none, 1 peer, 2 force_peer),
 * "verification_flags" (Integer), "ssl_cipher_filter", "ssl_ciphersuites", "cache_size"
 * (-1: no session cache), "cache_timeout". Raises ArgumentError with OpenSSL's reason. */
static VALUE context_initialize(VALUE self, VALUE options) {
  tls_context *t = rb_check_typeddata(self, &context_type);
  Check_Type(options, T_HASH);
  if (t->ctx) rb_raise(rb_eArgError, "TLS context already initialized");
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
  if (!(o.cert || o.cert_pem) || !(o.key || o.key_pem)) rb_raise(rb_eArgError, "a certificate and a key are needed");
  char err[512];
  t->ctx = mg_tls_ctx_new(&o, err, sizeof err);
  RB_GC_GUARD(options);
  if (!t->ctx) rb_raise(rb_eArgError, "%s", err);
  return self;
}

void mg_tls_init(VALUE mNative) {
  VALUE c = rb_define_class_under(mNative, "TLSContext", rb_cObject);
  rb_define_alloc_func(c, context_alloc);
  rb_define_method(c, "initialize", context_initialize, 1);
  rb_define_const(mNative, "TLS", mg_tls_available() ? Qtrue : Qfalse);
  rb_define_const(mNative, "OPENSSL_VERSION", rb_obj_freeze(rb_str_new_cstr(mg_tls_library())));
}
