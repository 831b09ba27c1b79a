/*
 * http/chunked.c - chunked transfer coding decoder (RFC 9112 7.1), in place and resumable.
 *
 * A byte-at-a-time state machine for the framing (size line, extensions, CRLFs, trailers), and a
 * bulk memmove for chunk data. All state lives in mg_chunked, so the input may be split anywhere:
 * each byte is judged in the same state whatever the split, and the result is the same.
 */
#include <stdint.h>
#include <string.h>
#include "http/bytes.h"
#include "http/chunked.h"

#define MAX_SIZE_DIGITS 32 /* leading zeros included */

enum {
  S_SIZE0 = 0,  /* first hex digit of a chunk-size */
  S_SIZE,       /* further hex digits, or what ends the size */
  S_EXT_WS,     /* BWS after the size or an ext value: only ';' may follow */
  S_EXT_NAME0,  /* after ';': BWS then ext-name */
  S_EXT_NAME,   /* in ext-name */
  S_EXT_NAMEWS, /* BWS after ext-name: ';' or '=' may follow */
  S_EXT_VAL0,   /* after '=': BWS then token or quoted-string */
  S_EXT_VAL,    /* in a token value */
  S_EXT_QS,     /* in a quoted-string value */
  S_EXT_QSESC,  /* after a backslash in a quoted-string */
  S_EXT_END,    /* after a closing quote */
  S_SIZE_LF,    /* CR of the chunk line seen */
  S_DATA,       /* chunk data, c->remaining bytes left */
  S_DATA_CR,    /* CRLF after chunk data */
  S_DATA_LF,
  S_TRL0,       /* start of a trailer line (or of the final CRLF) */
  S_TRL_NAME,
  S_TRL_VAL,
  S_TRL_LF,
  S_END_LF,     /* CR of the final empty line seen */
  S_DONE
};

void mg_chunked_init(mg_chunked *c, uint64_t max_body, size_t max_ext, size_t max_trailer) {
  memset(c, 0, sizeof *c);
  c->state = S_SIZE0;
  c->max_body = max_body;
  c->max_ext = max_ext;
  c->max_trailer = max_trailer;
}

static inline int hexval(uint8_t ch) {
  if (ch <= '9') return ch - '0';
  return (ch | 0x20) - 'a' + 10;
}

int mg_chunked_decode(mg_chunked *c, char *buf, size_t len, size_t *consumed, size_t *produced) {
  size_t i = 0, w = 0;
  int st = c->state;

  *consumed = *produced = 0;
  if (st < 0) return st;
  if (st == S_DONE) return MG_CHUNKED_DONE;

#define FAIL(status)                                                                            \
  do {                                                                                          \
    c->state = -(status);                                                                       \
    *consumed = i;                                                                              \
    *produced = w;                                                                              \
    return -(status);                                                                           \
  } while (0)

  while (i < len) {
    if (st == S_DATA) {
      size_t n = len - i;
      if (n > c->remaining) n = (size_t)c->remaining;
      if (w != i) memmove(buf + w, buf + i, n);
      w += n;
      i += n;
      c->remaining -= n;
      c->total += n;
      if (c->remaining == 0) st = S_DATA_CR;
      continue;
    }

    uint8_t ch = (uint8_t)buf[i];
    if (st >= S_EXT_WS && st <= S_EXT_END && ch != '\r' && ++c->ext_used > c->max_ext) FAIL(400);
    if (st >= S_TRL_NAME && st <= S_TRL_LF && ++c->trailer_used > c->max_trailer) FAIL(431);

    switch (st) {
    case S_SIZE0:
    case S_SIZE:
      if (MG_IS(ch, MG_C_HEX)) {
        if (++c->digits > MAX_SIZE_DIGITS) FAIL(400);
        if (c->remaining >> 56) FAIL(400); /* a 16th significant hex digit */
        c->remaining = (c->remaining << 4) | (uint64_t)hexval(ch);
        st = S_SIZE;
        break;
      }
      if (st == S_SIZE0) FAIL(400);
      /* The size is complete (at most 32 digits were buffered): a malformed size
       * is a 400 first; a well-formed one over the body budget is a 413, before
       * any of its data arrives. */
      if (c->remaining > c->max_body - c->total) FAIL(413);
      if (ch != '\r' && ++c->ext_used > c->max_ext) FAIL(400);
      goto after_value;

    case S_EXT_WS:
      if (MG_IS_OWS(ch)) break;
      if (ch == ';') { st = S_EXT_NAME0; break; }
      FAIL(400);

    case S_EXT_NAME0:
      if (MG_IS_OWS(ch)) break;
      if (MG_IS(ch, MG_C_TCHAR)) { st = S_EXT_NAME; break; }
      FAIL(400);

    case S_EXT_NAME:
      if (MG_IS(ch, MG_C_TCHAR)) break;
      if (ch == '=') { st = S_EXT_VAL0; break; }
      if (MG_IS_OWS(ch)) { st = S_EXT_NAMEWS; break; }
      goto after_value;

    case S_EXT_NAMEWS:
      if (MG_IS_OWS(ch)) break;
      if (ch == ';') { st = S_EXT_NAME0; break; }
      if (ch == '=') { st = S_EXT_VAL0; break; }
      FAIL(400);

    case S_EXT_VAL0:
      if (MG_IS_OWS(ch)) break;
      if (MG_IS(ch, MG_C_TCHAR)) { st = S_EXT_VAL; break; }
      if (ch == '"') { st = S_EXT_QS; break; }
      FAIL(400);

    case S_EXT_VAL:
      if (MG_IS(ch, MG_C_TCHAR)) break;
      goto after_value;

    case S_EXT_QS:
      if (ch == '"') { st = S_EXT_END; break; }
      if (ch == '\\') { st = S_EXT_QSESC; break; }
      if (MG_IS(ch, MG_C_QDTEXT)) break;
      FAIL(400);

    case S_EXT_QSESC:
      if (MG_IS_OWS(ch) || MG_IS(ch, MG_C_FIELD)) { st = S_EXT_QS; break; }
      FAIL(400);

    case S_EXT_END:
    after_value: /* what may follow a size, an ext-name or an ext-value */
      if (ch == '\r') { st = S_SIZE_LF; break; }
      if (ch == ';') { st = S_EXT_NAME0; break; }
      if (MG_IS_OWS(ch)) { st = S_EXT_WS; break; }
      FAIL(400);

    case S_SIZE_LF:
      if (ch != '\n') FAIL(400);
      st = c->remaining ? S_DATA : S_TRL0;
      c->digits = 0;
      break;

    case S_DATA_CR:
      if (ch != '\r') FAIL(400);
      st = S_DATA_LF;
      break;

    case S_DATA_LF:
      if (ch != '\n') FAIL(400);
      st = S_SIZE0;
      break;

    case S_TRL0:
      if (ch == '\r') { st = S_END_LF; break; }
      if (!MG_IS(ch, MG_C_TCHAR)) FAIL(400); /* empty name, obs-fold, bare LF, ... */
      if (++c->trailer_used > c->max_trailer) FAIL(431);
      st = S_TRL_NAME;
      break;

    case S_TRL_NAME:
      if (ch == ':') { st = S_TRL_VAL; break; }
      if (!MG_IS(ch, MG_C_TCHAR)) FAIL(400);
      break;

    case S_TRL_VAL:
      if (ch == '\r') { st = S_TRL_LF; break; }
      if (!MG_IS(ch, MG_C_FIELD) && !MG_IS_OWS(ch)) FAIL(400);
      break;

    case S_TRL_LF:
      if (ch != '\n') FAIL(400);
      st = S_TRL0;
      break;

    case S_END_LF:
      if (ch != '\n') FAIL(400);
      c->state = S_DONE;
      *consumed = i + 1;
      *produced = w;
      return MG_CHUNKED_DONE;

    default:
      FAIL(400); /* unreachable: corrupted state */
    }
    i++;
  }
#undef FAIL

  c->state = st;
  *consumed = i;
  *produced = w;
  return MG_CHUNKED_MORE;
}
