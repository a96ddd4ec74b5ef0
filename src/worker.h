/*
 * worker.h: the background worker that runs one stream.
 */
#ifndef STM_WORKER_H
#define STM_WORKER_H

#include "fmgr.h"

extern PGDLLEXPORT void streaming_worker_main(Datum main_arg);

#endif
