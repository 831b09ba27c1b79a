/*
 * http/bytes.h - the byte classes of HTTP/1.1 (RFC 9110, RFC 9112): one constant table that the
 * parser, the chunked decoder and the response writer test bytes against. Read-only, so any
 * thread may use it without the GVL.
 */
#ifndef MARGAY_HTTP_BYTES_H
#define MARGAY_HTTP_BYTES_H

#include <stdint.h>

enum {
  MG_C_TCHAR = 1 << 0,   /* token character (RFC 9110 5.6.2) */
  MG_C_FIELD = 1 << 1,   /* field-content byte other than SP/HTAB: VCHAR / obs-text */
  MG_C_TARGET = 1 << 2,  /* request-target byte: 0x21..0x7E except '#' */
  MG_C_DIGIT = 1 << 3,
  MG_C_HEX = 1 << 4,
  MG_C_REGNAME = 1 << 5, /* unreserved / sub-delims, minus ',' (see host_ok in parser.c) */
  MG_C_QDTEXT = 1 << 6,  /* quoted-string text: HTAB / SP / VCHAR except '"' and '\' / obs-text */
  MG_C_VALUE = 1 << 7    /* field-value byte: MG_C_FIELD / SP / HTAB */
};

/* The classes of each byte value (hidden: read without a GOT indirection from every unit). */
extern const uint8_t mg_byte_class[256] __attribute__((visibility("hidden")));

#define MG_IS(c, cls) (mg_byte_class[(uint8_t)(c)] & (cls))
#define MG_IS_OWS(c) ((c) == ' ' || (c) == '\t')

#endif
