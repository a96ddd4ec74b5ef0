/*
 * api.h: the SQL-callable functions and the commit-time actions they queue.
 */
#ifndef STM_API_H
#define STM_API_H

#define STM_ADVISORY_LOCK_CLASS 0x53544d00	/* "STM\0": first key of stream locks */

#include "catalog.h"

extern void stm_api_init(void);
extern void stm_api_want_again_on_abort(int32 stream_id, Oid owner);
extern void stm_api_drop_stream(StmStreamDef *def, bool drop_sink);
extern void stm_api_drop_source(StmSourceDef *src);
extern bool stm_lock_stream(int32 stream_id, bool session);
extern void stm_wait_stream_lock(int32 stream_id);

#endif
