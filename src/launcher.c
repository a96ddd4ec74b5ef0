/*
 * launcher.c: the one launcher of the cluster.
 *
 * It keeps one dynamic background worker per wanted slot in shared memory,
 * restarting a worker that died with exponential backoff.  Slots are filled
 * by the SQL API at commit (start, create_stream) and, after the server
 * starts or restarts, by one short "streaming discovery" worker per database
 * that reads the enabled streams of that database (shared memory is only a
 * cache; the catalog is the truth).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "launcher.h"
#include "shmem.h"
#include "sql.h"

#define MAX_RESTART_DELAY_MS (60 * 1000)

void
stm_launcher_register(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "streaming");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "streaming_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "streaming launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "streaming launcher");
	RegisterBackgroundWorker(&worker);
}

static bool
register_dynamic(const char *function, const char *name, Datum arg,
				 BackgroundWorkerHandle **handle)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "streaming");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker.bgw_name, BGW_MAXLEN, "%s", name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "%s",
			 strcmp(function, "streaming_worker_main") == 0 ?
			 "streaming worker" : "streaming discovery");
	worker.bgw_main_arg = arg;
	worker.bgw_notify_pid = MyProcPid;
	return RegisterDynamicBackgroundWorker(&worker, handle);
}

/* Start a discovery worker in every database that accepts connections. */
static void
discover_all_databases(void)
{
	static bool warned = false;
	List	   *dbs = NIL;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	ListCell   *lc;

	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		/* templates are skipped: a connection there would block CREATE DATABASE */
		if (db->datallowconn && !db->datistemplate)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			dbs = lappend_oid(dbs, db->oid);
			MemoryContextSwitchTo(old);
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();

	foreach(lc, dbs)
	{
		BackgroundWorkerHandle *handle;

		if (!register_dynamic("streaming_discovery_main", "streaming discovery",
							  ObjectIdGetDatum(lfirst_oid(lc)), &handle))
		{
			/* automatic helpers give their slots back (runtime.c) */
			stm_shmem_helpers_yield(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
																 STM_HELPER_YIELD_MS));
			/* retried every naptime until it works: said once, not each time */
			if (!warned)
				ereport(WARNING,
						(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
						 errmsg("could not start streaming discovery worker"),
						 errdetail("The streams of some databases are not started until it can run."),
						 errhint("Raise max_worker_processes.")));
			warned = true;
			stm_shared->rescan_requested = true;
			break;
		}
		warned = false;
		/* one at a time, so discovery never takes many worker slots */
		(void) WaitForBackgroundWorkerShutdown(handle);
		pfree(handle);
	}
	list_free(dbs);
}

/* What the launcher keeps per slot: the worker it started, of which generation. */
typedef struct LauncherSlots
{
	BackgroundWorkerHandle **handles;
	uint64	   *generations;
	bool		warned_full;	/* a WARNING said every background worker slot is taken */
} LauncherSlots;

/*
 * Slot i's worker exited: without being told to (the slot is still
 * wanted), it is restarted after a backoff that grows with each crash.
 */
static void
note_exit(LauncherSlots *ls, int i, TimestampTz now)
{
	StmWorkerSlot *slot = &stm_shared->slots[i];

	pfree(ls->handles[i]);
	ls->handles[i] = NULL;
	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	slot->pid = 0;
	if (slot->wanted)
	{
		int			delay = Min(MAX_RESTART_DELAY_MS, 1000 << Min(slot->crashes, 16));

		slot->crashes++;
		slot->next_start = TimestampTzPlusMilliseconds(now, delay);
		snprintf(slot->problem, sizeof(slot->problem),
				 "the worker exited %d time(s) without finishing a batch (see the server log); it restarts in %d ms",
				 slot->crashes, delay);
		ereport(LOG,
				(errmsg("streaming worker for stream \"%s\" of database \"%s\" exited, restarting in %d ms",
						slot->name, slot->dbname, delay)));
	}
	LWLockRelease(stm_shared->lock);
}

/*
 * Start slot i's worker (the lock is held, and released around the
 * registration); when no background worker slot is free, the slot says so
 * and one WARNING is logged until a start succeeds again.
 */
static void
start_worker(LauncherSlots *ls, int i)
{
	StmWorkerSlot *slot = &stm_shared->slots[i];
	char		name[BGW_MAXLEN];
	bool		started;

	snprintf(name, sizeof(name), "streaming worker for stream \"%s\"", slot->name);
	LWLockRelease(stm_shared->lock);
	started = register_dynamic("streaming_worker_main", name, Int32GetDatum(i), &ls->handles[i]);
	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	if (started)
	{
		ls->generations[i] = slot->generation;
		ls->warned_full = false;
		if (strncmp(slot->problem, "no background worker", 20) == 0)
			slot->problem[0] = '\0';
		return;
	}
	ls->handles[i] = NULL;
	/* automatic helpers of other streams give their slots back (runtime.c) */
	stm_shmem_helpers_yield(TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
														 STM_HELPER_YIELD_MS));
	snprintf(slot->problem, sizeof(slot->problem),
			 "no background worker could be started (max_worker_processes = %d); it starts when one is free",
			 max_worker_processes);
	if (!ls->warned_full)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not start background worker for stream \"%s\" of database \"%s\"",
						slot->name, slot->dbname),
				 errdetail("max_worker_processes is %d; every background worker slot is taken.",
						   max_worker_processes),
				 errhint("Raise max_worker_processes: each running stream takes one, and each of its parallel helpers another.")));
	ls->warned_full = true;
}

/*
 * One slot's turn: forget a worker of a reused slot, note one that
 * exited, free a slot no longer wanted, start a wanted one's worker when
 * its backoff has passed.  Returns how long until that backoff ends (or
 * wait_ms).
 */
static long
tend_slot(LauncherSlots *ls, int i, TimestampTz now, long wait_ms)
{
	StmWorkerSlot *slot = &stm_shared->slots[i];
	pid_t		pid;

	/* a worker of a reused slot is not ours to track */
	if (ls->handles[i] && ls->generations[i] != slot->generation)
	{
		pfree(ls->handles[i]);
		ls->handles[i] = NULL;
	}
	if (ls->handles[i] && GetBackgroundWorkerPid(ls->handles[i], &pid) == BGWH_STOPPED)
		note_exit(ls, i, now);

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	if (slot->in_use && !slot->wanted && ls->handles[i] == NULL && slot->pid == 0)
		slot->in_use = false;
	if (slot->in_use && slot->wanted && ls->handles[i] == NULL && slot->pid == 0)
	{
		if (slot->next_start <= now)
			start_worker(ls, i);
		else
			wait_ms = Min(wait_ms, (slot->next_start - now) / 1000 + 1);
	}
	LWLockRelease(stm_shared->lock);
	return wait_ms;
}

/*
 * The launcher: discovers the databases' enabled streams when asked to
 * (at start, after a crash restart, when the SQL API wakes it), then keeps
 * one worker per wanted slot, restarting one that dies with a backoff; it
 * sleeps on its latch between turns, at most streaming.naptime.
 */
void
streaming_launcher_main(Datum main_arg)
{
	LauncherSlots ls;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	ls.handles = MemoryContextAllocZero(TopMemoryContext,
										sizeof(BackgroundWorkerHandle *) * stm_shared->nslots);
	ls.generations = MemoryContextAllocZero(TopMemoryContext, sizeof(uint64) * stm_shared->nslots);
	ls.warned_full = false;

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	stm_shared->launcher_latch = MyLatch;
	/* workers of a previous launcher are gone (or are ours to forget) */
	for (int i = 0; i < stm_shared->nslots; i++)
		stm_shared->slots[i].next_start = 0;
	LWLockRelease(stm_shared->lock);

	for (;;)
	{
		TimestampTz now = GetCurrentTimestamp();
		long		wait_ms = stm_guc_naptime_ms;
		bool		rescan;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
		rescan = stm_shared->rescan_requested;
		stm_shared->rescan_requested = false;
		LWLockRelease(stm_shared->lock);
		if (rescan)
			discover_all_databases();
		for (int i = 0; i < stm_shared->nslots; i++)
			wait_ms = tend_slot(&ls, i, now, wait_ms);
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(wait_ms, 1), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

/* An enabled stream of the database (arg: its name): its slot is wanted. */
static void
want_stream(void *arg, HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;
	int32		id = DatumGetInt32(stm_sql_get_datum(tuple, desc, "id", &isnull));
	Oid			owner = DatumGetObjectId(stm_sql_get_datum(tuple, desc, "owner", &isnull));
	char	   *name = stm_sql_get_text(tuple, desc, "name");

	if (stm_shmem_want_stream(MyDatabaseId, id, owner, name, (const char *) arg) < 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("could not run stream \"%s\": all streaming.max_workers slots are taken", name),
				 errhint("Raise streaming.max_workers (it takes a restart).")));
}

/* Put the enabled streams of one database into shared memory, then exit. */
void
streaming_discovery_main(Datum main_arg)
{
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg), InvalidOid, 0);

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (OidIsValid(get_extension_oid("streaming", true)))
	{
		StmSql		q;

		/* any version's catalog has these columns: the workers start and wait for an update */
		stm_sql_init(&q, "SELECT id, owner::oid AS owner, name FROM streaming.stream_defs WHERE enabled");
		(void) stm_sql_run(&q, SPI_OK_SELECT, want_stream, get_database_name(MyDatabaseId));
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	proc_exit(0);
}
