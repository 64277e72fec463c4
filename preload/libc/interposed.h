// Declarations of every interposed call with C linkage, including the _FORTIFY_SOURCE variants that
// libc's headers declare only in fortified builds. Wrapper definitions use T2R_INTERPOSE so that they,
// and only they, are exported from the module.
#pragma once

#include "libc/real_calls.h"

extern "C" {
#define T2R_CALL(ret, name, params) ret name params;
#include "libc/intercepted_calls.def"
#undef T2R_CALL
}

#define T2R_INTERPOSE extern "C" [[gnu::visibility("default")]]
