/*
 * fuzz_chunked.c - libFuzzer harness for mg_chunked_decode (http/chunked.c), no Ruby needed.
 *
 * The input is a raw chunked body. It is decoded at once, split at points derived from the input,
 * and (when short) byte at a time, each under default and tight limits, checking (abort() on a
 * violation):
 *   - every split gives the same result, the same decoded bytes and the same consumed count;
 *   - produced <= consumed <= fed, MORE consumes all it was given, total == bytes produced;
 *   - the result is MORE, DONE or a known -status, and after DONE/error it repeats with 0 consumed;
 *   - decoded output never exceeds max_body.
 * Each piece is fed from an exact-size heap copy so ASan catches reads or writes past it.
 * Build (rake fuzz:build): clang -fsanitize=fuzzer,address,undefined -I ext/margay fuzz_chunked.c
 *        http/bytes.c http/parser.c http/chunked.c
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "http/chunked.h"

#define CHECK(cond)                                                                             \
  do {                                                                                          \
    if (!(cond)) {                                                                              \
      fprintf(stderr, "invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);             \
      abort();                                                                                  \
    }                                                                                           \
  } while (0)

typedef struct {
  int result;
  size_t consumed;
  size_t out_len;
  uint8_t *out; /* decoded bytes, capacity = input size */
} outcome;

typedef struct {
  uint64_t max_body;
  size_t max_ext, max_trailer;
} limits;

static uint32_t fnv1a(const uint8_t *d, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 16777619u;
  return h;
}

/* Feed data split at the sorted cut points (at most ncuts); stop at DONE or an error. */
static void decode(const uint8_t *data, size_t size, const size_t *cuts, size_t ncuts,
                   const limits *lim, outcome *o) {
  mg_chunked c;
  mg_chunked_init(&c, lim->max_body, lim->max_ext, lim->max_trailer);
  o->result = MG_CHUNKED_MORE;
  o->consumed = o->out_len = 0;
  size_t at = 0;
  for (size_t k = 0; k <= ncuts && o->result == MG_CHUNKED_MORE; k++) {
    size_t end = k < ncuts ? cuts[k] : size;
    if (end < at) continue;
    size_t n = end - at, used = 0, produced = 0;
    char *piece = malloc(n ? n : 1);
    memcpy(piece, data + at, n);
    int r = mg_chunked_decode(&c, piece, n, &used, &produced);
    CHECK(r == MG_CHUNKED_MORE || r == MG_CHUNKED_DONE || r == -400 || r == -413 || r == -431);
    CHECK(produced <= used && used <= n);
    if (r == MG_CHUNKED_MORE) CHECK(used == n);
    memcpy(o->out + o->out_len, piece, produced);
    free(piece);
    o->out_len += produced;
    o->consumed += used;
    o->result = r;
    at = end;
    CHECK(c.total == o->out_len);
    CHECK(c.total <= lim->max_body);
    CHECK(c.ext_used <= lim->max_ext + 1 && c.trailer_used <= lim->max_trailer + 1);
  }
  if (o->result != MG_CHUNKED_MORE) {
    char again[4] = "0\r\n";
    size_t used = 1, produced = 1;
    CHECK(mg_chunked_decode(&c, again, 3, &used, &produced) == o->result);
    CHECK(used == 0 && produced == 0);
  }
}

static void same(const outcome *a, const outcome *b) {
  CHECK(a->result == b->result);
  CHECK(a->out_len == b->out_len);
  CHECK(memcmp(a->out, b->out, a->out_len) == 0);
  if (a->result >= 0) CHECK(a->consumed == b->consumed);
}

static void run(const uint8_t *data, size_t size, const limits *lim, uint32_t h) {
  outcome whole, split;
  whole.out = malloc(size + 1);
  split.out = malloc(size + 1);

  decode(data, size, NULL, 0, lim, &whole);
  CHECK(whole.out_len <= whole.consumed && whole.consumed <= size);

  size_t one = size ? h % (size + 1) : 0;
  decode(data, size, &one, 1, lim, &split);
  same(&whole, &split);

  size_t three[3] = {0, 0, 0};
  for (int i = 0; i < 3; i++) three[i] = size ? (h >> (5 * i + 3)) % (size + 1) : 0;
  for (int i = 0; i < 3; i++) /* sort */
    for (int j = i + 1; j < 3; j++)
      if (three[j] < three[i]) { size_t t = three[i]; three[i] = three[j]; three[j] = t; }
  decode(data, size, three, 3, lim, &split);
  same(&whole, &split);

  if (size <= 512) {
    size_t cuts[512];
    for (size_t i = 0; i < size; i++) cuts[i] = i + 1;
    decode(data, size, cuts, size, lim, &split);
    same(&whole, &split);
  }
  free(whole.out);
  free(split.out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t h = fnv1a(data, size);
  limits def = {UINT64_MAX, 1024, 8192};
  run(data, size, &def, h);
  limits tight = {h % 200, (h >> 8) % 40, (h >> 16) % 64};
  run(data, size, &tight, h * 2654435761u);
  return 0;
}
