/*
 * ruby/field_key.h - the Rack env key of a request field name (with the GVL).
 */
#ifndef MARGAY_RUBY_FIELD_KEY_H
#define MARGAY_RUBY_FIELD_KEY_H

#include <ruby.h>
#include <stddef.h>

/* Makes the keys of the common fields (once, from mg_env_init). */
void mg_field_key_init(void);
/* HTTP_<NAME> for field name +name+ (+n+ bytes, any case; '-' becomes '_'), an interned frozen
 * String; Qnil when the name must be dropped (it has '_', or is too long). */
VALUE mg_field_key(const char *name, size_t n);

#endif
