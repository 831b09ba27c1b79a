/*
 * ruby/field_key.c - the Rack env key of a request field name (runs with the GVL): HTTP_<NAME>,
 * interned, with the keys of the fields most requests carry made once.
 */
#include "ruby/field_key.h"
#include "http/parser.h"
#include <string.h>

/* The fields most requests carry, their keys made once (mg_field_key_init): finding one here
 * costs a few comparisons where rb_interned_str hashed the name and searched Ruby's table of
 * interned strings (about 750 instructions per field). */
#define COMMON(name) {name, sizeof(name) - 1, 0}
static struct {
  const char *name; /* in lower case */
  size_t len;
  VALUE key;
} common_keys[] = {
    COMMON("host"),          COMMON("user-agent"),      COMMON("accept"),
    COMMON("accept-encoding"), COMMON("accept-language"), COMMON("connection"),
    COMMON("cookie"),        COMMON("referer"),         COMMON("origin"),
    COMMON("cache-control"), COMMON("authorization"),   COMMON("x-forwarded-for"),
    COMMON("x-forwarded-proto"), COMMON("x-request-id"), COMMON("if-none-match"),
    COMMON("if-modified-since"),
};
#define MG_COMMON_KEYS (sizeof common_keys / sizeof common_keys[0])

/* HTTP_<NAME>, interned; Qnil for a name to drop. */
static VALUE make_key(const char *name, size_t n) {
  char buf[300];
  if (n + 5 > sizeof buf) return Qnil;
  memcpy(buf, "HTTP_", 5);
  for (size_t i = 0; i < n; i++) {
    char ch = name[i];
    if (ch == '_') return Qnil; /* never alias X_Foo onto X-Foo (CVE-2024-45614, CVE-2015-7519) */
    if (ch == '-') ch = '_';
    else if (ch >= 'a' && ch <= 'z') ch = (char)(ch - 32);
    buf[5 + i] = ch;
  }
  return rb_interned_str(buf, (long)(n + 5));
}

VALUE mg_field_key(const char *name, size_t n) {
  mg_span whole = {0, (uint32_t)n};
  for (size_t k = 0; k < MG_COMMON_KEYS; k++) {
    if (common_keys[k].len == n && mg_span_ieq(name, whole, common_keys[k].name)) return common_keys[k].key;
  }
  return make_key(name, n);
}

void mg_field_key_init(void) {
  for (size_t k = 0; k < MG_COMMON_KEYS; k++) {
    /* the same object as ruby/env.c's k_HTTP_HOST and k_HTTP_COOKIE (one interned string) */
    common_keys[k].key = make_key(common_keys[k].name, common_keys[k].len);
    rb_gc_register_mark_object(common_keys[k].key);
  }
}
