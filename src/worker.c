/*
 * worker.c: one background worker per running stream.
 *
 * The worker connects as the bootstrap superuser, never as the stream's
 * owner (an owner without LOGIN works: SPEC 7), and each batch runs as the
 * owner (stm_batch_run).  It takes the stream's lock for its whole life (so
 * run_batch refuses meanwhile), and loops: one batch per transaction, then
 * sleep on its latch until the trigger is due or, when the source had
 * nothing, until the source says records arrived (its wake-up descriptor,
 * source.h), at most streaming.naptime.
 *
 * Failures: a batch that raises an error is rolled back and its error
 * recorded in the stream's row.  Connection errors (class 08: the broker is
 * down) and a sink that cannot take the batch (53000) set status 'waiting'
 * and are retried for ever; other errors are retried with exponential
 * backoff and set status 'failed' after streaming.max_retries (at once for
 * bad data, which no retry cures).
 * A source that cannot be read (whole or in part) is never silent: its
 * reason is the stream's source_error; status is 'waiting' when no part of
 * it can be read, 'running' while some part can (SPEC 4); it is logged as a WARNING when it begins and a LOG line when it
 * ends, not once per attempt.
 *
 * A sink that delivers after the commit (an outbox) is given its turn
 * after every batch, when there was none, and before the worker exits
 * (sink.h: deliver), outside any transaction.  While it cannot deliver, the
 * stream shows 'waiting' and why; while its rows fill what it may hold, no
 * batch runs.
 *
 * SIGTERM: the batch in flight may finish for STM_SHUTDOWN_GRACE_MS; the
 * long waits inside it (a source's or sink's calls, made in slices) then
 * give it up, and it rolls back, so the worker exits promptly whatever the
 * brokers do.  Then the sink delivers what it can within its timeout, and
 * the worker exits.
 */
#include "postgres.h"

#include "access/xact.h"
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

#include "api.h"
#include "batch.h"
#include "catalog.h"
#include "fault.h"
#include "guc.h"
#include "shmem.h"
#include "worker.h"

static int	my_slot = -1;
static uint64 my_generation = 0;
static bool source_trouble = false;	/* a WARNING said the source cannot be read */

/* Runs at exit after locks are released: the slot no longer has a worker. */
static void
clear_slot_pid(int code, Datum arg)
{
	StmWorkerSlot *slot = &stm_shared->slots[my_slot];

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	if (slot->generation == my_generation && slot->pid == MyProcPid)
		slot->pid = 0;
	LWLockRelease(stm_shared->lock);
	stm_shmem_wake_launcher();
}

/* The stream is done (finished, failed, stopped): do not restart it. */
static void
release_slot(void)
{
	StmWorkerSlot *slot = &stm_shared->slots[my_slot];

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	if (slot->generation == my_generation)
		slot->wanted = false;
	LWLockRelease(stm_shared->lock);
}

static bool
still_wanted(void)
{
	StmWorkerSlot *slot = &stm_shared->slots[my_slot];
	bool		wanted;

	LWLockAcquire(stm_shared->lock, LW_SHARED);
	wanted = slot->generation == my_generation && slot->wanted;
	LWLockRelease(stm_shared->lock);
	return wanted;
}

static void
sleep_ms(int64 ms)
{
	if (ms <= 0 || ShutdownRequestPending)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 (long) Min(ms, INT_MAX), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

/*
 * Is the catalog at this library's version?  After a new package and a
 * restart, until ALTER EXTENSION streaming UPDATE, it is not: the worker then
 * runs no batch and writes nothing (not even a failure), says so once in the
 * log and in pg_stat_activity, and looks again every naptime, so that it goes
 * on by itself after the update.
 */
static bool
catalog_ready(void)
{
	static bool waiting = false;
	MemoryContext cxt = CurrentMemoryContext;
	bool		ready;

	StartTransactionCommand();
	ready = stm_catalog_check_version(waiting ? DEBUG1 : LOG);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	if (!ready)
		pgstat_report_activity(STATE_IDLE, "waiting for ALTER EXTENSION streaming UPDATE");
	else if (waiting)
		ereport(LOG,
				(errmsg("the streaming catalog is at the library's version %s: batches resume",
						STM_EXTVERSION)));
	waiting = !ready;
	return ready;
}

/*
 * For the long waits of a batch (the sources' and sinks' calls to their
 * clients, made in slices): interrupts as anywhere, and in a worker told
 * to stop, the batch in flight is given up once it has had
 * STM_SHUTDOWN_GRACE_MS to finish (it rolls back: its records are read
 * again by the next run).
 * Elsewhere (run_batch in a backend) only the interrupts.
 */
void
stm_check_for_interrupts(void)
{
	static TimestampTz noticed = 0;

	CHECK_FOR_INTERRUPTS();
	if (!ShutdownRequestPending)
		return;
	if (noticed == 0)
		noticed = GetCurrentTimestamp();
	else if (TimestampDifferenceExceeds(noticed, GetCurrentTimestamp(), STM_SHUTDOWN_GRACE_MS))
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("the stream's worker is stopping: the batch in flight is rolled back")));
}

/* The source cannot be read (message), or can again (NULL): logged once each way. */
static void
report_source_trouble(StmStreamDef *def, const char *message)
{
	if (message && !source_trouble)
		ereport(WARNING,
				(errmsg("stream \"%s\" cannot read all of its source", def->name),
				 errdetail("%s", message),
				 errhint("The stream waits and tries again; streaming.streams shows the reason as source_error.")));
	else if (message == NULL && source_trouble)
		ereport(LOG,
				(errmsg("stream \"%s\" reads all of its source again", def->name)));
	source_trouble = message != NULL;
}

/* What the sink said last (deliver), and what the stream's row shows of it. */
static StmSinkStatus sink_status;
static char *shown_problem = NULL;	/* in TopMemoryContext; NULL: nothing shown */
static bool shown_error = false;	/* shown as last_error too */

/* The sink's problem as the stream's row shows it, or NULL. */
static const char *
sink_problem(void)
{
	return sink_status.error ? sink_status.error : sink_status.waiting;
}

/*
 * Show the sink's problem in the stream's row, in the current transaction:
 * status 'waiting' with source_error (and last_error, for an error), or,
 * once it is gone, 'running' without them (a last_error that is not the
 * sink's stays).  source_error says what the source's last plan could not
 * read too (stm_runtime_source_error: the batches write the same text).
 * force: write it even if it is shown already (a batch's progress row
 * wrote the stream's row).
 */
static void
show_sink_status(StmRuntime *rt, bool force)
{
	const char *problem = sink_problem();

	if (!force && (problem == NULL ? shown_problem == NULL :
				   shown_problem != NULL && strcmp(problem, shown_problem) == 0))
		return;
	rt->sink_problem = problem;
	if (problem)
	{
		stm_catalog_set_status(rt->stream_id, STM_STATUS_WAITING, sink_status.error,
							   sink_status.error == NULL && shown_error, -1);
		stm_catalog_set_source_error(rt->stream_id, stm_runtime_source_error(rt));
	}
	else if (shown_problem)
	{
		stm_catalog_set_status(rt->stream_id, STM_STATUS_RUNNING, NULL, shown_error, -1);
		stm_catalog_set_source_error(rt->stream_id, stm_runtime_source_error(rt));
	}
	if (shown_problem)
		pfree(shown_problem);
	/* the runtime's copy outlives sink_status's strings */
	shown_problem = problem ? MemoryContextStrdup(TopMemoryContext, problem) : NULL;
	rt->sink_problem = shown_problem;
	shown_error = sink_status.error != NULL;
}

/* Write the outcome of a failed batch in a transaction of its own. */
static int64
record_failure(StmStreamDef *def, ErrorData *edata, bool *stop)
{
	bool		connection = stm_error_is_waiting(edata->sqlerrcode);
	char	   *message = edata->detail ?
		psprintf("%s: %s", edata->message, edata->detail) : edata->message;
	int			failures = def->failures;
	int64		delay;

	*stop = false;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (connection)
	{
		stm_catalog_set_source_error(def->id, message);
		stm_catalog_set_status(def->id, STM_STATUS_WAITING, NULL, false, -1);
		delay = stm_guc_retry_delay_ms;
	}
	else
	{
		failures++;
		if (stm_error_is_permanent(edata->sqlerrcode) || failures > stm_guc_max_retries)
		{
			stm_catalog_set_status(def->id, STM_STATUS_FAILED, message, false, failures);
			stm_catalog_disable(def->id);
			*stop = true;
		}
		else
			stm_catalog_set_status(def->id, STM_STATUS_RUNNING, message, false, failures);
		delay = (int64) stm_guc_retry_delay_ms << Min(failures - 1, 20);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	def->failures = failures;
	return Min(delay, 60 * 1000);
}

/*
 * The sink's turn (sink.h: deliver), outside any transaction (busy: the
 * next batch runs at once); what it says is shown in the stream's row.  An
 * error is the stream's, as a batch's: recorded, and *wait_ms is the delay
 * before the next try (else 0); *stop when the stream failed for good.
 */
static void
deliver_rows(StmRuntime *rt, StmStreamDef *def, MemoryContext cxt, bool busy, int64 *wait_ms,
			 bool *stop)
{
	*wait_ms = 0;
	*stop = false;
	PG_TRY();
	{
		sink_status = stm_runtime_deliver(rt, busy);
		if (sink_problem() != NULL || shown_problem != NULL)
		{
			StartTransactionCommand();
			PushActiveSnapshot(GetTransactionSnapshot());
			show_sink_status(rt, false);
			PopActiveSnapshot();
			CommitTransactionCommand();
		}
		MemoryContextSwitchTo(cxt);
		/* a problem is retried after a while, not at once */
		if (sink_problem() != NULL)
			*wait_ms = stm_guc_retry_delay_ms;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
		*wait_ms = record_failure(def, edata, stop);
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/* The stream is finished (trigger once, available_now): not restarted, but start() runs it again. */
static void
finish_stream(int32 stream_id)
{
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	stm_catalog_set_status(stream_id, STM_STATUS_FINISHED, NULL, false, -1);
	stm_catalog_disable(stream_id);
	PopActiveSnapshot();
	CommitTransactionCommand();
	release_slot();
}

void
streaming_worker_main(Datum main_arg)
{
	StmWorkerSlot *slot;
	Oid			dboid;
	int32		stream_id;
	MemoryContext worker_cxt;
	MemoryContext def_cxt;
	StmRuntime *rt;
	StmStreamDef *volatile def = NULL;	/* read in PG_CATCH: volatile */
	TimestampTz lock_deadline;
	bool		batches_done = false;	/* once / available_now: the sink delivers the rest */

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	my_slot = DatumGetInt32(main_arg);
	slot = &stm_shared->slots[my_slot];
	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	if (!slot->in_use || !slot->wanted || slot->pid != 0)
	{
		LWLockRelease(stm_shared->lock);
		proc_exit(0);
	}
	my_generation = slot->generation;
	dboid = slot->dboid;
	stream_id = slot->stream_id;
	slot->pid = MyProcPid;
	LWLockRelease(stm_shared->lock);
	before_shmem_exit(clear_slot_pid, (Datum) 0);

	/* as the bootstrap superuser: batches take the owner's identity */
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);

	worker_cxt = AllocSetContextCreate(TopMemoryContext, "streaming worker",
									   ALLOCSET_DEFAULT_SIZES);
	def_cxt = AllocSetContextCreate(worker_cxt, "streaming definition",
									ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(worker_cxt);
	rt = stm_runtime_create(stream_id);
	rt->parallel_allowed = true;

	/* a run_batch in progress holds the lock for its transaction */
	lock_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60 * 1000);
	while (!stm_lock_stream(stream_id, true))
	{
		if (ShutdownRequestPending)
			proc_exit(0);
		if (GetCurrentTimestamp() > lock_deadline)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("stream \"%s\" is locked by another session", slot->name),
					 errhint("A streaming.run_batch() of another session holds it until its transaction ends.")));
		sleep_ms(100);
		CHECK_FOR_INTERRUPTS();
	}

	while (!ShutdownRequestPending)
	{
		int64		batch_id = -1;
		TimestampTz batch_start = GetCurrentTimestamp();
		int64		wait_ms;
		StmStreamStatus status;
		int64		deliver_wait;
		bool		stop;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (!still_wanted())
			break;
		if (!catalog_ready())
		{
			sleep_ms(stm_guc_naptime_ms);
			continue;
		}
		/*
		 * No batch while the sink holds all it may, or after the last one
		 * of a once / available_now stream: the sink delivers, and such a
		 * stream is finished once its sink has nothing left.
		 */
		if ((sink_status.full || batches_done) && def != NULL)
		{
			deliver_rows(rt, def, worker_cxt, false, &wait_ms, &stop);
			if (stop)
			{
				release_slot();
				break;
			}
			if (batches_done && sink_status.pending == 0 && sink_problem() == NULL)
			{
				finish_stream(stream_id);
				break;
			}
			if (sink_status.full || batches_done)
			{
				sleep_ms(Max(wait_ms, stm_guc_naptime_ms));
				continue;
			}
		}

		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		PG_TRY();
		{
			MemoryContext txcxt;

			/* the definition is re-read each batch: stop/alter take effect */
			def = NULL;
			MemoryContextReset(def_cxt);
			txcxt = MemoryContextSwitchTo(def_cxt);
			def = stm_catalog_get_stream_by_id(stream_id, false);
			MemoryContextSwitchTo(txcxt);
			if (def == NULL || !def->enabled)
			{
				PopActiveSnapshot();
				CommitTransactionCommand();
				release_slot();
				break;
			}
			pgstat_report_activity(STATE_RUNNING, psprintf("streaming batch of \"%s\"", def->name));
			rt->bounded = (def->trigger_kind == STM_TRIGGER_AVAILABLE_NOW);
			batch_id = stm_batch_run(rt);
			/*
			 * The batch wrote source_error.  Status follows what the plan
			 * could read (SPEC 4), never whether it found records: waiting
			 * when no part of the source can be read, running when some
			 * can (what is held back is in source_error), and waiting while
			 * the sink cannot deliver (a batch's progress row cleared the
			 * sink's last_error: shown again in the same transaction;
			 * source_error the batch wrote says the sink's problem too,
			 * stm_runtime_source_error)
			 */
			status = rt->unreadable ? STM_STATUS_WAITING : STM_STATUS_RUNNING;
			if (sink_problem() != NULL)
				show_sink_status(rt, batch_id >= 0);
			else if (def->status != status)
				stm_catalog_set_status(stream_id, status, NULL, false, -1);
			if (batch_id >= 0)
				STM_FAULT_POINT("before_commit");
			PopActiveSnapshot();
			CommitTransactionCommand();
			if (batch_id >= 0)
				STM_FAULT_POINT("after_commit");
			report_source_trouble(def, rt->problem);
			/* what the source does only once the batch is committed */
			if (batch_id >= 0)
				stm_batch_after_commit(rt);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(worker_cxt);
			edata = CopyErrorData();
			/* a broker that cannot be reached: once, as a WARNING (below) */
			if (def == NULL ||
				ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_CONNECTION_EXCEPTION)
				EmitErrorReport();
			FlushErrorState();
			AbortCurrentTransaction();
			pgstat_report_activity(STATE_IDLE, NULL);
			if (def == NULL)
				proc_exit(1);
			if (ShutdownRequestPending && edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
			{
				/* stopping: nothing failed */
				ereport(LOG,
						(errmsg("stream \"%s\" stopped during a batch: the batch was rolled back",
								def->name)));
				break;
			}
			if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION)
				report_source_trouble(def, edata->detail ?
									  psprintf("%s: %s", edata->message, edata->detail) :
									  edata->message);
			wait_ms = record_failure(def, edata, &stop);
			FreeErrorData(edata);
			if (stop)
			{
				release_slot();
				break;
			}
			/* a batch that waits for the sink's room: the sink delivers meanwhile */
			deliver_rows(rt, def, worker_cxt, false, &deliver_wait, &stop);
			if (stop)
			{
				release_slot();
				break;
			}
			sleep_ms(wait_ms);
			continue;
		}
		PG_END_TRY();
		MemoryContextSwitchTo(worker_cxt);
		pgstat_report_activity(STATE_IDLE, NULL);

		/* the worker runs: nothing to explain in streams any more */
		LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
		if (batch_id >= 0)
			slot->crashes = 0;
		slot->problem[0] = '\0';
		LWLockRelease(stm_shared->lock);

		if (batch_id < 0)
			wait_ms = stm_guc_naptime_ms;
		else
			wait_ms = def->trigger_interval_ms -
				(GetCurrentTimestamp() - batch_start) / 1000;

		/*
		 * The sink's turn: what committed batches left for it; when the next
		 * batch follows at once, it need not wait for confirmations
		 */
		deliver_rows(rt, def, worker_cxt,
					 batch_id >= 0 && wait_ms <= 0 && def->trigger_kind == STM_TRIGGER_INTERVAL,
					 &deliver_wait, &stop);
		if (stop)
		{
			release_slot();
			break;
		}

		/* once / available_now: the stream is done when it has nothing left */
		if (def->trigger_kind == STM_TRIGGER_ONCE ||
			(def->trigger_kind == STM_TRIGGER_AVAILABLE_NOW && batch_id < 0))
		{
			/* finished once the sink has delivered everything, too */
			if (sink_status.pending == 0 && sink_problem() == NULL)
			{
				finish_stream(stream_id);
				break;
			}
			batches_done = true;
		}

		if (batch_id >= 0)
			wait_ms = def->trigger_interval_ms -
				(GetCurrentTimestamp() - batch_start) / 1000;

		/*
		 * nothing to read: sleep until the source has records (its
		 * wake-up), at most naptime, unless the sink retries later than that
		 */
		if (batch_id < 0 && deliver_wait <= wait_ms)
		{
			if (!ShutdownRequestPending)
				(void) stm_runtime_wait(rt, wait_ms);
			continue;
		}
		sleep_ms(Max(wait_ms, deliver_wait));
	}

	/*
	 * Stopping: the sink delivers what it can within its timeout and
	 * leaves the rest for the next start; then the runtime lets go of its
	 * clients.
	 */
	PG_TRY();
	{
		sink_status = stm_runtime_deliver(rt, false);
		stm_runtime_close(rt);
	}
	PG_CATCH();
	{
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
	}
	PG_END_TRY();
	proc_exit(0);
}
