/*
 * fuzz_head.c - libFuzzer harness for mg_parse_head (http/parser.c), no Ruby needed.
 *
 * The input is a raw request head. Each input is parsed under default limits (with Puma's method
 * list) and under tight limits derived from the input (a one-method list or none), and these
 * invariants are checked (abort() on a violation):
 *   - the result is 0, a head length within the input and the head limit, or a known -status;
 *   - on success every span lies inside the head, values carry no surrounding OWS, the counts and
 *     framing fields are consistent (chunked excludes Content-Length, ...), the method is at most
 *     MG_MAX_METHOD bytes and in the list when there is one, the target holds no fragment;
 *   - a prefix of the input answers 0 or exactly what the whole input answers (incremental
 *     feeding agrees with feeding at once); prefixes are copied to exact-size heap buffers so
 *     ASan catches any read past the end.
 * Build (rake fuzz:build): clang -fsanitize=fuzzer,address,undefined -I ext/margay fuzz_head.c
 *        http/bytes.c http/parser.c http/chunked.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "http/parser.h"

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);             \
      abort();                                                                                  \
    }                                                                                           \
  } while (0)

static uint32_t fnv1a(const uint8_t *d, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 16777619u;
  return h;
}

static int known_status(long r) {
  switch (r) {
  case -400: case -413: case -414: case -417: case -431: case -501: case -505: return 1;
  default: return 0;
  }
}

static void check_span(mg_span s, size_t head_len) {
  CHECK((size_t)s.off + s.len <= head_len);
}

static void check_request(const uint8_t *b, size_t len, long r, const mg_limits *lim,
                          const mg_request *q) {
  CHECK(r > 0 && (size_t)r <= len && (size_t)r <= lim->max_head);
  CHECK(q->head_len == (size_t)r);
  CHECK(b[r - 1] == '\n' && b[r - 2] == '\r');
  CHECK(q->method.len > 0 && q->method.len <= MG_MAX_METHOD && q->target.len > 0 && q->target.len <= lim->max_target);
  CHECK(memchr(b + q->target.off, '#', q->target.len) == NULL); /* a fragment is dropped */
  if (lim->methods) {
    int listed = 0;
    for (const char *p = lim->methods; *p; p = strchr(p, ' ') + 1)
      listed |= (size_t)(strchr(p, ' ') - p) == q->method.len && memcmp(p, b + q->method.off, q->method.len) == 0;
    CHECK(listed);
  }
  check_span(q->method, r);
  check_span(q->target, r);
  check_span(q->path, r);
  check_span(q->query, r);
  check_span(q->authority, r);
  check_span(q->host, r);
  CHECK(q->minor == 0 || q->minor == 1);
  CHECK(q->target_form >= MG_ORIGIN_FORM && q->target_form <= MG_ASTERISK_FORM);
  CHECK(q->target_form != MG_AUTHORITY_FORM); /* only CONNECT uses it, and CONNECT is 501 */
  if (q->target_form == MG_ORIGIN_FORM) CHECK(q->path.len > 0 && b[q->path.off] == '/');
  if (q->target_form == MG_ASTERISK_FORM) CHECK(q->target.len == 1 && b[q->target.off] == '*');
  if (q->target_form == MG_ABSOLUTE_FORM) CHECK(q->authority.len > 0);
  CHECK(q->nheaders <= lim->max_headers && q->nheaders <= MG_MAX_HEADERS_HARD);
  for (size_t i = 0; i < q->nheaders; i++) {
    mg_span n = q->headers[i].name, v = q->headers[i].value;
    check_span(n, r);
    check_span(v, r);
    CHECK(n.len > 0 && b[n.off + n.len] == ':');
    if (v.len) {
      CHECK(b[v.off] != ' ' && b[v.off] != '\t');
      CHECK(b[v.off + v.len - 1] != ' ' && b[v.off + v.len - 1] != '\t');
    }
    for (size_t k = 0; k < v.len; k++) CHECK(b[v.off + k] >= 0x20 || b[v.off + k] == '\t');
  }
  CHECK(q->content_length >= -1 && q->content_length <= 999999999999999999LL);
  CHECK(!(q->chunked && q->content_length >= 0));
  CHECK(!(q->chunked && q->minor == 0));
  CHECK(q->keep_alive == 0 || q->keep_alive == 1);
  CHECK(!(q->expect_continue && q->minor == 0));
}

static long parse_copy(const uint8_t *data, size_t n, const mg_limits *lim, mg_request *q) {
  char *copy = malloc(n ? n : 1);
  memcpy(copy, data, n);
  long r = mg_parse_head(copy, n, lim, q);
  if (r > 0) check_request((const uint8_t *)copy, n, r, lim, q);
  free(copy);
  return r;
}

static mg_request whole, part;

static void run(const uint8_t *data, size_t size, const mg_limits *lim, uint32_t h) {
  long r = mg_parse_head((const char *)data, size, lim, &whole);
  CHECK(r >= 0 || known_status(r));
  if (r > 0) check_request(data, size, r, lim, &whole);

  /* A few prefixes: each answers 0 or the whole input's answer. */
  size_t cuts[4] = {size ? h % (size + 1) : 0, size ? (h >> 8) % (size + 1) : 0,
                    size ? size - 1 : 0, r > 0 ? (size_t)r : size};
  for (int i = 0; i < 4; i++) {
    long p = parse_copy(data, cuts[i], lim, &part);
    CHECK(p == 0 || p == r);
    if (p > 0) {
      CHECK(part.nheaders == whole.nheaders && part.content_length == whole.content_length &&
            part.chunked == whole.chunked && part.keep_alive == whole.keep_alive &&
            part.target_form == whole.target_form);
    }
    if (r > 0 && cuts[i] >= (size_t)r) CHECK(p == r);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t h = fnv1a(data, size);
  mg_limits def = {8192, 65536, 100, "HEAD GET POST PUT DELETE OPTIONS TRACE PATCH "};
  run(data, size, &def, h);
  mg_limits tight = {1 + h % 64, 16 + (h >> 6) % 512, (h >> 15) % 12, (h & 1) ? "GET " : NULL};
  run(data, size, &tight, h >> 3);
  mg_limits hard = {SIZE_MAX, SIZE_MAX, MG_MAX_HEADERS_HARD, NULL};
  run(data, size, &hard, h >> 5);
  return 0;
}
