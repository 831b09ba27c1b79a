/*
 * http/proxy.h - addresses that a proxy in front reports: the PROXY protocol v1 line
 * (HAProxy's proxy-protocol.txt, section 2.1) and the last element of a forwarding header such as
 * X-Forwarded-For.
 *
 * Pure C: no Ruby, no allocation, no state, so it runs without the GVL and is what the fuzz
 * harness fuzz_proxy.c drives.
 */
#ifndef MARGAY_HTTP_PROXY_H
#define MARGAY_HTTP_PROXY_H

#include <stddef.h>

/* The longest PROXY v1 line, CRLF included (the spec's bound: "PROXY TCP6 " + two 39-byte
 * addresses + two ports + spaces + CRLF). */
#define MG_PROXY_V1_MAX 107
/* Room for an address as text: INET6_ADDRSTRLEN. */
#define MG_ADDR_MAX 46

typedef struct {
  int family;              /* 4 (TCP4), 6 (TCP6), or 0 (UNKNOWN: the connection's own address stays) */
  char addr[MG_ADDR_MAX];  /* the source address as sent, NUL-terminated; "" for UNKNOWN */
} mg_proxy;

/*
 * Parse the PROXY v1 line that must start buf[0..len).
 * Returns:
 *   > 0   the line's length, CRLF included (the first request starts after it); *out is set
 *   0     incomplete: what is there is a valid beginning of a line, shorter than the bound
 *   -1    not a PROXY v1 line: a byte that cannot start or continue one, no CRLF within
 *         MG_PROXY_V1_MAX bytes, a bare CR or LF, an invalid address or port, one space too
 *         many. The connection is closed (the spec: never guess, never fall back to plain HTTP).
 * A prefix of an input answers 0 or what the whole input answers.
 */
long mg_proxy_parse(const char *buf, size_t len, mg_proxy *out);

/*
 * The last element of a comma- or space-separated list of addresses (a forwarding header's
 * value, every field line joined): the one the nearest proxy added, when it is an IPv4 or IPv6
 * address. Copies it, NUL-terminated, into out[MG_ADDR_MAX] and returns 1; else 0.
 */
int mg_forwarded_last(const char *value, size_t len, char *out);

#endif
