/*
 * ruby/settings.c - Engine.new's settings: Margay::Configuration validated them and passes one
 * value per name of Engine::SETTINGS, in that order (nil where a setting means "no limit" or
 * "derive it"); no default is restated here.
 */
#include "ruby/settings.h"
#include "http/parser.h"
#include <ctype.h>
#include <limits.h>

/* The value of setting +i+ from the array Engine.new was given. */
static VALUE setting(VALUE values, enum mg_setting i) { return RARRAY_AREF(values, i); }
static int64_t setting_ms(VALUE values, enum mg_setting i) { return (int64_t)(NUM2DBL(setting(values, i)) * 1000.0); }

/* Copy String +v+ into out[cap], or raise naming +what+. */
static void mg_rb_copy_setting(char *out, size_t cap, VALUE v, const char *what) {
  StringValue(v);
  if ((size_t)RSTRING_LEN(v) >= cap || memchr(RSTRING_PTR(v), 0, (size_t)RSTRING_LEN(v)))
    rb_raise(rb_eArgError, "%s: at most %zu bytes, no NUL", what, cap - 1);
  memcpy(out, RSTRING_PTR(v), (size_t)RSTRING_LEN(v));
  out[RSTRING_LEN(v)] = '\0';
}

/* The wire's rules and REMOTE_ADDR's source: supported_http_methods (:any or Strings),
 * remote_address (:socket, :localhost or a String), remote_address_header (nil or a field name),
 * proxy_protocol (nil or :v1); health_check_path (nil or a path the engine answers itself). */
static void mg_rb_wire_settings(mg_settings *s, VALUE values) {
  VALUE m = setting(values, MG_SET_supported_http_methods);
  s->methods[0] = '\0';
  if (!SYMBOL_P(m)) {
    Check_Type(m, T_ARRAY);
    size_t at = 0;
    for (long i = 0; i < RARRAY_LEN(m); i++) {
      VALUE name = rb_ary_entry(m, i);
      StringValue(name);
      size_t n = (size_t)RSTRING_LEN(name);
      if (n == 0 || n > MG_MAX_METHOD || at + n + 2 > sizeof s->methods)
        rb_raise(rb_eArgError, "supported_http_methods: at most 64 names of 1..%d bytes", MG_MAX_METHOD);
      memcpy(s->methods + at, RSTRING_PTR(name), n);
      at += n;
      s->methods[at++] = ' ';
    }
    s->methods[at] = '\0';
  }
  VALUE ra = setting(values, MG_SET_remote_address);
  s->remote_value[0] = '\0';
  if (SYMBOL_P(ra) && SYM2ID(ra) == rb_intern("localhost")) snprintf(s->remote_value, sizeof s->remote_value, "127.0.0.1");
  else if (!SYMBOL_P(ra)) mg_rb_copy_setting(s->remote_value, sizeof s->remote_value, ra, "remote_address");
  VALUE rh = setting(values, MG_SET_remote_address_header);
  s->remote_header[0] = '\0';
  if (!NIL_P(rh)) {
    mg_rb_copy_setting(s->remote_header, sizeof s->remote_header, rh, "remote_address_header");
    for (char *p = s->remote_header; *p; p++) *p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
  }
  VALUE pp = setting(values, MG_SET_proxy_protocol);
  if (!NIL_P(pp) && !(SYMBOL_P(pp) && SYM2ID(pp) == rb_intern("v1")))
    rb_raise(rb_eArgError, "proxy_protocol: nil or :v1");
  s->proxy_protocol = !NIL_P(pp);
  VALUE hp = setting(values, MG_SET_health_check_path);
  s->health_path[0] = '\0';
  if (!NIL_P(hp)) mg_rb_copy_setting(s->health_path, sizeof s->health_path, hp, "health_check_path");
}

/* queue_timeout (nil: off, else positive seconds) and queue_time_header (true or false). */
static void mg_rb_queue_settings(mg_settings *s, VALUE values) {
  VALUE qt = setting(values, MG_SET_queue_timeout);
  s->queue_timeout_ns = NIL_P(qt) ? 0 : (int64_t)(NUM2DBL(qt) * 1e9);
  s->queue_time_header = RTEST(setting(values, MG_SET_queue_time_header));
}

void mg_rb_settings_read(mg_settings *s, VALUE values) {
  if (RARRAY_LEN(values) != MG_SETTINGS_COUNT)
    rb_raise(rb_eArgError, "expected %d settings (Engine::SETTINGS), got %ld", MG_SETTINGS_COUNT, RARRAY_LEN(values));
  s->max_target = NUM2SIZET(setting(values, MG_SET_max_request_target));
  s->max_head = NUM2SIZET(setting(values, MG_SET_max_header_size));
  s->max_headers = NUM2SIZET(setting(values, MG_SET_max_headers));
  if (s->max_headers > MG_MAX_HEADERS_HARD) s->max_headers = MG_MAX_HEADERS_HARD;
  VALUE mb = setting(values, MG_SET_max_body_size);
  s->max_body = NIL_P(mb) ? UINT64_MAX : NUM2ULL(mb);
  s->body_buffer_size = NUM2SIZET(setting(values, MG_SET_body_buffer_size));
  s->max_chunk_ext = NUM2SIZET(setting(values, MG_SET_max_chunk_extensions));
  s->header_timeout_ms = setting_ms(values, MG_SET_header_timeout);
  s->body_timeout_ms = setting_ms(values, MG_SET_body_timeout);
  s->keepalive_timeout_ms = setting_ms(values, MG_SET_keepalive_timeout);
  s->write_timeout_ms = setting_ms(values, MG_SET_write_timeout);
  /* Configuration checks these are positive; beyond what the engine can count they mean "no
   * smaller limit" (read wide and clamped, so a large value is never truncated). */
  unsigned long long mkr = NUM2ULL(setting(values, MG_SET_max_keepalive_requests));
  s->max_keepalive_requests = mkr > UINT_MAX ? UINT_MAX : (unsigned)mkr;
  s->response_buffer_limit = NUM2SIZET(setting(values, MG_SET_response_buffer_limit));
  VALUE tmp = setting(values, MG_SET_tmpdir);
  snprintf(s->tmpdir, sizeof s->tmpdir, "%s", StringValueCStr(tmp));
  s->max_threads = NUM2INT(setting(values, MG_SET_max_threads));
  mg_rb_wire_settings(s, values);
  mg_rb_queue_settings(s, values);
}

int mg_rb_settings_max_connections(VALUE values, int ceiling) {
  VALUE mc = setting(values, MG_SET_max_connections);
  return NIL_P(mc) || NUM2LL(mc) > ceiling ? ceiling : (int)NUM2LL(mc);
}

int mg_rb_settings_backend(VALUE values) {
  VALUE backend = setting(values, MG_SET_event_backend);
  if (SYMBOL_P(backend) && SYM2ID(backend) == rb_intern("poll")) return MG_EV_POLL;
  if (SYMBOL_P(backend) && SYM2ID(backend) == rb_intern("epoll")) return MG_EV_EPOLL;
  return MG_EV_AUTO;
}

void mg_settings_init(VALUE cEngine) {
#define MG_SETTING_NAME(name) ID2SYM(rb_intern(#name)),
  VALUE names[] = {MG_ENGINE_SETTINGS(MG_SETTING_NAME)};
#undef MG_SETTING_NAME
  rb_define_const(cEngine, "SETTINGS", rb_obj_freeze(rb_ary_new_from_values(MG_SETTINGS_COUNT, names)));
}
