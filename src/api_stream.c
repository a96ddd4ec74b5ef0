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

PG_FUNCTION_INFO_V1(streaming_create_stream);
PG_FUNCTION_INFO_V1(streaming_drop_stream);
PG_FUNCTION_INFO_V1(streaming_alter_stream);

/* Every dedup key must be a column of the source. */
static void
check_dedup_keys(Oid view, ArrayType *keys)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *key = TextDatumGetCString(elems[i]);

		if (get_attnum(view, key) == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("dedup key \"%s\" is not a column of source \"%s\"", key, get_rel_name(view))));
	}
}

/* True when the (qualified) relation exists. */
static bool
to_regclass_name(const char *name)
{
	return OidIsValid(RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(name)),
									   NoLock, true));
}

/*
 * What aggregate streams need: a watermark on the window's event time (or,
 * without a window, on event_time, which closes groups only when it is a
 * GROUP BY column); every window and group column in the select list (they
 * key the sink).  Returns the event-time column to store: the window's
 * when there is a watermark, or event_time.
 */
static char *
check_aggregate_stream(StmQueryInfo *qi, const char *output_mode, bool has_watermark,
					   const char *event_time, const char *late_rows)
{
	StmAggQuery *agg = qi->agg;
	bool		in_output[FUNC_MAX_ARGS + 1] = {false};
	char	   *window_column = NULL;

	if (agg->window.kind != STM_WINDOW_NONE)
		window_column = get_attname(qi->source_view, ((Var *) agg->window.ts)->varattno, false);
	if (strcmp(output_mode, "append") == 0 && !has_watermark)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"append\" needs a watermark on an aggregate query"),
				 errdetail("In append mode a group's row is written once, when the watermark closes its window."),
				 errhint("Give watermark => '10 minutes', or use output_mode 'update' or 'complete'.")));
	if (window_column == NULL)
	{
		AttrNumber	attno = event_time ? get_attnum(qi->source_view, event_time) : InvalidAttrNumber;

		/* without a window, groups close only when the event time is one of them (as Spark) */
		if (strcmp(output_mode, "append") == 0 && stm_agg_time_key(agg, attno) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("output_mode \"append\" needs the event-time column among the GROUP BY columns of a query without a window"),
					 errdetail("In append mode a group's row is written once, when the watermark passes its event time."),
					 errhint("Group by a window call such as streaming.tumble(event_time, '5 minutes'), "
							 "or by the event_time column itself, or use output_mode 'update' or 'complete'.")));
	}
	else if (event_time && strcmp(event_time, window_column) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event_time of a windowed query must name the window's column \"%s\"", window_column),
				 errdetail("The event_time given was \"%s\".", event_time)));
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
		return event_time ? pstrdup(event_time) : NULL;
	return has_watermark ? window_column : NULL;
}

Datum
streaming_create_stream(PG_FUNCTION_ARGS)
{
	static const char *const modes[] = {"append", "update", "complete", NULL};
	static const char *const late_choices[] = {"drop", "keep", NULL};
	char	   *name;
	char	   *query;
	char	   *sink_name;
	char	   *output_mode;
	char	   *event_time = stm_arg_text(fcinfo, 5);
	char	   *trigger;
	char	   *late_rows;
	bool		start;
	int64		interval_ms;
	StmQueryInfo *qi;
	StmSourceDef *src;
	RangeVar   *sink_rv;
	Oid			sink_oid;
	StmSinkDef *named_sink = NULL;
	Datum		values[18];
	char		nulls[18];
	Oid			types[18] = {TEXTOID, TEXTOID, TEXTOID, OIDOID, TEXTOID, INTERVALOID, TEXTOID,
		TEXTOID, TEXTOID, INTERVALOID, BOOLOID, TEXTOID, OIDOID, TEXTARRAYOID, BOOLOID, OIDOID, TEXTOID,
	INT4OID};
	int			parallel_workers;
	int32		stream_id;
	StmCatalogScope scope;

	(void) stm_catalog_check_version(ERROR);
	stm_arg_require(fcinfo, 0, "name");
	stm_arg_require(fcinfo, 1, "query");
	stm_arg_require(fcinfo, 3, "output_mode");
	stm_arg_require(fcinfo, 7, "dedup_within_watermark");
	stm_arg_require(fcinfo, 8, "trigger");
	stm_arg_require(fcinfo, 10, "late_rows");
	stm_arg_require(fcinfo, 12, "start");
	stm_arg_require(fcinfo, 13, "parallel_workers");
	name = stm_arg_text(fcinfo, 0);
	query = stm_arg_text(fcinfo, 1);
	sink_name = PG_ARGISNULL(2) ? name : stm_arg_text(fcinfo, 2);
	output_mode = stm_arg_keyword(fcinfo, 3);
	trigger = stm_arg_text(fcinfo, 8);
	late_rows = stm_arg_keyword(fcinfo, 10);
	start = PG_GETARG_BOOL(12);
	parallel_workers = PG_GETARG_INT32(13);

	stm_arg_check_name("stream", name);
	if (stm_catalog_stream_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("stream \"%s\" already exists", name)));
	stm_arg_check_choice("output_mode", output_mode, modes,
				 "Valid output modes are \"append\", \"update\" and \"complete\".");
	stm_arg_check_choice("late_rows", late_rows, late_choices,
				 "Valid values are \"drop\" and \"keep\".");
	if (pg_strcasecmp(trigger, "available_now") != 0 && pg_strcasecmp(trigger, "once") != 0 &&
		!stm_arg_parses_as(trigger, INTERVALOID))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid trigger \"%s\"", trigger),
				 errhint("Use a processing-time interval such as '30 seconds' (or '0'), 'available_now' or 'once'.")));
	(void) stm_catalog_parse_trigger(trigger, &interval_ms);
	if (!PG_ARGISNULL(6) &&
		!stm_arg_check_sql("SELECT cardinality($1) > 0 AND NOT EXISTS (SELECT 1 FROM unnest($1) k WHERE k IS NULL OR k = '')",
				   TEXTARRAYOID, PG_GETARG_DATUM(6)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_keys must be a non-empty array of source column names")));
	if (PG_GETARG_BOOL(7) && (PG_ARGISNULL(6) || PG_ARGISNULL(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_within_watermark needs dedup_keys and a watermark")));
	if (!PG_ARGISNULL(9))
	{
		Oid			fn = PG_GETARG_OID(9);
		HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
		Form_pg_proc proc;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for function %u", fn);
		proc = (Form_pg_proc) GETSTRUCT(tup);
		if (proc->pronargs != 2 || proc->proargtypes.values[0] != INT8OID ||
			proc->proargtypes.values[1] != REGCLASSOID || proc->prokind != PROKIND_FUNCTION)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink_function %s must be a function of (batch_id bigint, batch regclass)",
							format_procedure(fn))));
		ReleaseSysCache(tup);
		if (!PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a stream with a sink_function has no sink table"),
					 errhint("Give either sink or sink_function.")));
		if (pg_proc_aclcheck(fn, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for function %s", format_procedure(fn))));
	}
	if (!PG_ARGISNULL(4) && !stm_arg_check_sql("SELECT $1 >= interval '0'", INTERVALOID, PG_GETARG_DATUM(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("watermark must not be negative")));
	if (!PG_ARGISNULL(11) && !stm_arg_check_sql("SELECT $1 > interval '0'", INTERVALOID, PG_GETARG_DATUM(11)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle_timeout must be greater than zero")));
	if (!PG_ARGISNULL(11) && PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle_timeout needs a watermark"),
				 errdetail("idle_timeout advances the watermark while the source is idle."),
				 errhint("Give watermark => '10 minutes' too.")));
	if (start)
		stm_api_require_workers(name);

	/* the query, through PostgreSQL's parser and analyser */
	STM_ARG_ERRCONTEXT_BEGIN("query", query);
	qi = stm_query_analyze(query);
	STM_ARG_ERRCONTEXT_END();
	src = stm_catalog_get_source_by_view(qi->source_view);
	if (src == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a streaming source", get_rel_name(qi->source_view)),
				 errhint("Create a source first, with one of the streaming.create_*_source() functions.")));
	ExecCheckRTPerms(qi->query->rtable, true);
	stm_parallel_check_arg(name, parallel_workers, stm_source_routine(src->kind), qi,
						   !PG_ARGISNULL(6), strcmp(late_rows, "keep") == 0);
	if (qi->agg == NULL && strcmp(output_mode, "complete") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"complete\" needs an aggregate query"),
				 errdetail("A query without aggregates writes each input row once; use \"append\".")));
	if (qi->agg)
		event_time = check_aggregate_stream(qi, output_mode, !PG_ARGISNULL(4), event_time,
											late_rows);
	if (!PG_ARGISNULL(4) && event_time == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("watermark needs an event-time column"),
				 errhint("Give event_time => 'column' naming a timestamptz column of source \"%s\".", src->name)));
	if (event_time)
	{
		Relation	view = relation_open(src->view, AccessShareLock);
		TupleDesc	desc = RelationGetDescr(view);
		int			found = -1;

		for (int i = 0; i < desc->natts; i++)
			if (strcmp(NameStr(TupleDescAttr(desc, i)->attname), event_time) == 0)
				found = i;
		if (found < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("event_time column \"%s\" does not exist in source \"%s\"", event_time, src->name)));
		if (TupleDescAttr(desc, found)->atttypid != TIMESTAMPTZOID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of source \"%s\" must be of type timestamptz", event_time, src->name),
					 errdetail("It is of type %s.", format_type_be(TupleDescAttr(desc, found)->atttypid))));
		relation_close(view, NoLock);
	}

	/*
	 * The sink: a named sink (streaming.sinks, of any kind), an
	 * existing compatible table, or a new one.  A given name is a named
	 * sink's when there is one (the caller's: writing to it means using its
	 * owner's settings), else SQL naming a table; the default sink is the
	 * table named exactly like the stream.
	 */
	if (!PG_ARGISNULL(2))
	{
		named_sink = stm_catalog_get_sink(sink_name, true);
		if (named_sink == NULL && stm_catalog_sink_exists(sink_name))
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for sink \"%s\"", sink_name),
					 errdetail("Only the sink's owner (or a member of the owning role) may write to it.")));
	}
	if (named_sink)
	{
		const StmSinkRoutine *routine = stm_sink_routine(named_sink->kind);

		routine->check_output(named_sink, stm_sink_output(qi, stm_catalog_parse_output_mode(output_mode)), name);
		sink_rv = NULL;
	}
	else if (PG_ARGISNULL(2))
		sink_rv = makeRangeVar(NULL, name, -1);
	else
	{
		STM_ARG_ERRCONTEXT_BEGIN("sink", sink_name);
		sink_rv = makeRangeVarFromNameList(stringToQualifiedNameList(sink_name));
		STM_ARG_ERRCONTEXT_END();
	}
	sink_oid = PG_ARGISNULL(9) && sink_rv ? RangeVarGetRelid(sink_rv, RowExclusiveLock, true) : InvalidOid;
	if (!PG_ARGISNULL(9) || named_sink)
		;						/* foreachBatch or a named sink: no sink table */
	else if (OidIsValid(sink_oid))
	{
		Relation	rel = table_open(sink_oid, NoLock);

		if (rel->rd_rel->relkind != RELKIND_RELATION &&
			rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("sink \"%s\" is not a table", sink_name)));
		stm_query_check_sink(qi, rel, name, qi->agg && strcmp(output_mode, "update") == 0);
		table_close(rel, NoLock);
	}
	else
	{
		Oid			nspid = RangeVarGetCreationNamespace(sink_rv);
		char	   *qualified = quote_qualified_identifier(get_namespace_name(nspid), sink_rv->relname);

		stm_api_exec(stm_sink_table_ddl(stm_sink_output(qi, stm_catalog_parse_output_mode(output_mode)),
										qualified,
										strcmp(output_mode, "append") != 0),
					 0, NULL, NULL, NULL, SPI_OK_UTILITY);
		CommandCounterIncrement();
		sink_oid = get_relname_relid(sink_rv->relname, nspid);
	}

	for (int i = 0; i < 18; i++)
		nulls[i] = ' ';
	values[17] = Int32GetDatum(parallel_workers);
	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(src->name);
	values[2] = CStringGetTextDatum(query);
	values[3] = ObjectIdGetDatum(sink_oid);
	if (!OidIsValid(sink_oid))
		nulls[3] = 'n';
	values[12] = PG_ARGISNULL(9) ? (Datum) 0 : PG_GETARG_DATUM(9);
	nulls[12] = PG_ARGISNULL(9) ? 'n' : ' ';
	values[13] = PG_ARGISNULL(6) ? (Datum) 0 : PG_GETARG_DATUM(6);
	nulls[13] = PG_ARGISNULL(6) ? 'n' : ' ';
	values[14] = BoolGetDatum(PG_GETARG_BOOL(7));
	values[4] = CStringGetTextDatum(output_mode);
	if (PG_ARGISNULL(4))
		nulls[5] = 'n';
	else
		values[5] = PG_GETARG_DATUM(4);
	if (event_time)
		values[6] = CStringGetTextDatum(event_time);
	else
		nulls[6] = 'n';
	values[7] = CStringGetTextDatum(trigger);
	values[8] = CStringGetTextDatum(late_rows);
	if (PG_ARGISNULL(11))
		nulls[9] = 'n';
	else
		values[9] = PG_GETARG_DATUM(11);
	values[10] = BoolGetDatum(start);
	values[11] = CStringGetTextDatum(GetConfigOption("search_path", false, false));

	values[15] = ObjectIdGetDatum(GetUserId());
	if (named_sink)
		values[16] = CStringGetTextDatum(named_sink->name);
	else
		nulls[16] = 'n';
	scope = stm_catalog_begin();
	SPI_connect();
	if (SPI_execute_with_args("INSERT INTO streaming.stream_defs (name, source, query, sink, output_mode, "
							  "watermark_delay, event_time, trigger, late_rows, idle_timeout, enabled, status, search_path, "
							  "sink_function, dedup_keys, dedup_within_watermark, owner, sink_name, parallel_workers) "
							  "VALUES ($1, $2, $3, $4::oid::regclass, $5, $6, $7, $8, $9, $10, $11, "
							  "CASE WHEN $11 THEN 'running' ELSE 'stopped' END, $12, $13::oid::regprocedure, $14, $15, "
							  "$16::oid::regrole, $17, $18) RETURNING id",
							  18, types, values, nulls, false, 0) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into streaming.stream_defs");
	{
		bool		isnull;

		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	stm_catalog_end(scope);

	if (qi->agg)
		stm_aggstate_create(stream_id, qi->agg, GetUserId());
	if (!PG_ARGISNULL(6))
	{
		check_dedup_keys(src->view, PG_GETARG_ARRAYTYPE_P(6));
		stm_dedup_create(stream_id, GetUserId());
	}
	if (start)
		stm_api_want_on_commit(stream_id, GetUserId());
	PG_RETURN_VOID();
}

/* The stream's state and dedup tables (the extension's owner's): dropped, or emptied (reset). */
void
stm_api_clear_state_tables(int32 stream_id, bool drop)
{
	char	   *tables[2] = {stm_aggstate_table(stream_id), stm_dedup_table(stream_id)};

	for (int i = 0; i < 2; i++)
		if (to_regclass_name(tables[i]))
			stm_catalog_exec(psprintf(drop ? "DROP TABLE %s" : "DELETE FROM %s", tables[i]),
							 0, NULL, NULL, NULL, drop ? SPI_OK_UTILITY : SPI_OK_DELETE);
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
 * streaming.alter_stream(name, parallel_workers => n): change a stream's
 * settings (NULL: unchanged).  A running stream takes them at its next
 * batch (its worker reads the definition each batch); the row lock waits
 * for a batch in flight.
 */
Datum
streaming_alter_stream(PG_FUNCTION_ARGS)
{
	char	   *name;
	StmStreamDef *def;

	(void) stm_catalog_check_version(ERROR);
	name = stm_arg_name(fcinfo);
	def = stm_catalog_get_stream(name, false);
	stm_catalog_check_owner("stream", name, def->owner);
	if (!PG_ARGISNULL(1))
	{
		int			n = PG_GETARG_INT32(1);
		StmQueryInfo *qi = NULL;
		StmSourceDef *src = stm_catalog_get_source_of_stream(def);

		if (n > 0)
		{
			/* the query as the batches analyse it: its creator's search_path */
			int			nest = NewGUCNestLevel();

			(void) set_config_option("search_path", def->search_path, PGC_USERSET,
									 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
			qi = stm_query_analyze(def->query);
			AtEOXact_GUC(true, nest);
		}
		stm_parallel_check_arg(name, n, stm_source_routine(src->kind), qi, def->has_dedup,
							   def->keep_late_rows);
		(void) stm_catalog_get_stream_by_id(def->id, true);
		{
			Oid			types[2] = {INT4OID, INT4OID};
			Datum		values[2] = {Int32GetDatum(def->id), Int32GetDatum(n)};

			stm_catalog_exec("UPDATE streaming.stream_defs SET parallel_workers = $2 WHERE id = $1",
							 2, types, values, NULL, SPI_OK_UPDATE);
		}
	}
	PG_RETURN_VOID();
}
