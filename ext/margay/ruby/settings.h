/*
 * ruby/settings.h - Engine.new's settings: the values of Engine::SETTINGS, by index, into the
 * core engine's mg_settings.
 */
#ifndef MARGAY_RUBY_SETTINGS_H
#define MARGAY_RUBY_SETTINGS_H

#include <ruby.h>
#include "core/engine.h"

/* Fill +s+ from the Array +values+ (one per name of Engine::SETTINGS, in order) except max_connections,
 * which needs the opened engine's size; raises ArgumentError or TypeError on a bad value. */
void mg_rb_settings_read(mg_settings *s, VALUE values);
/* The max_connections setting of +values+, at most +ceiling+. */
int mg_rb_settings_max_connections(VALUE values, int ceiling);
/* The event backend setting of +values+ (MG_EV_AUTO, MG_EV_POLL or MG_EV_EPOLL). */
int mg_rb_settings_backend(VALUE values);
/* Define Engine::SETTINGS, the names the engine reads (MG_ENGINE_SETTINGS). */
void mg_settings_init(VALUE cEngine);

#endif
