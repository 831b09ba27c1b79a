/*
 * http/chunked.h - the chunked transfer coding decoder (RFC 9112 section 7.1).
 *
 * Pure C like the parser: no Ruby, no allocation, all state in the caller's mg_chunked, so the
 * engine runs it without the GVL and the fuzz harness drives it alone. A framing error yields a
 * negative HTTP status.
 */
#ifndef MARGAY_HTTP_CHUNKED_H
#define MARGAY_HTTP_CHUNKED_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int state;                /* private */
  uint64_t remaining;       /* private: bytes left in the current chunk */
  uint64_t total;           /* decoded body bytes so far */
  uint64_t max_body;        /* decoded total above this: -413 (UINT64_MAX: unlimited) */
  size_t ext_used;          /* chunk-extension bytes seen so far (whole request) */
  size_t max_ext;           /* above this: -400 */
  size_t line_len;          /* private: bytes of the current size/trailer line */
  size_t trailer_used;      /* trailer section bytes so far */
  size_t max_trailer;       /* above this: -431 */
  int digits;               /* private */
} mg_chunked;

enum { MG_CHUNKED_MORE = 0, MG_CHUNKED_DONE = 1 };

void mg_chunked_init(mg_chunked *c, uint64_t max_body, size_t max_ext, size_t max_trailer);

/*
 * Decode buf[0..len) in place. Decoded data is written compacted at buf[0..*produced)
 * (output never overtakes input). *consumed is how many input bytes were used; on
 * MG_CHUNKED_DONE the bytes from buf + *consumed on belong to the next request.
 * Returns MG_CHUNKED_MORE, MG_CHUNKED_DONE, or -status (-400 framing error, -413 too large,
 * -431 trailers too large). Trailer fields are validated like header fields and discarded.
 * Feeding after DONE or after an error returns the same result again.
 */
int mg_chunked_decode(mg_chunked *c, char *buf, size_t len, size_t *consumed, size_t *produced);

#endif
