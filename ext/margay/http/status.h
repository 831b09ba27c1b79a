/*
 * http/status.h - reason phrases, the date field and the engine's own error page.
 */
#ifndef MARGAY_HTTP_STATUS_H
#define MARGAY_HTTP_STATUS_H

#include <stddef.h>

/* The reason phrase of +status+ ("" for one without a registered phrase). */
const char *mg_reason(int status);

/* Write "date: <IMF-fixdate>\r\n" to +out+ (64 bytes suffice); returns its length. */
size_t mg_date_header(char *out);

/* The whole response for an error the engine answers itself (status line, a plain-text body
 * naming the reason, connection: close) into +out+ of +cap+ bytes; returns its length. */
size_t mg_status_page(char *out, size_t cap, int status);
/* The same with more header fields, +fields+ (each line ending in CRLF; "" for none). */
size_t mg_status_page_with(char *out, size_t cap, int status, const char *fields);

#endif
