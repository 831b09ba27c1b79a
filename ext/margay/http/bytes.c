/*
 * http/bytes.c - the byte class table, computed by the compiler from the RFC grammar's
 * definitions below (no hand-written table to get wrong).
 */
#include "http/bytes.h"

#define IS_DIGIT_(c) ((c) >= '0' && (c) <= '9')
#define IS_ALPHA_(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z'))
#define IS_TCHAR_(c)                                                                              \
  (IS_DIGIT_(c) || IS_ALPHA_(c) || (c) == '!' || (c) == '#' || (c) == '$' || (c) == '%' ||        \
   (c) == '&' || (c) == '\'' || (c) == '*' || (c) == '+' || (c) == '-' || (c) == '.' ||           \
   (c) == '^' || (c) == '_' || (c) == '`' || (c) == '|' || (c) == '~')
#define IS_VCHAR_(c) ((c) >= 0x21 && (c) <= 0x7E)
#define IS_HEX_(c) (IS_DIGIT_(c) || ((c) >= 'a' && (c) <= 'f') || ((c) >= 'A' && (c) <= 'F'))
#define IS_REGNAME_(c)                                                                            \
  (IS_DIGIT_(c) || IS_ALPHA_(c) || (c) == '-' || (c) == '.' || (c) == '_' || (c) == '~' ||        \
   (c) == '!' || (c) == '$' || (c) == '&' || (c) == '\'' || (c) == '(' || (c) == ')' ||           \
   (c) == '*' || (c) == '+' || (c) == ';' || (c) == '=')

#define CLS(c)                                                                                    \
  ((IS_TCHAR_(c) ? MG_C_TCHAR : 0) | ((IS_VCHAR_(c) || (c) >= 0x80) ? MG_C_FIELD : 0) |           \
   ((IS_VCHAR_(c) && (c) != '#') ? MG_C_TARGET : 0) | (IS_DIGIT_(c) ? MG_C_DIGIT : 0) |           \
   (IS_HEX_(c) ? MG_C_HEX : 0) | (IS_REGNAME_(c) ? MG_C_REGNAME : 0) |                            \
   (((c) == '\t' || (c) == ' ' || (c) >= 0x80 || (IS_VCHAR_(c) && (c) != '"' && (c) != '\\'))     \
        ? MG_C_QDTEXT                                                                             \
        : 0) |                                                                                    \
   ((IS_VCHAR_(c) || (c) >= 0x80 || (c) == ' ' || (c) == '\t') ? MG_C_VALUE : 0))
#define R4(n) CLS(n), CLS((n) + 1), CLS((n) + 2), CLS((n) + 3)
#define R16(n) R4(n), R4((n) + 4), R4((n) + 8), R4((n) + 12)
#define R64(n) R16(n), R16((n) + 16), R16((n) + 32), R16((n) + 48)

const uint8_t mg_byte_class[256] = {R64(0), R64(64), R64(128), R64(192)};
