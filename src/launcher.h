/*
 * launcher.h: the launcher background worker and the per-database
 * discovery worker it starts.
 */
#ifndef STM_LAUNCHER_H
#define STM_LAUNCHER_H

#include "fmgr.h"

extern void stm_launcher_register(void);
extern PGDLLEXPORT void streaming_launcher_main(Datum main_arg);
extern PGDLLEXPORT void streaming_discovery_main(Datum main_arg);

#endif
