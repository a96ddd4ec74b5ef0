/*
 * api_control.c: running streams (SPEC 4): start, stop, reset, run_batch,
 * process_available, worker_pids, and the commit-time actions.
 *
 * Workers are asked for only after commit, through a transaction callback,
 * so that a worker always sees the committed row; stop() tells the worker
 * to finish its batch and waits for it to exit, and asks for it again if
 * the stopping transaction aborts.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/regproc.h"
#include "utils/json.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "aggstate.h"
#include "api.h"
#include "interrupts.h"
#include "batch.h"
#include "catalog.h"
#include "dedup.h"
#include "positions.h"
#include "scaleout.h"
#include "shmem.h"
#include "ssjoin.h"
#include "sink.h"
#include "source.h"

PG_FUNCTION_INFO_V1(streaming_start);
PG_FUNCTION_INFO_V1(streaming_stop);
PG_FUNCTION_INFO_V1(streaming_reset);
PG_FUNCTION_INFO_V1(streaming_run_batch);
PG_FUNCTION_INFO_V1(streaming_process_available);
PG_FUNCTION_INFO_V1(streaming_worker_pids);

/* ---- commit-time actions ------------------------------------------------ */

typedef struct PendingWorker
{
	Oid			dboid;
	int32		stream_id;
	Oid			owner;
	char	   *name;			/* for the launcher's messages; NULL: as before */
	char	   *dbname;
} PendingWorker;

static List *want_on_commit = NIL;
static List *want_on_abort = NIL;

static void
queue_want(List **list, int32 stream_id, Oid owner, const char *name)
{
	char	   *dbname = get_database_name(MyDatabaseId);
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PendingWorker *p = palloc(sizeof(PendingWorker));

	p->dboid = MyDatabaseId;
	p->stream_id = stream_id;
	p->owner = owner;
	p->name = name ? pstrdup(name) : NULL;
	p->dbname = dbname ? pstrdup(dbname) : NULL;
	*list = lappend(*list, p);
	MemoryContextSwitchTo(old);
}

static void
stm_xact_callback(XactEvent event, void *arg)
{
	List	   *apply = NIL;
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		apply = want_on_commit;
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		apply = want_on_abort;
	else
		return;
	if (stm_shmem_available())
	{
		foreach(lc, apply)
		{
			PendingWorker *p = lfirst(lc);

			(void) stm_shmem_want_stream(p->dboid, p->stream_id, p->owner, p->name, p->dbname);
		}
	}
	list_free_deep(want_on_commit);
	list_free_deep(want_on_abort);
	want_on_commit = want_on_abort = NIL;
}

void
stm_api_init(void)
{
	RegisterXactCallback(stm_xact_callback, NULL);
}

/* Once this transaction commits, the stream's worker is wanted. */
void
stm_api_want_on_commit(int32 stream_id, Oid owner)
{
	/* its name, for the log: the launcher reads no catalog */
	queue_want(&want_on_commit, stream_id, owner,
			   stm_catalog_text("SELECT name FROM streaming.stream_defs WHERE id = $1",
								INT4OID, Int32GetDatum(stream_id)));
}

/* If this transaction aborts, the stream's worker is wanted again. */
void
stm_api_want_again_on_abort(int32 stream_id, Oid owner)
{
	queue_want(&want_on_abort, stream_id, owner, NULL);
}

/* True when the (qualified) relation exists. */
static bool
to_regclass_name(const char *name)
{
	return OidIsValid(RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(name)),
									   NoLock, true));
}

/* The stream's state and dedup tables (the extension's owner's): dropped, or emptied (reset). */
void
stm_api_clear_state_tables(int32 stream_id, bool drop)
{
	char	   *tables[4] = {stm_aggstate_table(stream_id), stm_dedup_table(stream_id),
		psprintf("streaming.%s", quote_identifier(stm_ssjoin_table(stream_id, 0))),
	psprintf("streaming.%s", quote_identifier(stm_ssjoin_table(stream_id, 1)))};

	for (int i = 0; i < lengthof(tables); i++)
		if (to_regclass_name(tables[i]))
			stm_catalog_exec(psprintf(drop ? "DROP TABLE %s" : "DELETE FROM %s", tables[i]),
							 0, NULL, NULL, NULL, drop ? SPI_OK_UTILITY : SPI_OK_DELETE);
	/* the stateful operators count their rows on from what was stored: no more */
	if (!drop)
	{
		Oid			type = INT4OID;
		Datum		value = Int32GetDatum(stream_id);

		stm_catalog_exec("UPDATE streaming.stream_defs SET side_watermarks = "
						 "(SELECT jsonb_object_agg(k, v - 'state_rows' - 'state_oid') "
						 "FROM jsonb_each(side_watermarks) AS e(k, v)) "
						 "WHERE id = $1 AND side_watermarks IS NOT NULL",
						 1, &type, &value, NULL, SPI_OK_UPDATE);
		stm_catalog_exec("UPDATE streaming.stream_defs SET state_rows = NULL WHERE id = $1",
						 1, &type, &value, NULL, SPI_OK_UPDATE);
	}
}

void
stm_api_require_workers(const char *stream)
{
	if (!stm_shmem_available())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("streaming must be loaded via shared_preload_libraries to start stream \"%s\"", stream),
				 errhint("Add streaming to shared_preload_libraries in postgresql.conf and restart the server, "
						 "or create the stream with start => false and run its batches with streaming.run_batch().")));
}

/*
 * Ask the stream's worker to finish its batch and exit, and wait until it
 * has.  If this transaction aborts, the worker is asked for again.
 */
void
stm_api_stop_worker(StmStreamDef *def)
{
	TimestampTz deadline;

	if (!stm_shmem_available())
		return;
	if (def->enabled)
		queue_want(&want_on_abort, def->id, def->owner, def->name);
	stm_shmem_unwant_stream(MyDatabaseId, def->id);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60 * 1000);
	while (stm_shmem_stream_pid(MyDatabaseId, def->id) != 0)
	{
		if (GetCurrentTimestamp() > deadline)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("timed out waiting for the worker of stream \"%s\" to stop", def->name)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

Datum
streaming_start(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);

	stm_catalog_check_owner("stream", name, def->owner);
	stm_scaleout_check_runnable(def);
	stm_api_require_workers(name);
	stm_catalog_exec("UPDATE streaming.stream_defs SET enabled = true, status = 'running', "
			 "failures = 0, last_error = NULL, source_error = NULL WHERE id = $1",
			 1, &type, &value, NULL, SPI_OK_UPDATE);
	stm_api_want_on_commit(def->id, def->owner);
	PG_RETURN_VOID();
}

Datum
streaming_stop(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);

	stm_catalog_check_owner("stream", name, def->owner);
	stm_api_stop_worker(def);
	stm_catalog_exec("UPDATE streaming.stream_defs SET enabled = false, status = 'stopped' WHERE id = $1",
			 1, &type, &value, NULL, SPI_OK_UPDATE);
	PG_RETURN_VOID();
}

Datum
streaming_reset(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	const StmSourceRoutine *routine;
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);
	Oid			keep_types[2] = {INT4OID, BOOLOID};
	Datum		keep[2];

	stm_catalog_check_owner("stream", name, def->owner);
	if (stm_shmem_stream_pid(MyDatabaseId, def->id) != 0 || !stm_lock_stream(def->id, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("stream \"%s\" is running", name),
				 errhint("Stop it first with streaming.stop().")));
	(void) stm_catalog_get_stream_by_id(def->id, true);
	stm_positions_forget(def->id);
	/* positions a source kind keeps elsewhere (the file source's files) */
	routine = stm_source_routine(stm_catalog_get_source_of_stream(def)->kind);
	if (routine->reset_positions)
		routine->reset_positions(def->id);
	stm_catalog_exec("DELETE FROM streaming.batches WHERE stream_id = $1", 1, &type, &value, NULL, SPI_OK_DELETE);
	stm_api_clear_state_tables(def->id, false);
	/*
	 * Batch ids start at 0 again, except for a sink that delivers after the
	 * commit: its messages carry them (with their sequence, what consumers
	 * drop repeats by), so they go on, and rows waiting for delivery stay.
	 */
	keep[0] = value;
	keep[1] = BoolGetDatum(stm_sink_routine_of_stream(def)->pending != NULL);
	stm_catalog_exec("UPDATE streaming.stream_defs SET last_batch_id = CASE WHEN $2 THEN last_batch_id END, "
					 "watermark = NULL, failures = 0, "
					 "positions_initialized = false, source_started_at = NULL, no_data_batch_due = false, "
					 "side_watermarks = NULL, "
					 "idle_clock_at = now(), "
					 "last_error = NULL, source_error = NULL, "
					 "status = CASE WHEN enabled THEN status ELSE 'stopped' END WHERE id = $1",
					 2, keep_types, keep, NULL, SPI_OK_UPDATE);
	PG_RETURN_VOID();
}

Datum
streaming_run_batch(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	StmRuntime *rt;
	int64		batch_id;

	stm_catalog_check_owner("stream", name, def->owner);
	stm_scaleout_check_runnable(def);
	/* a worker holds the lock for its life: refuse; another run_batch: wait */
	if (stm_shmem_stream_pid(MyDatabaseId, def->id) == 0)
		stm_wait_stream_lock(def->id);
	if (!stm_lock_stream(def->id, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("stream \"%s\" is being run by a background worker", name),
				 errhint("Stop it with streaming.stop() to run batches by hand, or wait with streaming.process_available().")));
	rt = stm_runtime_create(def->id);
	rt->started_at = 0;			/* waits count from the last batch only */
	PG_TRY();
	{
		batch_id = stm_batch_run(rt);
	}
	PG_CATCH();
	{
		/* parallel helpers go with the batch (they see the segment go) */
		stm_runtime_abandon(rt);
		PG_RE_THROW();
	}
	PG_END_TRY();
	stm_runtime_close(rt);
	if (batch_id < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(batch_id);
}

/*
 * What the source holds now (its available()), or NULL while it cannot be
 * asked, with *why: a part it cannot read, or a broker that does not answer
 * (an error of class 08, from a subtransaction, so that the caller can ask
 * again).  Other errors are raised.
 */
static void *
ask_source(StmSource *src, int32 stream_id, char **why)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	void	   *available = NULL;

	*why = NULL;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		src->problem = NULL;
		available = src->routine->available(src, stream_id);
		if (src->problem)
			*why = pstrdup(src->problem);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_CONNECTION_EXCEPTION)
			ReThrowError(edata);
		*why = edata->detail ? psprintf("%s: %s", edata->message, edata->detail) : edata->message;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return *why ? NULL : available;
}

/*
 * What a source holds now, asked again while it cannot be read whole or its
 * broker does not answer, until the deadline.
 */
static void *
source_available(StmSource *src, int32 stream_id, TimestampTz deadline)
{
	for (;;)
	{
		char	   *why;
		void	   *available = ask_source(src, stream_id, &why);

		if (why == NULL)
			return available;
		if (GetCurrentTimestamp() > deadline)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("timed out waiting for source \"%s\" to be readable", src->name),
					 errdetail("%s", why)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 200, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* Have the stream's committed positions reached what each source held? */
static bool
sources_reached(List *sources, List *available, int32 stream_id)
{
	ListCell   *lc;
	ListCell   *lc2;

	forboth(lc, sources, lc2, available)
	{
		StmSource  *src = lfirst(lc);

		if (!src->routine->reached(src, stream_id, lfirst(lc2)))
			return false;
	}
	return true;
}

/*
 * Wait until the stream's worker has committed every record that was in the
 * source when the call started (Spark's processAllAvailable), and its sink
 * has delivered what those batches wrote (an outbox).  A stream with
 * trigger 'once' or 'available_now' takes what it takes and finishes: for
 * it, the wait is until it has finished (Spark's awaitTermination).
 */
Datum
streaming_process_available(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	Interval   *timeout = (stm_arg_require(fcinfo, 1, "timeout"), PG_GETARG_INTERVAL_P(1));
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	List	   *sources = NIL;
	List	   *available = NIL;
	ListCell   *lc;
	const StmSinkRoutine *sink = stm_sink_routine_of_stream(def);
	bool		bounded = def->trigger_kind == STM_TRIGGER_ONCE ||
		def->trigger_kind == STM_TRIGGER_AVAILABLE_NOW;
	TimestampTz deadline;
	int64		timeout_ms;

	stm_catalog_check_owner("stream", name, def->owner);
	timeout_ms = timeout->time / 1000 + (int64) timeout->day * 86400000 +
		(int64) timeout->month * 30 * 86400000;
	if (timeout_ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be greater than zero")));
	if (!def->enabled && def->status != STM_STATUS_FINISHED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is not running", name),
				 errhint("Start it with streaming.start(), or run its batches with streaming.run_batch().")));

	/* what the sources hold now; a transient outage is asked about again */
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	if (!bounded)
	{
		sources = list_make1(stm_source_open(stm_catalog_get_source_of_stream(def), def->owner, false));
		if (def->other_source)
			sources = lappend(sources, stm_source_open(stm_catalog_get_other_source_of_stream(def),
													   def->owner, false));
	}
	foreach(lc, sources)
		available = lappend(available, source_available(lfirst(lc), def->id, deadline));

	for (;;)
	{
		/* each read takes a fresh snapshot: the worker's commits are seen */
		StmStreamDef *now = stm_catalog_get_stream_by_id(def->id, false);

		if (now == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" was dropped", name)));
		/* a sink that delivers after the commit has delivered it, too */
		if (bounded ? now->status == STM_STATUS_FINISHED :
			(!now->no_data_batch_due && sources_reached(sources, available, def->id) &&
			 (sink->pending == NULL || sink->pending(def->id, 1) == 0)))
			break;
		if (now->status == STM_STATUS_FAILED)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream \"%s\" failed", name),
					 now->last_error ? errdetail("%s", now->last_error) : 0));
		if (now->status == STM_STATUS_STOPPED || now->status == STM_STATUS_FINISHED)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream \"%s\" stopped before it processed all available records", name)));
		if (GetCurrentTimestamp() > deadline)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("timed out waiting for stream \"%s\" to process the available records", name),
					 now->last_error ? errdetail("Last error: %s", now->last_error) : 0));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	foreach(lc, sources)
		stm_source_close(lfirst(lc));
	PG_RETURN_VOID();
}

/*
 * (stream_id, pid, problem) of every stream of this database that should
 * run and that the caller may see (SPEC 7): pid is NULL while it has no
 * worker, and problem says why (the launcher could not start one, or it
 * keeps exiting).
 */
Datum
streaming_worker_pids(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (!stm_shmem_available())
		return (Datum) 0;
	LWLockAcquire(stm_shared->lock, LW_SHARED);
	for (int i = 0; i < stm_shared->nslots; i++)
	{
		StmWorkerSlot *slot = &stm_shared->slots[i];
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		/* only the caller's streams, as the views show them */
		if (!slot->in_use || slot->dboid != MyDatabaseId ||
			(slot->pid == 0 && (!slot->wanted || slot->problem[0] == '\0')) ||
			!has_privs_of_role(GetUserId(), slot->owner))
			continue;
		values[0] = Int32GetDatum(slot->stream_id);
		values[1] = Int32GetDatum(slot->pid);
		nulls[1] = slot->pid == 0;
		values[2] = CStringGetTextDatum(slot->problem);
		nulls[2] = slot->problem[0] == '\0';
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stm_shared->lock);
	return (Datum) 0;
}
