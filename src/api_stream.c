/*
 * api_stream.c: create_stream and drop_stream (SPEC 3).
 *
 * create_stream analyses the query with PostgreSQL's parser, checks the
 * shape, the options and the sink before it creates anything, then makes
 * the sink (unless it exists), the catalog row and the state tables; the
 * worker is asked for at commit.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "aggstate.h"
#include "api.h"
#include "catalog.h"
#include "dedup.h"
#include "parallel.h"
#include "query.h"
#include "sink.h"
#include "ssjoin.h"

PG_FUNCTION_INFO_V1(streaming_create_stream);
PG_FUNCTION_INFO_V1(streaming_drop_stream);
PG_FUNCTION_INFO_V1(streaming_alter_stream);

/*
 * create_stream's arguments, read once by name (SPEC 3), as enums and
 * values; every check step below reads these, never the raw arguments.
 */
typedef struct StreamArgs
{
	char	   *name;
	char	   *query;
	char	   *sink;			/* NULL: the default (a table named as the stream) */
	char	   *output_mode_text;
	StmOutputMode output_mode;
	bool		has_watermark;
	Interval	watermark;
	char	   *event_time;		/* NULL: none (or the window's column) */
	List	   *dedup_keys;		/* names; NIL: none */
	bool		has_dedup_keys;
	Datum		dedup_keys_array;
	bool		dedup_within_watermark;
	char	   *trigger;
	StmTriggerKind trigger_kind;
	Oid			sink_function;	/* InvalidOid: none */
	char	   *late_rows_text;
	bool		keep_late_rows;
	bool		has_idle_timeout;
	Interval	idle_timeout;
	Jsonb	   *watermarks;		/* a join's, per side; NULL: none */
	char	   *watermark_policy;	/* multiple_watermark_policy */
	bool		any_watermark;	/* watermark, or a join's watermarks */
	bool		has_key_columns;
	Datum		key_columns_array;
	List	   *key_columns;	/* upsert mode's key: output column names; NIL: none */
	bool		start;
	int			parallel_workers;
} StreamArgs;

/* Read create_stream's arguments by name (required ones must not be NULL). */
static void
read_stream_args(FunctionCallInfo fcinfo, StreamArgs *a)
{
	StmArgs		args;

	stm_args_init(&args, fcinfo);
	a->name = stm_args_text(&args, "name", true);
	a->query = stm_args_text(&args, "query", true);
	a->sink = stm_args_text(&args, "sink", false);
	a->output_mode_text = stm_args_keyword(&args, "output_mode", true);
	a->has_watermark = stm_args_given(&args, "watermark");
	if (a->has_watermark)
		a->watermark = *DatumGetIntervalP(stm_args_datum(&args, "watermark", true));
	a->event_time = stm_args_text(&args, "event_time", false);
	a->has_dedup_keys = stm_args_given(&args, "dedup_keys");
	if (a->has_dedup_keys)
		a->dedup_keys_array = stm_args_datum(&args, "dedup_keys", true);
	a->dedup_within_watermark = stm_args_bool(&args, "dedup_within_watermark");
	a->trigger = stm_args_text(&args, "trigger", true);
	a->sink_function = stm_args_given(&args, "sink_function") ?
		DatumGetObjectId(stm_args_datum(&args, "sink_function", true)) : InvalidOid;
	a->late_rows_text = stm_args_keyword(&args, "late_rows", true);
	a->has_idle_timeout = stm_args_given(&args, "idle_timeout");
	if (a->has_idle_timeout)
		a->idle_timeout = *DatumGetIntervalP(stm_args_datum(&args, "idle_timeout", true));
	if (stm_args_given(&args, "watermarks"))
		a->watermarks = DatumGetJsonbPCopy(stm_args_datum(&args, "watermarks", true));
	a->watermark_policy = stm_args_keyword(&args, "multiple_watermark_policy", true);
	a->has_key_columns = stm_args_given(&args, "key_columns");
	if (a->has_key_columns)
		a->key_columns_array = stm_args_datum(&args, "key_columns", true);
	a->start = stm_args_bool(&args, "start");
	/* NULL (the default): automatic, -1 in the definition */
	a->parallel_workers = -1;
	if (stm_args_given(&args, "parallel_workers"))
	{
		a->parallel_workers = DatumGetInt32(stm_args_datum(&args, "parallel_workers", true));
		if (a->parallel_workers < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("parallel_workers must be between 0 and %d, or NULL for automatic",
							STM_MAX_PARALLEL_WORKERS)));
	}
}

/* The name is free for a new stream. */
static void
check_new_name(const StreamArgs *a)
{
	stm_arg_check_name("stream", a->name);
	if (stm_catalog_stream_exists(a->name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("stream \"%s\" already exists", a->name)));
}

/* A text[] argument of column names: non-empty, no NULL or empty name. */
static List *
column_names(const char *argname, Datum array, const char *what)
{
	Datum	   *names;
	int			n;
	List	   *result = NIL;

	if (!stm_arg_check_sql("SELECT cardinality($1) > 0 AND NOT EXISTS (SELECT 1 FROM unnest($1) k WHERE k IS NULL OR k = '')",
						   TEXTARRAYOID, array))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be a non-empty array of %s column names", argname, what)));
	deconstruct_array(DatumGetArrayTypeP(array), TEXTOID, -1, false, TYPALIGN_INT,
					  &names, NULL, &n);
	for (int i = 0; i < n; i++)
		result = lappend(result, TextDatumGetCString(names[i]));
	return result;
}

/* The keyword arguments, into their enums; the trigger; the dedup keys' and key columns' names. */
static void
check_keywords(StreamArgs *a)
{
	static const char *const modes[] = {"append", "update", "complete", "upsert", NULL};
	static const char *const late_choices[] = {"drop", "keep", NULL};
	static const char *const policies[] = {"min", "max", NULL};
	int64		interval_ms;
	bool		continuous;

	stm_arg_check_choice("output_mode", a->output_mode_text, modes,
						 "Valid output modes are \"append\", \"update\", \"complete\" and \"upsert\".");
	a->output_mode = stm_catalog_parse_output_mode(a->output_mode_text);
	stm_arg_check_choice("late_rows", a->late_rows_text, late_choices,
						 "Valid values are \"drop\" and \"keep\".");
	a->keep_late_rows = strcmp(a->late_rows_text, "keep") == 0;
	if (pg_strcasecmp(a->trigger, "available_now") != 0 && pg_strcasecmp(a->trigger, "once") != 0 &&
		pg_strcasecmp(a->trigger, "continuous") != 0 &&
		!stm_arg_parses_as(a->trigger, INTERVALOID))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid trigger \"%s\"", a->trigger),
				 errhint("Use a processing-time interval such as '30 seconds' (or '0'), 'available_now', 'once' or 'continuous'.")));
	a->trigger_kind = stm_catalog_parse_trigger(a->trigger, &interval_ms, &continuous);
	stm_arg_check_choice("multiple_watermark_policy", a->watermark_policy, policies,
						 "Valid values are \"min\" and \"max\".");
	a->any_watermark = a->has_watermark || a->watermarks != NULL;
	if (a->has_dedup_keys)
		a->dedup_keys = column_names("dedup_keys", a->dedup_keys_array, "source");
	if (a->has_key_columns)
		a->key_columns = column_names("key_columns", a->key_columns_array, "output");
}

/* The intervals and what they need: a watermark for dedup_within_watermark and idle_timeout. */
static void
check_time_arguments(const StreamArgs *a)
{
	Interval	zero = {0};

	if (a->dedup_within_watermark && (!a->has_dedup_keys || !a->has_watermark))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_within_watermark needs dedup_keys and a watermark")));
	if (a->has_watermark &&
		DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(&a->watermark),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("watermark must not be negative")));
	if (a->has_idle_timeout &&
		!DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(&a->idle_timeout),
										  IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle_timeout must be greater than zero")));
	if (a->has_idle_timeout && !a->has_watermark)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle_timeout needs a watermark"),
				 errdetail("idle_timeout advances the watermark while the source is idle."),
				 errhint("Give watermark => '10 minutes' too.")));
}

/* The query, through PostgreSQL's parser and analyser: it must read a source. */
static StmQueryInfo *
analyse_query(const StreamArgs *a, StmSourceDef **source)
{
	StmQueryInfo *qi;

	STM_ARG_ERRCONTEXT_BEGIN("query", a->query);
	qi = stm_query_analyze(a->query);
	STM_ARG_ERRCONTEXT_END();
	*source = stm_catalog_get_source_by_view(qi->ssjoin ?
											 qi->ssjoin->sides[STM_JOIN_LEFT_SIDE].view :
											 qi->source_view);
	if (*source == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a streaming source", get_rel_name(qi->source_view)),
				 errhint("Create a source first, with one of the streaming.create_*_source() functions.")));
	ExecCheckRTPerms(qi->query->rtable, true);
	return qi;
}

/*
 * A join of two sources (SPEC 3.6): its watermarks, bound to its sides, and
 * the refusals of ssjoin_query.c; what one source's arguments would say of
 * it is refused.  A watermarks argument without a join is refused too.
 */
static void
check_stream_join(const StreamArgs *a, StmQueryInfo *qi)
{
	StmStreamJoin *j = qi->ssjoin;

	if (j == NULL)
	{
		if (a->watermarks)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("watermarks is for a stream that joins two sources"),
					 errhint("Give a stream over one source watermark => '10 minutes' and event_time => 'column'.")));
		return;
	}
	if (a->has_watermark || a->event_time)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a stream that joins two sources takes watermarks, not watermark or event_time"),
				 errhint("Give watermarks => '{\"%s\": {\"event_time\": \"column\", \"delay\": \"10 minutes\"}, \"%s\": {...}}'.",
						 j->sides[0].alias, j->sides[1].alias)));
	if (a->has_dedup_keys)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("dedup_keys are not supported for a join of two sources yet")));
	if (a->has_idle_timeout)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a stream that joins two sources takes an idle_timeout per side, in watermarks"),
				 errhint("Give watermarks => '{\"%s\": {\"event_time\": ..., \"delay\": ..., \"idle_timeout\": \"1 minute\"}, ...}'.",
						 j->sides[0].alias)));
	if (qi->agg == NULL && a->output_mode != STM_OUTPUT_APPEND)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a join of two sources writes each joined row once: output_mode must be \"append\""),
				 errhint("An aggregate over the join may use \"update\".")));
	stm_ssjoin_bind_watermarks(j, a->watermarks, a->watermark_policy);
	stm_ssjoin_check(j, a->name);
	if (qi->agg && qi->agg->window.kind != STM_WINDOW_NONE)
	{
		Var		   *ts = (Var *) qi->agg->window.ts;
		int			s = qi->source_rtindex == j->sides[STM_JOIN_RIGHT_SIDE].rtindex && !j->sublink ?
			STM_JOIN_RIGHT_SIDE : STM_JOIN_LEFT_SIDE;

		if (ts->varattno != j->sides[s].time_att)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the window of an aggregate over a join must be on a side's event-time column"),
					 errdetail("The event-time column of \"%s\" is %s.", j->sides[s].alias,
							   j->sides[s].time_att ? quote_identifier(get_attname(j->sides[s].view, j->sides[s].time_att, false)) : "not given"),
					 errhint("Window by the column that watermarks names for that side.")));
		if (qi->agg->window.kind == STM_WINDOW_SESSION)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("session windows over a join of two sources are not supported yet")));
	}
}

/* Every dedup key must be a column of the source. */
static void
check_dedup_keys(const StreamArgs *a, const StmSourceDef *source)
{
	ListCell   *lc;

	foreach(lc, a->dedup_keys)
		if (get_attnum(source->view, lfirst(lc)) == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("dedup key \"%s\" is not a column of source \"%s\"",
							(char *) lfirst(lc), get_rel_name(source->view))));
}

/*
 * What aggregate streams need: a watermark on the window's event time (or,
 * without a window, on event_time, which closes groups only when it is a
 * GROUP BY column); every window and group column in the select list (they
 * key the sink).  Returns the event-time column to store: the window's
 * when there is a watermark, or event_time.
 */
static char *
check_aggregate_stream(const StreamArgs *a, StmQueryInfo *qi)
{
	StmAggQuery *agg = qi->agg;
	bool		in_output[FUNC_MAX_ARGS + 1] = {false};
	char	   *window_column = NULL;
	bool		append = a->output_mode == STM_OUTPUT_APPEND;

	if (agg->window.kind != STM_WINDOW_NONE)
		window_column = get_attname(qi->source_view, ((Var *) agg->window.ts)->varattno, false);
	if (append && !a->any_watermark)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"append\" needs a watermark on an aggregate query"),
				 errdetail("In append mode a group's row is written once, when the watermark closes its window."),
				 errhint("Give watermark => '10 minutes', or use output_mode 'update' or 'complete'.")));
	if (window_column == NULL)
	{
		AttrNumber	attno = a->event_time ? get_attnum(qi->source_view, a->event_time) : InvalidAttrNumber;

		/* without a window, groups close only when the event time is one of them (as Spark) */
		if (append && stm_agg_time_key(agg, attno) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("output_mode \"append\" needs the event-time column among the GROUP BY columns of a query without a window"),
					 errdetail("In append mode a group's row is written once, when the watermark passes its event time."),
					 errhint("Group by a window call such as streaming.tumble(event_time, '5 minutes'), "
							 "or by the event_time column itself, or use output_mode 'update' or 'complete'.")));
	}
	else if (a->event_time && strcmp(a->event_time, window_column) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event_time of a windowed query must name the window's column \"%s\"", window_column),
				 errdetail("The event_time given was \"%s\".", a->event_time)));
	if (agg->nkeys > FUNC_MAX_ARGS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a stream query may group by at most %d expressions", FUNC_MAX_ARGS)));
	for (int i = 0; i < qi->noutputs; i++)
		if (agg->out_group_col[i] >= 0)
			in_output[agg->out_group_col[i]] = true;
	if (agg->window.kind != STM_WINDOW_NONE && !in_output[0])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the select list of an aggregate stream must include the window"),
				 errhint("Add streaming.window_start() AS window_start: the sink's key is the window and the groups.")));
	for (int k = 1; k <= agg->nkeys; k++)
		if (!in_output[k])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the select list of an aggregate stream must include every GROUP BY expression"),
					 errdetail("GROUP BY expression %d is not in the select list.", k),
					 errhint("The sink's key is the window and the groups.")));
	if (window_column == NULL)
		return a->event_time ? pstrdup(a->event_time) : NULL;
	return a->any_watermark ? window_column : NULL;
}

/*
 * The query's shape and the arguments together: helpers, complete mode,
 * the aggregate's needs; returns the event-time column to store.
 */
static char *
check_query_shape(const StreamArgs *a, StmQueryInfo *qi, const StmSourceDef *source)
{
	char	   *event_time = a->event_time;

	/* NULL (automatic) takes helpers only for the shapes they run */
	if (a->parallel_workers >= 0)
		stm_parallel_check_arg(a->name, a->parallel_workers, stm_source_routine(source->kind), qi);
	if (qi->agg == NULL && a->output_mode == STM_OUTPUT_COMPLETE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"complete\" needs an aggregate query"),
				 errdetail("A query without aggregates writes each input row once; use \"append\".")));
	if (qi->agg)
		event_time = check_aggregate_stream(a, qi);
	if (a->has_watermark && event_time == NULL && qi->ssjoin == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("watermark needs an event-time column"),
				 errhint("Give event_time => 'column' naming a timestamptz column of source \"%s\".",
						 source->name)));
	return event_time;
}

/*
 * Upsert mode (SPEC 3.2) and its key: a stateless query, key_columns that
 * are output columns; key_columns in no other mode.
 */
static void
check_upsert(const StreamArgs *a, StmQueryInfo *qi)
{
	ListCell   *lc;

	if (a->has_key_columns && a->output_mode != STM_OUTPUT_UPSERT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key_columns is only for output_mode \"upsert\""),
				 errdetail("In update and complete mode the sink's key is the window and the GROUP BY columns.")));
	if (a->output_mode != STM_OUTPUT_UPSERT)
		return;
	if (qi->agg)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"upsert\" needs a query without aggregates"),
				 errdetail("Upsert mode applies each row of a stateless query by its key."),
				 errhint("Use output_mode \"update\": it upserts an aggregate's changed groups by their window and group columns.")));
	if (!a->has_key_columns)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"upsert\" needs key_columns"),
				 errhint("Give key_columns => ARRAY['id'], the output columns that are the sink's key.")));
	foreach(lc, a->key_columns)
	{
		bool		found = false;

		for (int i = 0; i < qi->noutputs; i++)
			found |= strcmp(qi->out_names[i], lfirst(lc)) == 0;
		if (!found)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("key column \"%s\" is not an output column of the stream query",
							(char *) lfirst(lc)),
					 errhint("key_columns names columns of the query's select list.")));
	}
}

/* The event-time column is a timestamptz column of the source. */
static void
check_event_time_column(const char *event_time, const StmSourceDef *source)
{
	AttrNumber	attno;
	Oid			type;

	if (event_time == NULL)
		return;
	attno = get_attnum(source->view, event_time);
	if (attno == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("event_time column \"%s\" does not exist in source \"%s\"", event_time, source->name)));
	type = get_atttype(source->view, attno);
	if (type != TIMESTAMPTZOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of source \"%s\" must be of type timestamptz", event_time, source->name),
				 errdetail("It is of type %s.", format_type_be(type))));
}

/*
 * The sink the stream names: a named sink (streaming.sinks, of any kind),
 * the sink function, or a table.  A given name is a named sink's when
 * there is one (the caller's: writing to it means using its owner's
 * settings), else SQL naming a table.  Its kind checks that it can take
 * the stream's output.
 */
static const StmSinkRoutine *
check_sink(const StreamArgs *a, StmSinkTarget *target, const StmSinkOutput *output)
{
	const StmSinkRoutine *routine;

	target->stream = a->name;
	target->sink = a->sink;
	target->function = a->sink_function;
	target->named = NULL;
	if (OidIsValid(a->sink_function) && a->sink != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a stream with a sink_function has no sink table"),
				 errhint("Give either sink or sink_function.")));
	if (a->sink)
	{
		target->named = stm_catalog_get_sink(a->sink, true);
		if (target->named == NULL && stm_catalog_sink_exists(a->sink))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for sink \"%s\"", a->sink),
					 errdetail("Only the sink's owner (or a member of the owning role) may write to it.")));
	}
	routine = stm_sink_routine_of_target(target);
	routine->check_output(target, output);
	return routine;
}

/* The stream's catalog row, as the checked arguments define it. */
static int32
insert_stream(const StreamArgs *a, const StmSourceDef *source, const char *event_time,
			  const StmSinkTarget *target, StmQueryInfo *qi)
{
	StmStreamDef def = {0};

	if (qi->ssjoin)
	{
		StmStreamJoin *j = qi->ssjoin;

		if (!j->self_join)
			def.other_source = j->sides[STM_JOIN_RIGHT_SIDE].source;
		def.watermarks = a->watermarks;
		def.max_watermark_policy = strcmp(a->watermark_policy, "max") == 0;
	}

	def.name = a->name;
	def.source = source->name;
	def.query = a->query;
	def.sink = target->relid;
	def.sink_function = a->sink_function;
	def.sink_name = target->named ? target->named->name : NULL;
	def.output_mode = a->output_mode;
	def.has_watermark = a->has_watermark;
	def.watermark_delay = a->watermark;
	def.event_time = (char *) event_time;
	def.trigger = a->trigger;
	def.keep_late_rows = a->keep_late_rows;
	def.has_idle_timeout = a->has_idle_timeout;
	def.idle_timeout = a->idle_timeout;
	def.dedup_keys = a->dedup_keys;
	def.dedup_within_watermark = a->dedup_within_watermark;
	def.enabled = a->start;
	def.search_path = pstrdup(GetConfigOption("search_path", false, false));
	def.owner = GetUserId();
	def.parallel_workers = a->parallel_workers;
	def.key_columns = a->key_columns;
	return stm_catalog_insert_stream(&def);
}

/*
 * streaming.create_stream (SPEC 3): the arguments read once, then each
 * check in turn before anything is made; then the sink (unless it exists),
 * the catalog row and the state tables; the worker is asked for at commit.
 */
Datum
streaming_create_stream(PG_FUNCTION_ARGS)
{
	StreamArgs	a = {0};
	StmQueryInfo *qi;
	StmSourceDef *source;
	char	   *event_time;
	StmSinkOutput *output;
	StmSinkTarget target;
	const StmSinkRoutine *sink_kind;
	int32		stream_id;

	(void) stm_catalog_check_version(ERROR);
	read_stream_args(fcinfo, &a);
	check_new_name(&a);
	check_keywords(&a);
	check_time_arguments(&a);
	if (a.start)
		stm_api_require_workers(a.name);
	qi = analyse_query(&a, &source);
	check_stream_join(&a, qi);
	event_time = check_query_shape(&a, qi, source);
	if (qi->ssjoin == NULL)
		check_event_time_column(event_time, source);
	check_dedup_keys(&a, source);
	check_upsert(&a, qi);
	output = stm_sink_output(qi, a.output_mode, a.key_columns);
	sink_kind = check_sink(&a, &target, output);

	/* everything checked: make it */
	if (sink_kind->create_output)
		sink_kind->create_output(&target, output);
	stream_id = insert_stream(&a, source, event_time, &target, qi);
	if (qi->agg)
		stm_aggstate_create(stream_id, qi->agg, GetUserId());
	if (qi->ssjoin)
		stm_ssjoin_create_state(stream_id, qi->ssjoin, GetUserId());
	if (a.has_dedup_keys)
		stm_dedup_create(stream_id, GetUserId());
	if (a.start)
		stm_api_want_on_commit(stream_id, GetUserId());
	PG_RETURN_VOID();
}

/*
 * Drop a stream the caller was checked for: stop its worker (a sink that
 * delivers after the commit sends what it can as the worker exits), then
 * its row (positions, history, dead letters and late rows go with it: ON
 * DELETE CASCADE), the rows its sink has not delivered (refused, unless
 * force, while there are any), its state tables and, with drop_sink, its
 * sink table, or its named sink unless another stream writes to it.
 */
void
stm_api_drop_stream(StmStreamDef *def, bool drop_sink, bool force)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);
	const char *name = def->name;
	const StmSinkRoutine *routine;
	StmSinkDef *named_sink = NULL;

	stm_api_stop_worker(def);
	def = stm_catalog_get_stream_by_id(def->id, true);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" was dropped meanwhile", name)));
	routine = stm_sink_routine_of_stream(def);
	if (routine->pending && !force)
	{
		int64		pending = routine->pending(def->id, PG_INT64_MAX);

		if (pending > 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg_plural("stream \"%s\" has " INT64_FORMAT " row that its sink \"%s\" has not delivered yet",
								   "stream \"%s\" has " INT64_FORMAT " rows that its sink \"%s\" has not delivered yet",
								   pending, name, pending, def->sink_name),
					 errdetail("The stream's worker delivers them to the %s sink while the stream runs.",
							   routine->display_name),
					 def->enabled ?
					 errhint("Its worker is delivering them: wait for that with streaming.process_available(), or drop it with force => true to discard them.") :
					 errhint("Start the stream and let it deliver them, or drop it with force => true to discard them.")));
	}
	if (drop_sink && def->sink_name)
	{
		named_sink = stm_catalog_get_sink_of_stream(def);
		stm_catalog_check_owner("sink", named_sink->name, named_sink->owner);
	}
	stm_catalog_exec("DELETE FROM streaming.stream_defs WHERE id = $1", 1, &type, &value, NULL, SPI_OK_DELETE);
	if (routine->discard)
		routine->discard(def->id);
	stm_api_clear_state_tables(def->id, true);
	if (drop_sink && OidIsValid(def->sink) && get_rel_name(def->sink) != NULL)
		stm_api_exec(psprintf("DROP TABLE %s",
						  quote_qualified_identifier(get_namespace_name(get_rel_namespace(def->sink)),
													 get_rel_name(def->sink))),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	if (named_sink && !stm_api_sink_in_use(named_sink->name))
		stm_api_drop_sink(named_sink);
}

Datum
streaming_drop_stream(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	bool		drop_sink = stm_arg_bool(fcinfo, 1, "drop_sink");
	bool		force = stm_arg_bool(fcinfo, 2, "force");
	StmStreamDef *def = stm_catalog_get_stream(name, false);

	stm_catalog_check_owner("stream", name, def->owner);
	stm_api_drop_stream(def, drop_sink, force);
	PG_RETURN_VOID();
}

/*
 * alter_stream's reset argument: the settings named go back to their
 * defaults (for now parallel_workers only: NULL, automatic), as NULL in an
 * argument means "unchanged".  Refused with a value for the same setting.
 */
static bool
reset_parallel_workers(FunctionCallInfo fcinfo)
{
	Datum	   *names;
	bool	   *nulls;
	int			n;
	bool		reset = false;

	if (PG_ARGISNULL(2))
		return false;
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(2), TEXTOID, -1, false, TYPALIGN_INT,
					  &names, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *name = nulls[i] ? NULL : TextDatumGetCString(names[i]);

		if (name == NULL || strcmp(name, "parallel_workers") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("alter_stream cannot reset \"%s\"", name ? name : "NULL"),
					 errhint("The settings that can be reset are: parallel_workers.")));
		reset = true;
	}
	if (reset && !PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parallel_workers cannot be both given and reset")));
	return reset;
}

/*
 * streaming.alter_stream(name, parallel_workers => n, reset => ARRAY[...]):
 * change a stream's settings (NULL: unchanged; reset: back to the
 * default).  A running stream takes them at its next batch (its worker
 * reads the definition each batch); the row lock waits for a batch in
 * flight.
 */
Datum
streaming_alter_stream(PG_FUNCTION_ARGS)
{
	char	   *name;
	StmStreamDef *def;
	bool		reset;

	(void) stm_catalog_check_version(ERROR);
	name = stm_arg_name(fcinfo);
	def = stm_catalog_get_stream(name, false);
	stm_catalog_check_owner("stream", name, def->owner);
	reset = reset_parallel_workers(fcinfo);
	if (!PG_ARGISNULL(1) || reset)
	{
		int			n = reset ? -1 : PG_GETARG_INT32(1);
		StmQueryInfo *qi = NULL;
		StmSourceDef *src = stm_catalog_get_source_of_stream(def);
		Oid			types[2] = {INT4OID, INT4OID};
		Datum		values[2] = {Int32GetDatum(def->id), Int32GetDatum(n)};
		char		nulls[2] = {' ', reset ? 'n' : ' '};

		if (n > 0)
		{
			/* the query as the batches analyse it: its creator's search_path */
			int			nest;

			qi = stm_query_analyze_stored(def, &nest);
			AtEOXact_GUC(true, nest);
		}
		if (!reset)
			stm_parallel_check_arg(name, n, stm_source_routine(src->kind), qi);
		(void) stm_catalog_get_stream_by_id(def->id, true);
		stm_catalog_exec("UPDATE streaming.stream_defs SET parallel_workers = $2 WHERE id = $1",
						 2, types, values, nulls, SPI_OK_UPDATE);
	}
	PG_RETURN_VOID();
}
