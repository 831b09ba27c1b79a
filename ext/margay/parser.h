/*
 * parser.h - HTTP/1.1 request head parser and chunked body decoder (RFC 9112).
 *
 * Pure C: no Ruby, no allocation, no global state, so it is safe to call
 * without the GVL from any thread, and it is what the fuzz harness drives.
 * Every malformed or ambiguous input yields a negative HTTP status; the caller
 * answers with that status and closes the connection.
 */
#ifndef MARGAY_PARSER_H
#define MARGAY_PARSER_H

#include <stddef.h>
#include <stdint.h>

/* Hard cap on header fields; mg_limits.max_headers must not exceed it. */
#define MG_MAX_HEADERS_HARD 256

/* A byte range of the caller's buffer. */
typedef struct { uint32_t off, len; } mg_span;

typedef struct {
  size_t max_target;   /* request-target longer than this: -414 */
  size_t max_head;     /* whole head (request line .. empty line) longer: -431 */
  size_t max_headers;  /* more header fields than this: -431 (<= MG_MAX_HEADERS_HARD) */
} mg_limits;

enum mg_target_form { MG_ORIGIN_FORM, MG_ABSOLUTE_FORM, MG_AUTHORITY_FORM, MG_ASTERISK_FORM };

typedef struct {
  mg_span method;
  mg_span target;      /* the request-target as sent */
  mg_span path;        /* origin-form path, or the path of an absolute-form target (len 0 when
                          empty: spans index the caller's buffer, so the caller uses "/");
                          len 0 for authority- and asterisk-form */
  mg_span query;       /* after '?', without it; len 0 when absent */
  mg_span authority;   /* host[:port] of an absolute- or authority-form target; len 0 otherwise */
  int target_form;     /* enum mg_target_form */
  int minor;           /* HTTP/1.<minor>: 0 or 1 (1.2..1.9 are answered as 1.1, minor = 1) */

  size_t nheaders;
  struct { mg_span name, value; } headers[MG_MAX_HEADERS_HARD]; /* value without surrounding OWS */

  /* Framing and semantics derived from the fields (RFC 9112 section 6) */
  int64_t content_length;  /* -1 when absent */
  int chunked;             /* Transfer-Encoding ends in chunked */
  int keep_alive;          /* version default, adjusted by Connection: close / keep-alive */
  int expect_continue;     /* Expect: 100-continue (HTTP/1.1 only) */
  mg_span host;            /* Host field value; len 0 when absent */
  size_t head_len;         /* bytes of the head including the final CRLF */
} mg_request;

/*
 * Parse the request head at buf[0..len).
 * Returns:
 *   > 0   the head is complete; the value is head_len (the body starts at buf + head_len)
 *   0     incomplete, more bytes are needed (limits already checked on what is there)
 *   < 0   -status: -400 malformed/ambiguous, -413 Content-Length above 18 digits, -414 target
 *         too long, -417 Expect other than 100-continue (HTTP/1.1), -431 head or field count
 *         too large, -501 unsupported transfer coding or CONNECT, -505 HTTP major version not 1.
 * Leading empty lines before the request line (RFC 9112 2.2) are skipped and counted in head_len.
 */
long mg_parse_head(const char *buf, size_t len, const mg_limits *lim, mg_request *req);

/* Case-insensitive compare of a span against a lowercase NUL-terminated name. */
int mg_span_ieq(const char *buf, mg_span s, const char *lower);

/* ---- chunked transfer coding (RFC 9112 section 7.1) ---- */

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
