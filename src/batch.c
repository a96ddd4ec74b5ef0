/*
 * batch.c: one micro-batch, start to commit (SPEC 6).
 *
 * In the caller's transaction: lock the stream's row, plan every source's
 * bounds from the stored positions, fetch, parse, filter and project,
 * write the sink, then write the new positions, the progress row and the
 * stream's state.  Nothing is acknowledged anywhere else, so a crash at
 * any point leaves either the whole batch or none of it.
 *
 * The batch runs over the runtime's list of sources (runtime.h; one today),
 * each an input of its own (BatchInput): its plan, its records, its
 * positions.  Two choices are made once per batch: how the records are
 * read (BatchFetch: by this process, or by the runtime's parallel
 * helpers), and where the results go (BatchOutput: into the sink and the
 * stream's state, or, in a helper's share, to the leader).
 *
 * Records are parsed in chunks inside a subtransaction; when a chunk fails,
 * its records are parsed again one subtransaction each, and the ones that
 * fail go to streaming.dead_letters (or are skipped, or stop the stream, by
 * on_bad_record).  Errors after parsing (the query's expressions, the sink's
 * constraints) fail the whole batch.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
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
#include "ssjoin.h"
#include "statetable.h"

typedef struct BatchContext BatchContext;

/* One source's part of a batch: its plan, and its records as the query sees them. */
typedef struct BatchInput
{
	BatchContext *bc;
	StmSourceRuntime *srt;
	StmSource  *src;
	Relation	view;			/* the source's view: its rows' columns */
	TupleDesc	desc;
	int			ndeclared;		/* declared columns; metadata follows */
	int			event_time_att; /* -1: none */
	StmParser	parser;
	TupleTableSlot *slot;
	int64		num_planned;	/* what its plan bounded */
	int			join_sides;		/* a join of two sources: the sides it feeds (bit 1 left, 2 right) */
	int			join_time_att;	/* and its side's event-time column, or -1 */
	int			index;			/* its place in the batch's inputs (a helper's rows name it) */
	/* the leader: helpers' source rows of this input, copied, until a chunk's worth is run */
	MinimalTuple *pending;
	int			npending;
	MemoryContext pending_cxt;
	TupleTableSlot *pending_slot;
} BatchInput;

/*
 * Where the batch's results go, chosen once per batch: into the sink and
 * the stream's state (output_to_sink), or, for a parallel helper's share
 * of its leader's batch, to the leader (output_to_leader).
 */
typedef struct BatchOutput
{
	/* the sink's writer and the operators of the query (after its analysis) */
	void		(*begin) (BatchContext *bc, StmRuntime *rt);
	/* a stateless query's output row */
	void		(*row) (BatchContext *bc, Datum *values, bool *nulls);
	/* a record that could not be parsed */
	void		(*bad) (BatchContext *bc, BatchInput *in, const StmBadRecord *bad);
	/* after the last record: state merged and the sink written, or the share done */
	void		(*end) (BatchContext *bc);
} BatchOutput;

/* How the batch's records are read, chosen once per batch. */
typedef void (*BatchFetch) (BatchContext *bc, StmRuntime *rt);

/* State of one batch while its records flow through. */
struct BatchContext
{
	StmStreamDef *def;
	const BatchOutput *output;
	BatchFetch	fetch;
	List	   *inputs;			/* BatchInput, one per source of the runtime */
	StmQueryInfo *qi;
	int			guc_nest;		/* the stream's search_path, set for the query */
	EState	   *estate;
	ExprContext *econtext;
	StmProjector *projector;
	StmSinkOutput *sink_output; /* the query's output rows, as the sink gets them */
	StmSinkBatch *sink;
	ExprState  *qual;			/* aggregate streams: WHERE */
	StmAggBatch *aggbatch;		/* aggregate streams: the batch's groups */
	StmJoin    *join;			/* a query that reads tables: run by the executor */
	StmJoinRun *ssjoin;			/* a query that joins two sources (ssjoin.c) */
	char	   *state_operators;	/* its state per side, for progress */
	bool		side_has_max[2];	/* its sides' largest event times in the batch */
	TimestampTz side_max[2];
	char	   *side_watermarks;	/* the sides' watermarks after the batch (jsonb text) */
	char	   *state_rows;		/* the state tables' rows after the batch (jsonb text) */
	StmDedup   *dedup;			/* dedup_keys */
	Datum	   *out_values;
	bool	   *out_nulls;
	MemoryContext chunk_cxt;
	StmHelperOut *share;		/* a parallel helper's share: its queue to the leader */
	bool		share_rows;		/* it sends source rows (the leader runs the stateful step) */
	StmParallel *helpers;		/* the leader's helpers, drained between its own chunks */
	StmParallelReceiver *helpers_recv;
	StmShareTotals *helpers_totals;
	bool		pending_filtered;	/* helpers' source rows are past WHERE (BatchInput.pending) */
	/* the row being processed, for errcontext */
	BatchInput *error_input;
	Datum	   *error_row;
	bool	   *error_nulls;
	/* the batch, as progress shows it */
	int64		batch_id;
	TimestampTz started;
	char	   *start_positions;	/* the plans' bounds, as progress shows them */
	char	   *end_positions;
	TimestampTz idle_advance;	/* an idle batch: the watermark it sets (0: none) */
	int64		num_input_planned;	/* what the plans bounded */
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
};

/* A parsed record: the source row, or the error that made it bad. */
typedef struct ParsedRecord
{
	Datum	   *values;
	bool	   *nulls;
	ErrorData  *error;
	bool		meta_ok;		/* the metadata columns are filled */
	bool		drop;			/* bad, late or a duplicate */
} ParsedRecord;

/* helpers' source rows run through the leader's batch this many at a time */
#define STM_PENDING_CHUNK 1000

static const BatchOutput output_to_sink;
static const BatchOutput output_to_leader;

static void begin_stream_join(BatchContext *bc, StmRuntime *rt);

static int64 run_batch_as_owner(StmRuntime *rt, StmStreamDef *def);

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

/* ---- records ------------------------------------------------------------ */

static void
parse_one(BatchInput *in, StmRecord *r, ParsedRecord *rec)
{
	int			natts = in->desc->natts;

	rec->values = palloc(sizeof(Datum) * natts);
	rec->nulls = palloc(sizeof(bool) * natts);
	rec->error = NULL;
	/* metadata first: it tells the record's position if parsing fails */
	in->src->routine->fill_metadata(in->src, r, rec->values + in->ndeclared,
									rec->nulls + in->ndeclared);
	rec->meta_ok = true;
	stm_source_parse(&in->parser, r, rec->values, rec->nulls);
	if (in->event_time_att >= 0 && rec->nulls[in->event_time_att])
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("event time column \"%s\" is null",
						NameStr(TupleDescAttr(in->desc, in->event_time_att)->attname))));
}

/*
 * Parse records [from, to) in one subtransaction.  Returns false (and rolls
 * the subtransaction back) when any of them failed; with single, records the
 * error in the record instead.
 */
static bool
parse_in_subxact(BatchInput *in, StmRecord *records, ParsedRecord *recs,
				 int from, int to, bool single)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(in->bc->chunk_cxt);
	PG_TRY();
	{
		for (int i = from; i < to; i++)
			parse_one(in, &records[i], &recs[i]);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(in->bc->chunk_cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		/* what parsing needs cannot be reached (a schema registry): no record's fault, the batch waits */
		if (stm_error_is_waiting(edata->sqlerrcode))
			ReThrowError(edata);
		if (single)
			recs[from].error = edata;
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* The position of a record as JSON text (its metadata columns are filled). */
static char *
record_position(BatchInput *in, ParsedRecord *rec)
{
	if (!rec->meta_ok)
		return pstrdup("{}");
	return stm_source_position(in->src, rec->values + in->ndeclared, rec->nulls + in->ndeclared);
}

/* on_bad_record, for a bad record of this batch or of a helper's share */
static void
apply_bad_record(BatchContext *bc, BatchInput *in, const StmBadRecord *bad)
{
	bc->num_bad++;
	if (in->src->on_bad_record == STM_BAD_RECORD_FAIL)
		ereport(ERROR,
				(errcode(bad->sqlerrcode),
				 errmsg("bad record in source \"%s\" at %s: %s",
						in->srt->def->name, bad->position, bad->message),
				 bad->detail ? errdetail("%s", bad->detail) : 0,
				 errhint("The source has on_bad_record => 'fail'; use 'dead_letter' to set bad records aside.")));
	if (in->src->on_bad_record == STM_BAD_RECORD_DEAD_LETTER)
		stm_deadletter_write(bc->def->id, bad);
}

/* A record that could not be parsed, as dead letters describe it, to the batch's output. */
static void
handle_bad_record(BatchInput *in, StmRecord *r, ParsedRecord *rec, ErrorData *edata)
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
	bad.position = record_position(in, rec);
	in->bc->output->bad(in->bc, in, &bad);
}

/*
 * Errors while a row goes through the query and into the sink or the state
 * name the stream and the row's position (as COPY names the line).
 */
static void
batch_error_callback(void *arg)
{
	BatchContext *bc = arg;
	BatchInput *in = bc->error_input;

	if (bc->error_row && in)
		errcontext("stream \"%s\", source \"%s\" at %s", bc->def->name, in->srt->def->name,
				   stm_source_position(in->src, bc->error_row + in->ndeclared,
									   bc->error_nulls + in->ndeclared));
	else
		errcontext("stream \"%s\"", bc->def->name);
}

/* Every good row moves the watermark, duplicates and late ones too (as Spark). */
static void
note_event_time(BatchContext *bc, TimestampTz ts)
{
	if (!bc->has_max_event_time || ts > bc->max_event_time)
		bc->max_event_time = ts;
	bc->has_max_event_time = true;
}

/* dedup_keys: before the query (in the chunk's memory, as the records) */
static void
drop_duplicates(BatchContext *bc, ParsedRecord *recs, int n)
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

/*
 * One source row through the query: joined, aggregated or projected, or,
 * in a helper's share that leaves the stateful step to the leader, sent
 * to it (past WHERE where the query's qual is set).  filtered: a helper
 * applied WHERE already.
 */
static void
process_row(BatchContext *bc, TupleTableSlot *slot, bool filtered)
{
	bc->econtext->ecxt_scantuple = slot;
	if (bc->ssjoin)
	{
		/* the join runs at the batch's end */
		for (int s = 0; s < 2; s++)
			if (bc->error_input->join_sides & (1 << s))
				stm_ssjoin_add(bc->ssjoin, s, slot);
	}
	else if (bc->join)
		stm_join_add(bc->join, slot);	/* the query runs at the batch's end */
	else if (bc->aggbatch)
	{
		if (filtered || bc->qual == NULL || ExecQual(bc->qual, bc->econtext))
			stm_aggbatch_add(bc->aggbatch, bc->econtext);
	}
	else if (bc->share_rows)
	{
		if (bc->qual == NULL || ExecQual(bc->qual, bc->econtext))
			stm_parallel_send_source_row(bc->share, bc->error_input->index,
										 slot->tts_tupleDescriptor,
										 slot->tts_values, slot->tts_isnull);
	}
	else if (stm_query_project(bc->projector, bc->econtext, bc->out_values, bc->out_nulls))
		bc->output->row(bc, bc->out_values, bc->out_nulls);
	ResetExprContext(bc->econtext);
}

static void process_parsed(BatchInput *in, ParsedRecord *recs, int n, bool filtered);

/* Called by a source with each chunk of records of the batch (arg: its BatchInput). */
static void
process_chunk(void *arg, StmRecord *records, int n)
{
	BatchInput *in = arg;
	BatchContext *bc = in->bc;
	ParsedRecord *recs;

	MemoryContextReset(bc->chunk_cxt);
	recs = MemoryContextAllocZero(bc->chunk_cxt, sizeof(ParsedRecord) * n);
	bc->num_input += n;

	if (!parse_in_subxact(in, records, recs, 0, n, false))
	{
		for (int i = 0; i < n; i++)
			(void) parse_in_subxact(in, records, recs, i, i + 1, true);
	}
	STM_FAULT_POINT("after_parse");

	for (int i = 0; i < n; i++)
	{
		if (recs[i].error)
		{
			handle_bad_record(in, &records[i], &recs[i], recs[i].error);
			recs[i].drop = true;
		}
		else if (in->event_time_att >= 0)
			note_event_time(bc, DatumGetTimestampTz(recs[i].values[in->event_time_att]));
	}
	process_parsed(in, recs, n, false);
	if (bc->share)
		STM_FAULT_POINT("helper_chunk");
}

/*
 * A chunk's parsed rows (this process's, or a helper's: filtered, past
 * WHERE there) after dedup, each through the query, in their order.
 */
static void
process_parsed(BatchInput *in, ParsedRecord *recs, int n, bool filtered)
{
	BatchContext *bc = in->bc;

	if (bc->dedup)
		drop_duplicates(bc, recs, n);

	bc->error_input = in;
	for (int i = 0; i < n; i++)
	{
		ParsedRecord *rec = &recs[i];
		TupleTableSlot *slot = in->slot;

		if (rec->drop)
			continue;
		bc->error_row = rec->values;
		bc->error_nulls = rec->nulls;
		ExecClearTuple(slot);
		memcpy(slot->tts_values, rec->values, sizeof(Datum) * in->desc->natts);
		memcpy(slot->tts_isnull, rec->nulls, sizeof(bool) * in->desc->natts);
		ExecStoreVirtualTuple(slot);
		process_row(bc, slot, filtered);
	}
	bc->error_row = NULL;
}

/* ---- the batch's progress ------------------------------------------------ */

/*
 * The positions of the batch's inputs as one JSON object (progress): one
 * source's own, or the members of each.
 */
static char *
positions_json(BatchContext *bc, bool end)
{
	StringInfoData buf;
	ListCell   *lc;

	if (list_length(bc->inputs) == 1)
	{
		BatchInput *in = linitial(bc->inputs);

		return in->src->routine->positions_json(in->src, end);
	}
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);
		char	   *json = in->src->routine->positions_json(in->src, end);
		size_t		len = strlen(json);

		/* the object's members, without its braces */
		if (len > 2)
			appendStringInfo(&buf, "%s%.*s", buf.len > 1 ? ", " : "", (int) (len - 2), json + 1);
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/* Data lost since the last batch, over the inputs (a JSON array), or NULL. */
static char *
data_loss_json(BatchContext *bc)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);
		char	   *json = in->src->routine->data_loss_json ?
			in->src->routine->data_loss_json(in->src) : NULL;

		if (json && strlen(json) > 2)
			appendStringInfo(&buf, "%s%.*s", buf.len > 0 ? ", " : "",
							 (int) strlen(json) - 2, json + 1);
	}
	return buf.len > 0 ? psprintf("[%s]", buf.data) : NULL;
}

/* The batch's progress row and the stream's new state, in the batch's transaction. */
static void
record_batch(BatchContext *bc, StmRuntime *rt, bool no_data_batch_due, TimestampTz idle_clock)
{
	StmBatchProgress p = {0};

	p.stream_id = bc->def->id;
	p.batch_id = bc->batch_id;
	p.started_at = bc->started;
	p.num_input_rows = bc->num_input;
	p.num_output_rows = bc->num_output;
	/* a sink that delivers after the commit counts its rows as they arrive */
	p.num_delivered_rows = bc->sink->deferred ? 0 : bc->num_output;
	p.num_bad_rows = bc->num_bad;
	p.num_late_rows = bc->num_late;
	p.num_dedup_rows = bc->num_dedup;
	p.num_state_rows = bc->num_state_rows;
	p.has_max_event_time = bc->has_max_event_time;
	p.max_event_time = bc->max_event_time;
	p.has_watermark = bc->has_watermark;
	p.watermark = bc->watermark;
	p.start_positions = bc->start_positions;
	p.end_positions = bc->end_positions;
	p.data_loss = data_loss_json(bc);
	p.no_data_batch_due = no_data_batch_due;
	p.idle_clock_at = idle_clock;
	p.source_error = stm_runtime_source_error(rt);
	p.state_operators = bc->state_operators;
	p.side_watermarks = bc->side_watermarks;
	p.state_rows = bc->state_rows;
	stm_catalog_record_batch(&p, stm_guc_progress_history);
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

/* watermark = max event time seen - delay, or the idle advance; it never moves back */
static void
advance_watermark(BatchContext *bc)
{
	StmStreamDef *def = bc->def;

	if (bc->qi && bc->qi->ssjoin)
	{
		StmStreamJoin *j = bc->qi->ssjoin;

		if (!j->sides[0].has_delay && !j->sides[1].has_delay)
		{
			/* no watermark: the sides' entries keep their state's rows only */
			(void) stm_ssjoin_watermark(j, bc->ssjoin, def->side_watermarks, bc->side_has_max,
										bc->side_max, GetCurrentTimestamp(),
										previous_watermark(def), &bc->side_watermarks);
			return;
		}
		bc->has_watermark = true;
		bc->watermark = stm_ssjoin_watermark(j, bc->ssjoin, def->side_watermarks, bc->side_has_max,
											 bc->side_max, GetCurrentTimestamp(),
											 previous_watermark(def), &bc->side_watermarks);
		return;
	}
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

/* ---- plan ---------------------------------------------------------------- */

/* The batch's inputs: one per source of the runtime, opened. */
static List *
make_inputs(BatchContext *bc, StmRuntime *rt)
{
	List	   *inputs = NIL;
	ListCell   *lc;

	foreach(lc, stm_runtime_open_sources(rt, bc->def))
	{
		BatchInput *in = palloc0(sizeof(BatchInput));

		in->bc = bc;
		in->srt = lfirst(lc);
		in->src = in->srt->src;
		in->event_time_att = -1;
		in->index = foreach_current_index(lc);
		/* a join: the first source is the left side's, the second the right's; one is both */
		in->join_sides = list_length(stm_runtime_open_sources(rt, bc->def)) == 1 ? 3 :
			foreach_current_index(lc) == 0 ? 1 : 2;
		inputs = lappend(inputs, in);
	}
	return inputs;
}

/*
 * Fix the batch's bounds on every source, each at most max_records
 * records (-1: no limit); false when there is no batch to run: nothing
 * new, no no-data batch due after a batch that moved the watermark (SPEC
 * 3.1), and no idle_timeout advance.
 */
static bool
plan_batch(BatchContext *bc, StmRuntime *rt, int64 max_records)
{
	StmStreamDef *def = bc->def;
	StmPlanContext ctx;
	bool		no_data_due = def->no_data_batch_due && def->trigger_kind != STM_TRIGGER_ONCE;
	ListCell   *lc;

	memset(&ctx, 0, sizeof(ctx));
	ctx.stream_id = def->id;
	ctx.initialized = def->positions_initialized;
	ctx.last_trigger_since = rt->started_at;
	ctx.has_source_started_at = def->has_source_started_at;
	ctx.source_started_at = def->source_started_at;
	ctx.batch_start = bc->started;
	ctx.max_records = max_records;
	ctx.chunk_size = 1000;		/* records fetch hands over at once: one subtransaction parses them */
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);

		in->src->problem = NULL;
		in->src->unreadable = false;
		in->num_planned = in->src->routine->plan(in->src, &ctx);
		/* what keeps the source from being read whole: source_error, now or with the batch */
		stm_runtime_note_plan(rt, in->srt);
		bc->num_input_planned += in->num_planned;
	}
	if (!def->positions_initialized)
		stm_catalog_mark_positions_initialized(def->id);
	if (bc->num_input_planned == 0 && !no_data_due)
		bc->idle_advance = def->watermarks ?
			(stm_ssjoin_idle_due(def->side_watermarks, def->max_watermark_policy,
								 previous_watermark(def), GetCurrentTimestamp()) ? 1 : 0) :
			idle_watermark(def, GetCurrentTimestamp());
	if (bc->num_input_planned == 0 && !no_data_due && bc->idle_advance == 0)
	{
		foreach(lc, bc->inputs)
		{
			BatchInput *in = lfirst(lc);

			if (in->src->routine->save_idle_positions)
				in->src->routine->save_idle_positions(in->src, def->id);
		}
		stm_catalog_set_source_error(def->id, stm_runtime_source_error(rt));
		return false;
	}
	bc->batch_id = def->last_batch_id + 1;
	bc->start_positions = positions_json(bc, false);
	bc->end_positions = positions_json(bc, true);
	return true;
}

/* ---- the query ----------------------------------------------------------- */

static int
view_attno(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
		if (strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
			return i;
	return -1;
}

/* An input's rows as the query sees them: its view's columns, parsed by its format. */
static void
open_input(BatchInput *in)
{
	StmStreamDef *def = in->bc->def;

	in->view = relation_open(in->srt->def->view, AccessShareLock);
	in->desc = CreateTupleDescCopy(RelationGetDescr(in->view));
	in->ndeclared = in->desc->natts - in->src->nmeta;
	in->event_time_att = in->bc->qi->ssjoin ? in->join_time_att :
		def->event_time ? view_attno(in->desc, def->event_time) : -1;
	stm_parser_init(&in->parser, in->src, in->desc, in->ndeclared);
	in->slot = MakeSingleTupleTableSlot(in->desc, &TTSOpsVirtual);
}

static void
close_input(BatchInput *in)
{
	ExecDropSingleTupleTableSlot(in->slot);
	relation_close(in->view, NoLock);
}

/* The single source's input (the operators of a one-source query read it). */
static BatchInput *
only_input(BatchContext *bc)
{
	Assert(list_length(bc->inputs) == 1);
	return linitial(bc->inputs);
}

/* The input a helper's message names (BatchInput.index). */
static BatchInput *
batch_input(BatchContext *bc, int index)
{
	if (index < 0 || index >= list_length(bc->inputs))
		elog(ERROR, "a parallel helper sent a row of source %d of a batch of %d",
			 index, list_length(bc->inputs));
	return list_nth(bc->inputs, index);
}

/*
 * The analysed query still reads the stream's sources, and a join's
 * watermarks are bound to its sides (each input's event time is its
 * side's: a NULL one is a bad record).
 */
static void
check_sources_read(BatchContext *bc)
{
	StmStreamDef *def = bc->def;
	StmQueryInfo *qi = bc->qi;
	StmStreamJoin *j = qi->ssjoin;
	BatchInput *first = linitial(bc->inputs);
	Oid			want[2];
	ListCell   *lc;

	want[0] = j ? j->sides[STM_JOIN_LEFT_SIDE].view : qi->source_view;
	want[1] = j ? j->sides[STM_JOIN_RIGHT_SIDE].view : InvalidOid;
	if (want[0] != first->srt->def->view ||
		(list_length(bc->inputs) == 2 ?
		 want[1] != ((BatchInput *) lsecond(bc->inputs))->srt->def->view :
		 j != NULL && !j->self_join))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the query of stream \"%s\" no longer reads its source \"%s\"",
						def->name, first->srt->def->name)));
	if (j == NULL)
		return;
	stm_ssjoin_bind_watermarks(j, def->watermarks, def->max_watermark_policy ? "max" : "min");
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);
		int			s = (in->join_sides & 1) ? STM_JOIN_LEFT_SIDE : STM_JOIN_RIGHT_SIDE;

		in->join_time_att = j->sides[s].time_att - 1;
	}
}

/*
 * The stream's query, analysed again as its creator wrote it (with "$user"
 * the owner), its sources' views opened, then the output's own set-up: the
 * sink and the operators (output_to_sink), or a helper's (output_to_leader).
 */
static void
begin_query(BatchContext *bc, StmRuntime *rt)
{
	StmStreamDef *def = bc->def;
	ListCell   *lc;

	bc->qi = stm_query_analyze_stored(def, &bc->guc_nest);
	check_sources_read(bc);
	ExecCheckRTPerms(bc->qi->query->rtable, true);
	foreach(lc, bc->inputs)
		open_input(lfirst(lc));
	bc->estate = CreateExecutorState();
	bc->econtext = GetPerTupleExprContext(bc->estate);
	bc->sink_output = stm_sink_output(bc->qi, def->output_mode, def->key_columns);
	bc->out_values = palloc(sizeof(Datum) * Max(bc->qi->noutputs, 1));
	bc->out_nulls = palloc(sizeof(bool) * Max(bc->qi->noutputs, 1));
	/* a large first block survives each reset: no malloc churn per chunk */
	bc->chunk_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming chunk",
										  0, 4 * 1024 * 1024, 8 * 1024 * 1024);
	bc->output->begin(bc, rt);
}

/* After the output's own end: what begin_query opened is closed. */
static void
end_query(BatchContext *bc)
{
	ListCell   *lc;

	bc->output->end(bc);
	foreach(lc, bc->inputs)
		close_input(lfirst(lc));
	FreeExecutorState(bc->estate);
	MemoryContextDelete(bc->chunk_cxt);
	AtEOXact_GUC(true, bc->guc_nest);
}

/* late_rows => 'keep': where the late rows of an input go, with their positions */
static StmLateRows *
keep_late_rows_of(StmStreamDef *def, BatchInput *in)
{
	StmLateRows *keep = palloc0(sizeof(StmLateRows));

	keep->stream_id = def->id;
	keep->src = in->src;
	keep->meta_att = in->ndeclared;
	return keep;
}

/* ---- output_to_sink: the stream's own batch ----------------------------- */

/*
 * The sink's writer, and the query's operators: a join's executor run, the
 * aggregation into the batch's groups (with the state), or the projection;
 * the operators before them (dedup).
 */
static void
sink_begin(BatchContext *bc, StmRuntime *rt)
{
	StmStreamDef *def = bc->def;
	StmQueryInfo *qi = bc->qi;
	BatchInput *in;
	StmLateRows *keep_late = NULL;

	bc->sink = stm_sink_begin_batch(stm_runtime_open_sink(rt, def), bc->sink_output,
									bc->batch_id, bc->estate);
	if (qi->ssjoin)
	{
		begin_stream_join(bc, rt);
		return;
	}
	in = only_input(bc);
	if (def->keep_late_rows)
		keep_late = keep_late_rows_of(def, in);
	/* a query that reads tables: the executor runs it (and makes qi->agg read its rows) */
	if (qi->planned)
		bc->join = stm_join_begin(&rt->join_plan, rt->cxt, qi, in->desc, def->query);
	if (qi->agg)
	{
		bc->qual = bc->join ? NULL : stm_query_compile_qual(qi);
		bc->aggbatch = stm_aggbatch_begin(qi->agg, def->id, def->output_mode, bc->sink,
										  def->has_watermark, previous_watermark(def),
										  in->event_time_att, keep_late);
		/* a window's column is the event time; without a window, event_time's */
		if (qi->agg->event_time_att >= 0)
			in->event_time_att = qi->agg->event_time_att;
	}
	else if (!bc->join)
		bc->projector = stm_query_compile(qi);
	if (def->has_dedup)
		bc->dedup = stm_dedup_begin(def->id, in->desc, def->dedup_keys,
									def->has_watermark ? in->event_time_att : -1,
									previous_watermark(def), def->dedup_within_watermark,
									def->watermark_delay.time +
									(int64) def->watermark_delay.day * USECS_PER_DAY,
									keep_late);
}

/*
 * A join of two sources: each side's rows go to the join (ssjoin.c), late
 * ones kept when late_rows => 'keep'; an aggregate over it reads the
 * joined row, and its windows close at the stream's watermark less the
 * join's largest time bound (SPEC 3.6: no join row can arrive for them
 * then), with nothing of the join's rows late for it: the join dropped
 * the late input rows, and no row of a closed window can come from it.
 */
static void
begin_stream_join(BatchContext *bc, StmRuntime *rt)
{
	StmStreamDef *def = bc->def;
	StmQueryInfo *qi = bc->qi;
	StmStreamJoin *j = qi->ssjoin;
	StmLateRows *keep_late[2] = {NULL, NULL};
	bool		has_wm = j->sides[0].has_delay || j->sides[1].has_delay;
	ListCell   *lc;

	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);

		for (int s = 0; s < 2; s++)
			if (def->keep_late_rows && (in->join_sides & (1 << s)))
				keep_late[s] = keep_late_rows_of(def, in);
	}
	bc->ssjoin = stm_ssjoin_begin(j, qi, def->id, def->query, bc->batch_id, has_wm,
								  previous_watermark(def), rt->ssjoin_plans, rt->cxt, keep_late,
								  def->side_watermarks);
	if (qi->agg)
	{
		bc->aggbatch = stm_aggbatch_begin(qi->agg, def->id, def->output_mode, bc->sink,
										  has_wm, previous_watermark(def) - j->max_bound_us,
										  qi->agg->event_time_att, NULL);
		stm_aggbatch_no_late_rows(bc->aggbatch);
	}
}

/* A join's row: into the sink, or the aggregate (its joined row). */
static void
stream_join_row(void *arg, TupleTableSlot *slot)
{
	BatchContext *bc = arg;

	if (bc->aggbatch)
	{
		bc->econtext->ecxt_scantuple = slot;
		stm_aggbatch_add(bc->aggbatch, bc->econtext);
		ResetExprContext(bc->econtext);
	}
	else
		stm_sink_insert(bc->sink, slot->tts_values, slot->tts_isnull);
}

static void
sink_row(BatchContext *bc, Datum *values, bool *nulls)
{
	stm_sink_insert(bc->sink, values, nulls);
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
		bc->error_input = only_input(bc);
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
 * After the last record: a join runs, the stateful operators merge into
 * their state tables and write the sink as the output mode says, the sink
 * writes what it holds (a sink function is called).
 */
static void
sink_end(BatchContext *bc)
{
	StringInfoData state_rows;

	initStringInfo(&state_rows);
	if (bc->ssjoin)
	{
		StringInfoData json;
		int64		join_late;
		int64		join_state;

		stm_ssjoin_run(bc->ssjoin, stream_join_row, bc);
		initStringInfo(&json);
		stm_ssjoin_progress(bc->ssjoin, &json, &join_late, &join_state, bc->side_has_max,
							bc->side_max);
		bc->state_operators = json.data;
		bc->num_late += join_late;
		bc->num_state_rows += join_state;
	}
	if (bc->join)
		stm_join_run(bc->join, joined_row, bc);
	if (bc->dedup)
	{
		int64		dedup_late;
		int64		dedup_state;

		stm_dedup_finish(bc->dedup, bc->def->state_rows, &state_rows, &bc->num_dedup, &dedup_late,
						 &dedup_state);
		bc->num_late += dedup_late;
		bc->num_state_rows += dedup_state;
	}
	if (bc->aggbatch)
	{
		int64		agg_state;
		int64		agg_late;

		stm_aggbatch_finish(bc->aggbatch, bc->def->state_rows, &state_rows, &agg_state, &agg_late);
		bc->num_state_rows += agg_state;
		bc->num_late += agg_late;
	}
	/* counted on by the next batch (stm_statetable_rows_after) */
	if (state_rows.len > 0)
		bc->state_rows = psprintf("{%s}", state_rows.data);
	stm_sink_end_batch(bc->sink);
	STM_FAULT_POINT("after_sink_write");
	bc->num_output = bc->sink->rows;
}

static const BatchOutput output_to_sink = {
	.begin = sink_begin,
	.row = sink_row,
	.bad = apply_bad_record,
	.end = sink_end,
};

/* ---- output_to_leader: a parallel helper's share ------------------------ */

/* a helper's aggregate share: a partial group to the leader */
static void
leader_group(void *arg, TupleDesc desc, Datum *values, bool *nulls)
{
	BatchContext *bc = arg;

	stm_parallel_send_group(bc->share, desc, values, nulls);
}

/* a helper's aggregate share: a late row kept, to the leader */
static void
leader_late(void *arg, const char *position, Datum event_time, bool isnull)
{
	BatchContext *bc = arg;

	stm_parallel_send_late(bc->share, position, DatumGetTimestampTz(event_time), isnull);
}

/*
 * Does a helper send its share's source rows, the leader running the step
 * after parsing?  Where that step needs the batch's state or snapshot in
 * one place: dedup_keys (the seen keys), a join with tables (run by the
 * leader's executor, in the batch's snapshot), session windows (sessions
 * merge across shares).
 */
static bool
share_sends_source_rows(StmStreamDef *def, StmQueryInfo *qi)
{
	return qi->ssjoin || def->has_dedup || qi->planned ||
		(qi->agg && qi->agg->window.kind == STM_WINDOW_SESSION);
}

/*
 * And are they past WHERE?  Only when nothing stateful comes before it
 * (dedup sees every row) and it reads the source row alone (a join's runs
 * in the leader's executor): an aggregate's (session windows).
 */
static bool
share_filters_source_rows(StmStreamDef *def, StmQueryInfo *qi)
{
	return qi->agg && !qi->ssjoin && !qi->planned && !def->has_dedup;
}

/*
 * A helper's share: no sink and no state (the leader writes them).  Its
 * source rows go to the leader (share_sends_source_rows), past WHERE only
 * when nothing stateful comes before WHERE and WHERE reads the source row
 * alone (no dedup, no join); or an aggregate pre-aggregates, forwarding
 * its partial groups (the leader combines them and keeps the state) and
 * its kept late rows; or the projection.
 */
static void
leader_begin(BatchContext *bc, StmRuntime *rt)
{
	StmStreamDef *def = bc->def;
	StmQueryInfo *qi = bc->qi;
	BatchInput *in;
	int			stream_time_att;

	/* a join of two sources: every row of either, tagged with its input, for the leader's join */
	if (qi->ssjoin)
	{
		bc->share_rows = true;
		return;
	}
	in = only_input(bc);
	stream_time_att = in->event_time_att;	/* event_time's column */

	/* the event time as the leader's batch takes it: a window's column when there is one */
	if (qi->agg && qi->agg->event_time_att >= 0)
		in->event_time_att = qi->agg->event_time_att;
	if (share_sends_source_rows(def, qi))
	{
		bc->share_rows = true;
		if (share_filters_source_rows(def, qi))
			bc->qual = stm_query_compile_qual(qi);
	}
	else if (qi->agg)
	{
		StmLateRows *keep_late = NULL;

		if (def->keep_late_rows)
		{
			keep_late = keep_late_rows_of(def, in);
			keep_late->forward = leader_late;
			keep_late->forward_arg = bc;
		}
		bc->qual = stm_query_compile_qual(qi);
		bc->aggbatch = stm_aggbatch_begin(qi->agg, def->id, def->output_mode, NULL,
										  def->has_watermark, previous_watermark(def),
										  stream_time_att, keep_late);
		stm_aggbatch_forward(bc->aggbatch, leader_group, bc);
	}
	else
		bc->projector = stm_query_compile(qi);
}

static void
leader_row(BatchContext *bc, Datum *values, bool *nulls)
{
	stm_parallel_send_row(bc->share, bc->sink_output->desc, values, nulls);
}

/* a helper: the leader applies on_bad_record (and writes the dead letter) */
static void
leader_bad(BatchContext *bc, BatchInput *in, const StmBadRecord *bad)
{
	bc->num_bad++;
	stm_parallel_send_bad(bc->share, in->index, bad);
}

static void
leader_end(BatchContext *bc)
{
	if (bc->aggbatch)
		stm_aggbatch_finish_forward(bc->aggbatch, &bc->num_late);
}

static const BatchOutput output_to_leader = {
	.begin = leader_begin,
	.row = leader_row,
	.bad = leader_bad,
	.end = leader_end,
};

/* ---- fetch: here, or by the helpers -------------------------------------- */

/* Every input's records, read by this process. */
static void
fetch_here(BatchContext *bc, StmRuntime *rt)
{
	ListCell   *lc;

	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);

		in->src->routine->fetch(in->src, process_chunk, in);
	}
}

/* the leader's batch: an output row a helper made */
static void
helper_row(void *arg, Datum *values, bool *nulls)
{
	BatchContext *bc = arg;

	bc->output->row(bc, values, nulls);
}

/* the leader's batch: a bad record a helper found */
static void
helper_bad(void *arg, int input, const StmBadRecord *bad)
{
	BatchContext *bc = arg;

	apply_bad_record(bc, batch_input(bc, input), bad);
}

/* the leader's aggregate batch: a helper's partial group, combined */
static void
helper_group(void *arg, Datum *values, bool *nulls)
{
	BatchContext *bc = arg;

	stm_aggbatch_add_partial(bc->aggbatch, values, nulls);
}

/*
 * The helpers' source rows of an input copied so far, through the batch's
 * step after parsing as a chunk of the leader's own (dedup, the query, a
 * join's side), in the order they came: each share's in its order.
 */
static void
run_pending(BatchInput *in)
{
	BatchContext *bc = in->bc;
	int			natts = in->desc->natts;
	ParsedRecord *recs;

	if (in->npending == 0)
		return;
	MemoryContextReset(bc->chunk_cxt);
	recs = MemoryContextAllocZero(bc->chunk_cxt, sizeof(ParsedRecord) * in->npending);
	for (int i = 0; i < in->npending; i++)
	{
		/* the values point into the copied tuples, kept until the chunk ran */
		ExecStoreMinimalTuple(in->pending[i], in->pending_slot, false);
		slot_getallattrs(in->pending_slot);
		recs[i].values = MemoryContextAlloc(bc->chunk_cxt, sizeof(Datum) * natts);
		recs[i].nulls = MemoryContextAlloc(bc->chunk_cxt, sizeof(bool) * natts);
		memcpy(recs[i].values, in->pending_slot->tts_values, sizeof(Datum) * natts);
		memcpy(recs[i].nulls, in->pending_slot->tts_isnull, sizeof(bool) * natts);
		recs[i].meta_ok = true;
		ExecClearTuple(in->pending_slot);
	}
	process_parsed(in, recs, in->npending, bc->pending_filtered);
	in->npending = 0;
	MemoryContextReset(in->pending_cxt);
}

/* the leader's batch: a helper's source row of an input, kept for the input's next chunk */
static void
helper_source_row(void *arg, int input, MinimalTuple tuple)
{
	BatchInput *in = batch_input((BatchContext *) arg, input);
	MemoryContext oldcxt = MemoryContextSwitchTo(in->pending_cxt);

	in->pending[in->npending++] = heap_copy_minimal_tuple(tuple);
	MemoryContextSwitchTo(oldcxt);
	if (in->npending == STM_PENDING_CHUNK)
		run_pending(in);
}

/* the leader's batch: a late row a helper's partial aggregation kept */
static void
helper_late(void *arg, const char *position, TimestampTz event_time, bool isnull)
{
	BatchContext *bc = arg;

	stm_late_row_store(bc->def->id, position, TimestampTzGetDatum(event_time), isnull);
}

/*
 * A chunk of the leader's own share: processed as any, then what the
 * helpers sent meanwhile, so that their queues do not stay full.
 */
static void
leader_share_chunk(void *arg, StmRecord *records, int n)
{
	BatchInput *in = arg;
	BatchContext *bc = in->bc;

	process_chunk(arg, records, n);
	(void) stm_parallel_drain(bc->helpers, bc->helpers_recv, bc->helpers_totals, false);
}

/*
 * The records, read by the runtime's helpers and the leader, each its
 * share of the bounds the leader's plan fixed (parallel.c): the helpers
 * shares 0 to n - 1 of n + 1, the leader the last one, through a source
 * of its own opened as a helper's (the planning source keeps the batch's
 * plan, and saves its positions).  The leader takes the helpers' rows,
 * groups and bad records as they come, between its own chunks and after.
 *
 * A join of two sources: a share is each source's share of its parts
 * (stm_parallel_share_bounds), a helper reads both and sends their rows
 * tagged with their input, and the leader feeds each to the input's join
 * sides as fetch_here's: late rows, each side's largest event time and
 * each partition's rows in source order are as without helpers.
 *
 * dedup_keys over a source whose parts have an order of their own
 * (ordered_parts: files, the rate source's values) keep the first row of
 * a key in that order: the shares are consecutive runs of the source, and
 * the leader takes them in order, as fetch_here reads them: its own share
 * 0 first, then helper after helper (each share i + 1), their rows
 * meanwhile waiting in their queues.
 */
static void
fetch_by_helpers(BatchContext *bc, StmRuntime *rt)
{
	StmParallelReceiver recv = {helper_row, helper_bad, helper_group, helper_source_row,
	helper_late, bc};
	StmShareTotals totals = {0};
	int			ninputs = list_length(bc->inputs);
	StmSource **plan_srcs = palloc(sizeof(StmSource *) * ninputs);
	int			nhelpers = stm_parallel_count(rt->parallel);
	const char *why;
	bool		in_order = bc->def->has_dedup && bc->qi->ssjoin == NULL &&
		only_input(bc)->src->routine->ordered_parts;
	bool		sends_rows = share_sends_source_rows(bc->def, bc->qi);
	ListCell   *lc;

	/* create_stream and alter_stream refuse the others */
	if (!stm_parallel_query_supported(bc->qi, &why))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream \"%s\" cannot have parallel_workers", bc->def->name),
				 errdetail("%s.", why)));
	bc->pending_filtered = sends_rows && share_filters_source_rows(bc->def, bc->qi);
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);

		plan_srcs[in->index] = in->src;
		if (!sends_rows)
			continue;
		in->pending = palloc(sizeof(MinimalTuple) * STM_PENDING_CHUNK);
		in->pending_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming helper rows",
												ALLOCSET_DEFAULT_SIZES);
		in->pending_slot = MakeSingleTupleTableSlot(in->desc, &TTSOpsMinimalTuple);
	}
	stm_parallel_send_shares(rt->parallel, plan_srcs, ninputs, nhelpers + 1, in_order,
							 bc->sink_output->desc,
							 bc->aggbatch && !bc->ssjoin ? stm_aggbatch_partial_desc(bc->aggbatch) : NULL);
	bc->helpers = rt->parallel;
	bc->helpers_recv = &recv;
	bc->helpers_totals = &totals;

	/* the leader's share of each input: its records go through the batch as fetch_here's do */
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);
		char	   *bounds = stm_parallel_share_bounds(plan_srcs, ninputs, in->index,
													   in_order ? 0 : nhelpers, nhelpers + 1);
		StmSource  *mine = stm_runtime_share_source(rt, bc->def, in->index);

		rt->share_src_dirty = true;
		mine->routine->set_share_bounds(mine, bounds);
		in->src = mine;
		/* in order: the helpers' shares come after the leader's, not between its chunks */
		mine->routine->fetch(mine, in_order ? process_chunk : leader_share_chunk, in);
		in->src = plan_srcs[in->index];
		rt->share_src_dirty = false;
		pfree(bounds);
	}

	(void) stm_parallel_drain(rt->parallel, &recv, &totals, true);
	bc->helpers = NULL;
	foreach(lc, bc->inputs)
	{
		BatchInput *in = lfirst(lc);

		if (in->pending == NULL)
			continue;
		run_pending(in);
		ExecDropSingleTupleTableSlot(in->pending_slot);
		MemoryContextDelete(in->pending_cxt);
		in->pending = NULL;
	}
	bc->num_input += totals.num_input;
	bc->num_late += totals.num_late;
	if (totals.has_max_event_time)
		note_event_time(bc, totals.max_event_time);
}

/* ---- one batch ----------------------------------------------------------- */

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
	(void) stm_catalog_check_version(ERROR);
	/* the row lock serialises batches with drop, reset and other batches */
	return stm_batch_run_locked(rt, stm_catalog_get_stream_by_id(rt->stream_id, true));
}

/*
 * stm_batch_run with the stream's row already read and locked FOR UPDATE
 * in this transaction, after stm_catalog_check_version (a worker reads it
 * once a batch, not twice); NULL when it is gone.
 */
int64
stm_batch_run_locked(StmRuntime *rt, StmStreamDef *def)
{
	Oid			save_userid;
	int			save_sec_context;
	int64		batch_id;

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
 * The sink's room bounds what the sources may read (back-pressure):
 * -1 for no limit; none at all is an error that makes the stream wait.
 */
static int64
sink_room(StmRuntime *rt, StmStreamDef *def)
{
	StmSink    *sink = stm_runtime_open_sink(rt, def);
	const char *why = NULL;
	int64		room = -1;

	if (sink->routine->capacity)
		room = sink->routine->capacity(sink, &why);
	if (room == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("stream \"%s\" cannot run a batch now: %s", def->name, why),
				 errhint("The stream's worker delivers the waiting rows; start the stream, or wait.")));
	return room;
}

/*
 * A data batch of a stateful stream that moved the watermark makes a
 * no-data batch due (SPEC 3.1; not for 'once'), so that what it closed is
 * written without waiting for more input.
 */
static bool
no_data_batch_due(BatchContext *bc)
{
	StmStreamDef *def = bc->def;
	bool		stateful = bc->aggbatch != NULL || bc->dedup != NULL || bc->ssjoin != NULL;

	return stateful && (bc->num_input > 0 || bc->idle_advance != 0) &&
		bc->has_watermark && bc->watermark > previous_watermark(def) &&
		def->trigger_kind != STM_TRIGGER_ONCE;
}

/* stm_batch_run, once the stream's row is locked and its owner in charge */
static int64
run_batch_as_owner(StmRuntime *rt, StmStreamDef *def)
{
	BatchContext bc = {0};
	ErrorContextCallback errcb;
	ListCell   *lc;
	int64		cpu_at_start = stm_thread_cpu_us();
	int64		runq_at_start = stm_guc_log_batches ? stm_thread_runq_us() : -1;
	int64		waited_at_start = stm_source_waited_us();
	TimestampTz planned_at;

	bc.def = def;
	bc.started = GetCurrentTimestamp();
	rt->ssjoin_ran = false;
	stm_runtime_prepare_helpers(rt, def);
	bc.inputs = make_inputs(&bc, rt);
	if (!plan_batch(&bc, rt, sink_room(rt, def)))
		return -1;
	planned_at = GetCurrentTimestamp();
	rt->batch_started = bc.started;
	rt->batch_planned = planned_at;
	stm_runtime_start_helpers(rt, def);

	bc.output = &output_to_sink;
	bc.fetch = rt->parallel ? fetch_by_helpers : fetch_here;
	begin_query(&bc, rt);
	errcb.callback = batch_error_callback;
	errcb.arg = &bc;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	bc.fetch(&bc, rt);
	STM_FAULT_POINT("after_fetch");
	end_query(&bc);
	error_context_stack = errcb.previous;
	rt->batch_queried = GetCurrentTimestamp();
	/* what its state tables' VACUUM after the commit goes by (the worker's) */
	if (bc.ssjoin)
	{
		stm_ssjoin_dead_rows(bc.ssjoin, rt->ssjoin_batch_dead, rt->ssjoin_live);
		rt->ssjoin_ran = true;
	}

	STM_FAULT_POINT("before_watermark_update");
	advance_watermark(&bc);
	foreach(lc, bc.inputs)
	{
		BatchInput *in = lfirst(lc);

		in->src->routine->save_positions(in->src, def->id, bc.batch_id);
	}
	rt->no_data_due = no_data_batch_due(&bc);
	record_batch(&bc, rt, rt->no_data_due,
				 bc.num_input_planned > 0 ? bc.started :
				 bc.idle_advance != 0 ? GetCurrentTimestamp() : 0);
	rt->batch_recorded = GetCurrentTimestamp();
	rt->batch_rows = bc.num_input;

	if (stm_guc_log_batches)
		ereport(LOG,
				(errmsg("stream \"%s\" ran batch " INT64_FORMAT ": %lld input rows, %lld output rows, %lld bad rows",
						def->name, bc.batch_id, (long long) bc.num_input,
						(long long) bc.num_output, (long long) bc.num_bad),
				 /* the main thread's, until the commit */
				 errdetail("%.1f ms: %.1f ms on a CPU, %.1f ms waiting for a CPU, %.1f ms to plan, %.1f ms waiting for records.",
						   (double) (GetCurrentTimestamp() - bc.started) / 1000.0,
						   (double) (stm_thread_cpu_us() - cpu_at_start) / 1000.0,
						   runq_at_start < 0 ? -1.0 : (double) (stm_thread_runq_us() - runq_at_start) / 1000.0,
						   (double) (planned_at - bc.started) / 1000.0,
						   (double) (stm_source_waited_us() - waited_at_start) / 1000.0)));
	return bc.batch_id;
}

/*
 * A parallel helper's share of a batch (helper.c), in the helper's
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
	ListCell   *lc;

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
	bc.output = &output_to_leader;
	bc.fetch = fetch_here;
	bc.started = GetCurrentTimestamp();
	/* a helper's client fetches for latency too, as the leader's would */
	rt->low_latency = bc.def->trigger_continuous;
	bc.inputs = make_inputs(&bc, rt);
	/* one bounds string per input, NUL-terminated, in the inputs' order */
	foreach(lc, bc.inputs)
	{
		BatchInput *in = lfirst(lc);

		in->src->routine->set_share_bounds(in->src, bounds);
		bounds += strlen(bounds) + 1;
	}
	begin_query(&bc, rt);
	errcb.callback = batch_error_callback;
	errcb.arg = &bc;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	bc.fetch(&bc, rt);
	end_query(&bc);
	error_context_stack = errcb.previous;
	SetUserIdAndSecContext(save_userid, save_sec_context);
	totals->num_input = bc.num_input;
	totals->num_late = bc.num_late;
	totals->has_max_event_time = bc.has_max_event_time;
	totals->max_event_time = bc.max_event_time;
}
