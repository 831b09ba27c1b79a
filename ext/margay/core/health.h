/*
 * core/health.h - health answered by the engine, never by an application thread: readiness
 * (started, not draining, not stopping; in a cluster, the board's view of every worker), the
 * health listener's own thread (GET /livez, /readyz, /metrics), the bytes of a probe's answer
 * on a main listener (health_check_path), and the metrics text Ruby sets.
 *
 * The health listener has a thread of its own (a plain pthread, never a Ruby thread): the pool
 * threads that run the event loop may all be inside the app, and a probe must still be
 * answered then.
 */
#ifndef MARGAY_CORE_HEALTH_H
#define MARGAY_CORE_HEALTH_H

#include <stddef.h>
#include <stdint.h>
#include "core/engine.h"

/* A text snapshot one writer replaces and readers on other threads (or processes: the cluster's
 * copy lives in shared memory) copy out, under a sequence count: odd while it is written. */
typedef struct mg_text mg_text;

/* The most bytes a metrics snapshot may hold (the mapping is touched only as far as it is used). */
#define MG_TEXT_CAP (4u << 20)

/* Map a text of MG_TEXT_CAP bytes (shared with the children forked later); NULL with errno. */
mg_text *mg_text_map(void);
void mg_text_unmap(mg_text *t);
/* Replace the text (one writer at a time: the caller holds the GVL); -1 when too long. */
int mg_text_set(mg_text *t, const char *s, size_t n);
/* A malloc'd copy of the text and its length; NULL when never set (or no memory). */
char *mg_text_copy(mg_text *t, size_t *n);

/* Whether this process (single mode) or the cluster (any worker booted, not draining) is ready. */
int mg_health_ready(const mg_engine *e);
/* Whether responses close their connection: the engine or the cluster drains, or it stops. */
int mg_health_closing(const mg_engine *e);

/* The answer to a readiness probe (health_check_path on a main listener): the whole response
 * into +out+ (cap >= 512), with connection: close unless +keep_alive+ (HTTP/1.0: keep-alive
 * named), no body for HEAD. Returns its length. */
size_t mg_health_probe_answer(char *out, size_t cap, int ready, int head, int keep_alive, int minor);
/* Whether the framed request +path+ (+method+) is the configured health_check_path's probe. */
int mg_health_is_probe(const mg_engine *e, const char *method, size_t mlen, const char *path, size_t plen);

/* Start the health thread when a health listener was added; -1 with errno when it cannot. */
int mg_health_start(mg_engine *e);
/* Stop and join the health thread (with or without the GVL; nothing when none runs). */
void mg_health_stop(mg_engine *e);

#endif
