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
#include "interrupts.h"
#include "positions.h"
#include "query.h"
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

/* Sleep between batches; none once told to stop. */
static void
sleep_ms(int64 ms)
{
	if (!ShutdownRequestPending)
		stm_sleep((long) Min(ms, INT_MAX));
}

/*
 * Is the catalog at this library's version?  After a new package and a
 * restart, until ALTER EXTENSION streaming UPDATE, it is not: the worker then
 * runs no batch and writes nothing (not even a failure), says so once in the
 * log and in pg_stat_activity, and looks again every naptime, so that it goes
 * on by itself after the update.  In a transaction, before the catalog is
 * read: a batch's (run_step), or one of its own (catalog_ready).
 */
static bool
catalog_ready_in_xact(void)
{
	static bool waiting = false;
	bool		ready;

	ready = stm_catalog_check_version(waiting ? DEBUG1 : LOG);
	if (!ready)
		pgstat_report_activity(STATE_IDLE, "waiting for ALTER EXTENSION streaming UPDATE");
	else if (waiting)
		ereport(LOG,
				(errmsg("the streaming catalog is at the library's version %s: batches resume",
						STM_EXTVERSION)));
	waiting = !ready;
	return ready;
}

/* catalog_ready_in_xact in a transaction of its own */
static bool
catalog_ready(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		ready;

	StartTransactionCommand();
	ready = catalog_ready_in_xact();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return ready;
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
}

/* What the loop does after a step. */
typedef enum WorkerNext
{
	WORKER_GO_ON,				/* the next step */
	WORKER_DONE,				/* the stream is done (finished, failed, disabled): the slot goes */
	WORKER_EXIT					/* exit, the slot kept (told to stop, no longer wanted) */
} WorkerNext;

/* A worker's state between its steps. */
typedef struct Worker
{
	int32		stream_id;
	MemoryContext cxt;			/* the worker's life */
	MemoryContext def_cxt;		/* the definition, read again each batch */
	StmRuntime *rt;
	StmStreamDef *def;			/* the last batch's, NULL before the first */
	bool		batches_done;	/* once / available_now: the sink delivers the rest */
	TimestampTz woke_at;		/* the last wait between batches ended */
	bool		waited;			/* ... and the worker waited for records in it */
} Worker;

/*
 * The worker's start: its slot claimed (another worker has it: exit),
 * connected as the bootstrap superuser (batches take the owner's
 * identity), its memory and runtime made, and the stream's lock taken for
 * its life (a run_batch in progress holds it for its transaction).
 */
static void
worker_start(Worker *w, Datum main_arg)
{
	StmWorkerSlot *slot;
	Oid			dboid;
	TimestampTz lock_deadline;

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
	w->stream_id = slot->stream_id;
	slot->pid = MyProcPid;
	LWLockRelease(stm_shared->lock);
	before_shmem_exit(clear_slot_pid, (Datum) 0);

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);

	w->cxt = AllocSetContextCreate(TopMemoryContext, "streaming worker", ALLOCSET_DEFAULT_SIZES);
	w->def_cxt = AllocSetContextCreate(w->cxt, "streaming definition", ALLOCSET_SMALL_SIZES);
	MemoryContextSwitchTo(w->cxt);
	w->rt = stm_runtime_create(w->stream_id);
	w->rt->parallel_allowed = true;
	w->def = NULL;
	w->batches_done = false;
	w->woke_at = 0;
	w->waited = false;

	lock_deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60 * 1000);
	while (!stm_lock_stream(w->stream_id, true))
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
	/* no one else writes the stream's positions while we hold its lock */
	stm_positions_keep(w->stream_id);
	/* nor do its batches change a simple query's analysis: kept until something changes */
	stm_query_keep_analysis();
}

/*
 * The sink's turn (deliver_rows), for the loop: *wait_ms is how long to
 * wait before retrying an error; the stream is done when it failed.
 */
static WorkerNext
deliver_step(Worker *w, bool busy, int64 *wait_ms)
{
	bool		stop;

	deliver_rows(w->rt, w->def, w->cxt, busy, wait_ms, &stop);
	return stop ? WORKER_DONE : WORKER_GO_ON;
}

/*
 * No batch while the sink holds all it may, or after the last one of a
 * once / available_now stream: the sink delivers, and such a stream is
 * finished once its sink has nothing left.
 */
static WorkerNext
drain_step(Worker *w)
{
	int64		wait_ms;

	if (deliver_step(w, false, &wait_ms) == WORKER_DONE)
		return WORKER_DONE;
	if (w->batches_done && sink_status.pending == 0 && sink_problem() == NULL)
	{
		finish_stream(w->stream_id);
		return WORKER_DONE;
	}
	/* still full (or done): wait; else the next batch runs at once */
	if (sink_status.full || w->batches_done)
		sleep_ms(Max(wait_ms, stm_guc_naptime_ms));
	return WORKER_GO_ON;
}

/*
 * A batch that failed, in its transaction's catch: rolled back, its error
 * recorded (a broker that cannot be reached once, as a WARNING), and the
 * sink given its turn (a batch that waits for the sink's room: the sink
 * delivers meanwhile); *wait_ms is the retry's delay.  A worker told to
 * stop during the batch just exits.
 */
static WorkerNext
batch_failed(Worker *w, int64 *wait_ms)
{
	ErrorData  *edata;
	bool		connection;
	bool		stop;
	int64		deliver_wait;

	MemoryContextSwitchTo(w->cxt);
	edata = CopyErrorData();
	connection = ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION;
	if (w->def == NULL || !connection)
		EmitErrorReport();
	FlushErrorState();
	AbortCurrentTransaction();
	pgstat_report_activity(STATE_IDLE, NULL);
	if (w->def == NULL)
		proc_exit(1);			/* before the definition was read: the launcher starts again */
	if (ShutdownRequestPending && edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN)
	{
		/* stopping: nothing failed */
		ereport(LOG,
				(errmsg("stream \"%s\" stopped during a batch: the batch was rolled back",
						w->def->name)));
		return WORKER_EXIT;
	}
	if (connection)
		report_source_trouble(w->def, edata->detail ?
							  psprintf("%s: %s", edata->message, edata->detail) :
							  edata->message);
	*wait_ms = record_failure(w->def, edata, &stop);
	FreeErrorData(edata);
	if (stop)
		return WORKER_DONE;
	return deliver_step(w, false, &deliver_wait);
}

/* run_step's *batch_id when the catalog is not at the library's version: no batch ran */
#define STEP_CATALOG_NOT_READY (-3)

/*
 * DEBUG1: where a committed batch's time went, from the end of the wait
 * before it (w->woke_at) to the end of its after-commit work, for
 * bench/latency.sh's breakdown of produce -> commit.  A few clock reads a
 * batch; the line only when DEBUG1 is logged.
 */
static void
log_batch_timing(Worker *w, int64 batch_id, TimestampTz step_at, TimestampTz committed_at)
{
	StmRuntime *rt = w->rt;
	TimestampTz now = GetCurrentTimestamp();

#define MS(a, b) ((double) ((b) - (a)) / 1000.0)
	ereport(DEBUG1,
			(errmsg_internal("batch timing: batch " INT64_FORMAT " rows " INT64_FORMAT
							 " woke %.3f xact %.3f plan %.3f query %.3f record %.3f commit %.3f after %.3f waited %d",
							 batch_id, rt->batch_rows,
							 w->woke_at > 0 && w->woke_at <= step_at ? MS(w->woke_at, step_at) : -1.0,
							 MS(step_at, rt->batch_started), MS(rt->batch_started, rt->batch_planned),
							 MS(rt->batch_planned, rt->batch_queried),
							 MS(rt->batch_queried, rt->batch_recorded),
							 MS(rt->batch_recorded, committed_at), MS(committed_at, now), w->waited ? 1 : 0)));
#undef MS
}

/*
 * One batch in a transaction of its own, as the stream's owner
 * (stm_batch_run); *batch_id is -1 when there was nothing to read,
 * STEP_CATALOG_NOT_READY when the catalog is not at the library's version
 * (checked first in the batch's transaction, not in one of its own).  The
 * definition is read again first, so that stop and alter take effect; a
 * stream that is gone or disabled is done.  Status follows what the plan
 * could read (SPEC 4), never whether it found records: waiting when no
 * part of the source can be read, running when some can (what is held
 * back is in source_error, which the batch wrote), and waiting while the
 * sink cannot deliver (a batch's progress row cleared the sink's
 * last_error: shown again in the same transaction).
 */
static WorkerNext
run_step(Worker *w, int64 *batch_id, int64 *wait_ms)
{
	volatile WorkerNext next = WORKER_GO_ON;
	TimestampTz step_at = GetCurrentTimestamp();
	volatile TimestampTz committed_at = 0;

	*batch_id = -1;
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (!catalog_ready_in_xact())
	{
		*batch_id = STEP_CATALOG_NOT_READY;
		PopActiveSnapshot();
		CommitTransactionCommand();
		MemoryContextSwitchTo(w->cxt);
		return WORKER_GO_ON;
	}
	PG_TRY();
	{
		StmStreamStatus status;
		MemoryContext txcxt;

		w->def = NULL;
		MemoryContextReset(w->def_cxt);
		txcxt = MemoryContextSwitchTo(w->def_cxt);
		/* locked as a batch locks it: the batch reads it no second time */
		w->def = stm_catalog_get_stream_by_id(w->stream_id, true);
		/*
		 * the batch in its transaction's memory, which the commit frees:
		 * what must outlive it is the runtime's (rt->cxt), the sources' and
		 * the sink's own (in the worker's memory, a batch of a continuous
		 * stream left ~37 kB behind: 850 MB after 22,000 batches)
		 */
		MemoryContextSwitchTo(txcxt);
		if (w->def == NULL || !w->def->enabled)
			next = WORKER_DONE;
		else
		{
			pgstat_report_activity(STATE_RUNNING, psprintf("streaming batch of \"%s\"", w->def->name));
			w->rt->bounded = (w->def->trigger_kind == STM_TRIGGER_AVAILABLE_NOW);
			w->rt->low_latency = w->def->trigger_continuous;
			*batch_id = stm_batch_run_locked(w->rt, w->def);
			status = stm_runtime_unreadable(w->rt) ? STM_STATUS_WAITING : STM_STATUS_RUNNING;
			if (sink_problem() != NULL)
				show_sink_status(w->rt, *batch_id >= 0);
			else if (w->def->status != status)
				stm_catalog_set_status(w->stream_id, status, NULL, false, -1);
			if (*batch_id >= 0)
				STM_FAULT_POINT("before_commit");
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
		committed_at = GetCurrentTimestamp();
		if (next == WORKER_GO_ON)
		{
			if (*batch_id >= 0)
				STM_FAULT_POINT("after_commit");
			report_source_trouble(w->def, stm_runtime_source_problem(w->rt));
			/* what the sources and sink do only once the batch is committed */
			if (*batch_id >= 0)
				stm_runtime_after_commit(w->rt);
		}
	}
	PG_CATCH();
	{
		*batch_id = -2;
		next = batch_failed(w, wait_ms);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(w->cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
	if (*batch_id >= 0 && message_level_is_interesting(DEBUG1))
		log_batch_timing(w, *batch_id, step_at, committed_at);
	return next;
}

/* A batch ran (or found nothing): nothing to explain in streams any more. */
static void
clear_slot_problem(bool ran_batch)
{
	StmWorkerSlot *slot = &stm_shared->slots[my_slot];

	LWLockAcquire(stm_shared->lock, LW_EXCLUSIVE);
	if (ran_batch)
		slot->crashes = 0;
	slot->problem[0] = '\0';
	LWLockRelease(stm_shared->lock);
}

/* How long until the trigger's next batch is due, from batch_start. */
static int64
until_next_trigger(Worker *w, TimestampTz batch_start)
{
	return w->def->trigger_interval_ms - (GetCurrentTimestamp() - batch_start) / 1000;
}

/*
 * After a batch (or a plan that found nothing): the sink's turn (when the
 * next batch follows at once, it need not wait for confirmations); a once
 * / available_now stream is finished when it has nothing left, its sink's
 * rows delivered; then the wait for the next batch: until the sources
 * have records (their wake-up), at most naptime, when there was nothing
 * to read, else until the trigger is due.
 */
static WorkerNext
settle_step(Worker *w, int64 batch_id, TimestampTz batch_start)
{
	StmStreamDef *def = w->def;
	int64		wait_ms = batch_id < 0 ? stm_guc_naptime_ms : until_next_trigger(w, batch_start);
	int64		deliver_wait;

	clear_slot_problem(batch_id >= 0);
	if (deliver_step(w, batch_id >= 0 && wait_ms <= 0 && def->trigger_kind == STM_TRIGGER_INTERVAL,
					 &deliver_wait) == WORKER_DONE)
		return WORKER_DONE;
	if (def->trigger_kind == STM_TRIGGER_ONCE ||
		(def->trigger_kind == STM_TRIGGER_AVAILABLE_NOW && batch_id < 0))
	{
		if (sink_status.pending == 0 && sink_problem() == NULL)
		{
			finish_stream(w->stream_id);
			return WORKER_DONE;
		}
		w->batches_done = true;
	}
	if (batch_id >= 0)
		wait_ms = until_next_trigger(w, batch_start);

	/*
	 * trigger continuous, after a data batch with nothing left behind it
	 * (no record for the next, no no-data batch due, nothing for the sink
	 * to deliver): sleep on the sources' wake-ups at once, not after an
	 * empty plan (a transaction whose row lock is flushed) that would
	 * hold up the next record
	 */
	if (batch_id >= 0 && def->trigger_continuous && !w->rt->no_data_due &&
		sink_status.pending == 0 && deliver_wait <= stm_guc_naptime_ms &&
		stm_runtime_quiet(w->rt))
	{
		batch_id = -1;
		wait_ms = stm_guc_naptime_ms;
	}
	/* nothing to read: sleep until the sources have records, unless the sink retries later */
	w->waited = batch_id < 0 && deliver_wait <= wait_ms;
	if (w->waited)
	{
		if (!ShutdownRequestPending)
			(void) stm_runtime_wait(w->rt, wait_ms);
	}
	else
		sleep_ms(Max(wait_ms, deliver_wait));
	w->woke_at = GetCurrentTimestamp();
	return WORKER_GO_ON;
}

/*
 * The one way out: a stream that is done gives its slot up (the launcher
 * does not start it again); the sink delivers what it can within its
 * timeout and leaves the rest for the next start; the runtime lets go of
 * its clients.
 */
static void
worker_exit(Worker *w, WorkerNext why)
{
	if (why == WORKER_DONE)
		release_slot();
	PG_TRY();
	{
		sink_status = stm_runtime_deliver(w->rt, false);
		stm_runtime_close(w->rt);
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

/*
 * A stream's worker: named steps in a loop (see src/README.md, "Worker
 * states"), until the stream is done or the worker is told to stop.
 */
void
streaming_worker_main(Datum main_arg)
{
	Worker		w;
	WorkerNext	next = WORKER_GO_ON;

	worker_start(&w, main_arg);
	while (next == WORKER_GO_ON && !ShutdownRequestPending)
	{
		TimestampTz batch_start = GetCurrentTimestamp();
		int64		batch_id;
		int64		wait_ms = 0;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		if (!still_wanted())
			next = WORKER_EXIT;
		else if (w.def != NULL && (sink_status.full || w.batches_done))
		{
			if (catalog_ready())
				next = drain_step(&w);
			else
				sleep_ms(stm_guc_naptime_ms);
		}
		else
		{
			next = run_step(&w, &batch_id, &wait_ms);
			if (next == WORKER_GO_ON && batch_id == STEP_CATALOG_NOT_READY)
				sleep_ms(stm_guc_naptime_ms);
			else if (next == WORKER_GO_ON && batch_id == -2)
				sleep_ms(wait_ms);	/* a failed batch is retried after its delay */
			else if (next == WORKER_GO_ON)
				next = settle_step(&w, batch_id, batch_start);
		}

		/*
		 * A backend reports its tables' statistics when it goes idle; a
		 * worker never does, so without this autovacuum and ANALYZE never
		 * heard of the rows its batches wrote and deleted (sink, state,
		 * progress) until it exited.  At most once a second.
		 */
		pgstat_report_stat(false);
	}
	worker_exit(&w, next == WORKER_GO_ON ? WORKER_EXIT : next);
}
