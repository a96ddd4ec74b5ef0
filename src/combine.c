/*
 * combine.c: a stream's partial states, read from other servers and
 * combined there (SPEC 8).
 *
 * Every server that runs a share of a stream keeps its groups' partial
 * aggregate states in its state table (streaming.state_<id>: window,
 * group values, one state per aggregate, serialized when internal).  The
 * view streaming.partial_states says, per aggregate stream, which table
 * that is and what its columns are (its layout, below); a server that reads
 * the states of others (postgres_fdw) builds with streaming.combine_view a
 * view that groups the rows of all of them and, per aggregate, combines
 * and finalizes their states with the aggregate's own functions
 * (streaming.combine_partial, an aggregate over states, whose steps are a
 * Finalize Agg's: deserialize, combine, final; aggregate.c calls them), then
 * computes the stream's output columns from the results.  So a windowed
 * count or percentile over all servers is what one server over every
 * partition would compute.
 *
 * The layout (jsonb, the same on every server that runs the same stream):
 *   window      kind (none, tumble, hop, session), size, slide, origin
 *   keys        per group column key_k: its type in the state table
 *   aggregates  per state column state_i: the aggregate (its signature), its
 *               argument types, the state's type and the result's type
 *   outputs     per output column: its name, and its expression over
 *               window_start, window_end, key_k and state_i (standing for
 *               aggregate i's result), deparsed by PostgreSQL's ruleutils
 * Names are qualified (deparsed with search_path pinned to pg_catalog).
 *
 * Trust: what comes from another server is input.  combine_view builds its
 * SQL from locally resolved types and aggregates, and takes a remote output
 * expression only if it parses alone as one expression without subqueries
 * and is immutable here.  A state of type internal is bytes that the
 * aggregate's deserialize function trusts; built-in ones check their input
 * (pq_getmsg*, the types' receive functions), others (tdigest's copies what
 * the bytes say), so those are loaded only by superusers
 * (stm_combine_check_trusted_states; import_share asks the same).
 * Session windows are refused: a session's extent depends on every row of
 * its group, so sessions of two servers may overlap and would have to
 * merge.  Servers that cannot be reached fail the view (postgres_fdw's
 * errors name them; errors of ours about a server's rows name it too):
 * never a partial answer.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "foreign/foreign.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/analyze.h"
#include "parser/parse_coerce.h"
#include "parser/parse_type.h"
#include "parser/parser.h"
#include "rewrite/rewriteHandler.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/regproc.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"

#include "aggregate.h"
#include "aggstate.h"
#include "api.h"
#include "catalog.h"
#include "combine.h"
#include "query.h"
#include "window.h"

PG_FUNCTION_INFO_V1(streaming_partial_state_layout);
PG_FUNCTION_INFO_V1(streaming_combine_partial_step);
PG_FUNCTION_INFO_V1(streaming_combine_partial_final);
PG_FUNCTION_INFO_V1(streaming_combine_view);

/* ---- the layout --------------------------------------------------------- */

static const char *const window_kind_names[] = {
	[STM_WINDOW_NONE] = "none",
	[STM_WINDOW_TUMBLE] = "tumble",
	[STM_WINDOW_HOP] = "hop",
	[STM_WINDOW_SESSION] = "session",
};

/* The state table of stream id, or InvalidOid when it has none. */
Oid
stm_combine_state_table(int32 stream_id)
{
	Oid			nsp = get_namespace_oid("streaming", true);

	if (!OidIsValid(nsp))
		return InvalidOid;
	return get_relname_relid(psprintf("state_%d", stream_id), nsp);
}

/* An output's Var of the group row as the state table's column (one further on). */
static Node *
state_table_var(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Var))
	{
		Var		   *v = copyObject((Var *) node);

		v->varattno += 1;
		v->varattnosyn = v->varattno;
		return (Node *) v;
	}
	return expression_tree_mutator(node, state_table_var, context);
}

static void
append_json_key(StringInfo buf, const char *key, const char *value, bool comma)
{
	if (comma)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	escape_json(buf, value);
}

/*
 * The layout of an aggregate stream's partial states (the file's banner),
 * as jsonb text.  state_table deparses the outputs: its columns are
 * window_start, window_end, key_k, state_i after the group key.
 */
char *
stm_combine_layout(StmAggQuery *agg, Oid state_table)
{
	StringInfoData buf;
	List	   *dpcontext = deparse_context_for("state", state_table);
	int			nest = stm_catalog_pin_search_path();
	ListCell   *lc;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"window\": {");
	append_json_key(&buf, "kind", window_kind_names[agg->window.kind], false);
	appendStringInfo(&buf, ", \"size_us\": " INT64_FORMAT ", \"slide_us\": " INT64_FORMAT
					 ", \"origin_us\": " INT64_FORMAT "}, \"keys\": [",
					 agg->window.size_us, agg->window.slide_us, (int64) agg->window.origin);
	for (int k = 0; k < agg->nkeys; k++)
	{
		appendStringInfoString(&buf, k > 0 ? ", {" : "{");
		append_json_key(&buf, "column", psprintf("key_%d", k + 1), false);
		append_json_key(&buf, "type", stm_aggstate_key_type(agg, k), true);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoString(&buf, "], \"aggregates\": [");
	foreach(lc, agg->aggrefs)
	{
		Aggref	   *a = lfirst_node(Aggref, lc);
		ListCell   *lt;

		appendStringInfoString(&buf, foreach_current_index(lc) > 0 ? ", {" : "{");
		append_json_key(&buf, "column", psprintf("state_%d", foreach_current_index(lc) + 1), false);
		append_json_key(&buf, "aggregate", format_procedure_qualified(a->aggfnoid), true);
		appendStringInfoString(&buf, ", \"argument_types\": [");
		foreach(lt, a->aggargtypes)
		{
			if (foreach_current_index(lt) > 0)
				appendStringInfoString(&buf, ", ");
			escape_json(&buf, format_type_be_qualified(lfirst_oid(lt)));
		}
		appendStringInfoChar(&buf, ']');
		append_json_key(&buf, "state_type", stm_aggstate_state_type(a), true);
		append_json_key(&buf, "result_type", format_type_be_qualified(a->aggtype), true);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoString(&buf, "], \"outputs\": [");
	foreach(lc, agg->outputs)
	{
		int			n = foreach_current_index(lc);
		Node	   *expr = state_table_var((Node *) lfirst(lc), NULL);

		appendStringInfoString(&buf, n > 0 ? ", {" : "{");
		append_json_key(&buf, "name", agg->out_names[n], false);
		append_json_key(&buf, "expression", deparse_expression(expr, dpcontext, false, false), true);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoString(&buf, "]}");
	stm_catalog_unpin_search_path(nest);
	return buf.data;
}

/*
 * streaming.partial_state_layout(stream_id): the state table and layout of
 * an aggregate stream the caller may see (none for others, and for streams
 * without aggregates); the view streaming.partial_states shows them.
 */
Datum
streaming_partial_state_layout(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StmStreamDef *def;
	Oid			table;
	StmQueryInfo *qi;
	int			nest;

	InitMaterializedSRF(fcinfo, 0);
	def = stm_catalog_get_stream_by_id(PG_GETARG_INT32(0), false);
	if (def == NULL || !has_privs_of_role(GetUserId(), def->owner))
		return (Datum) 0;
	table = stm_combine_state_table(def->id);
	if (!OidIsValid(table))
		return (Datum) 0;
	qi = stm_query_analyze_stored(def, &nest);
	if (qi->agg)
	{
		Datum		values[2];
		bool		nulls[2] = {false, false};

		values[0] = CStringGetTextDatum(get_rel_name(table));
		values[1] = DirectFunctionCall1(jsonb_in, CStringGetDatum(stm_combine_layout(qi->agg, table)));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	AtEOXact_GUC(true, nest);
	return (Datum) 0;
}

/* ---- streaming.combine_partial ------------------------------------------ */

/*
 * A state of type internal comes as bytes for the aggregate's deserialize
 * function, which trusts them.  PostgreSQL's own check what they read; for
 * others (tdigest's copies as many centroids as the bytes say), bytes from
 * outside (another server, an import) are loaded for superusers only.
 */
void
stm_combine_check_trusted_states(List *aggrefs, const char *whence)
{
	ListCell   *lc;

	foreach(lc, aggrefs)
	{
		Aggref	   *a = lfirst_node(Aggref, lc);
		HeapTuple	tup;
		Oid			deserialfn;

		if (stm_agg_transtype(a) != INTERNALOID)
			continue;
		tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(a->aggfnoid));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for aggregate %u", a->aggfnoid);
		deserialfn = ((Form_pg_aggregate) GETSTRUCT(tup))->aggdeserialfn;
		ReleaseSysCache(tup);
		if (deserialfn >= FirstNormalObjectId && !superuser())
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("only superusers may load partial states of aggregate %s from %s",
							format_procedure(a->aggfnoid), whence),
					 errdetail("Its states are of type internal, and its deserialize function %s trusts the bytes it is given.",
							   format_procedure(deserialfn))));
	}
}

/* One aggregate's support functions, kept in the step function's fn_extra. */
typedef struct CombineFns
{
	Oid			aggfnoid;
	char	   *name;			/* the aggregate, for messages */
	StmAggRuntime *rt;
	MemoryContext load_cxt;		/* a loaded state, until it is combined */
} CombineFns;

/* A group's combined state (the aggregate's transition value). */
typedef struct CombineGroup
{
	CombineFns *fns;
	StmAggValue value;
} CombineGroup;

typedef struct CombineErrorArg
{
	const char *aggregate;
	const char *server;
} CombineErrorArg;

static void
combine_error_callback(void *arg)
{
	CombineErrorArg *e = arg;

	if (e->server)
		errcontext("partial state of aggregate %s from server \"%s\"", e->aggregate, e->server);
	else
		errcontext("partial state of aggregate %s", e->aggregate);
}

/*
 * The aggregate's functions, as a Finalize Agg of it would call them: an
 * Aggref made as the parser makes one for these argument and result types
 * (aggregate.c takes it from there), and the states' type checked against
 * the column's.
 */
static CombineFns *
combine_fns(FunctionCallInfo fcinfo, Oid aggfnoid, ArrayType *argtypes_array)
{
	CombineFns *fns = fcinfo->flinfo->fn_extra;
	Oid			state_type = get_fn_expr_argtype(fcinfo->flinfo, 3);
	Oid			result_type = get_fn_expr_argtype(fcinfo->flinfo, 5);
	MemoryContext old;
	HeapTuple	tup;
	Form_pg_aggregate form;
	Form_pg_proc proc;
	Datum	   *elems;
	bool	   *elnulls;
	int			nargs;
	Oid			declared[FUNC_MAX_ARGS];
	Oid			given[FUNC_MAX_ARGS];
	Aggref	   *a;
	Oid			stored;

	if (fns != NULL)
	{
		if (fns->aggfnoid != aggfnoid)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the aggregate of streaming.combine_partial must be the same in every row")));
		return fns;
	}
	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	fns = palloc0(sizeof(CombineFns));
	fns->aggfnoid = aggfnoid;
	fns->name = format_procedure(aggfnoid);

	tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(aggfnoid));
	if (!HeapTupleIsValid(tup))
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("function %s is not an aggregate", fns->name)));
	form = (Form_pg_aggregate) GETSTRUCT(tup);
	if (form->aggkind != AGGKIND_NORMAL || !OidIsValid(form->aggcombinefn))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("aggregate %s cannot combine partial states", fns->name),
				 errdetail("It is an ordered-set aggregate, or it has no combine function.")));
	stm_agg_check_permissions(form);
	ReleaseSysCache(tup);

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(aggfnoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", aggfnoid);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	deconstruct_array(argtypes_array, REGTYPEOID, sizeof(Oid), true, TYPALIGN_INT,
					  &elems, &elnulls, &nargs);
	if (nargs != proc->pronargs || OidIsValid(proc->provariadic))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument_types of streaming.combine_partial must give the %d argument types of aggregate %s",
						proc->pronargs, fns->name)));
	for (int i = 0; i < nargs; i++)
	{
		declared[i] = proc->proargtypes.values[i];
		given[i] = elnulls[i] ? InvalidOid : DatumGetObjectId(elems[i]);
		if (!OidIsValid(given[i]) || IsPolymorphicType(given[i]) ||
			(!IsPolymorphicType(declared[i]) && given[i] != declared[i]))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("argument type %d of aggregate %s cannot be %s", i + 1, fns->name,
							OidIsValid(given[i]) ? format_type_be(given[i]) : "NULL")));
	}
	if (IsPolymorphicType(proc->prorettype) ?
		enforce_generic_type_consistency(given, declared, nargs, proc->prorettype, false) != result_type :
		proc->prorettype != result_type)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("the result of aggregate %s is not of type %s", fns->name,
						format_type_be(result_type))));
	ReleaseSysCache(tup);

	/* the Aggref the parser would make of a call with these argument types */
	a = makeNode(Aggref);
	a->aggfnoid = aggfnoid;
	a->aggtype = result_type;
	a->aggcollid = get_typcollation(result_type);
	a->inputcollid = PG_GET_COLLATION();
	a->aggstar = nargs == 0;
	a->aggkind = AGGKIND_NORMAL;
	a->aggsplit = AGGSPLIT_SIMPLE;
	a->location = -1;
	for (int i = 0; i < nargs; i++)
	{
		a->aggargtypes = lappend_oid(a->aggargtypes, given[i]);
		a->args = lappend(a->args,
						  makeTargetEntry((Expr *) makeNullConst(given[i], -1, get_typcollation(given[i])),
										  i + 1, NULL, false));
	}
	stored = stm_agg_storedtype(a);
	if (stored != state_type)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("partial states of aggregate %s are of type %s, not %s", fns->name,
						format_type_be(stored), format_type_be(state_type))));
	stm_combine_check_trusted_states(list_make1(a), "another server");
	fns->load_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming combine_partial",
										  ALLOCSET_DEFAULT_SIZES);
	fns->rt = stm_agg_init(list_make1(a), fns->load_cxt);
	fcinfo->flinfo->fn_extra = fns;
	MemoryContextSwitchTo(old);
	return fns;
}

/*
 * streaming.combine_partial(aggregate, argument_types, state, server,
 * result) step: a server's partial state of a group, deserialized and
 * combined into the group's; the states live in the aggregate's context.
 */
Datum
streaming_combine_partial_step(PG_FUNCTION_ARGS)
{
	MemoryContext aggcxt;
	CombineFns *fns;
	CombineGroup *g;
	StmAggValue from;
	CombineErrorArg errarg;
	ErrorContextCallback errcb;

	if (!AggCheckCallContext(fcinfo, &aggcxt))
		elog(ERROR, "streaming.combine_partial_step called in non-aggregate context");
	if (PG_ARGISNULL(1) || PG_ARGISNULL(2))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the aggregate and argument_types of streaming.combine_partial must not be NULL")));
	fns = combine_fns(fcinfo, PG_GETARG_OID(1), PG_GETARG_ARRAYTYPE_P(2));
	g = PG_ARGISNULL(0) ? NULL : (CombineGroup *) PG_GETARG_POINTER(0);
	if (g == NULL)
	{
		g = MemoryContextAllocZero(aggcxt, sizeof(CombineGroup));
		g->fns = fns;
		(void) stm_agg_set_state_context(fns->rt, aggcxt);
		stm_agg_group_init(fns->rt, &g->value);
	}

	errarg.aggregate = fns->name;
	errarg.server = PG_ARGISNULL(4) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(4));
	errcb.callback = combine_error_callback;
	errcb.arg = &errarg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	/* loaded in a context of its own, combined into the group's */
	MemoryContextReset(fns->load_cxt);
	(void) stm_agg_set_state_context(fns->rt, fns->load_cxt);
	stm_agg_load(fns->rt, 0, PG_GETARG_DATUM(3), PG_ARGISNULL(3), &from);
	(void) stm_agg_set_state_context(fns->rt, aggcxt);
	stm_agg_combine(fns->rt, 0, &g->value, &from);
	error_context_stack = errcb.previous;
	PG_RETURN_POINTER(g);
}

/* The combined state of a group, finalized by the aggregate's final function. */
Datum
streaming_combine_partial_final(PG_FUNCTION_ARGS)
{
	MemoryContext aggcxt;
	CombineGroup *g;
	Datum		result;
	bool		isnull;

	if (!AggCheckCallContext(fcinfo, &aggcxt))
		elog(ERROR, "streaming.combine_partial_final called in non-aggregate context");
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	g = (CombineGroup *) PG_GETARG_POINTER(0);
	(void) stm_agg_set_state_context(g->fns->rt, aggcxt);
	result = stm_agg_finalize(g->fns->rt, 0, &g->value, &isnull);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

/* ---- streaming.combine_view --------------------------------------------- */

/* What one server says of the stream (streaming.partial_states). */
typedef struct RemoteLayout
{
	const char *server;
	char	   *state_table;
	char	   *layout;
} RemoteLayout;

typedef struct LayoutAggregate
{
	Oid			aggfnoid;
	char	   *argument_types; /* a regtype[] literal */
	Oid			state_type;
	Oid			result_type;
} LayoutAggregate;

/* The layout, resolved here. */
typedef struct Layout
{
	char	   *window_kind;
	List	   *key_types;		/* char *: type names as this server writes them */
	List	   *aggregates;		/* LayoutAggregate */
	List	   *out_names;
	List	   *out_exprs;
} Layout;

typedef struct ReadArg
{
	const char *stream;
	const char *server;
} ReadArg;

static void
read_error_callback(void *arg)
{
	ReadArg    *r = arg;

	errcontext("reading the partial states of stream \"%s\" from server \"%s\"", r->stream, r->server);
}

static void
remote_layout_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	RemoteLayout *r = arg;

	if (r->layout != NULL)
		return;
	r->state_table = stm_sql_get_text(tuple, desc, "state_table");
	r->layout = stm_sql_get_text(tuple, desc, "layout");
}

/*
 * The stream's row of streaming.partial_states on a server, through a
 * foreign table of this transaction (pg_temp, dropped again): an error
 * when it has none.
 */
static void
read_remote_layout(RemoteLayout *r, const char *stream)
{
	const char *ft = "pg_temp.streaming_partial_states";
	ReadArg		arg = {stream, r->server};
	ErrorContextCallback errcb;
	StmSql		q;

	errcb.callback = read_error_callback;
	errcb.arg = &arg;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	stm_api_exec(psprintf("CREATE FOREIGN TABLE %s (stream text, state_table text, layout jsonb) "
						  "SERVER %s OPTIONS (schema_name 'streaming', table_name 'partial_states')",
						  ft, quote_identifier(r->server)),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	stm_sql_init(&q, psprintf("SELECT state_table, layout::text AS layout FROM %s WHERE stream = :stream", ft));
	stm_sql_text(&q, "stream", stream);
	(void) stm_sql_run(&q, SPI_OK_SELECT, remote_layout_row, r);
	stm_api_exec(psprintf("DROP FOREIGN TABLE %s", ft), 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	error_context_stack = errcb.previous;
	if (r->layout == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("server \"%s\" has no partial states of stream \"%s\"", r->server, stream),
				 errdetail("streaming.partial_states on that server has no row for the stream: it does not exist there, it has no aggregates, or the role of the user mapping is not its owner.")));
	if (r->state_table == NULL || strncmp(r->state_table, "state_", 6) != 0 ||
		r->state_table[6] == '\0' || strspn(r->state_table + 6, "0123456789") != strlen(r->state_table + 6))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("server \"%s\" names an unexpected state table for stream \"%s\"", r->server, stream)));
}

static void
layout_text_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	List	  **list = arg;

	*list = lappend(*list, stm_sql_get_text(tuple, desc, "v"));
}

/* The texts a jsonb path query of the layout returns, in order (NULLs are errors). */
static List *
layout_texts(const char *layout, const char *sql, const char *server)
{
	List	   *result = NIL;
	ListCell   *lc;
	StmSql		q;

	stm_sql_init(&q, sql);
	stm_sql_jsonb(&q, "layout", layout);
	(void) stm_sql_run(&q, SPI_OK_SELECT, layout_text_row, &result);
	foreach(lc, result)
		if (lfirst(lc) == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_EXCEPTION),
					 errmsg("server \"%s\" gave a malformed layout of partial states", server)));
	return result;
}

/* A type the layout names, here (with its typmod: key types keep theirs). */
static Oid
layout_type(const char *name, int32 *typmod)
{
	Oid			typid;
	int32		mod;

	parseTypeString(name, &typid, &mod, false);
	if (typmod)
		*typmod = mod;
	return typid;
}

/* The layout read and resolved here; what is missing here is an error. */
static Layout *
resolve_layout(const char *stream, const RemoteLayout *r)
{
	Layout	   *l = palloc0(sizeof(Layout));
	List	   *aggs;
	List	   *args;
	List	   *states;
	List	   *results;
	ListCell   *lc;
	List	   *kind = layout_texts(r->layout, "SELECT :layout::jsonb -> 'window' ->> 'kind' AS v", r->server);

	l->window_kind = linitial(kind);
	if (strcmp(l->window_kind, "session") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream \"%s\" has session windows, whose partial states cannot be combined across servers", stream),
				 errdetail("A session's extent depends on every row of its group: the sessions of two servers may overlap and would have to merge.")));
	l->key_types = layout_texts(r->layout,
								"SELECT k ->> 'type' AS v FROM jsonb_array_elements(:layout::jsonb -> 'keys') "
								"WITH ORDINALITY AS t(k, o) ORDER BY o", r->server);
	foreach(lc, l->key_types)
		(void) layout_type(lfirst(lc), NULL);
	aggs = layout_texts(r->layout,
						"SELECT a ->> 'aggregate' AS v FROM jsonb_array_elements(:layout::jsonb -> 'aggregates') "
						"WITH ORDINALITY AS t(a, o) ORDER BY o", r->server);
	args = layout_texts(r->layout,
						"SELECT ARRAY(SELECT jsonb_array_elements_text(a -> 'argument_types'))::text AS v "
						"FROM jsonb_array_elements(:layout::jsonb -> 'aggregates') WITH ORDINALITY AS t(a, o) ORDER BY o",
						r->server);
	states = layout_texts(r->layout,
						  "SELECT a ->> 'state_type' AS v FROM jsonb_array_elements(:layout::jsonb -> 'aggregates') "
						  "WITH ORDINALITY AS t(a, o) ORDER BY o", r->server);
	results = layout_texts(r->layout,
						   "SELECT a ->> 'result_type' AS v FROM jsonb_array_elements(:layout::jsonb -> 'aggregates') "
						   "WITH ORDINALITY AS t(a, o) ORDER BY o", r->server);
	if (list_length(args) != list_length(aggs) || list_length(states) != list_length(aggs) ||
		list_length(results) != list_length(aggs))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("server \"%s\" gave a malformed layout of partial states", r->server)));
	foreach(lc, aggs)
	{
		int			i = foreach_current_index(lc);
		LayoutAggregate *a = palloc0(sizeof(LayoutAggregate));
		Datum		oid = DirectFunctionCall1(to_regprocedure, CStringGetTextDatum(lfirst(lc)));

		if (DatumGetObjectId(oid) == InvalidOid ||
			!SearchSysCacheExists1(AGGFNOID, oid))
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_FUNCTION),
					 errmsg("aggregate %s of stream \"%s\" does not exist on this server", (char *) lfirst(lc), stream),
					 errhint("Install the extension that defines it in this database, in the same schema.")));
		a->aggfnoid = DatumGetObjectId(oid);
		a->argument_types = list_nth(args, i);
		/* resolved here, so that the view's text names nothing from elsewhere */
		{
			Oid			infunc;
			Oid			ioparam;

			getTypeInputInfo(REGTYPEARRAYOID, &infunc, &ioparam);
			(void) OidInputFunctionCall(infunc, a->argument_types, ioparam, -1);
		}
		a->state_type = layout_type(list_nth(states, i), NULL);
		a->result_type = layout_type(list_nth(results, i), NULL);
		l->aggregates = lappend(l->aggregates, a);
	}
	l->out_names = layout_texts(r->layout,
								"SELECT x ->> 'name' AS v FROM jsonb_array_elements(:layout::jsonb -> 'outputs') "
								"WITH ORDINALITY AS t(x, o) ORDER BY o", r->server);
	l->out_exprs = layout_texts(r->layout,
								"SELECT x ->> 'expression' AS v FROM jsonb_array_elements(:layout::jsonb -> 'outputs') "
								"WITH ORDINALITY AS t(x, o) ORDER BY o", r->server);
	if (l->out_names == NIL || list_length(l->out_exprs) != list_length(l->out_names))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("server \"%s\" gave a malformed layout of partial states", r->server)));
	return l;
}

static bool
has_sublink(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, SubLink))
		return true;
	return raw_expression_tree_walker(node, has_sublink, context);
}

/*
 * An output expression from another server: it must parse alone as one
 * expression without subqueries (so that it cannot be anything else in
 * the view's text).
 */
static void
check_output_expression(const char *stream, const char *column, const char *expr)
{
	List	   *raw = raw_parser(psprintf("SELECT (%s)", expr), RAW_PARSE_DEFAULT);
	SelectStmt *s = NULL;

	if (list_length(raw) == 1 && IsA(linitial_node(RawStmt, raw)->stmt, SelectStmt))
		s = (SelectStmt *) linitial_node(RawStmt, raw)->stmt;
	if (s == NULL || list_length(s->targetList) != 1 || s->fromClause != NIL ||
		s->whereClause != NULL || s->groupClause != NIL || s->havingClause != NULL ||
		s->windowClause != NIL || s->sortClause != NIL || s->limitCount != NULL ||
		s->limitOffset != NULL || s->lockingClause != NIL || s->withClause != NULL ||
		s->distinctClause != NIL || s->intoClause != NULL || s->valuesLists != NIL ||
		s->op != SETOP_NONE ||
		has_sublink(((ResTarget *) linitial(s->targetList))->val, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("output column \"%s\" of stream \"%s\" cannot be computed from combined partial states", column, stream),
				 errdetail("Its expression is \"%s\".", expr)));
}

/* The output columns must be immutable expressions of the combined groups. */
static void
check_view_query(const char *sql, const char *stream, const Layout *l)
{
	List	   *raw = raw_parser(sql, RAW_PARSE_DEFAULT);
	Query	   *query;
	ListCell   *lc;
	int			nest = stm_catalog_pin_search_path();

	query = parse_analyze_fixedparams(linitial_node(RawStmt, raw), sql, NULL, 0, NULL);
	foreach(lc, query->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (contain_mutable_functions((Node *) tle->expr))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("output column \"%s\" of stream \"%s\" cannot be computed from combined partial states",
							tle->resname, stream),
					 errdetail("Its expression is not immutable here: \"%s\".",
							   (char *) list_nth(l->out_exprs, foreach_current_index(lc)))));
	}
	stm_catalog_unpin_search_path(nest);
}

/* The view's text: the outputs over the combined groups of every server's states. */
static char *
view_sql(const char *stream, const Layout *l, const char *schema, char **tables, char **servers,
		 int nservers)
{
	StringInfoData sql;
	StringInfoData cols;
	ListCell   *lc;
	ListCell   *lc2;

	initStringInfo(&cols);
	appendStringInfoString(&cols, "window_start, window_end");
	for (int k = 0; k < list_length(l->key_types); k++)
		appendStringInfo(&cols, ", key_%d", k + 1);

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT ");
	forboth(lc, l->out_names, lc2, l->out_exprs)
	{
		check_output_expression(stream, lfirst(lc), lfirst(lc2));
		appendStringInfo(&sql, "%s(%s) AS %s", foreach_current_index(lc) > 0 ? ", " : "",
						 (char *) lfirst(lc2), quote_identifier(lfirst(lc)));
	}
	appendStringInfo(&sql, " FROM (SELECT %s", cols.data);
	foreach(lc, l->aggregates)
	{
		LayoutAggregate *a = lfirst(lc);
		int			i = foreach_current_index(lc) + 1;

		appendStringInfo(&sql, ", streaming.combine_partial(%s::pg_catalog.regprocedure, %s::pg_catalog.regtype[], "
						 "u.state_%d, u.server, NULL::%s) AS state_%d",
						 quote_literal_cstr(format_procedure_qualified(a->aggfnoid)),
						 quote_literal_cstr(a->argument_types), i,
						 format_type_be_qualified(a->result_type), i);
	}
	appendStringInfoString(&sql, " FROM (");
	for (int s = 0; s < nservers; s++)
	{
		appendStringInfo(&sql, "%sSELECT %s::pg_catalog.text AS server, f.* FROM %s f",
						 s > 0 ? " UNION ALL " : "", quote_literal_cstr(servers[s]),
						 quote_qualified_identifier(schema, tables[s]));
	}
	appendStringInfo(&sql, ") u GROUP BY %s) s", cols.data);
	return sql.data;
}

/* A foreign table of one server's state table, its columns as the layout says. */
static void
create_state_table(const char *schema, const char *table, const char *server,
				   const char *remote_table, const Layout *l)
{
	StringInfoData sql;
	ListCell   *lc;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE FOREIGN TABLE %s (window_start pg_catalog.timestamptz, "
					 "window_end pg_catalog.timestamptz",
					 quote_qualified_identifier(schema, table));
	foreach(lc, l->key_types)
	{
		int32		typmod;
		Oid			type = layout_type(lfirst(lc), &typmod);

		appendStringInfo(&sql, ", key_%d %s", foreach_current_index(lc) + 1,
						 format_type_extended(type, typmod,
											  FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY));
	}
	foreach(lc, l->aggregates)
		appendStringInfo(&sql, ", state_%d %s", foreach_current_index(lc) + 1,
						 format_type_be_qualified(((LayoutAggregate *) lfirst(lc))->state_type));
	appendStringInfo(&sql, ") SERVER %s OPTIONS (schema_name 'streaming', table_name %s, fetch_size '10000')",
					 quote_identifier(server), quote_literal_cstr(remote_table));
	stm_api_exec(sql.data, 0, NULL, NULL, NULL, SPI_OK_UTILITY);
}

/*
 * streaming.combine_view(name, stream, servers): a view of the stream's
 * results over the partial states of every server in servers (postgres_fdw
 * servers with user mappings), through a foreign table per server named
 * <name>_<server> next to it, which DROP VIEW takes along.  Everything is
 * made as the caller, who needs USAGE on the servers and CREATE on the
 * schema.
 */
Datum
streaming_combine_view(PG_FUNCTION_ARGS)
{
	char	   *name;
	char	   *stream;
	ArrayType  *servers_array;
	Datum	   *elems;
	bool	   *elnulls;
	int			nservers;
	char	  **servers;
	char	  **tables;
	RemoteLayout *remote;
	RangeVar   *rv;
	Oid			nsp;
	char	   *schema;
	Layout	   *layout;
	char	   *sql;
	ObjectAddress view_addr;

	(void) stm_catalog_check_version(ERROR);
	stm_arg_require(fcinfo, 0, "name");
	stm_arg_require(fcinfo, 1, "stream");
	stm_arg_require(fcinfo, 2, "servers");
	name = stm_arg_text(fcinfo, 0);
	stream = stm_arg_text(fcinfo, 1);
	servers_array = PG_GETARG_ARRAYTYPE_P(2);
	deconstruct_array(servers_array, TEXTOID, -1, false, TYPALIGN_INT, &elems, &elnulls, &nservers);
	if (nservers == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("servers must name at least one foreign server"),
				 errhint("For example ARRAY['server_a', 'server_b'], servers made with CREATE SERVER ... FOREIGN DATA WRAPPER postgres_fdw.")));

	rv = makeRangeVarFromNameList(stringToQualifiedNameList(name));
	nsp = RangeVarGetCreationNamespace(rv);
	schema = get_namespace_name(nsp);
	if (OidIsValid(get_relname_relid(rv->relname, nsp)))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_TABLE),
				 errmsg("relation \"%s\" already exists", rv->relname)));

	servers = palloc(sizeof(char *) * nservers);
	tables = palloc(sizeof(char *) * nservers);
	remote = palloc0(sizeof(RemoteLayout) * nservers);
	for (int i = 0; i < nservers; i++)
	{
		ForeignServer *fs;

		if (elnulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("servers must not contain NULL")));
		servers[i] = TextDatumGetCString(elems[i]);
		for (int j = 0; j < i; j++)
			if (strcmp(servers[i], servers[j]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("server \"%s\" is named twice in servers", servers[i]),
						 errdetail("Its partial states would count twice.")));
		fs = GetForeignServerByName(servers[i], false);
		if (strcmp(GetForeignDataWrapper(fs->fdwid)->fdwname, "postgres_fdw") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("server \"%s\" does not use postgres_fdw", servers[i]),
					 errhint("combine_view reads the partial states of other PostgreSQL servers through postgres_fdw.")));
		tables[i] = psprintf("%s_%s", rv->relname, servers[i]);
		if (strlen(tables[i]) >= NAMEDATALEN)
			ereport(ERROR,
					(errcode(ERRCODE_NAME_TOO_LONG),
					 errmsg("the foreign table of server \"%s\" would be named \"%s\", which is too long", servers[i], tables[i]),
					 errhint("Choose a shorter view name: the foreign tables are named <view>_<server>.")));
		if (OidIsValid(get_relname_relid(tables[i], nsp)))
			ereport(ERROR,
					(errcode(ERRCODE_DUPLICATE_TABLE),
					 errmsg("relation \"%s\" already exists", tables[i]),
					 errdetail("combine_view names the foreign table of server \"%s\" so.", servers[i])));
		remote[i].server = servers[i];
		read_remote_layout(&remote[i], stream);
		if (i > 0 && strcmp(remote[i].layout, remote[0].layout) != 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("stream \"%s\" on server \"%s\" differs from stream \"%s\" on server \"%s\"",
							stream, servers[i], stream, servers[0]),
					 errdetail("Layout on \"%s\": %s; on \"%s\": %s.", servers[0], remote[0].layout,
							   servers[i], remote[i].layout),
					 errhint("Every server must run the same stream definition.")));
	}
	layout = resolve_layout(stream, &remote[0]);

	for (int i = 0; i < nservers; i++)
		create_state_table(schema, tables[i], servers[i], remote[i].state_table, layout);
	CommandCounterIncrement();
	sql = view_sql(stream, layout, schema, tables, servers, nservers);
	check_view_query(sql, stream, layout);
	stm_api_exec(psprintf("CREATE VIEW %s AS %s", quote_qualified_identifier(schema, rv->relname), sql),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	stm_api_exec(psprintf("COMMENT ON VIEW %s IS %s", quote_qualified_identifier(schema, rv->relname),
						  quote_literal_cstr(psprintf("Stream \"%s\" combined over the partial states of %d servers (streaming.combine_view).",
													  stream, nservers))),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	CommandCounterIncrement();

	/* DROP VIEW takes the foreign tables along (as a table its serial's sequence) */
	ObjectAddressSet(view_addr, RelationRelationId, get_relname_relid(rv->relname, nsp));
	for (int i = 0; i < nservers; i++)
	{
		ObjectAddress table_addr;

		ObjectAddressSet(table_addr, RelationRelationId, get_relname_relid(tables[i], nsp));
		recordDependencyOn(&table_addr, &view_addr, DEPENDENCY_AUTO);
	}
	PG_RETURN_VOID();
}
