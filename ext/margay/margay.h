/*
 * margay.h - the extension's entry point. Ruby calls Init_margay_native when
 * it loads margay/margay_native; it defines Margay::Native and hands the
 * modules to each unit's init (the units never reach back up to this file).
 */
#ifndef MARGAY_H
#define MARGAY_H

__attribute__((visibility("default"))) void Init_margay_native(void);

#endif
