/*
 * http/parser.c - HTTP/1.1 request head parser (RFC 9112 sections 2-3, 5-6; RFC 9110 field rules).
 *
 * One forward pass over the buffer, each byte checked once against a constant class table; each
 * field line is judged for framing semantics as soon as it ends, the whole head once at the end.
 * The parser keeps no state between calls: the caller re-parses from the start when more bytes
 * arrive, which costs O(n) per call.
 *
 * Every check that can fail while the head is still incomplete (a byte class, a length limit)
 * is made at the byte where it becomes decidable, and checks that need a whole line or the whole
 * head are made only once that line/head is terminated. So a prefix of an input never gives a
 * different non-zero answer than the whole input: feeding byte by byte and feeding at once agree.
 */
#include <stdint.h>
#include <string.h>
#include "http/bytes.h"
#include "http/parser.h"

static inline uint8_t lower(uint8_t c) { return (c >= 'A' && c <= 'Z') ? (uint8_t)(c | 0x20) : c; }

int mg_span_ieq(const char *buf, mg_span s, const char *low) {
  size_t n = strlen(low);
  if (s.len != n) return 0;
  const uint8_t *p = (const uint8_t *)buf + s.off;
  for (size_t i = 0; i < n; i++)
    if (lower(p[i]) != (uint8_t)low[i]) return 0;
  return 1;
}

static inline mg_span span(size_t off, size_t len) {
  mg_span s = {(uint32_t)off, (uint32_t)len};
  return s;
}

/* ---- field value helpers (all work on a span of an already validated head) ---- */

/* uri-host [ ":" port ] (RFC 9110 7.2). reg-name excludes ',' on purpose: a comma-separated list
 * of hosts is what a request-smuggling probe sends, never a real Host. */
static int host_ok(const uint8_t *p, size_t n, int need_host) {
  size_t i = 0;
  if (n > 0 && p[0] == '[') {
    /* IP-literal: IPv6address (characters only, not its structure) or IPvFuture */
    size_t j = 1;
    if (j < n && (p[j] == 'v' || p[j] == 'V')) {
      size_t h = ++j;
      while (j < n && MG_IS(p[j], MG_C_HEX)) j++;
      if (j == h || j >= n || p[j] != '.') return 0;
      size_t r = ++j;
      while (j < n && (MG_IS(p[j], MG_C_REGNAME) || p[j] == ':')) j++;
      if (j == r) return 0;
    } else {
      int colon = 0;
      while (j < n && (MG_IS(p[j], MG_C_HEX) || p[j] == ':' || p[j] == '.')) colon |= p[j++] == ':';
      if (!colon) return 0;
    }
    if (j >= n || p[j] != ']') return 0;
    i = j + 1;
  } else {
    while (i < n) {
      if (MG_IS(p[i], MG_C_REGNAME)) {
        i++;
      } else if (p[i] == '%') {
        if (i + 2 >= n || !MG_IS(p[i + 1], MG_C_HEX) || !MG_IS(p[i + 2], MG_C_HEX)) return 0;
        i += 3;
      } else {
        break;
      }
    }
    if (need_host && i == 0) return 0;
  }
  if (i == n) return 1;
  if (p[i] != ':') return 0;
  for (i++; i < n; i++)
    if (!MG_IS(p[i], MG_C_DIGIT)) return 0;
  return 1;
}

/* Content-Length value: 1*DIGIT (leading zeros allowed). RFC 9112 6.3 lets a recipient take a
 * list of equal values as one; nginx, Puma and llhttp reject it, and so does Margay: a proxy in
 * front may have read the list differently. Returns 0 and sets *out, or -status. */
static long content_length(const uint8_t *p, size_t n, int64_t *out) {
  size_t i = 0, sig = 0;
  int64_t v = 0;
  while (i < n && MG_IS(p[i], MG_C_DIGIT)) {
    if (sig || p[i] != '0') {
      if (++sig > 18) return -413;
      v = v * 10 + (p[i] - '0');
    }
    i++;
  }
  if (i == 0 || i != n) return -400;
  *out = v;
  return 0;
}

/* quoted-string starting at p[*i] == '"'. Returns 1 and moves *i past it, or 0. */
static int quoted_string(const uint8_t *p, size_t n, size_t *i) {
  size_t j = *i + 1;
  while (j < n) {
    uint8_t c = p[j];
    if (c == '"') {
      *i = j + 1;
      return 1;
    }
    if (c == '\\') {
      if (j + 1 >= n || !(p[j + 1] == '\t' || p[j + 1] == ' ' || MG_IS(p[j + 1], MG_C_FIELD))) return 0;
      j += 2;
    } else if (MG_IS(c, MG_C_QDTEXT)) {
      j++;
    } else {
      return 0;
    }
  }
  return 0;
}

typedef struct {
  int codings;      /* codings seen in all TE fields */
  int chunked_seen; /* codings named chunked (with or without parameters) */
  int last_plain_chunked;
} te_state;

/* One Transfer-Encoding field value, appended to the running list. Returns 0 or -400. */
static long transfer_encoding(const uint8_t *p, size_t n, te_state *te) {
  size_t i = 0;
  int here = 0;
  for (;;) {
    while (i < n && MG_IS_OWS(p[i])) i++;
    if (i == n) break;
    if (p[i] == ',') {
      i++;
      continue;
    }
    size_t t0 = i;
    while (i < n && MG_IS(p[i], MG_C_TCHAR)) i++;
    if (i == t0) return -400;
    int is_chunked = i - t0 == 7 && mg_span_ieq((const char *)p, span(t0, 7), "chunked");
    int params = 0;
    for (;;) {
      size_t k = i;
      while (k < n && MG_IS_OWS(p[k])) k++;
      if (k == n || p[k] != ';') break;
      /* transfer-parameter = token BWS "=" BWS ( token / quoted-string ) */
      k++;
      while (k < n && MG_IS_OWS(p[k])) k++;
      size_t a = k;
      while (k < n && MG_IS(p[k], MG_C_TCHAR)) k++;
      if (k == a) return -400;
      while (k < n && MG_IS_OWS(p[k])) k++;
      if (k == n || p[k] != '=') return -400;
      k++;
      while (k < n && MG_IS_OWS(p[k])) k++;
      if (k < n && p[k] == '"') {
        if (!quoted_string(p, n, &k)) return -400;
      } else {
        a = k;
        while (k < n && MG_IS(p[k], MG_C_TCHAR)) k++;
        if (k == a) return -400;
      }
      params = 1;
      i = k;
    }
    while (i < n && MG_IS_OWS(p[i])) i++;
    if (i < n && p[i] != ',') return -400;
    here++;
    te->codings++;
    te->chunked_seen += is_chunked;
    te->last_plain_chunked = is_chunked && !params;
  }
  return here ? 0 : -400;
}

/* What the fields seen so far established (the parser keeps it on its stack for one call). */
typedef struct {
  size_t hosts, te_fields, cl_fields;
  te_state te;
  int ka_token, close_token;
} fields_state;

/* One field line, judged as soon as it ends (RFC 9112 6.1-6.3, 9.3; RFC 9110 7.2, 10.1.1): every
 * rule that a later line cannot change answers here, so an incomplete head that is already
 * invalid is answered at once, and a prefix never answers differently from the whole head. */
static long field(const char *buf, mg_request *req, size_t h, fields_state *st) {
  const uint8_t *b = (const uint8_t *)buf;
  mg_span nm = req->headers[h].name, v = req->headers[h].value;
  const uint8_t *vp = b + v.off;
  long r;
  switch (nm.len) {
  case 4:
    if (!mg_span_ieq(buf, nm, "host")) break;
    if (++st->hosts > 1) return -400;
    if (!host_ok(vp, v.len, 0)) return -400;
    req->host = v;
    break;
  case 6:
    if (!mg_span_ieq(buf, nm, "expect") || req->minor == 0 || v.len == 0) break;
    if (!mg_span_ieq(buf, v, "100-continue")) return -417;
    req->expect_continue = 1;
    break;
  case 10:
    if (!mg_span_ieq(buf, nm, "connection")) break;
    for (size_t i = 0; i < v.len;) {
      size_t e0, e1;
      while (i < v.len && (MG_IS_OWS(vp[i]) || vp[i] == ',')) i++;
      e0 = i;
      while (i < v.len && vp[i] != ',') i++;
      e1 = i;
      while (e1 > e0 && MG_IS_OWS(vp[e1 - 1])) e1--;
      mg_span el = span(v.off + e0, e1 - e0);
      if (mg_span_ieq(buf, el, "close")) st->close_token = 1;
      else if (mg_span_ieq(buf, el, "keep-alive")) st->ka_token = 1;
    }
    break;
  case 14:
    if (!mg_span_ieq(buf, nm, "content-length")) break;
    /* a second Content-Length field, even an equal one, or one beside Transfer-Encoding */
    if (st->cl_fields++ || st->te_fields) return -400;
    if ((r = content_length(vp, v.len, &req->content_length)) < 0) return r;
    break;
  case 17:
    if (!mg_span_ieq(buf, nm, "transfer-encoding")) break;
    st->te_fields++;
    if (req->minor == 0 || st->cl_fields) return -400;
    if ((r = transfer_encoding(vp, v.len, &st->te)) < 0) return r;
    if (st->te.chunked_seen > 1) return -400;
    break;
  default:
    break;
  }
  return 0;
}

/* What only the whole head decides: Host required, the last coding, the connection. */
static long semantics(mg_request *req, const fields_state *st) {
  if (req->minor == 1 && st->hosts == 0) return -400;
  if (st->te_fields) {
    if (!st->te.last_plain_chunked) return -400;
    if (st->te.codings > 1) return -501;
    req->chunked = 1;
  }
  req->keep_alive = st->close_token ? 0 : (req->minor == 1 || st->ka_token);
  return 0;
}

/* Classify the request-target (RFC 9112 3.2); its bytes are already known to be MG_C_TARGET. */
static long target_form(const char *buf, mg_request *req) {
  const uint8_t *t = (const uint8_t *)buf + req->target.off;
  size_t n = req->target.len, off = req->target.off, i;

  if (t[0] == '/') {
    req->target_form = MG_ORIGIN_FORM;
    for (i = 0; i < n && t[i] != '?'; i++) {}
    req->path = span(off, i);
    if (i < n) req->query = span(off + i + 1, n - i - 1);
    return 0;
  }
  if (n == 1 && t[0] == '*') {
    if (req->method.len != 7 || memcmp(buf + req->method.off, "OPTIONS", 7) != 0) return -400;
    req->target_form = MG_ASTERISK_FORM;
    return 0;
  }
  /* absolute-form: "http" / "https" "://" authority path-abempty [ "?" query ] */
  if (n > 7 && mg_span_ieq(buf, span(off, 7), "http://")) i = 7;
  else if (n > 8 && mg_span_ieq(buf, span(off, 8), "https://")) i = 8;
  else return -400;
  size_t a0 = i;
  while (i < n && t[i] != '/' && t[i] != '?') i++;
  if (!host_ok(t + a0, i - a0, 1)) return -400; /* also rejects '@' (userinfo) and empty */
  req->target_form = MG_ABSOLUTE_FORM;
  req->authority = span(off + a0, i - a0);
  size_t p0 = i;
  while (i < n && t[i] != '?') i++;
  req->path = span(off + p0, i - p0); /* len 0 for an empty path: the caller uses "/" */
  if (i < n) req->query = span(off + i + 1, n - i - 1);
  return 0;
}

/* Whether method m[0..n) is one of +list+ ("GET HEAD ": each name followed by one space). */
static int method_listed(const char *list, const char *m, size_t n) {
  for (const char *p = list; *p;) {
    const char *sp = strchr(p, ' ');
    size_t len = sp ? (size_t)(sp - p) : strlen(p);
    if (len == n && memcmp(p, m, n) == 0) return 1;
    if (!sp) break;
    p = sp + 1;
  }
  return 0;
}

/* Byte i is needed: past the head limit the head is too large, past the data we need more. */
#define NEED(i)                                                                                 \
  do {                                                                                          \
    if ((i) >= end) return (i) >= max_head ? -431 : 0;                                          \
  } while (0)

long mg_parse_head(const char *buf, size_t len, const mg_limits *lim, mg_request *req) {
  const uint8_t *b = (const uint8_t *)buf;
  size_t max_head = lim->max_head < UINT32_MAX ? lim->max_head : UINT32_MAX;
  size_t max_headers = lim->max_headers < MG_MAX_HEADERS_HARD ? lim->max_headers : MG_MAX_HEADERS_HARD;
  size_t end = len < max_head ? len : max_head;
  size_t i = 0, start;
  long r;
  fields_state st;

  memset(&st, 0, sizeof st);
  memset(req, 0, offsetof(mg_request, headers));
  req->content_length = -1;
  req->chunked = req->keep_alive = req->expect_continue = 0;
  req->host = span(0, 0);
  req->head_len = 0;

  /* Empty lines before the request line (RFC 9112 2.2) */
  for (;;) {
    NEED(i);
    if (b[i] != '\r') break;
    NEED(i + 1);
    if (b[i + 1] != '\n') return -400;
    i += 2;
  }

  /* method SP: a token of at most MG_MAX_METHOD bytes (501 beyond: Passenger's CVE-2025-26803
   * was a denial of service by method); one of lim->methods is checked with the version below */
  start = i;
  while (i < end && i - start <= MG_MAX_METHOD && MG_IS(b[i], MG_C_TCHAR)) i++;
  if (i - start > MG_MAX_METHOD) return -501;
  NEED(i);
  if (b[i] != ' ' || i == start) return -400;
  req->method = span(start, i - start);

  /* request-target [ "#" fragment ] SP: a fragment is no part of the request-target (RFC 9112
   * 3.2), but clients send one; it is accepted and dropped, and counts towards the limit */
  start = ++i;
  size_t stop = end - start > lim->max_target ? start + lim->max_target : end, hash = 0;
  for (; i < stop; i++) {
    if (MG_IS(b[i], MG_C_TARGET)) continue;
    if (b[i] != '#' || hash) break;
    hash = i;
  }
  NEED(i);
  if (b[i] != ' ') return i - start >= lim->max_target ? -414 : -400;
  if ((hash ? hash : i) == start) return -400;
  req->target = span(start, (hash ? hash : i) - start);

  /* HTTP-version CRLF: "HTTP/" DIGIT "." DIGIT, checked as the bytes arrive */
  start = ++i;
  for (int k = 0; k < 8; k++, i++) {
    NEED(i);
    if (k == 5 || k == 7 ? !MG_IS(b[i], MG_C_DIGIT) : b[i] != (uint8_t)"HTTP/x.x"[k]) return -400;
  }
  NEED(i);
  if (b[i] != '\r') return -400;
  NEED(i + 1);
  if (b[i + 1] != '\n') return -400;
  i += 2;
  if (b[start + 5] != '1') return -505;
  req->minor = b[start + 7] == '0' ? 0 : 1;
  /* the whole request line is in: its version first (505 for an HTTP/2 preface), then whether
   * the method is served */
  if (lim->methods && !method_listed(lim->methods, buf + req->method.off, req->method.len)) return -501;
  if (req->method.len == 7 && memcmp(buf + req->method.off, "CONNECT", 7) == 0) return -501;
  if ((r = target_form(buf, req)) < 0) return r;

  /* field-line CRLF ... CRLF */
  for (;;) {
    NEED(i);
    if (b[i] == '\r') {
      NEED(i + 1);
      if (b[i + 1] != '\n') return -400;
      i += 2;
      break;
    }
    if (MG_IS_OWS(b[i])) return -400; /* obs-fold, or whitespace before the first field */
    if (req->nheaders >= max_headers) return -431;

    start = i;
    while (i < end && MG_IS(b[i], MG_C_TCHAR)) i++;
    NEED(i);
    if (b[i] != ':' || i == start) return -400; /* includes whitespace before the colon */
    mg_span name = span(start, i - start);

    i++;
    while (i < end && MG_IS_OWS(b[i])) i++;
    size_t v0 = i, v1;
    while (i < end && MG_IS(b[i], MG_C_VALUE)) i++;
    NEED(i);
    if (b[i] != '\r') return -400; /* NUL, bare LF, other CTLs, DEL */
    NEED(i + 1);
    if (b[i + 1] != '\n') return -400;
    for (v1 = i; v1 > v0 && MG_IS_OWS(b[v1 - 1]); v1--) {}
    req->headers[req->nheaders].name = name;
    req->headers[req->nheaders].value = span(v0, v1 - v0);
    if ((r = field(buf, req, req->nheaders++, &st)) < 0) return r;
    i += 2;
  }

  req->head_len = i;
  if ((r = semantics(req, &st)) < 0) return r;
  return (long)i;
}
