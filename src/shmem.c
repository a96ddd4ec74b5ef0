/*
 * shmem.c: the slot table in shared memory and the hooks that create it.
 *
 * Invariants: a (database, stream) pair has at most one slot; slots are only
 * changed under stm_shared->lock; a slot is freed by the launcher once its
 * worker has exited and the slot is no longer wanted.
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"

#include "guc.h"
#include "shmem.h"

StmShared  *stm_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
stm_shmem_size(void)
{
	return add_size(offsetof(StmShared, slots),
					mul_size(stm_guc_max_workers, sizeof(StmWorkerSlot)));
}

static void
stm_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(stm_shmem_size());
	RequestNamedLWLockTranche("streaming", 1);
}

static void
stm_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stm_shared = ShmemInitStruct("streaming", stm_shmem_size(), &found);
	if (!found)
	{
		memset(stm_shared, 0, stm_shmem_size());
		stm_shared->lock = &(GetNamedLWLockTranche("streaming"))->lock;
		stm_shared->nslots = stm_guc_max_workers;
		stm_shared->rescan_requested = true;
		pg_atomic_init_u64(&stm_shared->helpers_yield_until, 0);
	}
	LWLockRelease(AddinShmemInitLock);
}

void
stm_shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = stm_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = stm_shmem_startup;
}

/* True when the library was preloaded and workers can be started. */
bool
stm_shmem_available(void)
{
	return stm_shared != NULL;
}

void
stm_shmem_wake_launcher(void)
{
	Latch	   *latch;

	if (!stm_shared)
		return;
	latch = stm_shared->launcher_latch;
	if (latch)
		SetLatch(latch);
}

static StmWorkerSlot *
find_slot(Oid dboid, int32 stream_id)
{
	for (int i = 0; i < stm_shared->nslots; i++)
	{
		StmWorkerSlot *slot = &stm_shared->slots[i];

		if (slot->in_use && slot->dboid == dboid && slot->stream_id == stream_id)
			return slot;
	}
	return NULL;
}

/*
 * Ask for a worker for this stream, named name in database dbname (NULL:
 * as the slot has them).  Returns the slot index, or -1 when every slot is
 * taken (the caller reports streaming.max_workers).
 */
int
stm_shmem_want_stream(Oid dboid, int32 stream_id, Oid owner, const char *name,
					  const char *dbname)
{
	StmWorkerSlot *slot;
	int			result = -1;

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	slot = find_slot(dboid, stream_id);
	if (slot == NULL)
	{
		for (int i = 0; i < stm_shared->nslots; i++)
		{
			if (!stm_shared->slots[i].in_use)
			{
				slot = &stm_shared->slots[i];
				slot->in_use = true;
				slot->dboid = dboid;
				slot->stream_id = stream_id;
				slot->pid = 0;
				slot->crashes = 0;
				slot->next_start = 0;
				slot->problem[0] = '\0';
				slot->name[0] = '\0';
				slot->dbname[0] = '\0';
				slot->generation++;
				break;
			}
		}
	}
	if (slot != NULL)
	{
		slot->wanted = true;
		slot->owner = owner;
		if (name)
			strlcpy(slot->name, name, sizeof(slot->name));
		if (dbname)
			strlcpy(slot->dbname, dbname, sizeof(slot->dbname));
		slot->next_start = 0;
		result = slot - stm_shared->slots;
	}
	LWLockRelease(stm_shared->lock);
	stm_shmem_wake_launcher();
	return result;
}

/* The stream should not run: tell its worker to finish its batch and exit. */
void
stm_shmem_unwant_stream(Oid dboid, int32 stream_id)
{
	StmWorkerSlot *slot;
	pid_t		pid = 0;

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	slot = find_slot(dboid, stream_id);
	if (slot)
	{
		slot->wanted = false;
		pid = slot->pid;
	}
	LWLockRelease(stm_shared->lock);
	if (pid != 0)
		kill(pid, SIGTERM);
	stm_shmem_wake_launcher();
}

pid_t
stm_shmem_stream_pid(Oid dboid, int32 stream_id)
{
	StmWorkerSlot *slot;
	pid_t		pid = 0;

	if (!stm_shared)
		return 0;
	LWLockAcquire(stm_shared->lock, LW_SHARED);
	slot = find_slot(dboid, stream_id);
	if (slot)
		pid = slot->pid;
	LWLockRelease(stm_shared->lock);
	return pid;
}

/*
 * Is there a stream of another database than dboid that runs as role?  Its
 * name and its database's go into name and dbname (NAMEDATALEN each):
 * DROP ROLE in one database cannot read another one's catalog, but running
 * streams are here.
 */
bool
stm_shmem_stream_of_owner_elsewhere(Oid dboid, Oid role, char *name, char *dbname)
{
	bool		found = false;

	if (!stm_shared)
		return false;
	LWLockAcquire(stm_shared->lock, LW_SHARED);
	for (int i = 0; i < stm_shared->nslots && !found; i++)
	{
		StmWorkerSlot *slot = &stm_shared->slots[i];

		if (slot->in_use && slot->wanted && slot->dboid != dboid && slot->owner == role)
		{
			strlcpy(name, slot->name, NAMEDATALEN);
			strlcpy(dbname, slot->dbname, NAMEDATALEN);
			found = true;
		}
	}
	LWLockRelease(stm_shared->lock);
	return found;
}

/* REASSIGN OWNED: the slots of this database's streams of old_owner follow. */
void
stm_shmem_reassign_owner(Oid dboid, Oid old_owner, Oid new_owner)
{
	if (!stm_shared)
		return;
	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < stm_shared->nslots; i++)
	{
		StmWorkerSlot *slot = &stm_shared->slots[i];

		if (slot->in_use && slot->dboid == dboid && slot->owner == old_owner)
			slot->owner = new_owner;
	}
	LWLockRelease(stm_shared->lock);
}

/*
 * The launcher could not start a stream's worker: automatic helpers
 * (parallel_workers NULL) stop and start no more until "until", so that
 * their slots go to the stream.  Without the shared memory (not preloaded)
 * there is no launcher either.
 */
void
stm_shmem_helpers_yield(TimestampTz until)
{
	if (stm_shared)
		pg_atomic_write_u64(&stm_shared->helpers_yield_until, (uint64) until);
}

/* Must automatic helpers give way now?  Until when, if so. */
bool
stm_shmem_helpers_yielding(TimestampTz now, TimestampTz *until)
{
	TimestampTz t;

	if (stm_shared == NULL)
		return false;
	t = (TimestampTz) pg_atomic_read_u64(&stm_shared->helpers_yield_until);
	*until = t;
	return now < t;
}
