/*
 * query.c: stream queries.
 *
 * The query text goes through PostgreSQL's raw parser and analyser; the
 * resulting Query is checked for the shapes streams support, and its target
 * list and WHERE clause are planned as expressions (expression_planner) and
 * compiled into ExprStates that read the source row as the scan tuple.  No
 * executor plan is built per batch: each record costs one qual and one
 * projection evaluation.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tupdesc.h"
#include "catalog/dependency.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/tlist.h"
#include "optimizer/optimizer.h"
#include "parser/analyze.h"
#include "parser/parse_coerce.h"
#include "parser/parser.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteHandler.h"
#include "rewrite/rewriteManip.h"
#include "storage/lmgr.h"
#include "access/genam.h"
#include "catalog/pg_index.h"
#include "nodes/bitmapset.h"
#include "parser/parse_relation.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "aggregate.h"
#include "catalog.h"
#include "query.h"
#include "ssjoin.h"
#include "window.h"

static void
refuse(const char *what, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s are not supported in a stream query", what),
			 hint ? errhint("%s", hint) : 0));
}

/*
 * Window calls are only valid as the window entry of a stream's GROUP BY
 * (allowed, NULL when there is none), window_start() and window_end() only
 * where a window exists.
 */
typedef struct WindowCallCheck
{
	Node	   *allowed;		/* the GROUP BY's window call */
	bool		has_window;
} WindowCallCheck;

static bool
window_call_walker(Node *node, WindowCallCheck *ctx)
{
	if (node == NULL)
		return false;
	if (node == ctx->allowed)
		return false;
	if (IsA(node, FuncExpr))
	{
		FuncExpr   *f = (FuncExpr *) node;
		StmWindowKind kind = stm_window_kind(f->funcid);

		if (kind == STM_WINDOW_START || kind == STM_WINDOW_END)
		{
			if (!ctx->has_window)
				ereport(ERROR,
						(errcode(ERRCODE_GROUPING_ERROR),
						 errmsg("streaming.%s() needs a window in the GROUP BY",
								kind == STM_WINDOW_START ? "window_start" : "window_end"),
						 errhint("Group by streaming.tumble(), streaming.hop() or streaming.session().")));
		}
		else if (kind != STM_WINDOW_NONE)
			ereport(ERROR,
					(errcode(ERRCODE_GROUPING_ERROR),
					 errmsg("streaming.%s() can only be used in the GROUP BY of a stream query",
							get_func_name(f->funcid)),
					 errhint("A stream query groups by at most one window call; its select list may repeat it, "
							 "or use streaming.window_start() and streaming.window_end().")));
	}
	return expression_tree_walker(node, window_call_walker, (void *) ctx);
}

static void
check_window_calls(Node *node, Node *allowed)
{
	WindowCallCheck ctx = {allowed, allowed != NULL};

	(void) window_call_walker(node, &ctx);
}

/* An installed extension's version, pg_extension.extversion. */
static char *
extension_version(Oid ext)
{
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *version = "";

	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ext));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/*
 * tdigest before 1.4.4 writes past a digest's buffer when its combine
 * function merges digests of different compressions (fixed upstream in
 * 1.4.4).  A stream combines the states of different batches, and each
 * batch's state takes its compression from its first row: with such a
 * tdigest the compression must be a constant, and aggregates of digests,
 * whose compressions cannot be known in advance, are refused.
 */
static void
check_tdigest(Aggref *agg, const char *name)
{
	Oid			ext = getExtensionOfObject(ProcedureRelationId, agg->aggfnoid);
	char	   *version;
	int			major = 0,
				minor = 0,
				patch = 0;
	ListCell   *lc;

	if (!OidIsValid(ext) || strcmp(get_extension_name(ext), "tdigest") != 0)
		return;
	version = extension_version(ext);
	if (sscanf(version, "%d.%d.%d", &major, &minor, &patch) >= 2 &&
		major * 10000 + minor * 100 + patch >= 10404)
		return;
	/* the value aggregates take double precision, the others digests */
	if (linitial_oid(agg->aggargtypes) != FLOAT8OID)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("aggregate %s cannot be used in a stream query", name),
				 errdetail("The installed tdigest %s corrupts memory when it combines digests of different compressions, and a stream cannot know the compressions of the digests it reads.",
						   version),
				 errhint("Aggregate the values themselves, or update the extension tdigest to version 1.4.4 or later.")));
	/* its integer argument is the compression */
	foreach(lc, agg->args)
	{
		Node	   *arg = (Node *) lfirst_node(TargetEntry, lc)->expr;

		if (exprType(arg) == INT4OID && !IsA(eval_const_expressions(NULL, arg), Const))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("aggregate %s needs a constant compression in a stream query", name),
					 errdetail("The installed tdigest %s corrupts memory when it combines digests of different compressions, as a stream does with the states of different batches.",
							   version),
					 errhint("Give the compression as a constant, or update the extension tdigest to version 1.4.4 or later.")));
	}
}

/* An aggregate must be computable in partial mode: its state is merged across batches. */
static bool
aggregate_walker(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, Aggref))
	{
		Aggref	   *agg = (Aggref *) node;
		char	   *name = format_procedure(agg->aggfnoid);
		HeapTuple	tup;
		Form_pg_aggregate form;

		if (agg->aggdistinct != NIL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("DISTINCT inside aggregate %s is not supported in a stream query", name),
					 errhint("Use dedup_keys to drop duplicate records before aggregating.")));
		if (agg->aggorder != NIL && agg->aggkind == AGGKIND_NORMAL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ORDER BY inside aggregate %s is not supported in a stream query", name)));
		if (agg->aggfilter != NULL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("FILTER on aggregate %s is not supported in a stream query", name),
					 errhint("Filter the rows with WHERE, or aggregate a CASE expression.")));
		if (agg->aggkind != AGGKIND_NORMAL)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("ordered-set aggregate %s cannot be used in a stream query", name),
					 errdetail("Its state cannot be computed in parts and combined across batches.")));
		tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(agg->aggfnoid));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for aggregate %u", agg->aggfnoid);
		form = (Form_pg_aggregate) GETSTRUCT(tup);
		stm_agg_check_permissions(form);
		if (!OidIsValid(form->aggcombinefn))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("aggregate %s cannot be used in a stream query", name),
					 errdetail("It has no combine function, so its state cannot be merged across batches.")));
		if (form->aggtranstype == INTERNALOID &&
			(!OidIsValid(form->aggserialfn) || !OidIsValid(form->aggdeserialfn)))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("aggregate %s cannot be used in a stream query", name),
					 errdetail("Its state is of type internal and it has no serialization functions, so the state cannot be stored.")));
		ReleaseSysCache(tup);
		check_tdigest(agg, name);
		return false;			/* arguments hold no aggregates */
	}
	return expression_tree_walker(node, aggregate_walker, context);
}

/* A source column of another type, cast to timestamptz for the window call. */
static void
check_event_time_column(Query *q, FuncExpr *window, Node *ts)
{
	Node	   *col = strip_implicit_coercions(ts);

	if (col != ts && IsA(col, Var))
	{
		Var		   *var = (Var *) col;
		RangeTblEntry *rte = rt_fetch(var->varno, q->rtable);

		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" must be of type timestamptz to be the event time of streaming.%s()",
						get_attname(rte->relid, var->varattno, false),
						get_func_name(window->funcid)),
				 errdetail("It is of type %s.", format_type_be(var->vartype))));
	}
}

/*
 * Shape 2 (SPEC 3): GROUP BY at most one window call and other expressions;
 * aggregates that PostgreSQL can compute in partial mode.
 */
static void
check_aggregate_shape(Query *q)
{
	FuncExpr   *window = NULL;
	ListCell   *lc;

	if (q->groupingSets)
		refuse("GROUPING SETS, ROLLUP and CUBE", NULL);
	if (q->havingQual)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("HAVING is not supported in a stream query yet")));
	foreach(lc, q->groupClause)
	{
		SortGroupClause *gc = lfirst_node(SortGroupClause, lc);
		TargetEntry *tle = get_sortgroupclause_tle(gc, q->targetList);

		if (IsA(tle->expr, FuncExpr))
		{
			StmWindowKind kind = stm_window_kind(((FuncExpr *) tle->expr)->funcid);

			if (kind == STM_WINDOW_TUMBLE || kind == STM_WINDOW_HOP || kind == STM_WINDOW_SESSION)
			{
				StmWindowSpec spec;

				if (window != NULL)
					ereport(ERROR,
							(errcode(ERRCODE_GROUPING_ERROR),
							 errmsg("a stream query may group by only one window call")));
				window = (FuncExpr *) tle->expr;
				stm_window_spec(window, &spec);
				check_event_time_column(q, window, (Node *) spec.ts);
				if (!IsA(spec.ts, Var))
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
							 errmsg("the event time of streaming.%s() must be a column of the source",
									get_func_name(window->funcid)),
							 errhint("Compute the event time in the source's columns.")));
			}
		}
	}
	check_window_calls((Node *) q->targetList, (Node *) window);
	check_window_calls((Node *) q->jointree, NULL);
	(void) aggregate_walker((Node *) q->targetList, NULL);
}

typedef struct GroupRowMap
{
	StmAggQuery *agg;
	Node	   *window_call;
} GroupRowMap;

static Var *
group_var(StmAggQuery *agg, int attno)
{
	Form_pg_attribute att = TupleDescAttr(agg->group_desc, attno - 1);

	return makeVar(1, attno, att->atttypid, att->atttypmod, att->attcollation, 0);
}

/* Rewrite an output expression to read the group row. */
static Node *
group_row_mutator(Node *node, GroupRowMap *map)
{
	StmAggQuery *agg = map->agg;
	ListCell   *lc;
	int			k = 0;

	if (node == NULL)
		return NULL;
	if (map->window_call && equal(node, map->window_call))
		return (Node *) group_var(agg, 1);
	if (IsA(node, FuncExpr))
	{
		StmWindowKind kind = stm_window_kind(((FuncExpr *) node)->funcid);

		if (kind == STM_WINDOW_START)
			return (Node *) group_var(agg, 1);
		if (kind == STM_WINDOW_END)
			return (Node *) group_var(agg, 2);
	}
	foreach(lc, agg->key_exprs)
	{
		if (equal(node, lfirst(lc)))
			return (Node *) group_var(agg, 3 + k);
		k++;
	}
	if (IsA(node, Aggref))
	{
		k = 0;
		foreach(lc, agg->aggrefs)
		{
			if (equal(node, lfirst(lc)))
				return (Node *) group_var(agg, 3 + agg->nkeys + k);
			k++;
		}
		elog(ERROR, "aggregate not found in the stream's aggregates");
	}
	return expression_tree_mutator(node, group_row_mutator, (void *) map);
}

static bool
collect_aggrefs(Node *node, List **aggs)
{
	if (node == NULL)
		return false;
	if (IsA(node, Aggref))
	{
		ListCell   *lc;

		foreach(lc, *aggs)
			if (equal(node, lfirst(lc)))
				return false;
		*aggs = lappend(*aggs, node);
		return false;
	}
	return expression_tree_walker(node, collect_aggrefs, (void *) aggs);
}

/* Groups, aggregates and outputs of an aggregate query (already checked). */
static StmAggQuery *
build_agg_query(Query *q, StmQueryInfo *qi)
{
	StmAggQuery *agg = palloc0(sizeof(StmAggQuery));
	GroupRowMap map = {agg, NULL};
	List	   *raw_keys = NIL;
	ListCell   *lc;
	int			natts;
	int			n = 0;

	agg->event_time_att = -1;
	foreach(lc, q->groupClause)
	{
		SortGroupClause *gc = lfirst_node(SortGroupClause, lc);
		TargetEntry *tle = get_sortgroupclause_tle(gc, q->targetList);

		if (IsA(tle->expr, FuncExpr) &&
			stm_window_kind(((FuncExpr *) tle->expr)->funcid) != STM_WINDOW_NONE)
		{
			map.window_call = (Node *) tle->expr;
			stm_window_spec((FuncExpr *) tle->expr, &agg->window);
			/* windows are computed on the source's rows (SPEC 3.5) */
			if (((Var *) agg->window.ts)->varno != qi->source_rtindex ||
				((Var *) agg->window.ts)->varlevelsup != 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("the event time of streaming.%s() must be a column of the source",
								get_func_name(((FuncExpr *) tle->expr)->funcid)),
						 errhint("A table's column cannot be the event time: event time, watermark and windows are the source's.")));
			agg->event_time_att = ((Var *) agg->window.ts)->varattno - 1;
		}
		else
			raw_keys = lappend(raw_keys, tle->expr);
	}
	agg->nkeys = list_length(raw_keys);
	agg->key_exprs = raw_keys;
	/* groups are found by hashing, as a HashAggregate does */
	foreach(lc, raw_keys)
	{
		Oid			type = exprType(lfirst(lc));
		TypeCacheEntry *tc = lookup_type_cache(type, TYPECACHE_EQ_OPR | TYPECACHE_HASH_PROC);

		if (!OidIsValid(tc->eq_opr) || !OidIsValid(tc->hash_proc))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("GROUP BY expression %d of the stream query is of type %s, which cannot be hashed",
							foreach_current_index(lc) + 1, format_type_be(type)),
					 errdetail("Streams group rows by hashing, with the type's hash and equality operators.")));
	}
	agg->key_types = palloc(sizeof(Oid) * Max(agg->nkeys, 1));
	agg->key_typmods = palloc(sizeof(int32) * Max(agg->nkeys, 1));
	foreach(lc, q->targetList)
		(void) collect_aggrefs((Node *) lfirst_node(TargetEntry, lc)->expr, &agg->aggrefs);

	natts = 2 + agg->nkeys + list_length(agg->aggrefs);
	agg->group_desc = CreateTemplateTupleDesc(natts);
	TupleDescInitEntry(agg->group_desc, 1, "window_start", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(agg->group_desc, 2, "window_end", TIMESTAMPTZOID, -1, 0);
	foreach(lc, raw_keys)
	{
		Node	   *key = lfirst(lc);

		agg->key_types[n] = exprType(key);
		agg->key_typmods[n] = exprTypmod(key);
		TupleDescInitEntry(agg->group_desc, 3 + n, NULL, exprType(key), exprTypmod(key), 0);
		TupleDescInitEntryCollation(agg->group_desc, 3 + n, exprCollation(key));
		n++;
	}
	n = 0;
	foreach(lc, agg->aggrefs)
	{
		Aggref	   *a = lfirst_node(Aggref, lc);

		TupleDescInitEntry(agg->group_desc, 3 + agg->nkeys + n, NULL, a->aggtype, -1, 0);
		TupleDescInitEntryCollation(agg->group_desc, 3 + agg->nkeys + n, a->aggcollid);
		n++;
	}

	/* outputs over the group row; which of them are the group columns */
	agg->out_group_col = palloc(sizeof(int) * list_length(q->targetList));
	agg->out_names = palloc(sizeof(char *) * list_length(q->targetList));
	n = 0;
	foreach(lc, q->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);
		Node	   *out;

		if (tle->resjunk)
			continue;
		out = group_row_mutator((Node *) tle->expr, &map);
		/* evaluated per group, over the group row: no plan for a subquery there */
		if (checkExprHasSubLink(out))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("subqueries in the select list of an aggregate stream query are only supported inside GROUP BY expressions and aggregate arguments"),
					 errhint("Join the table in FROM instead.")));
		agg->out_names[n] = tle->resname;
		agg->out_group_col[n] = -1;
		if (IsA(out, Var) && ((Var *) out)->varattno == 1)
			agg->out_group_col[n] = 0;
		else if (IsA(out, Var) && ((Var *) out)->varattno >= 3 &&
				 ((Var *) out)->varattno < 3 + agg->nkeys)
			agg->out_group_col[n] = ((Var *) out)->varattno - 2;
		agg->outputs = lappend(agg->outputs, expression_planner((Expr *) out));
		n++;
	}
	/* keys are evaluated over the source row */
	n = 0;
	foreach(lc, agg->key_exprs)
		lfirst(lc) = expression_planner((Expr *) lfirst(lc));
	return agg;
}

/*
 * Without a window, the GROUP BY column that is the source's event-time
 * column (attribute number, from 1): its groups close when the watermark
 * passes their value.  Returns the key's index, or -1.
 */
int
stm_agg_time_key(StmAggQuery *agg, AttrNumber event_time_attno)
{
	ListCell   *lc;

	if (agg->window.kind != STM_WINDOW_NONE || event_time_attno <= 0)
		return -1;
	foreach(lc, agg->key_exprs)
	{
		Node	   *key = lfirst(lc);

		if (IsA(key, Var) && ((Var *) key)->varattno == event_time_attno)
			return foreach_current_index(lc);
	}
	return -1;
}

/* Where the query's sources are (find_source). */
typedef struct SourceSearch
{
	int			depth;			/* 0: the stream query itself */
	List	   *top;			/* source RTEs of the stream query's range table */
	List	   *names;			/* every source read, anywhere */
	int			nested;			/* sources read in subqueries, sublinks, WITH */
} SourceSearch;

static bool
source_walker(Node *node, SourceSearch *ctx)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		RangeTblEntry *rte = (RangeTblEntry *) node;

		if (rte->rtekind == RTE_RELATION && rte->relkind == RELKIND_VIEW &&
			stm_catalog_get_source_by_view(rte->relid) != NULL)
		{
			ctx->names = lappend(ctx->names, get_rel_name(rte->relid));
			if (ctx->depth == 0)
				ctx->top = lappend(ctx->top, rte);
			else
				ctx->nested++;
		}
		return false;
	}
	if (IsA(node, Query))
	{
		bool		result;

		ctx->depth++;
		result = query_tree_walker((Query *) node, source_walker, (void *) ctx,
								   QTW_EXAMINE_RTES_BEFORE);
		ctx->depth--;
		return result;
	}
	return expression_tree_walker(node, source_walker, (void *) ctx);
}

/* Is range-table entry rtindex in this part of the join tree? */
static bool
jointree_has(Node *node, int rtindex)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblRef))
		return ((RangeTblRef *) node)->rtindex == rtindex;
	if (IsA(node, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) node;

		return jointree_has(j->larg, rtindex) || jointree_has(j->rarg, rtindex);
	}
	if (IsA(node, FromExpr))
	{
		ListCell   *lc;

		foreach(lc, ((FromExpr *) node)->fromlist)
			if (jointree_has(lfirst(lc), rtindex))
				return true;
		return false;
	}
	return false;
}

/*
 * A join that would emit table rows without a source row is refused, as
 * Spark refuses it: the source on the nullable side of an outer join.
 */
static void
check_outer_joins(Node *node, int rtindex, const char *source)
{
	if (node == NULL)
		return;
	if (IsA(node, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) node;
		const char *kind = NULL;

		if (j->jointype == JOIN_FULL && jointree_has(node, rtindex))
			kind = "FULL";
		else if (j->jointype == JOIN_LEFT && jointree_has(j->rarg, rtindex))
			kind = "LEFT";
		else if (j->jointype == JOIN_RIGHT && jointree_has(j->larg, rtindex))
			kind = "RIGHT";
		if (kind)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("the source \"%s\" cannot be on the nullable side of a %s JOIN", source, kind),
					 errdetail("The join would emit table rows without a source row, which a stream cannot do."),
					 errhint("Put the source on the left of a LEFT JOIN (table RIGHT JOIN source is one too), or use an inner join.")));
		check_outer_joins(j->larg, rtindex, source);
		check_outer_joins(j->rarg, rtindex, source);
	}
	else if (IsA(node, FromExpr))
	{
		ListCell   *lc;

		foreach(lc, ((FromExpr *) node)->fromlist)
			check_outer_joins(lfirst(lc), rtindex, source);
	}
}

/*
 * A query that joins two sources (SPEC 3.6, ssjoin_query.c).  The source
 * the query's own code reads as "the source" (qi->source_view) is the
 * side of the aggregate's window, else the left one: windows, event time
 * and late rows of an aggregate over the join are that side's.
 */
static void
find_sources_of_join(StmQueryInfo *qi, List *top)
{
	Query	   *q = qi->query;
	StmStreamJoin *j = stm_ssjoin_analyze(q, top);
	int			s = STM_JOIN_LEFT_SIDE;
	ListCell   *lc;

	foreach(lc, q->groupClause)
	{
		TargetEntry *tle = get_sortgroupclause_tle(lfirst_node(SortGroupClause, lc), q->targetList);

		if (IsA(tle->expr, FuncExpr) &&
			stm_window_kind(((FuncExpr *) tle->expr)->funcid) != STM_WINDOW_NONE)
		{
			Node	   *ts = linitial(((FuncExpr *) tle->expr)->args);

			if (IsA(ts, Var) && j->sublink == NULL &&
				((Var *) ts)->varno == j->sides[STM_JOIN_RIGHT_SIDE].rtindex)
				s = STM_JOIN_RIGHT_SIDE;
		}
	}
	qi->ssjoin = j;
	qi->source_view = j->sides[s].view;
	qi->source_rtindex = j->sides[s].rtindex;
	qi->planned = true;
}

/*
 * A query that reads more than its source (SPEC 3.5: tables, views,
 * materialized views, subqueries and WITH over them): exactly one source,
 * in the stream query's own FROM, never on the nullable side of an outer
 * join.  The query is then run by PostgreSQL's planner and executor with the
 * batch's rows as the source (join.c).
 */
static void
find_source(StmQueryInfo *qi)
{
	Query	   *q = qi->query;
	SourceSearch ctx = {0};
	RangeTblEntry *rte;

	(void) query_tree_walker(q, source_walker, (void *) &ctx, QTW_EXAMINE_RTES_BEFORE);
	if (ctx.names == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the stream query reads no streaming source"),
				 errhint("A stream query reads one source, which it may join with tables, or two joined.")));
	/* two sources (or one under two aliases): a stream-stream join */
	if (list_length(ctx.names) > 1)
	{
		find_sources_of_join(qi, ctx.top);
		return;
	}
	if (ctx.nested > 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the source \"%s\" must be in the FROM clause of the stream query",
						(char *) linitial(ctx.names)),
				 errdetail("It is read in a subquery or a WITH clause, where its rows cannot be told apart."),
				 errhint("Read the source in FROM and the tables in subqueries.")));
	rte = linitial(ctx.top);
	qi->source_view = rte->relid;
	qi->source_rtindex = 0;
	for (int i = 0; i < list_length(q->rtable); i++)
		if (list_nth(q->rtable, i) == rte)
			qi->source_rtindex = i + 1;
	if (!jointree_has((Node *) q->jointree, qi->source_rtindex))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the source \"%s\" must be in the FROM clause of the stream query",
						get_rel_name(rte->relid))));
	qi->planned = true;
	check_outer_joins((Node *) q->jointree, qi->source_rtindex, get_rel_name(rte->relid));
}

/*
 * Parse and analyse a stream query and check its shape.  Raises an error for
 * anything other than a SELECT over exactly one relation (the caller checks
 * that it is a source).
 */
StmQueryInfo *
stm_query_analyze(const char *sql)
{
	List	   *raw;
	RawStmt    *rawstmt;
	Query	   *q;
	RangeTblEntry *rte;
	StmQueryInfo *qi;
	ListCell   *lc;
	int			n = 0;

	raw = raw_parser(sql, RAW_PARSE_DEFAULT);
	if (list_length(raw) != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("query must be a single SELECT statement"),
				 errdetail("The query given has %d statements.", list_length(raw))));
	rawstmt = linitial_node(RawStmt, raw);
	if (!IsA(rawstmt->stmt, SelectStmt))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("query must be a SELECT statement")));

	q = parse_analyze_fixedparams(rawstmt, sql, NULL, 0, NULL);
	/* a join of two sources may compare windows in its condition */
	stm_ssjoin_prepare(q);

	if (q->setOperations)
		refuse("set operations (UNION, INTERSECT, EXCEPT)", NULL);
	if (q->hasWindowFuncs)
		refuse("window functions (OVER)", NULL);
	if (q->hasTargetSRFs)
		refuse("set-returning functions in the select list", NULL);
	if (!(q->hasAggs || q->groupClause || q->groupingSets || q->havingQual))
	{
		check_window_calls((Node *) q->targetList, NULL);
		check_window_calls((Node *) q->jointree, NULL);
	}
	else
		check_aggregate_shape(q);
	if (q->distinctClause)
		refuse("DISTINCT clauses", "Use dedup_keys to drop duplicate records.");
	if (q->sortClause)
		refuse("ORDER BY clauses", "A stream's output is unordered; order when you read the sink.");
	if (q->limitCount || q->limitOffset)
		refuse("LIMIT and OFFSET clauses", NULL);
	if (q->rowMarks)
		refuse("locking clauses (FOR UPDATE)", NULL);

	if (q->hasModifyingCTE)
		refuse("data-modifying statements in WITH", NULL);
	if (q->jointree->fromlist == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a stream query must read a source"),
				 errdetail("The query has no FROM clause.")));

	qi = palloc0(sizeof(StmQueryInfo));
	qi->query = q;
	/* one relation: the source, the caller checks (and says if it is not one) */
	if (list_length(q->rtable) == 1 && !q->hasSubLinks && q->cteList == NIL &&
		linitial_node(RangeTblEntry, q->rtable)->rtekind == RTE_RELATION)
	{
		rte = linitial_node(RangeTblEntry, q->rtable);
		qi->source_view = rte->relid;
		qi->source_rtindex = 1;
	}
	else
		find_source(qi);
	if (q->hasAggs || q->groupClause)
		qi->agg = build_agg_query(q, qi);
	foreach(lc, q->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (!tle->resjunk)
			n++;
	}
	qi->noutputs = n;
	qi->out_names = palloc(sizeof(char *) * n);
	qi->out_types = palloc(sizeof(Oid) * n);
	qi->out_typmods = palloc(sizeof(int32) * n);
	qi->out_collations = palloc(sizeof(Oid) * n);
	n = 0;
	foreach(lc, q->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (tle->resjunk)
			continue;
		if (tle->resname == NULL || strcmp(tle->resname, "?column?") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_COLUMN_REFERENCE),
					 errmsg("column %d of the stream query needs a name", n + 1),
					 errhint("Add AS name after the expression.")));
		for (int i = 0; i < n; i++)
			if (strcmp(qi->out_names[i], tle->resname) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column name \"%s\" appears more than once in the stream query",
								tle->resname)));
		qi->out_names[n] = tle->resname;
		qi->out_types[n] = exprType((Node *) tle->expr);
		qi->out_typmods[n] = exprTypmod((Node *) tle->expr);
		qi->out_collations[n] = exprCollation((Node *) tle->expr);
		if (qi->out_types[n] == UNKNOWNOID)
		{
			qi->out_types[n] = TEXTOID;
			qi->out_collations[n] = DEFAULT_COLLATION_OID;
		}
		n++;
	}
	return qi;
}

/*
 * Errors in a stored query (a function or table gone, say) point into the
 * query's text and name the stream, not the statement that ran it.
 */
static void
stored_query_error_callback(void *arg)
{
	const StmStreamDef *def = arg;
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
 * A stream's worker keeps the analysis of its stream's query from batch to
 * batch (stm_query_keep_analysis), for the simplest shape only: a query
 * over its source alone, without aggregates, joins, subqueries or WITH (the
 * others' analyses are changed by the batches that use them).  It is kept
 * for the query's text, the stream's search_path and the user it was
 * analysed as, and forgotten at any change of a relation, function, type,
 * operator, cast, collation, schema or role that this process hears of (an
 * ALTER of the source's view, a DROP FUNCTION ...): PostgreSQL's plan
 * cache forgets a plan for less, but those are rare next to a continuous
 * stream's hundreds of batches a second, whose analysis was a twentieth of
 * each.  As the plan cache does, the relations it reads are locked before
 * it is trusted: a change committed meanwhile is then heard of.
 */
static bool keep_analysis = false;
static bool kept_valid = false;
static MemoryContext kept_cxt = NULL;
static StmQueryInfo *kept_qi;
static char *kept_query;
static char *kept_search_path;
static Oid	kept_user;

static void
forget_analysis_rel(Datum arg, Oid relid)
{
	kept_valid = false;
}

static void
forget_analysis_syscache(Datum arg, int cacheid, uint32 hashvalue)
{
	kept_valid = false;
}

void
stm_query_keep_analysis(void)
{
	static const int caches[] = {PROCOID, TYPEOID, OPEROID, CASTSOURCETARGET, COLLOID,
	NAMESPACEOID, AUTHOID, AUTHMEMMEMROLE};

	if (keep_analysis)
		return;
	kept_cxt = AllocSetContextCreate(TopMemoryContext, "streaming kept analysis",
									 ALLOCSET_SMALL_SIZES);
	CacheRegisterRelcacheCallback(forget_analysis_rel, (Datum) 0);
	for (int i = 0; i < lengthof(caches); i++)
		CacheRegisterSyscacheCallback(caches[i], forget_analysis_syscache, (Datum) 0);
	keep_analysis = true;
}

/* A copy of qi, in the current memory context, that its user may change. */
static StmQueryInfo *
copy_query_info(const StmQueryInfo *qi)
{
	StmQueryInfo *c = palloc(sizeof(StmQueryInfo));
	int			n = qi->noutputs;

	*c = *qi;
	c->query = copyObject(qi->query);
	c->out_names = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
		c->out_names[i] = pstrdup(qi->out_names[i]);
	c->out_types = palloc(sizeof(Oid) * Max(n, 1));
	c->out_typmods = palloc(sizeof(int32) * Max(n, 1));
	c->out_collations = palloc(sizeof(Oid) * Max(n, 1));
	if (n > 0)
	{
		memcpy(c->out_types, qi->out_types, sizeof(Oid) * n);
		memcpy(c->out_typmods, qi->out_typmods, sizeof(int32) * n);
		memcpy(c->out_collations, qi->out_collations, sizeof(Oid) * n);
	}
	return c;
}

/* The shape whose analysis a batch does not change (see keep_analysis). */
static bool
analysis_keepable(const StmQueryInfo *qi)
{
	return qi->agg == NULL && !qi->planned && qi->ssjoin == NULL &&
		list_length(qi->query->rtable) == 1 && !qi->query->hasSubLinks &&
		qi->query->cteList == NIL &&
		linitial_node(RangeTblEntry, qi->query->rtable)->rtekind == RTE_RELATION;
}

/* The kept analysis for this stream, its relations locked, or NULL. */
static StmQueryInfo *
kept_analysis(const StmStreamDef *def)
{
	RangeTblEntry *rte;

	if (!keep_analysis || !kept_valid || def->search_path == NULL ||
		strcmp(kept_query, def->query) != 0 ||
		strcmp(kept_search_path, def->search_path) != 0 || kept_user != GetUserId())
		return NULL;
	rte = linitial_node(RangeTblEntry, kept_qi->query->rtable);
	/* as analysis would lock it; a change committed meanwhile is heard of now */
	LockRelationOid(rte->relid, rte->rellockmode);
	if (!kept_valid)
		return NULL;
	return copy_query_info(kept_qi);
}

static void
remember_analysis(const StmStreamDef *def, const StmQueryInfo *qi)
{
	MemoryContext old;

	kept_valid = false;
	MemoryContextReset(kept_cxt);
	if (!analysis_keepable(qi) || def->search_path == NULL)
		return;
	old = MemoryContextSwitchTo(kept_cxt);
	kept_qi = copy_query_info(qi);
	kept_query = pstrdup(def->query);
	kept_search_path = pstrdup(def->search_path);
	kept_user = GetUserId();
	MemoryContextSwitchTo(old);
	kept_valid = true;
}

/*
 * A stream's stored query, analysed again as its creator wrote it: under
 * the stream's search_path (with "$user" the current user, which a batch
 * has made the owner), or as a worker kept it (keep_analysis).  The
 * search_path stays set until the caller ends it with AtEOXact_GUC(true,
 * *guc_nest), as the batch's expressions and functions run under it too.
 */
StmQueryInfo *
stm_query_analyze_stored(const StmStreamDef *def, int *guc_nest)
{
	ErrorContextCallback errcb;
	StmQueryInfo *qi;

	*guc_nest = NewGUCNestLevel();
	(void) set_config_option("search_path", def->search_path, PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	qi = kept_analysis(def);
	if (qi)
		return qi;
	errcb.callback = stored_query_error_callback;
	errcb.arg = (void *) def;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;
	qi = stm_query_analyze(def->query);
	error_context_stack = errcb.previous;
	if (keep_analysis)
		remember_analysis(def, qi);
	return qi;
}

static TargetEntry *
output_tle(StmQueryInfo *qi, int index)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, qi->query->targetList)
	{
		TargetEntry *tle = lfirst_node(TargetEntry, lc);

		if (tle->resjunk)
			continue;
		if (n++ == index)
			return tle;
	}
	elog(ERROR, "stream query has no output column %d", index);
	return NULL;
}

/* Only WHERE, for aggregate streams (their outputs are per group). */
ExprState *
stm_query_compile_qual(StmQueryInfo *qi)
{
	Node	   *quals = qi->query->jointree->quals;

	if (quals == NULL)
		return NULL;
	return ExecInitQual(make_ands_implicit(expression_planner((Expr *) quals)), NULL);
}

/*
 * Output column i's expression, of the type the stream says it has (an
 * unknown literal is text).
 */
static Expr *
output_expr(StmQueryInfo *qi, int i)
{
	Node	   *expr = (Node *) output_tle(qi, i)->expr;

	if (exprType(expr) == UNKNOWNOID)
		expr = coerce_to_target_type(NULL, expr, UNKNOWNOID, TEXTOID, -1,
									 COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);
	return (Expr *) expr;
}

/*
 * Compile WHERE and one expression per output column, evaluated per source
 * row (a query over its source alone).
 */
StmProjector *
stm_query_compile(StmQueryInfo *qi)
{
	StmProjector *pj = palloc0(sizeof(StmProjector));

	pj->qual = stm_query_compile_qual(qi);
	pj->nout = qi->noutputs;
	pj->exprs = palloc0(sizeof(ExprState *) * Max(qi->noutputs, 1));
	for (int i = 0; i < qi->noutputs; i++)
		pj->exprs[i] = ExecInitExpr(expression_planner(output_expr(qi, i)), NULL);
	return pj;
}

/* The query's target list without its junk columns (join.c plans it). */
List *
stm_query_output_targetlist(StmQueryInfo *qi)
{
	List	   *tlist = NIL;

	for (int i = 0; i < qi->noutputs; i++)
		tlist = lappend(tlist, makeTargetEntry(output_expr(qi, i), i + 1,
											   pstrdup(qi->out_names[i]), false));
	return tlist;
}

/*
 * Evaluate one source row (econtext's scan tuple).  Returns false when WHERE
 * rejects it; otherwise fills the output row.
 */
bool
stm_query_project(StmProjector *pj, ExprContext *econtext,
				  Datum *values, bool *nulls)
{
	if (pj->qual && !ExecQual(pj->qual, econtext))
		return false;
	for (int i = 0; i < pj->nout; i++)
		values[i] = ExecEvalExprSwitchContext(pj->exprs[i], econtext, &nulls[i]);
	return true;
}

/*
 * Add an output column to an analysed query: expr (over its source's row)
 * as the last column, named name, as if the query selected it (upsert
 * mode's change column, sink.c).
 */
void
stm_query_add_output(StmQueryInfo *qi, Expr *expr, const char *name)
{
	int			n = qi->noutputs;
	TargetEntry *tle = makeTargetEntry(expr, list_length(qi->query->targetList) + 1,
									   pstrdup(name), false);

	qi->query->targetList = lappend(qi->query->targetList, tle);
	qi->out_names = repalloc(qi->out_names, sizeof(char *) * (n + 1));
	qi->out_types = repalloc(qi->out_types, sizeof(Oid) * (n + 1));
	qi->out_typmods = repalloc(qi->out_typmods, sizeof(int32) * (n + 1));
	qi->out_collations = repalloc(qi->out_collations, sizeof(Oid) * (n + 1));
	qi->out_names[n] = tle->resname;
	qi->out_types[n] = exprType((Node *) expr);
	qi->out_typmods[n] = exprTypmod((Node *) expr);
	qi->out_collations[n] = exprCollation((Node *) expr);
	qi->noutputs = n + 1;
}
