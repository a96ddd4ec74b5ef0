/*
 * worker.h: the background worker that runs one stream.
 */
#ifndef STM_WORKER_H
#define STM_WORKER_H

#include "fmgr.h"

extern PGDLLEXPORT void streaming_worker_main(Datum main_arg);

/* a worker told to stop gives up its batch after this long (SPEC: stop within 2 s) */
#define STM_SHUTDOWN_GRACE_MS 1000

extern void stm_check_for_interrupts(void);

#endif
