/*
 * fuzz_proxy.c - libFuzzer harness for http/proxy.c (the PROXY v1 line and forwarding-header
 * addresses), no Ruby needed.
 *
 * Invariants checked (abort() on a violation):
 *   - mg_proxy_parse answers -1, 0 or a line length of at most MG_PROXY_V1_MAX that ends in CRLF
 *     and holds no other CR or LF; 0 only for inputs shorter than the bound;
 *   - on success the family is 0, 4 or 6, the address is NUL-terminated, empty exactly for
 *     UNKNOWN, and appears in the line right after the protocol;
 *   - a prefix answers 0 or what the whole input answers (copied to exact-size heap buffers, so
 *     ASan catches a read past the end);
 *   - mg_forwarded_last gives a NUL-terminated address that is a suffix element of the value.
 * Build (rake fuzz:build): clang -fsanitize=fuzzer,address,undefined -I ext/margay fuzz_proxy.c
 *        http/proxy.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "http/proxy.h"

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);             \
      abort();                                                                                  \
    }                                                                                           \
  } while (0)

static long parse_copy(const uint8_t *data, size_t n, mg_proxy *px) {
  char *copy = malloc(n ? n : 1);
  memcpy(copy, data, n);
  long r = mg_proxy_parse(copy, n, px);
  free(copy);
  return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mg_proxy whole, part;
  long r = parse_copy(data, size, &whole);
  CHECK(r >= -1 && r <= MG_PROXY_V1_MAX);
  if (r == 0) CHECK(size < MG_PROXY_V1_MAX);
  if (r > 0) {
    CHECK(r >= 8 && data[r - 2] == '\r' && data[r - 1] == '\n');
    CHECK(memchr(data, '\n', (size_t)r - 1) == NULL && memchr(data, '\r', (size_t)r - 2) == NULL);
    CHECK(whole.family == 0 || whole.family == 4 || whole.family == 6);
    size_t alen = strnlen(whole.addr, MG_ADDR_MAX);
    CHECK(alen < MG_ADDR_MAX);
    CHECK((alen == 0) == (whole.family == 0));
    if (alen) CHECK((size_t)r > 11 + alen && memcmp(data + 11, whole.addr, alen) == 0 && data[11 + alen] == ' ');
  }
  for (size_t cut = 0; cut < size && cut <= MG_PROXY_V1_MAX; cut += 1 + cut / 8) {
    long p = parse_copy(data, cut, &part);
    CHECK(p == 0 || p == r);
  }

  char out[MG_ADDR_MAX];
  char *copy = malloc(size ? size : 1);
  memcpy(copy, data, size);
  if (mg_forwarded_last(copy, size, out)) {
    size_t n = strnlen(out, MG_ADDR_MAX);
    CHECK(n > 0 && n < MG_ADDR_MAX);
    const char *at = NULL;
    for (size_t i = 0; i + n <= size; i++)
      if (memcmp(copy + i, out, n) == 0) at = copy + i;
    CHECK(at != NULL);
  }
  free(copy);
  return 0;
}
