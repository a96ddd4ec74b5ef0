/*
 * api.h: the SQL-callable functions and the commit-time actions they queue.
 */
#ifndef STM_API_H
#define STM_API_H

#define STM_ADVISORY_LOCK_CLASS 0x53544d00	/* "STM\0": first key of stream locks */

extern void stm_api_init(void);
extern bool stm_lock_stream(int32 stream_id, bool session);
extern void stm_wait_stream_lock(int32 stream_id);

#endif
