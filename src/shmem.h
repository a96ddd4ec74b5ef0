/*
 * shmem.h: shared state between the SQL API, the launcher and stream workers.
 *
 * One slot per stream that should run.  Shared memory is only a cache of
 * what the catalog says (enabled streams); after a crash restart the launcher
 * rebuilds it from the catalog of every database.
 */
#ifndef STM_SHMEM_H
#define STM_SHMEM_H

#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/timestamp.h"

typedef struct StmWorkerSlot
{
	bool		in_use;
	bool		wanted;			/* false: let the worker exit, do not restart */
	Oid			dboid;
	Oid			owner;			/* role the stream runs as (its owner) */
	int32		stream_id;
	pid_t		pid;			/* 0 while no worker runs */
	int			crashes;		/* consecutive abnormal exits, for backoff */
	TimestampTz next_start;		/* launcher waits until then */
	uint64		generation;		/* bumped whenever the slot is reused */
	char		problem[160];	/* why no worker runs ('' when none): shown in streams */
	/* for messages: the launcher reads no catalog (names can be truncated) */
	char		name[NAMEDATALEN];	/* the stream's */
	char		dbname[NAMEDATALEN];	/* its database's */
} StmWorkerSlot;

typedef struct StmShared
{
	LWLock	   *lock;
	Latch	   *launcher_latch;
	bool		rescan_requested;	/* rediscover enabled streams in all DBs */
	/*
	 * automatic helpers give their background worker slots back to a
	 * stream's worker that could not start: until then (a TimestampTz),
	 * streams with parallel_workers NULL run without helpers
	 */
	pg_atomic_uint64 helpers_yield_until;
	int			nslots;
	StmWorkerSlot slots[FLEXIBLE_ARRAY_MEMBER];
} StmShared;

extern StmShared *stm_shared;

/* how long automatic helpers give way after a stream's worker found no slot */
#define STM_HELPER_YIELD_MS 10000

extern void stm_shmem_install_hooks(void);
extern bool stm_shmem_available(void);
extern void stm_shmem_wake_launcher(void);
extern int	stm_shmem_want_stream(Oid dboid, int32 stream_id, Oid owner, const char *name,
								  const char *dbname);
extern void stm_shmem_unwant_stream(Oid dboid, int32 stream_id);
extern pid_t stm_shmem_stream_pid(Oid dboid, int32 stream_id);
extern bool stm_shmem_stream_of_owner_elsewhere(Oid dboid, Oid role, char *name, char *dbname);
extern void stm_shmem_reassign_owner(Oid dboid, Oid old_owner, Oid new_owner);
extern void stm_shmem_helpers_yield(TimestampTz until);
extern bool stm_shmem_helpers_yielding(TimestampTz now, TimestampTz *until);

#endif
