/*
 * http/parser.h - HTTP/1.1 request head parser (RFC 9112).
 *
 * Pure C: no Ruby, no allocation, no global state, so it is safe to call
 * without the GVL from any thread, and it is what the fuzz harness drives.
 * Every malformed or ambiguous input yields a negative HTTP status; the caller
 * answers with that status and closes the connection.
 */
#ifndef MARGAY_HTTP_PARSER_H
#define MARGAY_HTTP_PARSER_H

#include <stddef.h>
#include <stdint.h>

/* Hard cap on header fields; mg_limits.max_headers must not exceed it. */
#define MG_MAX_HEADERS_HARD 256

/* Longest method accepted (-501 beyond it, whatever the method list says). The longest method
 * in IANA's registry is 17 bytes (UPDATEREDIRECTREF) and Puma's grammar stops at 20: every
 * method Puma accepts passes. */
#define MG_MAX_METHOD 20

/* A byte range of the caller's buffer. */
typedef struct { uint32_t off, len; } mg_span;

typedef struct {
  size_t max_target;   /* request-target longer than this: -414 */
  size_t max_head;     /* whole head (request line .. empty line) longer: -431 */
  size_t max_headers;  /* more header fields than this: -431 (<= MG_MAX_HEADERS_HARD) */
  const char *methods; /* the methods served, each followed by one space ("GET HEAD "), case
                          sensitive; another method: -501. NULL: every token (up to MG_MAX_METHOD) */
} mg_limits;

enum mg_target_form { MG_ORIGIN_FORM, MG_ABSOLUTE_FORM, MG_AUTHORITY_FORM, MG_ASTERISK_FORM };

typedef struct {
  mg_span method;
  mg_span target;      /* the request-target as sent, without a fragment ("#..." is accepted
                          and dropped, as llhttp, nginx and Puma do) */
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
 *   < 0   -status: -400 malformed/ambiguous (a repeated Content-Length field or a list in one,
 *         even of equal values), -413 Content-Length above 18 digits, -414 target too long, -417
 *         Expect other than 100-continue (HTTP/1.1), -431 head or field count too large, -501
 *         unsupported transfer coding, CONNECT, a method longer than MG_MAX_METHOD or not in
 *         lim->methods, -505 HTTP major version not 1.
 * Leading empty lines before the request line (RFC 9112 2.2) are skipped and counted in head_len.
 * A field line is judged as soon as it ends (duplicates, Content-Length, Transfer-Encoding with
 * Content-Length or on HTTP/1.0, Host, Expect): an incomplete head that is already invalid gets
 * its answer without waiting for the rest.
 */
long mg_parse_head(const char *buf, size_t len, const mg_limits *lim, mg_request *req);

/* Case-insensitive compare of a span against a lowercase NUL-terminated name. */
int mg_span_ieq(const char *buf, mg_span s, const char *lower);

#endif
