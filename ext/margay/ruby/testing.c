/*
 * ruby/testing.c - test bindings for the pure-C parser and chunked decoder (internal; the engine
 * calls http/ directly): Margay::Native.parse_head and Margay::Native::ChunkedDecoder.
 */
#include "ruby/testing.h"
#include <stdint.h>
#include "http/chunked.h"
#include "http/parser.h"

static VALUE cChunkedDecoder;
static ID id_method, id_target, id_path, id_query, id_authority, id_form, id_minor, id_headers,
    id_content_length, id_chunked, id_keep_alive, id_expect_continue, id_host, id_head_len,
    id_origin, id_absolute, id_asterisk;

static size_t size_arg(VALUE v, const char *what) {
  long n = NUM2LONG(v);
  if (n < 0) rb_raise(rb_eArgError, "%s must not be negative", what);
  return (size_t)n;
}

static VALUE span_str(const char *b, mg_span s) { return rb_str_new(b + s.off, s.len); }

static void set(VALUE h, ID key, VALUE v) { rb_hash_aset(h, ID2SYM(key), v); }

/*
 * Margay::Native.parse_head(str, max_target, max_head, max_headers)
 * Returns 0 (incomplete), -status, or a Hash with the spans as Strings: :method, :target, :path,
 * :query, :authority, :form (:origin/:absolute/:authority/:asterisk), :minor, :headers
 * ([[name, value], ...]), :content_length (nil when absent), :chunked, :keep_alive,
 * :expect_continue, :host (nil when absent), :head_len.
 */
static VALUE native_parse_head(VALUE self, VALUE str, VALUE vtarget, VALUE vhead, VALUE vheaders) {
  (void)self;
  StringValue(str);
  mg_limits lim = {size_arg(vtarget, "max_target"), size_arg(vhead, "max_head"), size_arg(vheaders, "max_headers")};
  if (lim.max_headers > MG_MAX_HEADERS_HARD)
    rb_raise(rb_eArgError, "max_headers must be at most %d", MG_MAX_HEADERS_HARD);

  /* A private copy: the parser's spans must stay valid while we build Ruby objects (GC may run). */
  VALUE copy = rb_str_new(RSTRING_PTR(str), RSTRING_LEN(str));
  const char *b = RSTRING_PTR(copy);
  mg_request rq, *req = &rq;
  long r = mg_parse_head(b, (size_t)RSTRING_LEN(copy), &lim, req);
  if (r <= 0) return LONG2NUM(r);

  VALUE h = rb_hash_new();
  /* indexed by enum mg_target_form */
  const ID forms[] = {id_origin, id_absolute, id_authority, id_asterisk};
  set(h, id_method, span_str(b, req->method));
  set(h, id_target, span_str(b, req->target));
  set(h, id_path, span_str(b, req->path));
  set(h, id_query, span_str(b, req->query));
  set(h, id_authority, span_str(b, req->authority));
  set(h, id_form, ID2SYM(forms[req->target_form & 3]));
  set(h, id_minor, INT2NUM(req->minor));
  VALUE headers = rb_ary_new_capa((long)req->nheaders);
  VALUE host = Qnil;
  for (size_t i = 0; i < req->nheaders; i++) {
    rb_ary_push(headers, rb_assoc_new(span_str(b, req->headers[i].name),
                                      span_str(b, req->headers[i].value)));
    if (mg_span_ieq(b, req->headers[i].name, "host")) host = span_str(b, req->host);
  }
  set(h, id_headers, headers);
  set(h, id_content_length, req->content_length < 0 ? Qnil : LL2NUM(req->content_length));
  set(h, id_chunked, req->chunked ? Qtrue : Qfalse);
  set(h, id_keep_alive, req->keep_alive ? Qtrue : Qfalse);
  set(h, id_expect_continue, req->expect_continue ? Qtrue : Qfalse);
  set(h, id_host, host);
  set(h, id_head_len, SIZET2NUM(req->head_len));
  RB_GC_GUARD(copy);
  return h;
}

/* ---- Margay::Native::ChunkedDecoder ---- */

static size_t decoder_memsize(const void *p) {
  (void)p;
  return sizeof(mg_chunked);
}

static const rb_data_type_t decoder_type = {
    "Margay::Native::ChunkedDecoder",
    {NULL, RUBY_TYPED_DEFAULT_FREE, decoder_memsize, NULL},
    NULL,
    NULL,
    RUBY_TYPED_FREE_IMMEDIATELY | RUBY_TYPED_WB_PROTECTED,
};

static VALUE decoder_alloc(VALUE klass) {
  mg_chunked *c;
  VALUE obj = TypedData_Make_Struct(klass, mg_chunked, &decoder_type, c);
  mg_chunked_init(c, UINT64_MAX, SIZE_MAX, SIZE_MAX);
  return obj;
}

static mg_chunked *decoder_get(VALUE self) {
  mg_chunked *c;
  TypedData_Get_Struct(self, mg_chunked, &decoder_type, c);
  return c;
}

/*
 * ChunkedDecoder.new(max_body, max_ext, max_trailer): max_body nil means unlimited.
 */
static VALUE decoder_initialize(VALUE self, VALUE max_body, VALUE max_ext, VALUE max_trailer) {
  if (!NIL_P(max_body) && RTEST(rb_funcall(max_body, rb_intern("negative?"), 0)))
    rb_raise(rb_eArgError, "max_body must not be negative");
  uint64_t mb = NIL_P(max_body) ? UINT64_MAX : NUM2ULL(max_body);
  mg_chunked_init(decoder_get(self), mb, size_arg(max_ext, "max_ext"),
                  size_arg(max_trailer, "max_trailer"));
  return self;
}

/*
 * decoder.feed(str) -> [result, consumed, decoded]: result is 0 (more), 1 (done) or -status;
 * consumed counts bytes of str used (on done, the rest belongs to the next request).
 */
static VALUE decoder_feed(VALUE self, VALUE str) {
  mg_chunked *c = decoder_get(self);
  StringValue(str);
  VALUE out = rb_str_new(RSTRING_PTR(str), RSTRING_LEN(str));
  size_t consumed = 0, produced = 0;
  int r = mg_chunked_decode(c, RSTRING_PTR(out), (size_t)RSTRING_LEN(out), &consumed, &produced);
  rb_str_set_len(out, (long)produced);
  return rb_ary_new_from_args(3, INT2NUM(r), SIZET2NUM(consumed), out);
}

/* decoder.total -> decoded body bytes so far */
static VALUE decoder_total(VALUE self) { return ULL2NUM(decoder_get(self)->total); }

void mg_testing_init(VALUE mNative) {
#define I(name) id_##name = rb_intern(#name)
  I(method); I(target); I(path); I(query); I(authority); I(form); I(minor); I(headers);
  I(content_length); I(chunked); I(keep_alive); I(expect_continue); I(host); I(head_len);
  I(origin); I(absolute); I(asterisk);
#undef I

  rb_define_module_function(mNative, "parse_head", native_parse_head, 4);

  cChunkedDecoder = rb_define_class_under(mNative, "ChunkedDecoder", rb_cObject);
  rb_define_alloc_func(cChunkedDecoder, decoder_alloc);
  rb_define_method(cChunkedDecoder, "initialize", decoder_initialize, 3);
  rb_define_method(cChunkedDecoder, "feed", decoder_feed, 1);
  rb_define_method(cChunkedDecoder, "total", decoder_total, 0);
}
