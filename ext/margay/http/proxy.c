/*
 * http/proxy.c - the PROXY protocol v1 line and forwarding-header addresses (see proxy.h).
 *
 * The line is judged byte by byte as it arrives, against the grammar's fixed parts, and whole
 * once its CRLF is in; it is never longer than MG_PROXY_V1_MAX, so a peer that sends anything else
 * costs at most that many bytes before the connection is closed (Puma's 2026 advisories: a line
 * without CRLF grew a buffer without bound, and a line was parsed again on a kept-alive
 * connection; the caller reads it only at a connection's start).
 */
#include "http/proxy.h"
#include <arpa/inet.h>
#include <string.h>

/* Whether b[0..n) is a beginning of word w (n may be longer than w: then w must be all of it). */
static int starts(const char *b, size_t n, const char *w) {
  size_t k = strlen(w);
  return memcmp(b, w, n < k ? n : k) == 0;
}

/* One address of family af (4 or 6) at p[0..n) into out; 1 if valid. */
static int address(int af, const char *p, size_t n, char *out) {
  unsigned char bin[16];
  if (n == 0 || n >= MG_ADDR_MAX) return 0;
  memcpy(out, p, n);
  out[n] = '\0';
  return inet_pton(af == 4 ? AF_INET : AF_INET6, out, bin) == 1;
}

/* A port: 0..65535 in decimal, no leading zero. */
static int port(const char *p, size_t n) {
  if (n == 0 || n > 5 || (n > 1 && p[0] == '0')) return 0;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return 0;
    v = v * 10 + (unsigned)(p[i] - '0');
  }
  return v <= 65535;
}

/* "TCP4 " / "TCP6 " src SP dst SP sport SP dport, the line without "PROXY " and CRLF. */
static int tcp(const char *p, size_t n, mg_proxy *out) {
  int af = p[3] == '4' ? 4 : 6;
  const char *f[4];
  size_t fl[4], k = 0, at = 5;
  for (size_t i = 5; i <= n; i++) {
    if (i < n && p[i] != ' ') continue;
    if (k == 4) return 0; /* a fifth field */
    f[k] = p + at;
    fl[k++] = i - at;
    at = i + 1;
  }
  char dst[MG_ADDR_MAX];
  if (k != 4 || !address(af, f[0], fl[0], out->addr) || !address(af, f[1], fl[1], dst) ||
      !port(f[2], fl[2]) || !port(f[3], fl[3]))
    return 0;
  out->family = af;
  return 1;
}

long mg_proxy_parse(const char *buf, size_t len, mg_proxy *out) {
  size_t n = len < MG_PROXY_V1_MAX ? len : MG_PROXY_V1_MAX, cr = n;
  if (!starts(buf, n, "PROXY ")) return -1;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)buf[i];
    if (c == '\r') { cr = i; break; }
    if (c < 0x20 || c > 0x7E) return -1; /* a bare LF, a control or a non-ASCII byte */
  }
  /* after "PROXY ": the protocol, checked as it arrives */
  const char *p = buf + 6;
  size_t pn = (cr < n ? cr : n) > 6 ? (cr < n ? cr : n) - 6 : 0;
  if (n > 6 && !starts(p, pn, "TCP4 ") && !starts(p, pn, "TCP6 ") && !starts(p, pn, "UNKNOWN"))
    return -1;
  if (cr == n) return len >= MG_PROXY_V1_MAX ? -1 : 0;
  if (cr + 1 == n) return len >= MG_PROXY_V1_MAX ? -1 : 0; /* the LF may still come */
  if (buf[cr + 1] != '\n') return -1;

  memset(out, 0, sizeof *out);
  if (pn >= 7 && memcmp(p, "UNKNOWN", 7) == 0) {
    /* "PROXY UNKNOWN" [SP anything] CRLF: the receiver ignores the rest (spec 2.1) */
    if (pn > 7 && p[7] != ' ') return -1;
  } else if (pn < 5 || !tcp(p, pn, out)) {
    return -1;
  }
  return (long)(cr + 2);
}

int mg_forwarded_last(const char *value, size_t len, char *out) {
  size_t e = len;
  while (e > 0 && (value[e - 1] == ' ' || value[e - 1] == '\t' || value[e - 1] == ',')) e--;
  size_t s = e;
  while (s > 0 && value[s - 1] != ' ' && value[s - 1] != '\t' && value[s - 1] != ',') s--;
  if (s == e) return 0;
  return address(memchr(value + s, ':', e - s) ? 6 : 4, value + s, e - s, out);
}
