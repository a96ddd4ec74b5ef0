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
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/regproc.h"
#include "catalog/namespace.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "aggstate.h"
#include "batch.h"
#include "dedup.h"
#include "guc.h"
#include "parse.h"
#include "query.h"
#include "sink_table.h"

/* State of one batch while its records flow through. */
typedef struct BatchContext
{
	StmStreamDef *def;
	StmKafka   *kc;
	StmParser	parser;
	TupleDesc	source_desc;
	int			ndeclared;		/* declared columns; metadata follows */
	int			event_time_att; /* -1: none */
	TupleTableSlot *source_slot;
	EState	   *estate;
	ExprContext *econtext;
	StmProjector *projector;
	StmSink    *sink;
	ExprState  *qual;			/* aggregate streams: WHERE */
	StmAggBatch *aggbatch;		/* aggregate streams: the batch's groups */
	StmDedup   *dedup;			/* dedup_keys */
	Datum	   *out_values;
	bool	   *out_nulls;
	MemoryContext chunk_cxt;
	/* counters */
	int64		num_input;
	int64		num_bad;
	int64		num_dedup;
	bool		has_max_event_time;
	TimestampTz max_event_time;
} BatchContext;

/* A parsed record: the source row, or the error that made it bad. */
typedef struct ParsedRecord
{
	Datum	   *values;
	bool	   *nulls;
	ErrorData  *error;
	bool		drop;			/* bad, late or a duplicate */
} ParsedRecord;

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
 * Errors that a retry cannot cure: bad data (class 22), lost source data and
 * on_bad_record => 'fail'.  The stream fails at once instead of retrying.
 */
bool
stm_error_is_permanent(int sqlerrcode)
{
	return ERRCODE_TO_CATEGORY(sqlerrcode) == ERRCODE_DATA_EXCEPTION ||
		sqlerrcode == ERRCODE_DATA_CORRUPTED;
}

static void
parse_one(BatchContext *bc, StmKafkaPartition *part, rd_kafka_message_t *m,
		  ParsedRecord *rec)
{
	int			natts = bc->source_desc->natts;

	rec->values = palloc(sizeof(Datum) * natts);
	rec->nulls = palloc(sizeof(bool) * natts);
	rec->error = NULL;
	stm_parse_record(&bc->parser, m->payload, (int) m->len, rec->values, rec->nulls);
	stm_kafka_fill_metadata(bc->kc, part, m, rec->values + bc->ndeclared,
							rec->nulls + bc->ndeclared);
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
parse_in_subxact(BatchContext *bc, StmKafkaPartition *part,
				 rd_kafka_message_t **msgs, ParsedRecord *recs,
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
			parse_one(bc, part, msgs[i], &recs[i]);
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

static void
write_dead_letter(BatchContext *bc, rd_kafka_message_t *m, ErrorData *edata)
{
	Oid			types[6] = {TEXTOID, TEXTOID, TEXTOID, BYTEAOID, TEXTOID, TEXTOID};
	Datum		values[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	StringInfoData pos;
	bytea	   *raw;
	int			nest;

	initStringInfo(&pos);
	appendStringInfoString(&pos, "{\"topic\": ");
	escape_json(&pos, rd_kafka_topic_name(m->rkt));
	appendStringInfo(&pos, ", \"partition\": %d, \"offset\": " INT64_FORMAT "}",
					 m->partition, (int64) m->offset);
	raw = palloc(m->len + VARHDRSZ);
	SET_VARSIZE(raw, m->len + VARHDRSZ);
	if (m->len > 0)
		memcpy(VARDATA(raw), m->payload, m->len);

	values[0] = CStringGetTextDatum(bc->def->name);
	values[1] = CStringGetTextDatum(bc->def->source);
	values[2] = CStringGetTextDatum(pos.data);
	values[3] = PointerGetDatum(raw);
	if (m->payload == NULL)
		nulls[3] = 'n';
	values[4] = CStringGetTextDatum(edata->detail ?
									psprintf("%s: %s", edata->message, edata->detail) :
									edata->message);
	values[5] = CStringGetTextDatum(unpack_sql_state(edata->sqlerrcode));

	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (SPI_execute_with_args("INSERT INTO streaming.dead_letters (stream, source, position, raw, error, sqlstate) "
							  "VALUES ($1, $2, $3::jsonb, $4, $5, $6)",
							  6, types, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write streaming.dead_letters");
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
}

static void
handle_bad_record(BatchContext *bc, rd_kafka_message_t *m, ErrorData *edata)
{
	bc->num_bad++;
	if (strcmp(bc->kc->on_bad_record, "fail") == 0)
		ereport(ERROR,
				(errcode(edata->sqlerrcode),
				 errmsg("bad record at Kafka topic \"%s\" partition %d offset " INT64_FORMAT ": %s",
						rd_kafka_topic_name(m->rkt), m->partition, (int64) m->offset,
						edata->message),
				 edata->detail ? errdetail("%s", edata->detail) : 0,
				 errhint("The source has on_bad_record => 'fail'; use 'dead_letter' to set bad records aside.")));
	if (strcmp(bc->kc->on_bad_record, "dead_letter") == 0)
		write_dead_letter(bc, m, edata);
}

/* Called by the Kafka source with each chunk of messages of the batch. */
static void
process_chunk(void *arg, StmKafkaPartition *part, rd_kafka_message_t **msgs, int n)
{
	BatchContext *bc = arg;
	ParsedRecord *recs;
	MemoryContext oldcxt;

	MemoryContextReset(bc->chunk_cxt);
	oldcxt = MemoryContextSwitchTo(bc->chunk_cxt);
	recs = palloc0(sizeof(ParsedRecord) * n);
	MemoryContextSwitchTo(oldcxt);
	bc->num_input += n;

	if (!parse_in_subxact(bc, part, msgs, recs, 0, n, false))
	{
		for (int i = 0; i < n; i++)
			(void) parse_in_subxact(bc, part, msgs, recs, i, i + 1, true);
	}

	for (int i = 0; i < n; i++)
	{
		if (recs[i].error)
		{
			handle_bad_record(bc, msgs[i], recs[i].error);
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
		ExecClearTuple(slot);
		memcpy(slot->tts_values, rec->values, sizeof(Datum) * bc->source_desc->natts);
		memcpy(slot->tts_isnull, rec->nulls, sizeof(bool) * bc->source_desc->natts);
		ExecStoreVirtualTuple(slot);
		bc->econtext->ecxt_scantuple = slot;
		if (bc->aggbatch)
		{
			if (bc->qual == NULL || ExecQual(bc->qual, bc->econtext))
				stm_aggbatch_add(bc->aggbatch, bc->econtext);
		}
		else if (stm_query_project(bc->projector, bc->econtext, bc->out_values, bc->out_nulls))
			stm_sink_put(bc->sink, bc->out_values, bc->out_nulls);
		ResetExprContext(bc->econtext);
	}
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
	int			nest = stm_catalog_pin_search_path();

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
	stm_catalog_unpin_search_path(nest);
	return result;
}

static void
record_batch(BatchContext *bc, int64 batch_id, TimestampTz started,
			 char *start_json, char *end_json, int64 num_output, int64 num_state_rows,
			 int64 num_late_rows, bool no_data_batch_due,
			 bool has_watermark, TimestampTz watermark, TimestampTz idle_clock)
{
	Oid			types[17] = {INT4OID, INT8OID, TIMESTAMPTZOID, INT8OID, INT8OID, INT8OID,
		TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, INT4OID, INT8OID, INT8OID, BOOLOID, INT8OID,
	TIMESTAMPTZOID};
	Datum		values[17];
	char		nulls[17] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			nest;

	values[0] = Int32GetDatum(bc->def->id);
	values[1] = Int64GetDatum(batch_id);
	values[2] = TimestampTzGetDatum(started);
	values[3] = Int64GetDatum(bc->num_input);
	values[4] = Int64GetDatum(num_output);
	values[5] = Int64GetDatum(bc->num_bad);
	values[6] = TimestampTzGetDatum(bc->max_event_time);
	nulls[6] = bc->has_max_event_time ? ' ' : 'n';
	values[7] = TimestampTzGetDatum(watermark);
	nulls[7] = has_watermark ? ' ' : 'n';
	values[8] = CStringGetTextDatum(start_json);
	values[9] = CStringGetTextDatum(end_json);
	if (bc->kc->data_loss.len > 0)
		values[10] = CStringGetTextDatum(psprintf("[%s]", bc->kc->data_loss.data));
	else
		nulls[10] = 'n';
	values[11] = Int32GetDatum(stm_guc_progress_history);
	values[12] = Int64GetDatum(num_state_rows);
	values[13] = Int64GetDatum(num_late_rows);
	values[14] = BoolGetDatum(no_data_batch_due);
	values[15] = Int64GetDatum(bc->num_dedup);
	values[16] = TimestampTzGetDatum(idle_clock);
	nulls[16] = idle_clock != 0 ? ' ' : 'n';

	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (SPI_execute_with_args("INSERT INTO streaming.batches (stream_id, batch_id, started_at, duration, "
							  "num_input_rows, num_output_rows, num_bad_rows, max_event_time, watermark, "
							  "start_positions, end_positions, data_loss, num_state_rows, num_late_rows, num_dedup_rows) "
							  "VALUES ($1, $2, $3, clock_timestamp() - $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb, $11::jsonb, $13, $14, $16)",
							  17, types, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write streaming.batches");
	if (SPI_execute_with_args("DELETE FROM streaming.batches WHERE stream_id = $1 AND batch_id <= $2 - $12",
							  17, types, values, nulls, false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not trim streaming.batches");
	if (SPI_execute_with_args("UPDATE streaming.stream_defs SET last_batch_id = $2, watermark = $8, "
							  "no_data_batch_due = $15, idle_clock_at = coalesce($17, idle_clock_at), "
							  "failures = 0, last_error = NULL, source_error = NULL WHERE id = $1",
							  17, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update streaming.stream_defs");
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
}

/*
 * foreachBatch (SPEC 3.2): the batch's output rows go to a temporary table,
 * which the stream's sink_function gets with the batch id, in the batch's
 * transaction; the table is dropped after the call.
 */
static Oid
batch_table(StmQueryInfo *qi, int64 batch_id, bool update)
{
	char	   *name = psprintf("streaming_batch_" INT64_FORMAT, batch_id);
	Oid			relid;

	SPI_connect();
	/*
	 * update mode: the sink's key, since a group merged in two parts of the
	 * batch (aggstate.c) is upserted twice; else no key
	 */
	if (SPI_execute(stm_query_sink_ddl(qi, psprintf("pg_temp.%s", quote_identifier(name)), update),
					false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create the batch table");
	SPI_finish();
	CommandCounterIncrement();
	relid = get_relname_relid(name, LookupExplicitNamespace("pg_temp", false));
	return relid;
}

static void
call_sink_function(StmStreamDef *def, int64 batch_id)
{
	Oid			types[2] = {INT8OID, REGCLASSOID};
	Datum		values[2] = {Int64GetDatum(batch_id), ObjectIdGetDatum(def->sink)};

	SPI_connect();
	if (SPI_execute_with_args(psprintf("SELECT %s($1, $2)",
									   quote_qualified_identifier(get_namespace_name(get_func_namespace(def->sink_function)),
																  get_func_name(def->sink_function))),
							  2, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not call the sink function of stream \"%s\"", def->name);
	if (SPI_execute(psprintf("DROP TABLE pg_temp.%s",
							 quote_identifier(get_rel_name(def->sink))), false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not drop the batch table");
	SPI_finish();
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
 * Run one batch of the stream in the current transaction.  Returns its batch
 * id, or -1 when there was nothing to do.
 */
int64
stm_batch_run(StmRuntime *rt)
{
	BatchContext bc = {0};
	StmStreamDef *def;
	StmSourceDef *src;
	StmQueryInfo *qi;
	Relation	view;
	Relation	sink_rel;
	TimestampTz started = GetCurrentTimestamp();
	int64		total;
	int64		batch_id;
	int			nest;
	char	   *start_json;
	char	   *end_json;
	bool		has_watermark = false;
	TimestampTz watermark = 0;
	int64		num_output;
	int64		num_state_rows = 0;
	int64		num_late_rows = 0;
	TimestampTz idle_advance = 0;	/* an idle batch: the watermark it sets */
	bool		keep_late;
	MemoryContext oldcxt;
	ListCell   *lc;

	/* the row lock serialises batches with drop, reset and other batches */
	def = stm_catalog_get_stream_by_id(rt->stream_id, true);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream with id %d does not exist", rt->stream_id)));
	src = stm_catalog_get_source(def->source, false);

	if (rt->kafka == NULL)
	{
		oldcxt = MemoryContextSwitchTo(rt->cxt);
		rt->kafka = stm_kafka_open(src->name, true);
		rt->kafka->bounded = rt->bounded;
		MemoryContextSwitchTo(oldcxt);
	}
	bc.def = def;
	bc.kc = rt->kafka;

	total = stm_kafka_plan(bc.kc, def->id, def->positions_initialized,
						   last_trigger_time(rt, def));
	if (!def->positions_initialized)
		stm_catalog_mark_positions_initialized(def->id);
	/* nothing new: still a batch when the last one moved the watermark (SPEC 3.1) */
	if (total == 0 && !(def->no_data_batch_due && def->trigger_kind != STM_TRIGGER_ONCE))
		idle_advance = idle_watermark(def, GetCurrentTimestamp());
	if (total == 0 && !(def->no_data_batch_due && def->trigger_kind != STM_TRIGGER_ONCE) &&
		idle_advance == 0)
	{
		bool		unsaved = bc.kc->data_loss.len > 0;

		foreach(lc, bc.kc->partitions)
			if (!((StmKafkaPartition *) lfirst(lc))->stored)
				unsaved = true;
		/* pin where 'latest' pointed, so later records are not skipped */
		if (unsaved)
			stm_kafka_save_positions(bc.kc, def->id);
		return -1;
	}
	batch_id = def->last_batch_id + 1;
	start_json = stm_kafka_positions_json(bc.kc, false);
	end_json = stm_kafka_positions_json(bc.kc, true);

	/* the query is analysed as its creator wrote it */
	nest = NewGUCNestLevel();
	(void) set_config_option("search_path", def->search_path, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	qi = stm_query_analyze(def->query);
	if (qi->source_view != src->view)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the query of stream \"%s\" no longer reads its source \"%s\"",
						def->name, def->source)));
	ExecCheckRTPerms(qi->query->rtable, true);

	view = relation_open(src->view, AccessShareLock);
	if (OidIsValid(def->sink_function))
		def->sink = batch_table(qi, batch_id, strcmp(def->output_mode, "update") == 0);
	sink_rel = OidIsValid(def->sink) ? try_relation_open(def->sink, RowExclusiveLock) : NULL;
	if (sink_rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the sink table of stream \"%s\" was dropped", def->name),
				 errhint("Drop the stream, or create the table again.")));

	keep_late = strcmp(def->late_rows, "keep") == 0;
	bc.source_desc = CreateTupleDescCopy(RelationGetDescr(view));
	bc.ndeclared = bc.source_desc->natts - STM_KAFKA_META_COLUMNS -
		(bc.kc->include_headers ? 1 : 0);
	bc.event_time_att = def->event_time ? view_attno(bc.source_desc, def->event_time) : -1;
	stm_parser_init(&bc.parser, bc.kc->format, bc.kc->has_columns, ',',
					bc.source_desc, bc.ndeclared);
	bc.estate = CreateExecutorState();
	bc.econtext = GetPerTupleExprContext(bc.estate);
	bc.source_slot = MakeSingleTupleTableSlot(bc.source_desc, &TTSOpsVirtual);
	if (qi->agg)
	{
		bc.qual = stm_query_compile_qual(qi);
		bc.aggbatch = stm_aggbatch_begin(qi->agg, def->id, def->output_mode, sink_rel,
										 OidIsValid(def->sink_function),
										 def->has_watermark, previous_watermark(def),
										 bc.event_time_att,
										 keep_late ? def->name : NULL, bc.ndeclared);
		/* a window's column is the event time; without a window, event_time's */
		if (qi->agg->event_time_att >= 0)
			bc.event_time_att = qi->agg->event_time_att;
	}
	else
	{
		bc.sink = stm_sink_open(sink_rel, bc.estate);
		bc.projector = stm_query_compile(qi, sink_rel, bc.estate);
	}
	bc.out_values = palloc(sizeof(Datum) * RelationGetDescr(sink_rel)->natts);
	bc.out_nulls = palloc(sizeof(bool) * RelationGetDescr(sink_rel)->natts);
	/* a large first block survives each reset: no malloc churn per chunk */
	bc.chunk_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming chunk",
										 0, 4 * 1024 * 1024, 8 * 1024 * 1024);

	if (def->has_dedup)
		bc.dedup = stm_dedup_begin(def->id, bc.source_desc, stm_catalog_dedup_keys(def->id),
								   def->has_watermark ? bc.event_time_att : -1,
								   previous_watermark(def), def->dedup_within_watermark,
								   def->watermark_delay.time +
								   (int64) def->watermark_delay.day * USECS_PER_DAY,
								   keep_late ? def->name : NULL, bc.ndeclared);
	stm_kafka_fetch(bc.kc, process_chunk, &bc);
	if (bc.dedup)
	{
		int64		dedup_late;
		int64		dedup_state;

		stm_dedup_finish(bc.dedup, &bc.num_dedup, &dedup_late, &dedup_state);
		num_late_rows += dedup_late;
		num_state_rows += dedup_state;
	}

	if (bc.aggbatch)
	{
		int64		agg_state;
		int64		agg_late;

		num_output = stm_aggbatch_finish(bc.aggbatch, &agg_state, &agg_late);
		num_state_rows += agg_state;
		num_late_rows += agg_late;
	}
	else
	{
		stm_sink_close(bc.sink);
		num_output = bc.sink->rows;
	}
	ExecDropSingleTupleTableSlot(bc.source_slot);
	FreeExecutorState(bc.estate);
	MemoryContextDelete(bc.chunk_cxt);
	table_close(sink_rel, NoLock);
	relation_close(view, NoLock);
	if (OidIsValid(def->sink_function))
		call_sink_function(def, batch_id);
	AtEOXact_GUC(true, nest);

	/* watermark = max event time seen - delay; it never moves back */
	if (def->has_watermark)
	{
		has_watermark = true;
		watermark = previous_watermark(def);
		if (bc.has_max_event_time)
		{
			TimestampTz candidate = DatumGetTimestampTz(
				DirectFunctionCall2(timestamptz_mi_interval,
									TimestampTzGetDatum(bc.max_event_time),
									IntervalPGetDatum(&def->watermark_delay)));

			watermark = Max(watermark, candidate);
		}
		if (idle_advance != 0)
			watermark = Max(watermark, idle_advance);
	}

	stm_kafka_save_positions(bc.kc, def->id);
	/*
	 * a data batch of a stateful stream that moved the watermark makes a
	 * no-data batch due (not for 'once')
	 */
	record_batch(&bc, batch_id, started, start_json, end_json, num_output, num_state_rows,
				 num_late_rows,
				 (bc.aggbatch != NULL || bc.dedup != NULL) && (bc.num_input > 0 || idle_advance != 0) &&
				 has_watermark && watermark > previous_watermark(def) &&
				 def->trigger_kind != STM_TRIGGER_ONCE,
				 has_watermark, watermark,
				 total > 0 ? started : idle_advance != 0 ? GetCurrentTimestamp() : 0);

	if (stm_guc_log_batches)
		ereport(LOG,
				(errmsg("stream \"%s\" ran batch " INT64_FORMAT ": %lld input rows, %lld output rows, %lld bad rows",
						def->name, batch_id, (long long) bc.num_input,
						(long long) num_output, (long long) bc.num_bad)));
	return batch_id;
}
