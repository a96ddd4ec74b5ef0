/*
 * helper.h: a parallel helper's process (helper.c).
 */
#ifndef STM_HELPER_H
#define STM_HELPER_H

#include "fmgr.h"

extern PGDLLEXPORT void streaming_helper_main(Datum main_arg);

#endif
