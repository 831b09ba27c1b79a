/*
 * http/status.c - what every response needs besides the application's bytes: the reason phrase
 * of a status, the date field (formatted once a second per thread), and the plain-text page the
 * engine answers errors with. Pure C, no allocation.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "http/status.h"

const char *mg_reason(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 103: return "Early Hints";
  case 200: return "OK";
  case 201: return "Created";
  case 202: return "Accepted";
  case 204: return "No Content";
  case 206: return "Partial Content";
  case 301: return "Moved Permanently";
  case 302: return "Found";
  case 303: return "See Other";
  case 304: return "Not Modified";
  case 307: return "Temporary Redirect";
  case 308: return "Permanent Redirect";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 410: return "Gone";
  case 411: return "Length Required";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 416: return "Range Not Satisfiable";
  case 417: return "Expectation Failed";
  case 422: return "Unprocessable Content";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 502: return "Bad Gateway";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return "";
  }
}

size_t mg_date_header(char *out) {
  static __thread time_t cached_at;
  static __thread char cached[64];
  static __thread size_t cached_len;
  time_t now = time(NULL);
  if (now != cached_at) {
    struct tm tm;
    gmtime_r(&now, &tm);
    cached_len = strftime(cached, sizeof cached, "date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
    cached_at = now;
  }
  memcpy(out, cached, cached_len);
  return cached_len;
}

size_t mg_status_page(char *out, size_t cap, int status) { return mg_status_page_with(out, cap, status, ""); }

size_t mg_status_page_with(char *out, size_t cap, int status, const char *fields) {
  char date[64];
  const char *reason = mg_reason(status);
  size_t dlen = mg_date_header(date);
  int n = snprintf(out, cap,
                   "HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %zu\r\n"
                   "connection: close\r\n%s%.*s\r\n%s\n",
                   status, reason, strlen(reason) + 1, fields, (int)dlen, date, reason);
  return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
