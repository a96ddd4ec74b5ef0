/*
 * batch.c: one micro-batch, start to commit (SPEC 6).
 *
 * In the caller's transaction: lock the stream's row, plan the source's
 * bounds from the stored positions, fetch, parse, filter and project, write
 * the sink, then write the new positions, the progress row and the stream's
 * state.  Nothing is acknowledged anywhere else, so a crash at any point
 * leaves either the whole batch or none of it.
 *
 * Records are parsed in chunks inside a subtransaction; when a chunk fails,
 * its records are parsed again one subtransaction each, and the ones that
 * fail go to streaming.dead_letters (or are skipped, or stop the stream, by
 * on_bad_record).  Errors after parsing (the query's expressions, the sink's
 * constraints) fail the whole batch.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "catalog/pg_authid.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/regproc.h"
#include "catalog/namespace.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "aggstate.h"
#include "batch.h"
#include "deadletter.h"
#include "dedup.h"
#include "fault.h"
#include "guc.h"
#include "join.h"
#include "parallel.h"
#include "parse.h"
#include "query.h"
#include "sink.h"

/* State of one batch while its records flow through. */
typedef struct BatchContext
{
	StmStreamDef *def;
	StmSource  *src;
	StmParser	parser;
	TupleDesc	source_desc;
	int			ndeclared;		/* declared columns; metadata follows */
	int			event_time_att; /* -1: none */
	TupleTableSlot *source_slot;
	EState	   *estate;
	ExprContext *econtext;
	StmProjector *projector;
	StmSinkOutput *output;		/* the query's output rows, as the sink gets them */
	StmSinkBatch *sink;
	ExprState  *qual;			/* aggregate streams: WHERE */
	StmAggBatch *aggbatch;		/* aggregate streams: the batch's groups */
	StmJoin    *join;			/* a query that reads tables: run by the executor */
	StmDedup   *dedup;			/* dedup_keys */
	Datum	   *out_values;
	bool	   *out_nulls;
	MemoryContext chunk_cxt;
	Datum	   *error_row;		/* the row being processed, for errcontext */
	bool	   *error_nulls;
	/* the batch, as progress shows it */
	int64		batch_id;
	TimestampTz started;
	char	   *start_positions;
	char	   *end_positions;
	TimestampTz idle_advance;	/* an idle batch: the watermark it sets (0: none) */
	int64		num_input_planned;	/* what plan bounded */
	int64		num_input;
	int64		num_output;
	int64		num_bad;
	int64		num_dedup;
	int64		num_late;
	int64		num_state_rows;
	bool		has_max_event_time;
	TimestampTz max_event_time;
	bool		has_watermark;
	TimestampTz watermark;		/* the new one, when has_watermark */
	/* what the batch's query reads and writes */
	StmSourceDef *source_def;
	StmQueryInfo *qi;
	Relation	view;
	int			guc_nest;		/* the stream's search_path, set for the query */
	StmHelperOut *share;		/* a parallel helper's share: rows and bad records go to the leader */
} BatchContext;

/* A parsed record: the source row, or the error that made it bad. */
typedef struct ParsedRecord
{
	Datum	   *values;
	bool	   *nulls;
	ErrorData  *error;
	bool		meta_ok;		/* the metadata columns are filled */
	bool		drop;			/* bad, late or a duplicate */
} ParsedRecord;

static int64 run_batch_as_owner(StmRuntime *rt, StmStreamDef *def);

StmRuntime *
stm_runtime_create(int32 stream_id)
{
	StmRuntime *rt = palloc0(sizeof(StmRuntime));

	rt->cxt = CurrentMemoryContext;
	rt->stream_id = stream_id;
	rt->started_at = GetCurrentTimestamp();
	return rt;
}

/*
 * The stream's source_error: what keeps it from reading all of its source
 * and what keeps its sink from taking its rows, or NULL.  One text for
 * both, so that the batch and the worker write the same value.
 */
char *
stm_runtime_source_error(StmRuntime *rt)
{
	if (rt->problem && rt->sink_problem)
		return psprintf("%s; %s", rt->problem, rt->sink_problem);
	if (rt->problem)
		return pstrdup(rt->problem);
	return rt->sink_problem ? pstrdup(rt->sink_problem) : NULL;
}

/*
 * Errors that a retry cannot cure: bad data (class 22), lost source data,
 * on_bad_record => 'fail', and an owner that is gone or may no longer use
 * the source's settings (class 28).  The stream fails at once instead of
 * retrying.
 */
bool
stm_error_is_permanent(int sqlerrcode)
{
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_DATA_EXCEPTION ||
		ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION ||
		sqlerrcode == ERRCODE_DATA_CORRUPTED;
}

static void
parse_one(BatchContext *bc, StmRecord *r, ParsedRecord *rec)
{
	int			natts = bc->source_desc->natts;

	rec->values = palloc(sizeof(Datum) * natts);
	rec->nulls = palloc(sizeof(bool) * natts);
	rec->error = NULL;
	/* metadata first: it tells the record's position if parsing fails */
	bc->src->routine->fill_metadata(bc->src, r, rec->values + bc->ndeclared,
									rec->nulls + bc->ndeclared);
	rec->meta_ok = true;
	stm_source_parse(&bc->parser, r, rec->values, rec->nulls);
	if (bc->event_time_att >= 0 && rec->nulls[bc->event_time_att])
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event time column \"%s\" is null",
						NameStr(TupleDescAttr(bc->source_desc, bc->event_time_att)->attname))));
}

/*
 * Parse records [from, to) in one subtransaction.  Returns false (and rolls
 * the subtransaction back) when any of them failed; with single, records the
 * error in the record instead.
 */
static bool
parse_in_subxact(BatchContext *bc, StmRecord *records, ParsedRecord *recs,
				 int from, int to, bool single)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(bc->chunk_cxt);
	PG_TRY();
	{
		for (int i = from; i < to; i++)
			parse_one(bc, &records[i], &recs[i]);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(bc->chunk_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		if (single)
			recs[from].error = edata;
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* The position of a record as JSON text (its metadata columns are filled). */
static char *
record_position(BatchContext *bc, ParsedRecord *rec)
{
	if (!rec->meta_ok)
		return pstrdup("{}");
	return stm_source_position(bc->src, rec->values + bc->ndeclared, rec->nulls + bc->ndeclared);
}

/* on_bad_record, for a bad record of this batch or of a helper's share */
static void
apply_bad_record(BatchContext *bc, const StmBadRecord *bad)
{
	bc->num_bad++;
	if (bc->src->on_bad_record == STM_BAD_RECORD_FAIL)
		ereport(ERROR,
				(errcode(bad->sqlerrcode),
				 errmsg("bad record in source \"%s\" at %s: %s",
						bc->def->source, bad->position, bad->message),
				 bad->detail ? errdetail("%s", bad->detail) : 0,
				 errhint("The source has on_bad_record => 'fail'; use 'dead_letter' to set bad records aside.")));
	if (bc->src->on_bad_record == STM_BAD_RECORD_DEAD_LETTER)
		stm_deadletter_write(bc->def->id, bad);
}

/* the leader's batch: a bad record a helper found */
static void
helper_bad_record(void *arg, const StmBadRecord *bad)
{
	apply_bad_record((BatchContext *) arg, bad);
}

static void
handle_bad_record(BatchContext *bc, StmRecord *r, ParsedRecord *rec, ErrorData *edata)
{
	StmBadRecord bad;
	uint8		sha[PG_SHA256_DIGEST_LENGTH];

	stm_deadletter_describe(&bad, r->whole ? NULL : r->data, r->len, sha);
	if (r->whole)
	{
		/* the source kept only the record's start: it says what the whole was */
		bad.raw = r->data;
		bad.raw_len = Min(r->len, STM_RAW_KEEP);
		bad.whole_len = r->whole->length;
		bad.sha256 = r->whole->sha256;
	}
	bad.sqlerrcode = edata->sqlerrcode;
	bad.message = edata->message;
	bad.detail = edata->detail;
	bad.position = record_position(bc, rec);
	if (bc->share)
	{
		/* a helper: the leader applies on_bad_record (and writes the dead letter) */
		bc->num_bad++;
		stm_parallel_send_bad(bc->share, &bad);
	}
	else
		apply_bad_record(bc, &bad);
}

/*
 * Errors while a row goes through the query and into the sink or the state
 * name the stream and the row's position (as COPY names the line).
 */
static void
batch_error_callback(void *arg)
{
	BatchContext *bc = arg;

	if (bc->error_row)
		errcontext("stream \"%s\", source \"%s\" at %s", bc->def->name, bc->def->source,
				   stm_source_position(bc->src, bc->error_row + bc->ndeclared,
									   bc->error_nulls + bc->ndeclared));
	else
		errcontext("stream \"%s\"", bc->def->name);
}

/* Called by the source with each chunk of records of the batch. */
static void
process_chunk(void *arg, StmRecord *records, int n)
{
	BatchContext *bc = arg;
	ParsedRecord *recs;
	MemoryContext oldcxt;

	MemoryContextReset(bc->chunk_cxt);
	oldcxt = MemoryContextSwitchTo(bc->chunk_cxt);
	recs = palloc0(sizeof(ParsedRecord) * n);
	MemoryContextSwitchTo(oldcxt);
	bc->num_input += n;

	if (!parse_in_subxact(bc, records, recs, 0, n, false))
	{
		for (int i = 0; i < n; i++)
			(void) parse_in_subxact(bc, records, recs, i, i + 1, true);
	}
	STM_FAULT_POINT("after_parse");

	for (int i = 0; i < n; i++)
	{
		if (recs[i].error)
		{
			handle_bad_record(bc, &records[i], &recs[i], recs[i].error);
			recs[i].drop = true;
		}
		else if (bc->event_time_att >= 0)
		{
			/* every good row moves the watermark, duplicates and late ones too (as Spark) */
			TimestampTz ts = DatumGetTimestampTz(recs[i].values[bc->event_time_att]);

			if (!bc->has_max_event_time || ts > bc->max_event_time)
				bc->max_event_time = ts;
			bc->has_max_event_time = true;
		}
	}
	/* dedup_keys: before the query (in the chunk's memory, as the records) */
	if (bc->dedup)
	{
		Datum	  **values = MemoryContextAlloc(bc->chunk_cxt, sizeof(Datum *) * n);
		bool	  **nulls = MemoryContextAlloc(bc->chunk_cxt, sizeof(bool *) * n);
		bool	   *drop = MemoryContextAlloc(bc->chunk_cxt, sizeof(bool) * n);

		for (int i = 0; i < n; i++)
		{
			values[i] = recs[i].values;
			nulls[i] = recs[i].nulls;
			drop[i] = recs[i].drop;
		}
		stm_dedup_chunk(bc->dedup, n, values, nulls, drop);
		for (int i = 0; i < n; i++)
			recs[i].drop = drop[i];
	}

	for (int i = 0; i < n; i++)
	{
		ParsedRecord *rec = &recs[i];
		TupleTableSlot *slot = bc->source_slot;

		if (rec->drop)
			continue;
		bc->error_row = rec->values;
		bc->error_nulls = rec->nulls;
		ExecClearTuple(slot);
		memcpy(slot->tts_values, rec->values, sizeof(Datum) * bc->source_desc->natts);
		memcpy(slot->tts_isnull, rec->nulls, sizeof(bool) * bc->source_desc->natts);
		ExecStoreVirtualTuple(slot);
		bc->econtext->ecxt_scantuple = slot;
		if (bc->join)
			stm_join_add(bc->join, slot);	/* the query runs at the batch's end */
		else if (bc->aggbatch)
		{
			if (bc->qual == NULL || ExecQual(bc->qual, bc->econtext))
				stm_aggbatch_add(bc->aggbatch, bc->econtext);
		}
		else if (stm_query_project(bc->projector, bc->econtext, bc->out_values, bc->out_nulls))
		{
			if (bc->share)
				stm_parallel_send_row(bc->share, bc->output->desc, bc->out_values, bc->out_nulls);
			else
				stm_sink_insert(bc->sink, bc->out_values, bc->out_nulls);
		}
		ResetExprContext(bc->econtext);
	}
	bc->error_row = NULL;
}

/*
 * When the last batch started (min_offsets_per_trigger waits at most
 * max_trigger_delay from then): the newest batch, else when this runtime or
 * the stream began.
 */
static TimestampTz
last_trigger_time(StmRuntime *rt, StmStreamDef *def)
{
	Oid			argtype = INT4OID;
	Datum		arg = Int32GetDatum(rt->stream_id);
	TimestampTz result = rt->started_at;
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args("SELECT coalesce((SELECT max(started_at) FROM streaming.batches WHERE stream_id = $1), "
							  "(SELECT created_at FROM streaming.stream_defs WHERE id = $1))",
							  1, &argtype, &arg, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.batches");
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull && DatumGetTimestampTz(d) > result)
			result = DatumGetTimestampTz(d);
	}
	SPI_finish();
	stm_catalog_end(scope);
	return result;
}

/* The batch's progress row and the stream's new state, in the batch's transaction. */
static void
record_batch(BatchContext *bc, StmRuntime *rt, bool no_data_batch_due, TimestampTz idle_clock)
{
	Oid			types[19] = {INT4OID, INT8OID, TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, INT8OID, INT8OID, BOOLOID, INT8OID,
	TIMESTAMPTZOID, TEXTOID, INT8OID};
	Datum		values[19];
	char		nulls[19] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	char	   *data_loss = bc->src->routine->data_loss_json ?
		bc->src->routine->data_loss_json(bc->src) : NULL;
	char	   *source_error = stm_runtime_source_error(rt);
	StmCatalogScope scope;

	values[0] = Int32GetDatum(bc->def->id);
	values[1] = Int64GetDatum(bc->batch_id);
	values[2] = TimestampTzGetDatum(bc->started);
	values[3] = Int64GetDatum(bc->num_input);
	values[4] = Int64GetDatum(bc->num_output);
	values[5] = Int64GetDatum(bc->num_bad);
	values[6] = TimestampTzGetDatum(bc->max_event_time);
	nulls[6] = bc->has_max_event_time ? ' ' : 'n';
	values[7] = TimestampTzGetDatum(bc->watermark);
	nulls[7] = bc->has_watermark ? ' ' : 'n';
	values[8] = CStringGetTextDatum(bc->start_positions);
	values[9] = CStringGetTextDatum(bc->end_positions);
	if (data_loss)
		values[10] = CStringGetTextDatum(data_loss);
	else
		nulls[10] = 'n';
	values[11] = Int32GetDatum(stm_guc_progress_history);
	values[12] = Int64GetDatum(bc->num_state_rows);
	values[13] = Int64GetDatum(bc->num_late);
	values[14] = BoolGetDatum(no_data_batch_due);
	values[15] = Int64GetDatum(bc->num_dedup);
	values[16] = TimestampTzGetDatum(idle_clock);
	nulls[16] = idle_clock != 0 ? ' ' : 'n';
	if (source_error)
		values[17] = CStringGetTextDatum(source_error);
	else
		nulls[17] = 'n';
	/* a sink that delivers after the commit counts its rows as they arrive */
	values[18] = Int64GetDatum(bc->sink->deferred ? 0 : bc->num_output);

	scope = stm_catalog_begin();
	SPI_connect();
	if (SPI_execute_with_args("INSERT INTO streaming.batches (stream_id, batch_id, started_at, duration, "
							  "num_input_rows, num_output_rows, num_bad_rows, max_event_time, watermark, "
							  "start_positions, end_positions, data_loss, num_state_rows, num_late_rows, num_dedup_rows, "
							  "num_delivered_rows) "
							  "VALUES ($1, $2, $3, clock_timestamp() - $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11::jsonb, $13, $14, $16, $19)",
							  19, types, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write streaming.batches");
	if (SPI_execute_with_args("DELETE FROM streaming.batches WHERE stream_id = $1 AND batch_id <= $2 - $12",
							  19, types, values, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not trim streaming.batches");
	if (SPI_execute_with_args("UPDATE streaming.stream_defs SET last_batch_id = $2, watermark = $8, "
							  "no_data_batch_due = $15, idle_clock_at = coalesce($17, idle_clock_at), "
							  "failures = 0, last_error = NULL, source_error = $18 WHERE id = $1",
							  19, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update streaming.stream_defs");
	SPI_finish();
	stm_catalog_end(scope);
}

/* The watermark committed by the last batch: what this batch filters with. */
static TimestampTz
previous_watermark(StmStreamDef *def)
{
	/* before any event, the watermark is 1970-01-01 00:00 UTC */
	return def->has_watermark_value ? def->watermark_value : STM_UNIX_EPOCH;
}

/*
 * idle_timeout (SPEC 3.1): when the source has given no records for that
 * long, the watermark advances as if a record with event time now() - delay
 * had arrived, so to now() - 2 * delay.  Once per idle_timeout while the
 * source stays idle (the clock restarts with each advance), and only when
 * that moves the watermark.  Returns the new watermark, or 0 when no idle
 * batch is due.
 */
static TimestampTz
idle_watermark(StmStreamDef *def, TimestampTz now)
{
	Datum		t;

	if (def->idle_timeout_us <= 0 || !def->has_watermark ||
		def->trigger_kind != STM_TRIGGER_INTERVAL ||
		now - def->idle_clock_at < def->idle_timeout_us)
		return 0;
	t = DirectFunctionCall2(timestamptz_mi_interval, TimestampTzGetDatum(now),
							IntervalPGetDatum(&def->watermark_delay));
	t = DirectFunctionCall2(timestamptz_mi_interval, t, IntervalPGetDatum(&def->watermark_delay));
	if (DatumGetTimestampTz(t) <= previous_watermark(def))
		return 0;
	return DatumGetTimestampTz(t);
}

static int
view_attno(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
		if (strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i;
	return -1;
}

/*
 * Run one batch of the stream in the current transaction, as the stream's
 * owner whoever calls it (SPEC 7): the owner's user id in a security-
 * restricted operation, as REFRESH MATERIALIZED VIEW runs its query, so the
 * query's functions, the sink's triggers and the sink function all see the
 * owner as current_user, and the stream's search_path is resolved for the
 * owner.  Returns the batch id, or -1 when there was nothing to do.
 */
int64
stm_batch_run(StmRuntime *rt)
{
	StmStreamDef *def;
	Oid			save_userid;
	int			save_sec_context;
	int64		batch_id;

	(void) stm_catalog_check_version(ERROR);
	/* the row lock serialises batches with drop, reset and other batches */
	def = stm_catalog_get_stream_by_id(rt->stream_id, true);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream with id %d does not exist", rt->stream_id)));
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(def->owner)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
				 errmsg("the owner of stream \"%s\" (role with OID %u) does not exist",
						def->name, def->owner),
				 errhint("A superuser can drop the stream with streaming.drop_stream().")));

	/* an error restores the user id with the (sub)transaction's abort */
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	batch_id = run_batch_as_owner(rt, def);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	return batch_id;
}

/*
 * Errors in the stored query (a function or table gone, say) point into
 * the query's text and name the stream, not the statement that ran it.
 */
static void
query_error_callback(void *arg)
{
	StmStreamDef *def = arg;
	int			pos = geterrposition();

	if (pos > 0)
	{
		errposition(0);
		internalerrposition(pos);
		internalerrquery(def->query);
	}
	errcontext("query of stream \"%s\"", def->name);
}

/*
 * The source, opened by the runtime's first batch (for a worker, once in its
 * life): it lives in the runtime's memory context.
 */
static StmSource *
open_source(StmRuntime *rt, StmStreamDef *def, StmSourceDef *source_def)
{
	if (rt->source == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(rt->cxt);

		rt->source = stm_source_open(source_def, def->owner, true);
		rt->source->bounded = rt->bounded;
		rt->source->plan_only = rt->parallel_wanted > 0;
		MemoryContextSwitchTo(oldcxt);
	}
	return rt->source;
}

/* The sink, opened by the runtime's first batch, as the source. */
static StmSink *
open_sink(StmRuntime *rt, StmStreamDef *def)
{
	if (rt->sink == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(rt->cxt);

		rt->sink = stm_sink_open(def);
		MemoryContextSwitchTo(oldcxt);
	}
	return rt->sink;
}

/*
 * Fix the batch's bounds, at most max_records records (-1: no limit); false
 * when there is no batch to run: nothing new, no no-data batch due after a
 * batch that moved the watermark (SPEC 3.1), and no idle_timeout advance.
 */
static bool
plan_batch(BatchContext *bc, StmRuntime *rt, int64 max_records)
{
	StmStreamDef *def = bc->def;
	StmPlanContext ctx;
	int64		total;
	bool		no_data_due = def->no_data_batch_due && def->trigger_kind != STM_TRIGGER_ONCE;

	ctx.stream_id = def->id;
	ctx.initialized = def->positions_initialized;
	ctx.last_trigger = last_trigger_time(rt, def);
	ctx.batch_start = bc->started;
	bc->src->problem = NULL;
	bc->src->unreadable = false;
	ctx.max_records = max_records;
	ctx.chunk_size = 1000;		/* records fetch hands over at once: one subtransaction parses them */
	total = bc->src->routine->plan(bc->src, &ctx);
	/* what keeps the source from being read whole: source_error, now or with the batch */
	if (rt->problem)
		pfree(rt->problem);
	rt->problem = bc->src->problem ? MemoryContextStrdup(rt->cxt, bc->src->problem) : NULL;
	rt->unreadable = bc->src->problem != NULL && bc->src->unreadable;
	if (!def->positions_initialized)
		stm_catalog_mark_positions_initialized(def->id);
	bc->num_input_planned = total;
	if (total == 0 && !no_data_due)
		bc->idle_advance = idle_watermark(def, GetCurrentTimestamp());
	if (total == 0 && !no_data_due && bc->idle_advance == 0)
	{
		if (bc->src->routine->save_idle_positions)
			bc->src->routine->save_idle_positions(bc->src, def->id);
		stm_catalog_set_source_error(def->id, stm_runtime_source_error(rt));
		return false;
	}
	bc->batch_id = def->last_batch_id + 1;
	bc->start_positions = bc->src->routine->positions_json(bc->src, false);
	bc->end_positions = bc->src->routine->positions_json(bc->src, true);
	return true;
}

/* a parallel helper's aggregate batch: a partial group to the leader */
static void
share_group(void *arg, TupleDesc desc, Datum *values, bool *nulls)
{
	BatchContext *bc = arg;

	stm_parallel_send_group(bc->share, desc, values, nulls);
}

/*
 * The stream's query, analysed again as its creator wrote it (with "$user"
 * the owner), its relations opened, its projection or aggregation and its
 * sink set up, and the operators before it (dedup).
 */
static void
begin_query(BatchContext *bc, StmRuntime *rt)
{
	StmStreamDef *def = bc->def;
	ErrorContextCallback errcb;
	StmQueryInfo *qi;
	StmLateRows *keep_late = NULL;

	bc->guc_nest = NewGUCNestLevel();
	(void) set_config_option("search_path", def->search_path, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	errcb.callback = query_error_callback;
	errcb.arg = def;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	qi = bc->qi = stm_query_analyze(def->query);
	error_context_stack = errcb.previous;
	if (qi->source_view != bc->source_def->view)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the query of stream \"%s\" no longer reads its source \"%s\"",
						def->name, def->source)));
	ExecCheckRTPerms(qi->query->rtable, true);

	bc->view = relation_open(bc->source_def->view, AccessShareLock);
	bc->source_desc = CreateTupleDescCopy(RelationGetDescr(bc->view));
	bc->ndeclared = bc->source_desc->natts - bc->src->nmeta;
	bc->event_time_att = def->event_time ? view_attno(bc->source_desc, def->event_time) : -1;
	stm_parser_init(&bc->parser, bc->src->format, bc->src->has_columns, bc->src->csv_delimiter,
					bc->source_desc, bc->ndeclared);
	bc->estate = CreateExecutorState();
	bc->econtext = GetPerTupleExprContext(bc->estate);
	bc->source_slot = MakeSingleTupleTableSlot(bc->source_desc, &TTSOpsVirtual);
	bc->output = stm_sink_output(qi, def->output_mode);
	if (bc->share)
	{
		const char *why;

		/* create_stream and alter_stream refuse the others */
		if (!stm_parallel_supported(bc->src->routine, qi, def->has_dedup, def->keep_late_rows, &why))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("stream \"%s\" cannot have parallel_workers", def->name),
					 errdetail("%s.", why)));
		if (qi->agg)
		{
			/* pre-aggregation: the leader combines the groups and keeps the state */
			bc->qual = stm_query_compile_qual(qi);
			bc->aggbatch = stm_aggbatch_begin(qi->agg, def->id, def->output_mode, NULL,
											  def->has_watermark, previous_watermark(def),
											  bc->event_time_att, NULL);
			stm_aggbatch_forward(bc->aggbatch, share_group, bc);
			if (qi->agg->event_time_att >= 0)
				bc->event_time_att = qi->agg->event_time_att;
		}
		else
			bc->projector = stm_query_compile(qi);
		bc->out_values = palloc(sizeof(Datum) * Max(qi->noutputs, 1));
		bc->out_nulls = palloc(sizeof(bool) * Max(qi->noutputs, 1));
		bc->chunk_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming chunk",
											  0, 4 * 1024 * 1024, 8 * 1024 * 1024);
		return;
	}
	bc->sink = stm_sink_begin_batch(open_sink(rt, def), bc->output, bc->batch_id, bc->estate);
	if (def->keep_late_rows)
	{
		keep_late = palloc(sizeof(StmLateRows));
		keep_late->stream_id = def->id;
		keep_late->src = bc->src;
		keep_late->meta_att = bc->ndeclared;
	}
	/* a query that reads tables: the executor runs it (and makes qi->agg read its rows) */
	if (qi->planned)
		bc->join = stm_join_begin(&rt->join_plan, rt->cxt, qi, bc->source_desc, def->query);
	if (qi->agg)
	{
		bc->qual = bc->join ? NULL : stm_query_compile_qual(qi);
		bc->aggbatch = stm_aggbatch_begin(qi->agg, def->id, def->output_mode, bc->sink,
										  def->has_watermark, previous_watermark(def),
										  bc->event_time_att,
										  keep_late);
		/* a window's column is the event time; without a window, event_time's */
		if (qi->agg->event_time_att >= 0)
			bc->event_time_att = qi->agg->event_time_att;
	}
	else if (!bc->join)
		bc->projector = stm_query_compile(qi);
	bc->out_values = palloc(sizeof(Datum) * Max(qi->noutputs, 1));
	bc->out_nulls = palloc(sizeof(bool) * Max(qi->noutputs, 1));
	/* a large first block survives each reset: no malloc churn per chunk */
	bc->chunk_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming chunk",
										  0, 4 * 1024 * 1024, 8 * 1024 * 1024);

	if (def->has_dedup)
		bc->dedup = stm_dedup_begin(def->id, bc->source_desc, stm_catalog_dedup_keys(def->id),
									def->has_watermark ? bc->event_time_att : -1,
									previous_watermark(def), def->dedup_within_watermark,
									def->watermark_delay.time +
									(int64) def->watermark_delay.day * USECS_PER_DAY,
									keep_late);
}

/*
 * A row of a query that reads tables: an output row (stateless), or the
 * joined row, whose first columns are the source row's (aggregates).
 */
static void
joined_row(void *arg, TupleTableSlot *slot)
{
	BatchContext *bc = arg;

	if (bc->aggbatch)
	{
		bc->error_row = slot->tts_values;
		bc->error_nulls = slot->tts_isnull;
		bc->econtext->ecxt_scantuple = slot;
		stm_aggbatch_add(bc->aggbatch, bc->econtext);
		ResetExprContext(bc->econtext);
		bc->error_row = NULL;
	}
	else
		stm_sink_insert(bc->sink, slot->tts_values, slot->tts_isnull);
}

/*
 * After the last record: the stateful operators merge into their state
 * tables and write the sink as the output mode says; the sink writes what
 * it holds (a sink function is called); the query's relations are closed.
 */
static void
end_query(BatchContext *bc)
{
	if (bc->share)
	{
		/* a helper's share: the leader writes the sink and the state */
		if (bc->aggbatch)
			stm_aggbatch_finish_forward(bc->aggbatch, &bc->num_late);
		ExecDropSingleTupleTableSlot(bc->source_slot);
		FreeExecutorState(bc->estate);
		MemoryContextDelete(bc->chunk_cxt);
		relation_close(bc->view, NoLock);
		AtEOXact_GUC(true, bc->guc_nest);
		return;
	}
	if (bc->join)
		stm_join_run(bc->join, joined_row, bc);
	if (bc->dedup)
	{
		int64		dedup_late;
		int64		dedup_state;

		stm_dedup_finish(bc->dedup, &bc->num_dedup, &dedup_late, &dedup_state);
		bc->num_late += dedup_late;
		bc->num_state_rows += dedup_state;
	}
	if (bc->aggbatch)
	{
		int64		agg_state;
		int64		agg_late;

		stm_aggbatch_finish(bc->aggbatch, &agg_state, &agg_late);
		bc->num_state_rows += agg_state;
		bc->num_late += agg_late;
	}
	stm_sink_end_batch(bc->sink);
	STM_FAULT_POINT("after_sink_write");
	bc->num_output = bc->sink->rows;
	ExecDropSingleTupleTableSlot(bc->source_slot);
	FreeExecutorState(bc->estate);
	MemoryContextDelete(bc->chunk_cxt);
	relation_close(bc->view, NoLock);
	AtEOXact_GUC(true, bc->guc_nest);
}

/* watermark = max event time seen - delay, or the idle advance; it never moves back */
static void
advance_watermark(BatchContext *bc)
{
	StmStreamDef *def = bc->def;

	if (!def->has_watermark)
		return;
	bc->has_watermark = true;
	bc->watermark = previous_watermark(def);
	if (bc->has_max_event_time)
	{
		TimestampTz candidate = DatumGetTimestampTz(
			DirectFunctionCall2(timestamptz_mi_interval,
								TimestampTzGetDatum(bc->max_event_time),
								IntervalPGetDatum(&def->watermark_delay)));

		bc->watermark = Max(bc->watermark, candidate);
	}
	if (bc->idle_advance != 0)
		bc->watermark = Max(bc->watermark, bc->idle_advance);
}

/* the leader's batch: an output row a helper made */
static void
helper_row(void *arg, Datum *values, bool *nulls)
{
	BatchContext *bc = arg;

	stm_sink_insert(bc->sink, values, nulls);
}

/* the leader's aggregate batch: a helper's partial group, combined */
static void
helper_group(void *arg, Datum *values, bool *nulls)
{
	BatchContext *bc = arg;

	stm_aggbatch_add_partial(bc->aggbatch, values, nulls);
}

/*
 * How many helpers the stream's parallel_workers asks for now (none for a
 * run_batch inside a transaction block, whose uncommitted work they would
 * not see): the runtime's helpers are replaced after a batch that failed
 * while they worked, or when the number changed, and the leader's source
 * is opened again when that changes who fetches.  The helpers themselves
 * start with the first batch that has records (start_helpers).
 */
static void
prepare_helpers(StmRuntime *rt, StmStreamDef *def, StmSourceDef *source_def)
{
	int			want = rt->parallel_allowed || !IsTransactionBlock() ? def->parallel_workers : 0;
	const char *why;

	if (want > 0 && !stm_parallel_supported(stm_source_routine(source_def->kind), NULL,
											def->has_dedup, def->keep_late_rows, &why))
		want = 0;
	if (rt->parallel &&
		(stm_parallel_dirty(rt->parallel) || stm_parallel_wanted(rt->parallel) != want))
	{
		stm_parallel_stop(rt->parallel);
		rt->parallel = NULL;
	}
	rt->parallel_wanted = want;
	if (rt->source && rt->source->plan_only != (want > 0))
	{
		stm_source_close(rt->source);
		rt->source = NULL;
	}
}

/*
 * The helpers, once a plan found records to read: a batch whose source
 * is plan_only cannot run without any, so it waits (53000) while no
 * background worker slot is free.
 */
static void
start_helpers(StmRuntime *rt, StmStreamDef *def)
{
	if (rt->parallel_wanted == 0 || rt->parallel != NULL)
		return;
	rt->parallel = stm_parallel_start(def->id, rt->parallel_wanted, rt->cxt);
	if (rt->parallel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("stream \"%s\" could not start any of its %d parallel helpers",
						def->name, rt->parallel_wanted),
				 errdetail("No background worker slot is free."),
				 errhint("Raise max_worker_processes, or set parallel_workers to 0 with streaming.alter_stream().")));
}

/* stm_batch_run, once the stream's row is locked and its owner in charge */
static int64
run_batch_as_owner(StmRuntime *rt, StmStreamDef *def)
{
	BatchContext bc = {0};
	ErrorContextCallback errcb;
	bool		stateful;

	StmSink    *sink;
	int64		room = -1;
	const char *why = NULL;

	bc.def = def;
	bc.started = GetCurrentTimestamp();
	bc.source_def = stm_catalog_get_source_of_stream(def);
	prepare_helpers(rt, def, bc.source_def);
	bc.src = open_source(rt, def, bc.source_def);
	/* the sink's room bounds what the source may read (back-pressure) */
	sink = open_sink(rt, def);
	if (sink->routine->capacity)
		room = sink->routine->capacity(sink, &why);
	if (room == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("stream \"%s\" cannot run a batch now: %s", def->name, why),
				 errhint("The stream's worker delivers the waiting rows; start the stream, or wait.")));
	if (!plan_batch(&bc, rt, room))
		return -1;
	start_helpers(rt, def);

	begin_query(&bc, rt);
	errcb.callback = batch_error_callback;
	errcb.arg = &bc;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	if (rt->parallel)
	{
		StmParallelReceiver recv = {helper_row, helper_bad_record, helper_group, &bc};
		StmShareTotals totals = {0};
		const char *why;

		if (!stm_parallel_supported(bc.src->routine, bc.qi, def->has_dedup, def->keep_late_rows,
									&why))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("stream \"%s\" cannot have parallel_workers", def->name),
					 errdetail("%s.", why)));
		stm_parallel_fetch(rt->parallel, bc.src, bc.output->desc,
						   bc.aggbatch ? stm_aggbatch_partial_desc(bc.aggbatch) : NULL,
						   &recv, &totals);
		bc.num_input += totals.num_input;
		bc.num_late += totals.num_late;
		if (totals.has_max_event_time &&
			(!bc.has_max_event_time || totals.max_event_time > bc.max_event_time))
		{
			bc.has_max_event_time = true;
			bc.max_event_time = totals.max_event_time;
		}
	}
	else
		bc.src->routine->fetch(bc.src, process_chunk, &bc);
	STM_FAULT_POINT("after_fetch");
	end_query(&bc);
	error_context_stack = errcb.previous;

	STM_FAULT_POINT("before_watermark_update");
	advance_watermark(&bc);
	bc.src->routine->save_positions(bc.src, def->id, bc.batch_id);
	/*
	 * a data batch of a stateful stream that moved the watermark makes a
	 * no-data batch due (not for 'once')
	 */
	stateful = bc.aggbatch != NULL || bc.dedup != NULL;
	record_batch(&bc, rt,
				 stateful && (bc.num_input > 0 || bc.idle_advance != 0) &&
				 bc.has_watermark && bc.watermark > previous_watermark(def) &&
				 def->trigger_kind != STM_TRIGGER_ONCE,
				 bc.num_input_planned > 0 ? bc.started :
				 bc.idle_advance != 0 ? GetCurrentTimestamp() : 0);

	if (stm_guc_log_batches)
		ereport(LOG,
				(errmsg("stream \"%s\" ran batch " INT64_FORMAT ": %lld input rows, %lld output rows, %lld bad rows",
						def->name, bc.batch_id, (long long) bc.num_input,
						(long long) bc.num_output, (long long) bc.num_bad)));
	return bc.batch_id;
}

/*
 * A parallel helper's share of a batch (parallel.c), in the helper's
 * transaction: the stream's query analysed as the leader's batch does, as
 * the stream's owner; exactly the bounds the leader gave fetched, parsed,
 * filtered and projected, the rows and bad records sent to the leader.  It
 * writes nothing and locks no catalog row (the leader holds the stream's).
 */
void
stm_batch_run_share(StmRuntime *rt, const char *bounds, StmHelperOut *out,
					StmShareTotals *totals)
{
	BatchContext bc = {0};
	ErrorContextCallback errcb;
	Oid			save_userid;
	int			save_sec_context;

	bc.def = stm_catalog_get_stream_by_id(rt->stream_id, false);
	if (bc.def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream with id %d does not exist", rt->stream_id)));
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(bc.def->owner)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_AUTHORIZATION_SPECIFICATION),
				 errmsg("the owner of stream \"%s\" (role with OID %u) does not exist",
						bc.def->name, bc.def->owner)));
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(bc.def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	bc.share = out;
	bc.started = GetCurrentTimestamp();
	bc.source_def = stm_catalog_get_source_of_stream(bc.def);
	bc.src = open_source(rt, bc.def, bc.source_def);
	bc.src->routine->set_share_bounds(bc.src, bounds);
	begin_query(&bc, rt);
	errcb.callback = batch_error_callback;
	errcb.arg = &bc;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	bc.src->routine->fetch(bc.src, process_chunk, &bc);
	end_query(&bc);
	error_context_stack = errcb.previous;
	SetUserIdAndSecContext(save_userid, save_sec_context);
	totals->num_input = bc.num_input;
	totals->has_max_event_time = bc.has_max_event_time;
	totals->max_event_time = bc.max_event_time;
}

/*
 * After the batch's transaction committed, outside any transaction (the
 * source starts one if it needs one): the source's work that must wait for
 * the commit.  A crash before it only delays it: the source does it again
 * before its next batch.  run_batch, inside the caller's transaction, never
 * gets here: its source catches up before its next batch.
 */
void
stm_batch_after_commit(StmRuntime *rt)
{
	if (rt->source && rt->source->routine->after_commit)
		rt->source->routine->after_commit(rt->source, rt->stream_id);
	if (rt->sink && rt->sink->routine->after_commit)
		rt->sink->routine->after_commit(rt->sink);
}

/*
 * The worker, outside any transaction: a sink that delivers after the
 * commit sends what committed batches left (SinkRoutine.deliver); busy:
 * the next batch runs at once.  Nothing to do for a sink that is not open yet or writes in
 * the batch's transaction.
 */
StmSinkStatus
stm_runtime_deliver(StmRuntime *rt, bool busy)
{
	StmSinkStatus none = {0, false, NULL, NULL};

	if (rt->sink == NULL || rt->sink->routine->deliver == NULL)
		return none;
	return rt->sink->routine->deliver(rt->sink, busy);
}

/*
 * Errors after which a stream waits rather than fails: its source cannot
 * be reached (class 08), or its sink cannot take a batch now (53000, see
 * StmSinkRoutine.capacity).  The worker retries without counting them.
 */
bool
stm_error_is_waiting(int sqlerrcode)
{
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_CONNECTION_EXCEPTION ||
		sqlerrcode == ERRCODE_INSUFFICIENT_RESOURCES;
}

/*
 * The worker (or a parallel helper) is idle: sleep until the runtime's
 * source may have records, the latch is set, or timeout_ms pass; true when
 * the source says records may have arrived.  It reads the source's queue
 * outside any transaction: an error there is logged and slept off, and the
 * next plan or share (in a transaction) meets and reports it.
 */
bool
stm_runtime_wait(StmRuntime *rt, long timeout_ms)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool arrived = false;

	PG_TRY();
	{
		arrived = stm_source_wait(rt->source, timeout_ms);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	PG_END_TRY();
	return arrived;
}

/*
 * A runtime given up on error (run_batch's): its parallel helpers are told
 * to stop and its segment detached, without waiting for them; the rest
 * goes with the memory context.
 */
void
stm_runtime_abandon(StmRuntime *rt)
{
	stm_parallel_abandon(rt->parallel);
	rt->parallel = NULL;
}

/* The end of a runtime: its source and sink let go of what they hold. */
void
stm_runtime_close(StmRuntime *rt)
{
	stm_parallel_stop(rt->parallel);
	rt->parallel = NULL;
	stm_source_close(rt->source);
	rt->source = NULL;
	if (rt->sink && rt->sink->routine->close)
		rt->sink->routine->close(rt->sink);
	rt->sink = NULL;
}
