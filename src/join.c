/*
 * join.c: stream queries that read tables besides their source (SPEC 3.5:
 * the stream-static join), run by PostgreSQL's planner and executor.
 *
 * A batch's source rows (parsed, deduplicated) go into a tuplestore that the
 * query reads as an ephemeral named relation, as trigger transition tables
 * are read: the source's range-table entry in the analysed query becomes a
 * named tuplestore of the same columns.  An ephemeral named relation rather
 * than a custom scan: it is PostgreSQL's own way to give a query rows that
 * live in memory, the planner estimates it from its row count, every join
 * method works over it, and the executor reads it with no code of ours.
 * The planner then joins it with the tables as it would for the same SQL
 * over a table of that many rows (hash, merge, or nested loop over an index).
 *
 * What is planned:
 *   stateless   the whole query, its target list the output columns
 *               (query.c: stm_query_output_targetlist);
 *   aggregate   the query's FROM and WHERE with a target list of the joined
 *               row: the source row's columns (so event time, late rows and
 *               errors still see the source row), then each GROUP BY
 *               expression, then each aggregate argument; the batch's own
 *               partial aggregation (aggstate.c) reads those columns, as it
 *               reads a source row when there is no join.
 *
 * One plan is kept for the runtime (a worker's life), with the size class
 * of the batch it was made for (a power of ten of rows; the planner is
 * given the first such batch's exact count), and made again for a batch of
 * another class, when the analysed query differs, or when an object the
 * plan uses changes (relcache and syscache invalidation, as PostgreSQL's
 * plan cache does).  Batches of one size, the usual case, plan once.
 * Each batch runs in the batch's snapshot, as the stream's owner, so a table
 * changed between batches affects later batches only, and the executor
 * checks the owner's SELECT privileges on every table.
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "executor/executor.h"
#include "executor/tstoreReceiver.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteHandler.h"
#include "storage/lmgr.h"
#include "tcop/tcopprot.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/queryenvironment.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "join.h"

#define SOURCE_ENR_NAME "streaming source rows"

/* A plan kept for the runtime. */
struct StmJoinPlan
{
	MemoryContext cxt;			/* the plan's, a child of the runtime's */
	char	   *query_key;		/* nodeToString of the query planned */
	int			size_class;		/* floor(log10(rows)) it was planned for */
	PlannedStmt *plan;
	bool		valid;			/* cleared by invalidation */
};

/* One batch's run of the query. */
struct StmJoin
{
	StmJoinPlan **cache;		/* the runtime's kept plan */
	MemoryContext cache_cxt;
	Query	   *query;			/* to plan: the source a named tuplestore */
	const char *query_text;
	TupleDesc	source_desc;
	Tuplestorestate *rows;
	int64		nrows;
};

/* Plans of this process, for the invalidation callbacks. */
static List *live_plans = NIL;
static bool callbacks_registered = false;

static void
invalidate_all(void)
{
	ListCell   *lc;

	foreach(lc, live_plans)
		((StmJoinPlan *) lfirst(lc))->valid = false;
}

static void
relcache_callback(Datum arg, Oid relid)
{
	ListCell   *lc;

	foreach(lc, live_plans)
	{
		StmJoinPlan *p = lfirst(lc);

		if (relid == InvalidOid || list_member_oid(p->plan->relationOids, relid))
			p->valid = false;
	}
}

/* functions, types, operators, namespaces: rare; every plan is made again */
static void
syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	invalidate_all();
}

static void
register_callbacks(void)
{
	if (callbacks_registered)
		return;
	CacheRegisterRelcacheCallback(relcache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(PROCOID, syscache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(TYPEOID, syscache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(OPEROID, syscache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(AMOPOPID, syscache_callback, (Datum) 0);
	CacheRegisterSyscacheCallback(NAMESPACEOID, syscache_callback, (Datum) 0);
	callbacks_registered = true;
}

/* Memory-context callback: a plan whose runtime goes is forgotten. */
static void
forget_plan(void *arg)
{
	live_plans = list_delete_ptr(live_plans, arg);
}

/*
 * The source's entry becomes the named tuplestore of the batch's rows: the
 * same columns, so every Var over it stays as it is.  Its permissions were
 * checked on the view (batch.c); a tuplestore has none.
 */
void
stm_join_rte_as_tuplestore(Query *q, int rtindex, TupleDesc desc, const char *name)
{
	RangeTblEntry *rte = rt_fetch(rtindex, q->rtable);

	rte->rtekind = RTE_NAMEDTUPLESTORE;
	rte->relid = InvalidOid;
	rte->relkind = 0;
	rte->rellockmode = NoLock;
	rte->inh = false;
	rte->requiredPerms = 0;
	rte->checkAsUser = InvalidOid;
	rte->selectedCols = NULL;
	rte->enrname = pstrdup(name);
	rte->enrtuples = 1000;		/* set to the batch's rows when planned */
	rte->coltypes = rte->coltypmods = rte->colcollations = NIL;
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		rte->coltypes = lappend_oid(rte->coltypes, att->atttypid);
		rte->coltypmods = lappend_int(rte->coltypmods, att->atttypmod);
		rte->colcollations = lappend_oid(rte->colcollations, att->attcollation);
	}
	/* columns past the view's (a stream-stream join's own) get their names too */
	for (int a = list_length(rte->eref->colnames); a < desc->natts; a++)
		rte->eref->colnames = lappend(rte->eref->colnames,
									  makeString(pstrdup(NameStr(TupleDescAttr(desc, a)->attname))));
}

/* A Var of the joined row (or the query's output): column attno. */
static Var *
row_var(int attno, Node *like)
{
	return makeVar(1, attno, exprType(like), exprTypmod(like), exprCollation(like), 0);
}

/*
 * An aggregate query: what is planned produces the joined row, and the
 * batch's aggregation (qi->agg) is made to read it: its GROUP BY
 * expressions and aggregate arguments become the row's columns.  The row
 * is the source row's columns (qi->source_rtindex, of source_desc: so
 * event time, late rows and errors still see the source row), then each
 * GROUP BY expression, then each aggregate argument.  Returns the target
 * list over q's range table; called once per batch (it changes qi->agg).
 */
List *
stm_join_row_targetlist(Query *q, StmQueryInfo *qi, TupleDesc source_desc)
{
	StmAggQuery *agg = qi->agg;
	List	   *tlist = NIL;
	int			attno = 0;
	ListCell   *lc;
	ListCell   *lc2;

	for (int a = 0; a < source_desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(source_desc, a);

		tlist = lappend(tlist,
						makeTargetEntry((Expr *) makeVar(qi->source_rtindex, a + 1, att->atttypid,
														 att->atttypmod, att->attcollation, 0),
										++attno, pstrdup(NameStr(att->attname)), false));
	}
	/* the group keys, from the analysed (not planned) GROUP BY */
	foreach(lc, q->groupClause)
	{
		TargetEntry *tle = get_sortgroupclause_tle(lfirst_node(SortGroupClause, lc), q->targetList);

		if (IsA(tle->expr, FuncExpr) &&
			stm_window_kind(((FuncExpr *) tle->expr)->funcid) != STM_WINDOW_NONE)
			continue;			/* the window: computed from the source row */
		tlist = lappend(tlist, makeTargetEntry((Expr *) copyObject(tle->expr), ++attno,
											   NULL, false));
	}
	attno = source_desc->natts;
	foreach(lc, agg->key_exprs)
	{
		Node	   *key = lfirst(lc);

		lfirst(lc) = row_var(++attno, key);
	}
	/* the aggregates' arguments */
	foreach(lc, agg->aggrefs)
	{
		Aggref	   *aggref = lfirst_node(Aggref, lc);

		foreach(lc2, aggref->args)
		{
			TargetEntry *arg = lfirst_node(TargetEntry, lc2);

			tlist = lappend(tlist, makeTargetEntry((Expr *) copyObject(arg->expr),
												   list_length(tlist) + 1, NULL, false));
			arg->expr = (Expr *) row_var(list_length(tlist), (Node *) arg->expr);
		}
	}
	return tlist;
}

/* What is planned of an aggregate query gives rows, not groups: its aggregation goes. */
void
stm_join_strip_aggregation(Query *q)
{
	q->groupClause = NIL;
	q->hasAggs = false;
	q->havingQual = NULL;
}

/*
 * Get the batch's join ready: what to plan (built from this batch's
 * analysis), and the tuplestore for the source rows.  For an aggregate
 * query, qi->agg now reads the joined row.
 */
StmJoin *
stm_join_begin(StmJoinPlan **cache, MemoryContext cache_cxt, StmQueryInfo *qi,
			   TupleDesc source_desc, const char *query_text)
{
	StmJoin    *j = palloc0(sizeof(StmJoin));
	Query	   *q = copyObject(qi->query);

	register_callbacks();
	j->cache = cache;
	j->cache_cxt = cache_cxt;
	j->query_text = query_text;
	j->source_desc = source_desc;
	if (qi->agg)
	{
		q->targetList = stm_join_row_targetlist(q, qi, source_desc);
		stm_join_strip_aggregation(q);
	}
	else
		q->targetList = stm_query_output_targetlist(qi);
	stm_join_rte_as_tuplestore(q, qi->source_rtindex, source_desc, SOURCE_ENR_NAME);
	j->query = q;
	/* in memory up to work_mem, on disk after that */
	j->rows = tuplestore_begin_heap(false, false, work_mem);
	return j;
}

/* A source row of the batch (it is copied). */
void
stm_join_add(StmJoin *j, TupleTableSlot *slot)
{
	tuplestore_puttupleslot(j->rows, slot);
	j->nrows++;
}

/*
 * The kept plan, if it is for this query and this size of input and
 * nothing it uses changed; else a new one.  The plan's relations are
 * locked first, which processes invalidations (as the plan cache does).
 * Each named tuplestore is planned with its own row count (from env).
 */
static PlannedStmt *
get_plan(StmJoinPlan **cache, MemoryContext cache_cxt, Query *query, const char *query_text,
		 QueryEnvironment *env)
{
	StmJoinPlan *p = *cache;
	double		rows = 0;
	int			size_class;
	char	   *key = nodeToString(query);
	MemoryContext old;
	Query	   *q;
	List	   *rewritten;
	PlannedStmt *plan;
	ListCell   *lc;

	q = copyObject(query);
	foreach(lc, q->rtable)
	{
		RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

		if (rte->rtekind == RTE_NAMEDTUPLESTORE)
		{
			EphemeralNamedRelation enr = get_ENR(env, rte->enrname);

			rte->enrtuples = enr ? Max(enr->md.enrtuples, 1) : 1;
			rows += rte->enrtuples;
		}
	}
	size_class = (int) floor(log10(Max(rows, 1)));
	if (p != NULL)
	{
		foreach(lc, p->plan->rtable)
		{
			RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

			if (rte->rtekind == RTE_RELATION)
				LockRelationOid(rte->relid, rte->rellockmode);
		}
		if (p->valid && p->size_class == size_class && strcmp(p->query_key, key) == 0)
			return p->plan;
		MemoryContextDelete(p->cxt);	/* forget_plan unregisters it */
		*cache = NULL;
	}

	/* as the plan cache makes a plan: rewrite (views), then plan */
	AcquireRewriteLocks(q, true, false);
	rewritten = QueryRewrite(q);
	if (list_length(rewritten) != 1)
		elog(ERROR, "a stream query rewrote into %d queries", list_length(rewritten));
	plan = pg_plan_query(linitial_node(Query, rewritten), query_text, 0, NULL);

	p = MemoryContextAllocZero(cache_cxt, sizeof(StmJoinPlan));
	p->cxt = AllocSetContextCreate(cache_cxt, "streaming join plan", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(p->cxt);
	p->plan = copyObject(plan);
	p->query_key = pstrdup(key);
	p->size_class = size_class;
	p->valid = true;
	MemoryContextSwitchTo(old);
	{
		MemoryContextCallback *cb = MemoryContextAlloc(p->cxt, sizeof(MemoryContextCallback));

		cb->func = forget_plan;
		cb->arg = p;
		MemoryContextRegisterResetCallback(p->cxt, cb);
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	live_plans = lappend(live_plans, p);
	MemoryContextSwitchTo(old);
	*cache = p;
	return p->plan;
}

/* The executor's rows, handed to the batch. */
typedef struct JoinDest
{
	DestReceiver pub;
	StmJoinRowFn fn;
	void	   *arg;
} JoinDest;

static bool
join_receive(TupleTableSlot *slot, DestReceiver *self)
{
	JoinDest   *dest = (JoinDest *) self;

	slot_getallattrs(slot);
	dest->fn(dest->arg, slot);
	return true;
}

static void
join_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
join_shutdown(DestReceiver *self)
{
}

static void
join_destroy(DestReceiver *self)
{
}

/*
 * Run a query over named tuplestores (env) in the batch's snapshot, as the
 * current user (the stream's owner), planned once per query and size of
 * input (the plan kept in *cache, in cache_cxt); every result row goes to
 * fn.
 */
void
stm_join_exec(StmJoinPlan **cache, MemoryContext cache_cxt, Query *query, const char *query_text,
			  QueryEnvironment *env, StmJoinRowFn fn, void *arg)
{
	PlannedStmt *plan;
	JoinDest	dest;
	QueryDesc  *qd;

	register_callbacks();
	plan = get_plan(cache, cache_cxt, query, query_text, env);
	memset(&dest, 0, sizeof(dest));
	dest.pub.receiveSlot = join_receive;
	dest.pub.rStartup = join_startup;
	dest.pub.rShutdown = join_shutdown;
	dest.pub.rDestroy = join_destroy;
	dest.pub.mydest = DestNone;
	dest.fn = fn;
	dest.arg = arg;

	/* the batch's snapshot, seeing the batch's own writes so far (as SPI does) */
	PushCopiedSnapshot(GetActiveSnapshot());
	UpdateActiveSnapshotCommandId();
	qd = CreateQueryDesc(plan, query_text, GetActiveSnapshot(), InvalidSnapshot,
						 (DestReceiver *) &dest, NULL, env, 0);
	ExecutorStart(qd, 0);
	ExecutorRun(qd, ForwardScanDirection, 0, true);
	ExecutorFinish(qd);
	ExecutorEnd(qd);
	FreeQueryDesc(qd);
	PopActiveSnapshot();
}

/* A named tuplestore of rows of desc, for a query's environment. */
EphemeralNamedRelation
stm_join_enr(const char *name, TupleDesc desc, Tuplestorestate *rows, double nrows)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));

	enr->md.name = pstrdup(name);
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = nrows;
	enr->reldata = rows;
	return enr;
}

/*
 * Run the query over the batch's source rows, in the batch's snapshot, as
 * the current user (the stream's owner); every result row goes to fn.
 */
void
stm_join_run(StmJoin *j, StmJoinRowFn fn, void *arg)
{
	QueryEnvironment *env = create_queryEnv();

	register_ENR(env, stm_join_enr(SOURCE_ENR_NAME, j->source_desc, j->rows, (double) j->nrows));
	stm_join_exec(j->cache, j->cache_cxt, j->query, j->query_text, env, fn, arg);
	tuplestore_end(j->rows);
	j->rows = NULL;
}
