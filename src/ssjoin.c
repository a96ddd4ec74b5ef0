/*
 * ssjoin.c: one batch of a stream-stream join (SPEC 3.6), run by
 * PostgreSQL's planner and executor.
 *
 * Each side keeps the rows that can still match in a state table of its
 * own, streaming.join_<stream id>_<left|right> (the columns the query uses,
 * then the row's id, event time, expiry and whether it matched; an index on
 * the equality's columns), written in the batch's
 * transaction.  A batch's new rows of a side are a named tuplestore of the
 * side's view's columns, the same four and a NULL ctid; the state table is
 * read as its columns and its rows' ctids.  Every relation the queries read
 * has that shape, so the stream query's own range-table entry of a side
 * can become any of them: its new rows, its state, both, the rows to give
 * NULL rows, or none.
 *
 * A batch, with the watermark W the previous batch committed:
 *   1. new rows of each side whose event time is <= W are late: dropped
 *      and counted (or kept, late_rows => 'keep');
 *   2. stored rows whose expiry is <= W are evicted (their partners would
 *      all be late); on an outer side the unmatched ones give their NULL
 *      rows, on an anti join's left side they are its rows;
 *   3. the pairs: new-left with (state-right and new-right), then
 *      state-left with new-right, each the user's query made an inner join
 *      over those relations, so a pair is found once whatever batches its
 *      rows come in (an inner or outer join with new rows on both sides:
 *      one query over both sides' state and new rows, without the pairs
 *      of two stored rows); an outer join's WHERE is evaluated per pair (a pair
 *      that fails it still counts as matched, as in SQL); semi and anti
 *      joins find pairs with the EXISTS's condition;
 *   4. new rows already past their expiry are not stored: on an outer side
 *      the unmatched ones give their NULL rows now, on an anti join's left
 *      side its rows;
 *   5. the other new rows are stored with whether they matched (not those
 *      the next batch evicts, whose partners would all be late there, but
 *      for an outer or anti side's unmatched: their rows come then), and stored
 *      rows that matched now are marked (an outer side's), or dropped (a
 *      semi or anti join's left side: its row was given, or never will be).
 * NULL rows are the user's query with the row's side reading those rows and
 * the other side none, so its expressions and tables apply as in SQL; a
 * semi join's rows, and an anti join's, are the user's query with its
 * EXISTS true, over those rows of the left side.  After the batch's commit
 * the worker vacuums the state tables that its batches left enough dead
 * rows in (stm_ssjoin_vacuum).
 */
#include "postgres.h"

#include <malloc.h>

#include "access/heapam.h"
#include "access/nbtree.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/vacuum.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "executor/executor.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "nodes/nodeFuncs.h"
#include "parser/analyze.h"
#include "parser/parse_node.h"
#include "parser/parser.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteManip.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/tuplesort.h"

#include "aggstate.h"
#include "guc.h"
#include "join.h"
#include "options.h"
#include "ssjoin.h"
#include "statetable.h"

/*
 * The columns every side relation has after the view's: the four a state
 * table stores, then where a stored row is (its ctid; NULL for a batch's
 * new rows), so that the stored rows that matched are marked by a TID
 * scan rather than a scan of the whole table.
 */
#define HIDDEN_ROW_ID		0
#define HIDDEN_EVENT_TIME	1
#define HIDDEN_EXPIRES_AT	2
#define HIDDEN_MATCHED		3
#define NSTORED				4
#define HIDDEN_TID			4
#define NHIDDEN				5

static const char *const hidden_names[NHIDDEN] = {
	"_stm_row_id", "_stm_event_time", "_stm_expires_at", "_stm_matched", "_stm_tid"
};
static const Oid hidden_types[NHIDDEN] = {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID, TIDOID};

static const char *const side_names[2] = {"left", "right"};

/* the relations a side's range-table entry can read */
typedef enum SideRelation
{
	SIDE_NEW,					/* the batch's new rows */
	SIDE_STATE,					/* the stored rows */
	SIDE_ALL,					/* both */
	SIDE_ROWS,					/* rows to give their own rows (NULL rows, semi, anti) */
	SIDE_NONE					/* no rows */
} SideRelation;

/* One side, in one batch. */
typedef struct SideRun
{
	StmJoinSide *side;
	char	   *table;			/* its state table, qualified and quoted */
	TupleDesc	view_desc;		/* its view's columns */
	TupleDesc	desc;			/* the view's, then the hidden ones */
	Tuplestorestate *new_rows;
	int64		nnew;
	int64		cap;			/* new_matched and new_expired have room for this many */
	bool	   *new_matched;	/* per new row (index: row id - first id) */
	bool	   *new_expired;	/* already past its expiry (not stored) */
	List	   *matched_state;	/* ctids of stored rows that matched for the first time */
	Tuplestorestate *rows;		/* SIDE_ROWS: rows to give their own rows */
	int64		nrows;
	TimestampTz max_event_time;
	bool		has_max_event_time;
	StmLateRows *keep_late;
	ExprState  *own_qual;		/* the condition's part over this side alone, or NULL */
	/* progress (Spark's state operator metrics) */
	int64		num_late;
	int64		num_removed;
	int64		num_updated;
	int64		num_null_rows;
	int64		num_total;
	int64		num_inserted;	/* rows stored by this batch */
	int64		prev_total;		/* the rows the last committed batch left, if known */
	bool		has_prev_total;
} SideRun;

struct StmJoinRun
{
	StmStreamJoin *j;
	StmQueryInfo *qi;
	int32		stream_id;
	const char *query_text;
	int64		first_id;		/* row ids of this batch start here */
	bool		has_watermark;
	TimestampTz watermark;		/* W: the previous batch's */
	Jsonb	   *prev_sides;		/* the sides' clocks the previous batch left */
	SideRun		sides[2];
	List	   *out_tlist;		/* what every query gives the batch: the output
								 * row, or the joined row of an aggregate */
	int			nout;
	ExprContext *econtext;		/* for the sides' own quals */
	StmJoinPlan **plans;		/* the runtime's kept plans, STM_SSJOIN_NPLANS */
	MemoryContext plans_cxt;
	MemoryContext cxt;			/* the batch's */
	/* the batch's row function, while a query runs */
	StmJoinRowFn fn;
	void	   *arg;
	int64		num_output;
	bool		done;			/* stm_ssjoin_run finished: num_total is known */
};

static bool gives_unmatched(StmStreamJoin *j, int s);
static bool next_watermark_floor(StmJoinRun *run, TimestampTz *floor);

/*
 * The memory of a batch's join, in kB: the half of streaming.batch_memory
 * that an aggregate's groups get (the other bounds the prefetch), a quarter
 * for each side's new rows; the queries hash with a quarter too (work_mem,
 * hash_mem_multiplier on top).  The session's work_mem, when larger.  At
 * work_mem (4MB by default) a capped batch of 100,000 rows a side wrote
 * its new rows to temporary files and read them back for every query, and
 * hashed them in two batches (bench/joins.sh --explain).
 */
static int
join_memory_kb(void)
{
	return Max(work_mem, (int) (stm_guc_groups_memory() / 1024 / 2));
}
static int64 side_int8(Jsonb *obj, const char *key, bool *found);

/*
 * Once per worker: freed memory stays in the process.  A join's batch
 * allocates its new rows, their sort and its hash tables anew (hundreds of
 * MB for 100,000 rows a side) and frees them at its end; glibc gave most
 * of that back to the kernel (its heap trimmed, blocks past the mmap
 * threshold unmapped), and the next batch faulted every page in again and
 * had it zeroed: about a tenth of a busy worker's time (bench/joins.sh
 * --perf left_capped: sysmalloc, exc_page_fault, clear_page).  Kept up to
 * four times streaming.batch_memory at the heap's top; a backend's
 * run_batch is left as it is.
 */
static void
keep_freed_memory(void)
{
	static bool done = false;

	if (done || !IsBackgroundWorker)
		return;
	(void) mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
	(void) mallopt(M_TRIM_THRESHOLD, (int) Min((int64) stm_guc_batch_memory_kb * 1024 * 4, INT_MAX));
	done = true;
}

/* A side's state table, by its OID (what the running row count is of). */
static Oid
state_oid(StmJoinRun *run, int s)
{
	return get_relname_relid(stm_ssjoin_table(run->stream_id, s), get_namespace_oid("streaming", false));
}

/* ---- names and shapes ---------------------------------------------------- */

/* streaming.join_<stream id>_<left|right>, unquoted */
char *
stm_ssjoin_table(int32 stream_id, int side)
{
	return psprintf("join_%d_%s", stream_id, side_names[side]);
}

static char *
enr_name(int side, SideRelation rel)
{
	return psprintf("streaming join %s %s", side_names[side],
					rel == SIDE_NEW ? "new" : rel == SIDE_ROWS ? "rows" : "none");
}

/* the side relations' shape: the view's columns, then the hidden ones */
static TupleDesc
side_desc(TupleDesc view_desc)
{
	TupleDesc	desc = CreateTemplateTupleDesc(view_desc->natts + NHIDDEN);

	for (int a = 0; a < view_desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(view_desc, a);

		TupleDescInitEntry(desc, a + 1, NameStr(att->attname), att->atttypid, att->atttypmod, 0);
		TupleDescInitEntryCollation(desc, a + 1, att->attcollation);
	}
	for (int h = 0; h < NHIDDEN; h++)
		TupleDescInitEntry(desc, view_desc->natts + h + 1, hidden_names[h], hidden_types[h], -1, 0);
	return desc;
}

/* The state table's columns (CREATE TABLE), the used view columns then the hidden ones. */
static char *
state_columns(StmJoinSide *side, TupleDesc view_desc)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int a = 0; a < view_desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(view_desc, a);

		if (!bms_is_member(a + 1, side->used))
			continue;
		appendStringInfo(&buf, "%s %s, ", quote_identifier(NameStr(att->attname)),
						 format_type_with_typemod(att->atttypid, att->atttypmod));
	}
	appendStringInfoString(&buf, "_stm_row_id bigint NOT NULL, _stm_event_time timestamptz, "
						   "_stm_expires_at timestamptz, _stm_matched boolean NOT NULL");
	return buf.data;
}

/*
 * The state table as a side relation: the view's columns (NULL for those
 * the query does not use, which are not stored), then the hidden ones;
 * from: the table (its rows' ctids), or a DELETE's RETURNING rows (none).
 */
static char *
state_select(SideRun *sr, const char *from, bool has_tid)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "SELECT ");
	for (int a = 0; a < sr->view_desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(sr->view_desc, a);

		if (bms_is_member(a + 1, sr->side->used))
			appendStringInfo(&buf, "%s, ", quote_identifier(NameStr(att->attname)));
		else
			appendStringInfo(&buf, "NULL::%s AS %s, ",
							 format_type_with_typemod(att->atttypid, att->atttypmod),
							 quote_identifier(NameStr(att->attname)));
	}
	appendStringInfo(&buf, "_stm_row_id, _stm_event_time, _stm_expires_at, _stm_matched, %s AS _stm_tid FROM %s",
					 has_tid ? "ctid" : "NULL::tid", from);
	return buf.data;
}

static TupleDesc
view_desc_of(Oid view)
{
	Relation	rel = relation_open(view, AccessShareLock);
	TupleDesc	desc = CreateTupleDescCopy(RelationGetDescr(rel));

	relation_close(rel, AccessShareLock);
	return desc;
}

/*
 * create_stream: each side's state table in schema streaming (the
 * extension's owner's, readable by the stream's owner), with an index on
 * the columns the equality compares.  None on the expiry: eviction scans
 * the table (a batch already counts its rows, and evicting a good share of
 * them the planner scanned it anyway), while keeping that index up cost
 * every stored row a second btree insert, about a tenth of a busy join's
 * time (bench/joins.sh).  Tables made before keep theirs: every index is
 * kept up, and the planner may still use it.
 */
void
stm_ssjoin_create_state(int32 stream_id, StmStreamJoin *j, Oid owner)
{
	for (int s = 0; s < 2; s++)
	{
		StmJoinSide *side = &j->sides[s];
		TupleDesc	view_desc = view_desc_of(side->view);
		StringInfoData keys;
		ListCell   *lc;

		initStringInfo(&keys);
		foreach(lc, side->key_attnos)
			appendStringInfo(&keys, "%s%s", keys.len ? ", " : "",
							 quote_identifier(NameStr(TupleDescAttr(view_desc, lfirst_int(lc) - 1)->attname)));
		stm_statetable_create(stm_ssjoin_table(stream_id, s), state_columns(side, view_desc),
							  keys.len ? keys.data : "_stm_row_id", NULL, owner);
	}
}

/* ---- the side relations -------------------------------------------------- */

/* Parse and analyse SQL over the side relations' named tuplestores (env). */
static Query *
analyse(const char *sql, QueryEnvironment *env)
{
	List	   *raw = raw_parser(sql, RAW_PARSE_DEFAULT);

	return parse_analyze_fixedparams(linitial_node(RawStmt, raw), sql, NULL, 0, env);
}

/*
 * The range-table entry rtindex of q (a side's source) becomes the side
 * relation rel: a named tuplestore, or a subquery over the state table.
 */
static void
side_as_relation(StmJoinRun *run, Query *q, int rtindex, int s, SideRelation rel,
				 QueryEnvironment *env)
{
	SideRun    *sr = &run->sides[s];
	RangeTblEntry *rte;
	Query	   *sub;

	if (rel == SIDE_NEW || rel == SIDE_ROWS || rel == SIDE_NONE)
	{
		stm_join_rte_as_tuplestore(q, rtindex, sr->desc, enr_name(s, rel));
		return;
	}
	if (rel == SIDE_STATE)
		sub = analyse(state_select(sr, sr->table, true), env);
	else
		sub = analyse(psprintf("%s UNION ALL SELECT * FROM %s", state_select(sr, sr->table, true),
							   quote_identifier(enr_name(s, SIDE_NEW))), env);
	rte = rt_fetch(rtindex, q->rtable);
	rte->rtekind = RTE_SUBQUERY;
	rte->subquery = sub;
	rte->relid = InvalidOid;
	rte->relkind = 0;
	rte->rellockmode = NoLock;
	rte->inh = false;
	rte->requiredPerms = 0;
	rte->checkAsUser = InvalidOid;
	rte->selectedCols = NULL;
	rte->security_barrier = false;
	for (int h = 0; h < NHIDDEN; h++)
		rte->eref->colnames = lappend(rte->eref->colnames, makeString(pstrdup(hidden_names[h])));
}

/* A Var of a side's hidden column, in q's range table at rtindex. */
static Var *
hidden_var(StmJoinRun *run, int s, int rtindex, int hidden)
{
	return makeVar(rtindex, run->sides[s].view_desc->natts + hidden + 1, hidden_types[hidden],
				   -1, InvalidOid, 0);
}

/* ---- the queries --------------------------------------------------------- */

/* the kinds of queries a batch runs, each with a plan the runtime keeps */
enum
{
	PLAN_PAIRS_NEW_LEFT,		/* new-left x (state-right + new-right) */
	PLAN_PAIRS_STATE_LEFT,		/* state-left x new-right */
	PLAN_ROWS_LEFT,				/* NULL rows of left rows, or semi / anti rows */
	PLAN_ROWS_RIGHT,			/* NULL rows of right rows */
	PLAN_PAIRS_ALL				/* (state + new left) x (state + new right), not state x state */
};

/* The environment of a batch's queries: every side's named tuplestores. */
static QueryEnvironment *
batch_env(StmJoinRun *run)
{
	QueryEnvironment *env = create_queryEnv();

	for (int s = 0; s < 2; s++)
	{
		SideRun    *sr = &run->sides[s];

		register_ENR(env, stm_join_enr(enr_name(s, SIDE_NEW), sr->desc, sr->new_rows, sr->nnew));
		register_ENR(env, stm_join_enr(enr_name(s, SIDE_ROWS), sr->desc, sr->rows, sr->nrows));
		register_ENR(env, stm_join_enr(enr_name(s, SIDE_NONE), sr->desc,
									   tuplestore_begin_heap(false, false, 64), 0));
	}
	return env;
}

/* The JoinExpr of range-table index rtindex in a join tree. */
static JoinExpr *
find_join(Node *node, int rtindex)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) node;
		JoinExpr   *found;

		if (j->rtindex == rtindex)
			return j;
		if ((found = find_join(j->larg, rtindex)) != NULL)
			return found;
		return find_join(j->rarg, rtindex);
	}
	if (IsA(node, FromExpr))
	{
		ListCell   *lc;

		foreach(lc, ((FromExpr *) node)->fromlist)
		{
			JoinExpr   *found = find_join(lfirst(lc), rtindex);

			if (found)
				return found;
		}
	}
	return NULL;
}

/* The EXISTS conjunct of a semi or anti join's WHERE, replaced by TRUE. */
static Node *
exists_true(Node *node, SubLink *sublink)
{
	if (node == NULL)
		return NULL;
	if (equal(node, sublink))
		return makeBoolConst(true, false);
	if (IsA(node, BoolExpr) && ((BoolExpr *) node)->boolop == NOT_EXPR &&
		equal(linitial(((BoolExpr *) node)->args), sublink))
		return makeBoolConst(true, false);
	if (IsA(node, BoolExpr) && ((BoolExpr *) node)->boolop == AND_EXPR)
	{
		BoolExpr   *b = (BoolExpr *) copyObject(node);
		ListCell   *lc;

		foreach(lc, b->args)
			lfirst(lc) = exists_true(lfirst(lc), sublink);
		return (Node *) b;
	}
	return node;
}

/*
 * The pairs of an inner or outer join: the user's query made an inner join
 * with the left side reading left_rel and the right right_rel; its rows are
 * the output (or joined) row, whether an outer join's WHERE holds for it,
 * and both sides' ids, matched flags and ctids.
 */
static Query *
pairs_query(StmJoinRun *run, SideRelation left_rel, SideRelation right_rel, QueryEnvironment *env)
{
	StmStreamJoin *j = run->j;
	Query	   *q = copyObject(run->qi->query);
	int			l = j->sides[STM_JOIN_LEFT_SIDE].rtindex;
	int			r = j->sides[STM_JOIN_RIGHT_SIDE].rtindex;
	Node	   *pass = (Node *) makeBoolConst(true, false);
	List	   *tlist = copyObject(run->out_tlist);

	if (run->qi->agg)
		stm_join_strip_aggregation(q);
	if (j->type != STM_JOIN_INNER)
	{
		/* the same JoinExpr in the copy, by its range-table index */
		JoinExpr   *join = find_join((Node *) q->jointree, j->join->rtindex);

		join->jointype = JOIN_INNER;
		rt_fetch(join->rtindex, q->rtable)->jointype = JOIN_INNER;
		/* a pair that fails the WHERE still matched, as in SQL: the WHERE is per pair */
		if (q->jointree->quals)
			pass = q->jointree->quals;
		q->jointree->quals = NULL;
	}
	if (left_rel == SIDE_ALL && right_rel == SIDE_ALL)
	{
		/* not two stored rows: that pair was found by the batch that stored the later */
		NullTest   *lnew = makeNode(NullTest);
		NullTest   *rnew = makeNode(NullTest);

		lnew->arg = (Expr *) hidden_var(run, 0, l, HIDDEN_TID);
		lnew->nulltesttype = IS_NULL;
		lnew->location = -1;
		rnew->arg = (Expr *) hidden_var(run, 1, r, HIDDEN_TID);
		rnew->nulltesttype = IS_NULL;
		rnew->location = -1;
		q->jointree->quals = make_and_qual(q->jointree->quals,
										   (Node *) makeBoolExpr(OR_EXPR, list_make2(lnew, rnew), -1));
	}
	side_as_relation(run, q, l, STM_JOIN_LEFT_SIDE, left_rel, env);
	side_as_relation(run, q, r, STM_JOIN_RIGHT_SIDE, right_rel, env);
	tlist = lappend(tlist, makeTargetEntry((Expr *) pass, list_length(tlist) + 1, "_stm_pass", false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 0, l, HIDDEN_ROW_ID), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 0, l, HIDDEN_MATCHED), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 0, l, HIDDEN_TID), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 1, r, HIDDEN_ROW_ID), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 1, r, HIDDEN_MATCHED), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 1, r, HIDDEN_TID), list_length(tlist) + 1, NULL, false));
	q->targetList = tlist;
	return q;
}

/*
 * The pairs of a semi or anti join: FROM left, right WHERE the EXISTS's
 * condition (its Vars moved to this query's levels), giving the left row's
 * id, matched flag and ctid.
 */
static Query *
exists_pairs_query(StmJoinRun *run, SideRelation left_rel, SideRelation right_rel,
				   QueryEnvironment *env)
{
	StmStreamJoin *j = run->j;
	Query	   *top = run->qi->query;
	Query	   *sub = (Query *) j->sublink->subselect;
	Query	   *q = makeNode(Query);
	Node	   *cond = copyObject(sub->jointree->quals);
	int			l = j->sides[STM_JOIN_LEFT_SIDE].rtindex;
	const int	tmp = 10000;

	/* the right side (1 in the EXISTS) becomes 2, the left (one level up) 1 */
	ChangeVarNodes(cond, 1, tmp, 0);
	IncrementVarSublevelsUp(cond, -1, 1);
	ChangeVarNodes(cond, l, 1, 0);
	ChangeVarNodes(cond, tmp, 2, 0);
	q->commandType = CMD_SELECT;
	q->querySource = QSRC_ORIGINAL;
	q->canSetTag = true;
	q->rtable = list_make2(copyObject(rt_fetch(l, top->rtable)),
						   copyObject(linitial(sub->rtable)));
	q->jointree = makeFromExpr(list_make2(makeNode(RangeTblRef), makeNode(RangeTblRef)), cond);
	((RangeTblRef *) linitial(q->jointree->fromlist))->rtindex = 1;
	((RangeTblRef *) lsecond(q->jointree->fromlist))->rtindex = 2;
	q->hasSubLinks = sub->hasSubLinks;
	side_as_relation(run, q, 1, STM_JOIN_LEFT_SIDE, left_rel, env);
	side_as_relation(run, q, 2, STM_JOIN_RIGHT_SIDE, right_rel, env);
	q->targetList = list_make3(makeTargetEntry((Expr *) hidden_var(run, 0, 1, HIDDEN_ROW_ID), 1, "id", false),
							   makeTargetEntry((Expr *) hidden_var(run, 0, 1, HIDDEN_MATCHED), 2, "matched", false),
							   makeTargetEntry((Expr *) hidden_var(run, 0, 1, HIDDEN_TID), 3, "tid", false));
	return q;
}

/*
 * A side's own rows (SIDE_ROWS): an outer join's NULL rows (the user's
 * query, the other side reading no rows), or a semi or anti join's rows
 * (the user's query, its EXISTS true).
 */
static Query *
rows_query(StmJoinRun *run, int s, QueryEnvironment *env)
{
	StmStreamJoin *j = run->j;
	Query	   *q = copyObject(run->qi->query);

	if (run->qi->agg)
		stm_join_strip_aggregation(q);
	q->targetList = copyObject(run->out_tlist);
	if (j->sublink)
	{
		q->jointree->quals = exists_true(q->jointree->quals, j->sublink);
		q->hasSubLinks = true;	/* others may remain; the planner looks */
		side_as_relation(run, q, j->sides[STM_JOIN_LEFT_SIDE].rtindex, STM_JOIN_LEFT_SIDE,
						 SIDE_ROWS, env);
		return q;
	}
	side_as_relation(run, q, j->sides[s].rtindex, s, SIDE_ROWS, env);
	side_as_relation(run, q, j->sides[1 - s].rtindex, 1 - s, SIDE_NONE, env);
	return q;
}

/* ---- a batch --------------------------------------------------------------- */

/*
 * A batch's join: the sides' new rows are gathered (stm_ssjoin_add), then
 * stm_ssjoin_run does the rest.  watermark: W, the previous batch's (none
 * before the stream has one); plans: the runtime's STM_SSJOIN_NPLANS kept
 * plans.  An aggregate query's joined row is made here (it changes
 * qi->agg to read it), with qi->source_rtindex the side of its window.
 */
StmJoinRun *
stm_ssjoin_begin(StmStreamJoin *j, StmQueryInfo *qi, int32 stream_id, const char *query_text,
				 int64 batch_id, bool has_watermark, TimestampTz watermark,
				 StmJoinPlan **plans, MemoryContext plans_cxt, StmLateRows **keep_late,
				 Jsonb *prev_sides)
{
	StmJoinRun *run = palloc0(sizeof(StmJoinRun));

	keep_freed_memory();
	run->j = j;
	run->qi = qi;
	run->stream_id = stream_id;
	run->query_text = query_text;
	run->first_id = batch_id << 32;
	run->has_watermark = has_watermark;
	run->watermark = watermark;
	run->prev_sides = prev_sides;
	run->plans = plans;
	run->plans_cxt = plans_cxt;
	run->cxt = CurrentMemoryContext;
	for (int s = 0; s < 2; s++)
	{
		SideRun    *sr = &run->sides[s];
		Jsonb	   *entry;

		sr->side = &j->sides[s];
		sr->table = psprintf("streaming.%s", quote_identifier(stm_ssjoin_table(stream_id, s)));
		sr->view_desc = view_desc_of(sr->side->view);
		sr->desc = side_desc(sr->view_desc);
		sr->new_rows = tuplestore_begin_heap(false, false, join_memory_kb());
		sr->rows = tuplestore_begin_heap(false, false, work_mem);
		sr->keep_late = keep_late ? keep_late[s] : NULL;
		if (sr->side->own_quals)
			sr->own_qual = ExecInitQual((List *) expression_planner((Expr *) sr->side->own_quals), NULL);
		entry = prev_sides ? stm_option_jsonb(prev_sides, sr->side->alias) : NULL;
		if (entry && side_int8(entry, "state_oid", &sr->has_prev_total) == state_oid(run, s))
			sr->prev_total = side_int8(entry, "state_rows", &sr->has_prev_total);
		else
			sr->has_prev_total = false;
	}
	run->econtext = CreateStandaloneExprContext();
	if (qi->agg)
	{
		Query	   *q = copyObject(qi->query);
		int			s = qi->source_rtindex == j->sides[STM_JOIN_RIGHT_SIDE].rtindex &&
			!j->sublink ? STM_JOIN_RIGHT_SIDE : STM_JOIN_LEFT_SIDE;

		run->out_tlist = stm_join_row_targetlist(q, qi, run->sides[s].view_desc);
	}
	else
		run->out_tlist = stm_query_output_targetlist(qi);
	run->nout = list_length(run->out_tlist);
	return run;
}

/* the per-row flags of a side's new rows, grown as rows come */
static void
grow_flags(SideRun *sr)
{
	int64		cap = Max(sr->cap * 2, 1024);

	if (sr->cap == 0)
	{
		sr->new_matched = palloc0(cap);
		sr->new_expired = palloc0(cap);
	}
	else
	{
		sr->new_matched = repalloc(sr->new_matched, cap);
		sr->new_expired = repalloc(sr->new_expired, cap);
		memset(sr->new_matched + sr->cap, 0, cap - sr->cap);
		memset(sr->new_expired + sr->cap, 0, cap - sr->cap);
	}
	sr->cap = cap;
}

/*
 * A new row of a side (the view's columns): its event time moves the side's
 * watermark; a late row (event time <= W) is dropped and counted, or kept
 * with late_rows => 'keep'; the others join, with their id and expiry.
 */
void
stm_ssjoin_add(StmJoinRun *run, int s, TupleTableSlot *slot)
{
	SideRun    *sr = &run->sides[s];
	StmJoinSide *side = sr->side;
	int			natts = sr->view_desc->natts;
	Datum	   *values = palloc(sizeof(Datum) * (natts + NHIDDEN));
	bool	   *nulls = palloc0(sizeof(bool) * (natts + NHIDDEN));
	TimestampTz t = 0;
	bool		has_time = false;

	slot_getallattrs(slot);
	memcpy(values, slot->tts_values, sizeof(Datum) * natts);
	memcpy(nulls, slot->tts_isnull, sizeof(bool) * natts);
	if (side->time_att > 0 && !nulls[side->time_att - 1])
	{
		t = DatumGetTimestampTz(values[side->time_att - 1]);
		has_time = true;
		if (!sr->has_max_event_time || t > sr->max_event_time)
			sr->max_event_time = t;
		sr->has_max_event_time = true;
		if (run->has_watermark && t <= run->watermark)
		{
			sr->num_late++;
			if (sr->keep_late)
				stm_late_row_keep(sr->keep_late, values, nulls, side->time_att - 1);
			return;
		}
	}
	/* what fails the condition's part over this side alone matches nothing: never stored */
	if (sr->own_qual)
	{
		bool		pass;

		run->econtext->ecxt_scantuple = slot;
		pass = ExecQual(sr->own_qual, run->econtext);
		ResetExprContext(run->econtext);
		if (!pass)
		{
			/* an outer side's row gives its NULL row now, an anti join's its row */
			if (gives_unmatched(run->j, s))
			{
				values[natts + HIDDEN_ROW_ID] = Int64GetDatum(-1);
				values[natts + HIDDEN_EVENT_TIME] = TimestampTzGetDatum(t);
				nulls[natts + HIDDEN_EVENT_TIME] = !has_time;
				nulls[natts + HIDDEN_EXPIRES_AT] = true;
				values[natts + HIDDEN_MATCHED] = BoolGetDatum(false);
				nulls[natts + HIDDEN_TID] = true;
				tuplestore_putvalues(sr->rows, sr->desc, values, nulls);
				sr->nrows++;
			}
			return;
		}
	}
	if (sr->nnew == sr->cap)
		grow_flags(sr);
	values[natts + HIDDEN_ROW_ID] = Int64GetDatum(run->first_id + sr->nnew);
	values[natts + HIDDEN_EVENT_TIME] = TimestampTzGetDatum(t);
	nulls[natts + HIDDEN_EVENT_TIME] = !has_time;
	nulls[natts + HIDDEN_EXPIRES_AT] = true;
	if (has_time && stm_ssjoin_side_bounded(run->j, s))
	{
		TimestampTz expiry = stm_ssjoin_expiry(&side->bound, t);

		values[natts + HIDDEN_EXPIRES_AT] = TimestampTzGetDatum(expiry);
		nulls[natts + HIDDEN_EXPIRES_AT] = false;
		/* not late, but past its own bound: joined now, never stored */
		sr->new_expired[sr->nnew] = run->has_watermark && expiry <= run->watermark;
	}
	values[natts + HIDDEN_MATCHED] = BoolGetDatum(false);
	nulls[natts + HIDDEN_TID] = true;
	tuplestore_putvalues(sr->new_rows, sr->desc, values, nulls);
	sr->nnew++;
	pfree(values);
	pfree(nulls);
}

/*
 * A row of a side that matched, by its id: a new row's flag, or a stored
 * row (by its ctid, tid) to mark.
 */
static void
note_match(StmJoinRun *run, int s, int64 id, bool was_matched, Datum tid, bool tid_isnull)
{
	SideRun    *sr = &run->sides[s];

	if (id >= run->first_id && id < run->first_id + sr->nnew)
		sr->new_matched[id - run->first_id] = true;
	else if (!was_matched)
	{
		MemoryContext old = MemoryContextSwitchTo(run->cxt);

		if (tid_isnull)
			elog(ERROR, "a stored row of a stream-stream join came without its ctid");
		sr->matched_state = lappend(sr->matched_state, palloc(sizeof(ItemPointerData)));
		ItemPointerCopy((ItemPointer) DatumGetPointer(tid), (ItemPointer) llast(sr->matched_state));
		MemoryContextSwitchTo(old);
	}
}

/* A pair of an inner or outer join: the flags, and the row when the WHERE holds. */
static void
pair_row(void *arg, TupleTableSlot *slot)
{
	StmJoinRun *run = arg;
	int			n = run->nout;
	Datum	   *v = slot->tts_values;
	bool	   *isnull = slot->tts_isnull;

	note_match(run, STM_JOIN_LEFT_SIDE, DatumGetInt64(v[n + 1]), DatumGetBool(v[n + 2]),
			   v[n + 3], isnull[n + 3]);
	note_match(run, STM_JOIN_RIGHT_SIDE, DatumGetInt64(v[n + 4]), DatumGetBool(v[n + 5]),
			   v[n + 6], isnull[n + 6]);
	if (!isnull[n] && DatumGetBool(v[n]))
	{
		run->num_output++;
		run->fn(run->arg, slot);
	}
}

/* A pair of a semi or anti join: the left row matched. */
static void
exists_pair_row(void *arg, TupleTableSlot *slot)
{
	StmJoinRun *run = arg;

	note_match(run, STM_JOIN_LEFT_SIDE, DatumGetInt64(slot->tts_values[0]),
			   DatumGetBool(slot->tts_values[1]), slot->tts_values[2], slot->tts_isnull[2]);
}

/* A row of a rows query (NULL rows, semi and anti rows): the batch's. */
static void
own_row(void *arg, TupleTableSlot *slot)
{
	StmJoinRun *run = arg;

	run->num_output++;
	run->fn(run->arg, slot);
}

/* A tuple of the side's shape (a SPI result row) into its rows to give their own rows. */
static void
add_to_rows(void *arg, HeapTuple tuple, TupleDesc desc)
{
	SideRun    *sr = arg;

	tuplestore_puttuple(sr->rows, tuple);
	sr->nrows++;
}

/* Do the unmatched rows of side s give their own rows (NULL rows, anti rows)? */
static bool
gives_unmatched(StmStreamJoin *j, int s)
{
	if (s == STM_JOIN_LEFT_SIDE)
		return j->type == STM_JOIN_LEFT || j->type == STM_JOIN_FULL || j->type == STM_JOIN_ANTI;
	return j->type == STM_JOIN_RIGHT || j->type == STM_JOIN_FULL;
}

/*
 * Step 2: stored rows past the watermark go; an outer (anti) side's
 * unmatched give their rows.  One scan of the state table, in the table
 * AM: each row whose expiry is <= W is deleted, and an outer side's
 * unmatched ones are copied into the side's rows first (in the side
 * relations' shape: the columns the query does not use NULL, no ctid).
 * The DELETE statements it replaces scanned an outer side twice (the
 * matched rows, then the unmatched ones with RETURNING: copying every
 * evicted row out for nothing was a good part of a batch) and went
 * through the executor for every row.  The state tables have no triggers
 * or rules and only the worker writes them (the stream's owner may only
 * read them), so a row deleted here is what a DELETE would delete; the
 * index entries go with VACUUM, as a DELETE's do.
 */
static void
evict(StmJoinRun *run, int s)
{
	SideRun    *sr = &run->sides[s];
	bool		keep_unmatched = gives_unmatched(run->j, s);
	int			natts = sr->view_desc->natts;
	int			nused = bms_num_members(sr->side->used);
	StmStateAccess access;
	Relation	rel;
	Snapshot	snapshot;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Datum	   *values;
	bool	   *nulls;
	int64		removed = 0;

	if (!run->has_watermark || !stm_ssjoin_side_bounded(run->j, s))
		return;
	access = stm_statetable_begin();
	rel = table_open(RangeVarGetRelid(makeRangeVar("streaming", stm_ssjoin_table(run->stream_id, s), -1),
									  RowExclusiveLock, false), NoLock);
	if (RelationGetDescr(rel)->natts != nused + NSTORED)
		elog(ERROR, "the state table of a stream-stream join has %d columns, not %d",
			 RelationGetDescr(rel)->natts, nused + NSTORED);
	values = palloc(sizeof(Datum) * (natts + NHIDDEN));
	nulls = palloc(sizeof(bool) * (natts + NHIDDEN));
	/* what a DELETE over SPI would see */
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	scan = table_beginscan(rel, snapshot, 0, NULL);
	slot = table_slot_create(rel, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		expires = slot_getattr(slot, nused + HIDDEN_EXPIRES_AT + 1, &isnull);

		CHECK_FOR_INTERRUPTS();
		if (isnull || DatumGetTimestampTz(expires) > run->watermark)
			continue;
		if (keep_unmatched &&
			!DatumGetBool(slot_getattr(slot, nused + HIDDEN_MATCHED + 1, &isnull)))
		{
			int			o = 0;

			slot_getallattrs(slot);
			for (int a = 0; a < natts; a++)
			{
				if (bms_is_member(a + 1, sr->side->used))
				{
					values[a] = slot->tts_values[o];
					nulls[a] = slot->tts_isnull[o++];
				}
				else
				{
					values[a] = (Datum) 0;
					nulls[a] = true;
				}
			}
			for (int h = 0; h < NSTORED; h++)
			{
				values[natts + h] = slot->tts_values[nused + h];
				nulls[natts + h] = slot->tts_isnull[nused + h];
			}
			values[natts + HIDDEN_TID] = (Datum) 0;
			nulls[natts + HIDDEN_TID] = true;
			tuplestore_putvalues(sr->rows, sr->desc, values, nulls);
			sr->nrows++;
		}
		simple_table_tuple_delete(rel, &slot->tts_tid, snapshot);
		removed++;
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, NoLock);
	stm_statetable_end(access);
	pfree(values);
	pfree(nulls);
	sr->num_removed += removed;
}

/*
 * Run one of the batch's queries, its plan kept in slot plan.  Planned
 * without merge joins: a side's new rows have no column statistics, so
 * the planner takes 200 distinct keys, prices a hash join's buckets at a
 * tenth of its input and chose merge joins that sort both inputs (on disk
 * for a large batch); a hash join (or a nested loop over the key index)
 * is what these joins want.  Run without JIT: for the same reason a busy
 * batch's pairs were priced at millions of rows, past jit_above_cost, and
 * JIT code lives for one execution only, so every batch compiled the
 * query anew (0.3 to 1 s of a 100,000-row batch, more than its join;
 * bench/joins.sh --explain).  work_mem: join_memory_kb's.
 */
static void
run_query(StmJoinRun *run, int plan, Query *q, QueryEnvironment *env, StmJoinRowFn fn)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("work_mem", psprintf("%d", join_memory_kb()), PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_mergejoin", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	stm_join_exec(&run->plans[plan], run->plans_cxt, q, run->query_text, env, fn, run);
	AtEOXact_GUC(true, nest);
}

/*
 * Step 3: the pairs, each once: new-left x (state + new right), state-left
 * x new-right.  An inner or outer join with new rows on both sides finds
 * them in one query, (state + new left) x (state + new right) without the
 * pairs of two stored rows: one hash table and one pass over each side,
 * where the two queries built one of a side's new rows twice (each probed
 * by the other side's rows of its own query).
 */
static void
find_pairs(StmJoinRun *run, QueryEnvironment *env)
{
	bool		exists = run->j->sublink != NULL;
	StmJoinRowFn fn = exists ? exists_pair_row : pair_row;

	if (!exists && run->sides[STM_JOIN_LEFT_SIDE].nnew > 0 && run->sides[STM_JOIN_RIGHT_SIDE].nnew > 0)
	{
		run_query(run, PLAN_PAIRS_ALL, pairs_query(run, SIDE_ALL, SIDE_ALL, env), env, fn);
		return;
	}
	if (run->sides[STM_JOIN_LEFT_SIDE].nnew > 0)
		run_query(run, PLAN_PAIRS_NEW_LEFT,
				  exists ? exists_pairs_query(run, SIDE_NEW, SIDE_ALL, env) :
				  pairs_query(run, SIDE_NEW, SIDE_ALL, env), env, fn);
	if (run->sides[STM_JOIN_RIGHT_SIDE].nnew > 0)
		run_query(run, PLAN_PAIRS_STATE_LEFT,
				  exists ? exists_pairs_query(run, SIDE_STATE, SIDE_NEW, env) :
				  pairs_query(run, SIDE_STATE, SIDE_NEW, env), env, fn);
}

/*
 * New rows of side s that match pred (of their index): into the side's
 * rows to give their own rows.
 */
static void
new_rows_into_rows(SideRun *sr, bool want_matched, bool want_expired)
{
	TupleTableSlot *slot = MakeSingleTupleTableSlot(sr->desc, &TTSOpsMinimalTuple);
	int			ptr = tuplestore_alloc_read_pointer(sr->new_rows, 0);
	int64		k = 0;

	tuplestore_select_read_pointer(sr->new_rows, ptr);
	tuplestore_rescan(sr->new_rows);
	while (tuplestore_gettupleslot(sr->new_rows, true, false, slot))
	{
		if ((!want_expired || sr->new_expired[k]) && sr->new_matched[k] == want_matched)
		{
			tuplestore_puttupleslot(sr->rows, slot);
			sr->nrows++;
		}
		k++;
	}
	tuplestore_select_read_pointer(sr->new_rows, 0);
	ExecDropSingleTupleTableSlot(slot);
}

/* A list of ctids as a tid[] */
static ArrayType *
tid_list_array(List *tids)
{
	Datum	   *d = palloc(sizeof(Datum) * Max(list_length(tids), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, tids)
		d[n++] = PointerGetDatum(lfirst(lc));
	return construct_array(d, n, TIDOID, sizeof(ItemPointerData), false, TYPALIGN_SHORT);
}

/*
 * A statement on a side's state table over the stored rows that matched
 * (:tids, their ctids), by a TID scan.  The planner prices a TID scan at a
 * random page read per row and took a scan of the whole table for a few
 * thousand rows; those pages are the ones this batch's pairs just read.
 */
static uint64
run_by_tids(SideRun *sr, const char *sql, int expect, StmSqlRowFn fn, void *arg)
{
	int			nest = NewGUCNestLevel();
	StmSql		q;
	uint64		n;

	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	stm_sql_init(&q, sql);
	stm_sql_param(&q, "tids", TIDARRAYOID, PointerGetDatum(tid_list_array(sr->matched_state)), false);
	n = stm_catalog_run(&q, expect, fn, arg);
	AtEOXact_GUC(true, nest);
	return n;
}

/*
 * Step 4, a semi or anti join's left side: a semi join gives its rows that
 * matched for the first time (new ones, and stored ones, which go: done),
 * an anti join those that can match no more (evicted, or new and past
 * their bound) unmatched; the stored ones that matched go too (never).
 */
static void
exists_rows(StmJoinRun *run)
{
	SideRun    *sr = &run->sides[STM_JOIN_LEFT_SIDE];
	bool		semi = run->j->type == STM_JOIN_SEMI;

	if (semi)
		new_rows_into_rows(sr, true, false);
	else
		new_rows_into_rows(sr, false, true);
	if (sr->matched_state == NIL)
		return;
	sr->num_removed += run_by_tids(sr, psprintf("WITH d AS (DELETE FROM %s WHERE ctid = ANY (:tids) RETURNING *) %s",
												sr->table, state_select(sr, "d", false)),
								   SPI_OK_SELECT, semi ? add_to_rows : NULL, sr);
}

/* rows written per table_multi_insert, as COPY FROM buffers them */
#define STORE_BUFFER	1000

/*
 * Write the buffered state rows and their index entries (COPY FROM's
 * steps); what that allocates goes with the reset of cxt.
 */
static void
store_flush(Relation rel, ResultRelInfo *rri, EState *estate, TupleTableSlot **slots, int n,
			MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);

	/*
	 * No BulkInsertState: its ring of 16 MB would make this process write
	 * back (and flush WAL for) the state's pages that the next batch reads
	 * again; they stay in shared buffers instead.
	 */
	table_multi_insert(rel, slots, n, GetCurrentCommandId(true), 0, NULL);
	for (int i = 0; i < n; i++)
	{
		if (rri->ri_NumIndices > 0)
			list_free(ExecInsertIndexTuples(rri, slots[i], estate, false, false, NULL, NIL));
		ExecClearTuple(slots[i]);
	}
	MemoryContextSwitchTo(old);
	MemoryContextReset(cxt);
	ResetPerTupleExprContext(estate);
}

/*
 * A sort of a side's state rows in the order of the state table's key
 * index (its first, the lowest OID: the one made with the table), or NULL
 * when the side has no key (that index is on the row id, which only
 * grows).  Sorted, a batch's rows reach the index's leaf pages in order,
 * mostly its rightmost one, which btree inserts into without descending
 * from the root; in arrival order (partition after partition, each
 * spanning the batch's keys) every insert descended.  In bench/joins.sh
 * (left, capped, perf) the index inserts went from a fifth of the
 * worker's time to a tenth, the sort costing about 6%.  Only the order of
 * the inserts changes, never what is stored.  Memory as CREATE INDEX
 * sorts its entries: maintenance_work_mem.
 */
static Tuplesortstate *
key_sort_begin(StmJoinSide *side, ResultRelInfo *rri)
{
	Relation	index;
	int			nkeys;
	AttrNumber *attnos;
	Oid		   *ops;
	Oid		   *collations;
	bool	   *nulls_first;

	if (side->key_attnos == NIL || rri->ri_NumIndices == 0)
		return NULL;
	index = rri->ri_IndexRelationDescs[0];
	if (index->rd_rel->relam != BTREE_AM_OID)
		return NULL;
	nkeys = IndexRelationGetNumberOfKeyAttributes(index);
	attnos = palloc(sizeof(AttrNumber) * nkeys);
	ops = palloc(sizeof(Oid) * nkeys);
	collations = palloc(sizeof(Oid) * nkeys);
	nulls_first = palloc(sizeof(bool) * nkeys);
	for (int k = 0; k < nkeys; k++)
	{
		attnos[k] = index->rd_index->indkey.values[k];
		if (attnos[k] == 0)
			return NULL;		/* an expression: not a table we made */
		ops[k] = get_opfamily_member(index->rd_opfamily[k], index->rd_opcintype[k],
									 index->rd_opcintype[k],
									 (index->rd_indoption[k] & INDOPTION_DESC) ?
									 BTGreaterStrategyNumber : BTLessStrategyNumber);
		if (!OidIsValid(ops[k]))
			return NULL;
		collations[k] = index->rd_indcollation[k];
		nulls_first[k] = (index->rd_indoption[k] & INDOPTION_NULLS_FIRST) != 0;
	}
	return tuplesort_begin_heap(RelationGetDescr(rri->ri_RelationDesc), nkeys, attnos, ops,
								collations, nulls_first, maintenance_work_mem, NULL,
								TUPLESORT_NONE);
}

/* A state row into the multi-insert buffer (copied), written when it is full. */
static void
store_row(Relation rel, ResultRelInfo *rri, EState *estate, TupleTableSlot **slots, int *nbuf,
		  TupleTableSlot *row, MemoryContext flush_cxt)
{
	if (slots[*nbuf] == NULL)
		slots[*nbuf] = table_slot_create(rel, NULL);
	ExecCopySlot(slots[*nbuf], row);
	if (++*nbuf == STORE_BUFFER)
	{
		store_flush(rel, rri, estate, slots, *nbuf, flush_cxt);
		*nbuf = 0;
	}
}

/*
 * Step 5: the new rows of a side that can still match go into its state
 * table, with whether they matched; not a semi or anti join's left rows
 * that matched (their row was given, or never will be).  They go in with
 * the table AM's multi-insert and the index AM's inserts, as COPY FROM
 * writes a plain table (WAL-logged, in the batch's transaction), sorted
 * by the key index's order (key_sort_begin): an INSERT ... SELECT over
 * the new rows spent most of a batch on the executor's per-row work and
 * on its skip and matched arrays.
 */
static void
store_new_rows(StmJoinRun *run, int s)
{
	SideRun    *sr = &run->sides[s];
	bool		exists_left = run->j->sublink != NULL && s == STM_JOIN_LEFT_SIDE;
	int			natts = sr->view_desc->natts;
	StmStateAccess access;
	Relation	rel;
	TupleDesc	rdesc;
	ResultRelInfo *rri;
	EState	   *estate;
	TupleTableSlot *in;
	TupleTableSlot *row;
	TupleTableSlot *slots[STORE_BUFFER];
	Tuplesortstate *sort;
	MemoryContext flush_cxt;
	int			nbuf = 0;
	int64		k = 0;
	int64		n = 0;
	TimestampTz floor = 0;
	bool		has_floor;
	bool		keep_unmatched = gives_unmatched(run->j, s);

	if (sr->nnew == 0)
		return;
	has_floor = next_watermark_floor(run, &floor);
	access = stm_statetable_begin();
	rel = table_open(RangeVarGetRelid(makeRangeVar("streaming", stm_ssjoin_table(run->stream_id, s), -1),
									  RowExclusiveLock, false), NoLock);
	rdesc = RelationGetDescr(rel);
	if (rdesc->natts != bms_num_members(sr->side->used) + NSTORED)
		elog(ERROR, "the state table of a stream-stream join has %d columns, not %d",
			 rdesc->natts, bms_num_members(sr->side->used) + NSTORED);
	estate = CreateExecutorState();
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);
	flush_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming join state write",
									  ALLOCSET_DEFAULT_SIZES);
	memset(slots, 0, sizeof(slots));
	in = MakeSingleTupleTableSlot(sr->desc, &TTSOpsMinimalTuple);
	row = MakeSingleTupleTableSlot(rdesc, &TTSOpsVirtual);
	sort = key_sort_begin(sr->side, rri);
	tuplestore_rescan(sr->new_rows);
	while (tuplestore_gettupleslot(sr->new_rows, true, false, in))
	{
		int			o = 0;

		if (sr->new_expired[k] || (exists_left && sr->new_matched[k]))
		{
			k++;
			continue;
		}
		ExecClearTuple(row);
		slot_getallattrs(in);
		/*
		 * Evicted by the next batch and matching nothing before (its
		 * partners would be late then): not stored, unless it gives its
		 * own row at that eviction (an outer or anti side's, unmatched).
		 */
		if (has_floor && !in->tts_isnull[natts + HIDDEN_EXPIRES_AT] &&
			DatumGetTimestampTz(in->tts_values[natts + HIDDEN_EXPIRES_AT]) <= floor &&
			!(keep_unmatched && !sr->new_matched[k]))
		{
			k++;
			continue;
		}
		/* the state table's columns: the used view columns, then the hidden ones */
		for (int a = 0; a < natts; a++)
			if (bms_is_member(a + 1, sr->side->used))
			{
				row->tts_values[o] = in->tts_values[a];
				row->tts_isnull[o++] = in->tts_isnull[a];
			}
		for (int h = 0; h < NSTORED; h++)
		{
			row->tts_values[o] = in->tts_values[natts + h];
			row->tts_isnull[o++] = in->tts_isnull[natts + h];
		}
		row->tts_values[o - NSTORED + HIDDEN_MATCHED] = BoolGetDatum(sr->new_matched[k]);
		row->tts_isnull[o - NSTORED + HIDDEN_MATCHED] = false;
		ExecStoreVirtualTuple(row);
		/* both copy the row: the input slot's memory is the tuplestore's */
		if (sort)
			tuplesort_puttupleslot(sort, row);
		else
			store_row(rel, rri, estate, slots, &nbuf, row, flush_cxt);
		k++;
		n++;
	}
	if (sort)
	{
		TupleTableSlot *sorted = MakeSingleTupleTableSlot(rdesc, &TTSOpsMinimalTuple);

		tuplesort_performsort(sort);
		while (tuplesort_gettupleslot(sort, true, false, sorted, NULL))
			store_row(rel, rri, estate, slots, &nbuf, sorted, flush_cxt);
		tuplesort_end(sort);
		ExecDropSingleTupleTableSlot(sorted);
	}
	if (nbuf > 0)
		store_flush(rel, rri, estate, slots, nbuf, flush_cxt);
	for (int i = 0; i < STORE_BUFFER && slots[i]; i++)
		ExecDropSingleTupleTableSlot(slots[i]);
	ExecDropSingleTupleTableSlot(row);
	ExecDropSingleTupleTableSlot(in);
	ExecCloseIndices(rri);
	table_finish_bulk_insert(rel, 0);
	FreeExecutorState(estate);
	MemoryContextDelete(flush_cxt);
	table_close(rel, NoLock);
	stm_statetable_end(access);
	sr->num_updated += n;
	sr->num_inserted += n;
}

/* Step 5: stored rows of a side that matched for the first time are marked (outer) or go (anti). */
static void
mark_matched(StmJoinRun *run, int s)
{
	SideRun    *sr = &run->sides[s];

	if (sr->matched_state == NIL || !gives_unmatched(run->j, s) || run->j->type == STM_JOIN_ANTI)
		return;
	sr->num_updated += run_by_tids(sr, psprintf("UPDATE %s SET _stm_matched = true WHERE ctid = ANY (:tids) "
												"AND NOT _stm_matched", sr->table),
								   SPI_OK_UPDATE, NULL, NULL);
}

/*
 * The batch's join, after every new row was added: evict, pairs, the rows
 * that give their own rows, state written (see the file's header).  Every
 * output row (or joined row of an aggregate) goes to fn, whose slot may
 * hold more columns after the output's.
 */
void
stm_ssjoin_run(StmJoinRun *run, StmSSJoinRowFn fn, void *arg)
{
	StmStreamJoin *j = run->j;
	QueryEnvironment *env;

	run->fn = fn;
	run->arg = arg;
	for (int s = 0; s < 2; s++)
		evict(run, s);
	CommandCounterIncrement();
	env = batch_env(run);
	find_pairs(run, env);
	if (j->sublink)
		exists_rows(run);
	else
		for (int s = 0; s < 2; s++)
			if (gives_unmatched(j, s))
				new_rows_into_rows(&run->sides[s], false, true);
	for (int s = 0; s < 2; s++)
	{
		SideRun    *sr = &run->sides[s];
		int64		before = run->num_output;

		if (sr->nrows == 0 || (j->sublink && s == STM_JOIN_RIGHT_SIDE))
			continue;
		env = batch_env(run);	/* the rows' count, for the planner */
		run_query(run, s == STM_JOIN_LEFT_SIDE ? PLAN_ROWS_LEFT : PLAN_ROWS_RIGHT,
				  rows_query(run, s, env), env, own_row);
		if (!j->sublink)
			sr->num_null_rows += run->num_output - before;
	}
	for (int s = 0; s < 2; s++)
	{
		store_new_rows(run, s);
		mark_matched(run, s);
	}
	CommandCounterIncrement();
	for (int s = 0; s < 2; s++)
	{
		SideRun    *sr = &run->sides[s];

		/*
		 * The state's rows: what the last committed batch left (kept with
		 * the sides' clocks, in the same transaction as the rows) plus and
		 * minus this batch's; counted when that is not known (the first
		 * batch, after a reset, a table made anew).
		 */
		sr->num_total = stm_statetable_rows_after(sr->table, sr->has_prev_total, sr->prev_total,
												  sr->num_inserted - sr->num_removed);
		tuplestore_end(sr->new_rows);
		tuplestore_end(sr->rows);
	}
	FreeExprContext(run->econtext, true);
	run->done = true;
}

/*
 * The row versions the batch left dead in each side's state table (the
 * rows it evicted or deleted, and the old versions of the rows it marked
 * matched), and the rows each holds after it: what the worker's VACUUM
 * goes by (stm_ssjoin_vacuum).
 */
void
stm_ssjoin_dead_rows(StmJoinRun *run, int64 *dead, int64 *live)
{
	for (int s = 0; s < 2; s++)
	{
		SideRun    *sr = &run->sides[s];

		dead[s] = sr->num_removed + (sr->num_updated - sr->num_inserted);
		live[s] = sr->num_total;
	}
}

/*
 * A side is vacuumed once the committed batches left this many dead row
 * versions in it since its last VACUUM: VACUUM_MIN_DEAD, plus a
 * VACUUM_SHARE-th of its rows (as autovacuum's threshold and scale factor),
 * so that its cost (a scan of the table and of its index) is spread over
 * the rows it frees.
 */
#define VACUUM_MIN_DEAD		100
#define VACUUM_SHARE		10

/*
 * The worker, after a committed batch of a stream-stream join, outside any
 * transaction: VACUUM (SKIP_LOCKED, no truncation, not the TOAST tables)
 * of the sides whose dead rows passed the threshold above; *dead counts
 * from 0 again for them.
 *
 * A join's state is a queue in event time: each batch stores a batch of
 * rows and evicts about as many older ones.  Without a VACUUM between
 * batches (autovacuum comes at most once a naptime, a minute by default)
 * the dead rows' space is never reused: the table and its key index grow
 * with the input, not with the state, every new row goes into a new page
 * (the relation extended, its buffers and the kernel's pages touched for
 * the first time: a quarter of a busy worker's time, bench/joins.sh
 * --perf left_capped), and the eviction's and the pairs' scans of the
 * state read every dead page again.  Vacuumed, the table stays the size of
 * its rows and a batch's rows go into the pages the last eviction freed
 * (the free space map), already in shared buffers.
 *
 * Still needed now that workers report their tables' statistics and
 * autovacuum sees the state tables: bench/joins.sh --modes capped without
 * it (autovacuum on, its defaults) left both sides' tables at 16,394 pages,
 * the whole input, against 6,013 with it, their key indexes at 2,900
 * pages against 1,350, and used more worker CPU: no autovacuum came
 * within the runs' 25 seconds.
 *
 * As the extension's owner, who owns the state tables.  A failure is a
 * WARNING: the batch committed, and the next one vacuums again.
 */
void
stm_ssjoin_vacuum(int32 stream_id, int64 *dead, const int64 *live)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming join vacuum",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	MemoryContext save_portal = PortalContext;
	bool		want[2];
	StmStateAccess access;

	for (int s = 0; s < 2; s++)
		want[s] = dead[s] >= VACUUM_MIN_DEAD + Max(live[s], 0) / VACUUM_SHARE;
	if (!want[0] && !want[1])
	{
		MemoryContextSwitchTo(old);
		MemoryContextDelete(cxt);
		return;
	}
	/* what an error restores (the extension's owner is looked up in a transaction) */
	GetUserIdAndSecContext(&access.save_userid, &access.save_sec_context);
	PG_TRY();
	{
		StringInfoData sql;
		Oid			nsp;
		int			n = 0;

		StartTransactionCommand();
		(void) stm_statetable_begin();
		initStringInfo(&sql);
		appendStringInfoString(&sql, "VACUUM (SKIP_LOCKED, TRUNCATE false, PROCESS_TOAST false) ");
		nsp = get_namespace_oid("streaming", false);
		for (int s = 0; s < 2; s++)
		{
			char	   *relname = stm_ssjoin_table(stream_id, s);

			/* dropped or reset since: nothing to vacuum */
			if (want[s] && OidIsValid(get_relname_relid(relname, nsp)))
				appendStringInfo(&sql, "%sstreaming.%s", n++ ? ", " : "",
								 quote_identifier(relname));
		}
		if (n > 0)
		{
			List	   *raw;
			ParseState *pstate;

			/* what vacuum() allocates for its run goes under PortalContext */
			PortalContext = cxt;
			raw = raw_parser(sql.data, RAW_PARSE_DEFAULT);
			pstate = make_parsestate(NULL);
			pstate->p_sourcetext = sql.data;
			ExecVacuum(pstate, castNode(VacuumStmt, linitial_node(RawStmt, raw)->stmt), true);
		}
		stm_statetable_end(access);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		PortalContext = save_portal;
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		stm_statetable_end(access);
		MemoryContextSwitchTo(old);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("could not vacuum the state tables of stream with id %d: %s",
						stream_id, edata->message),
				 errhint("The stream's next batch tries again; VACUUM of the tables streaming.join_%d_left and _right does the same.",
						 stream_id)));
		MemoryContextDelete(cxt);
		return;
	}
	PG_END_TRY();
	PortalContext = save_portal;
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	for (int s = 0; s < 2; s++)
		if (want[s])
			dead[s] = 0;
}

/*
 * What the batch reports: per side (by alias) Spark's state metrics and
 * the NULL rows given (progress.state_operators), the late rows and state
 * rows summed over the sides, and each side's largest event time.
 */
void
stm_ssjoin_progress(StmJoinRun *run, StringInfo json, int64 *num_late, int64 *num_state,
					bool *has_max, TimestampTz *max)
{
	appendStringInfoChar(json, '{');
	*num_late = 0;
	*num_state = 0;
	for (int s = 0; s < 2; s++)
	{
		SideRun    *sr = &run->sides[s];

		if (s > 0)
			appendStringInfoString(json, ", ");
		escape_json(json, sr->side->alias);
		appendStringInfo(json, ": {\"side\": \"%s\", \"numRowsTotal\": " INT64_FORMAT
						 ", \"numRowsUpdated\": " INT64_FORMAT ", \"numRowsRemoved\": " INT64_FORMAT
						 ", \"numRowsDroppedByWatermark\": " INT64_FORMAT ", \"numNullRows\": " INT64_FORMAT "}",
						 side_names[s], sr->num_total, sr->num_updated, sr->num_removed,
						 sr->num_late, sr->num_null_rows);
		*num_late += sr->num_late;
		*num_state += sr->num_total;
		has_max[s] = sr->has_max_event_time;
		max[s] = sr->max_event_time;
	}
	appendStringInfoChar(json, '}');
}

/* ---- the stream's watermark ---------------------------------------------- */

/* A side's entry of side_watermarks, by its alias: what batches learnt of it. */
typedef struct SideClock
{
	bool		has_watermark;
	TimestampTz watermark;		/* max(event time seen) - delay, idle advances included */
	bool		has_idle_clock;
	TimestampTz idle_clock_at;	/* its last records, or its last idle advance */
	int64		delay_us;
	int64		idle_timeout_us;
} SideClock;

static int64
side_int8(Jsonb *obj, const char *key, bool *found)
{
	char	   *v = obj ? stm_option_text(obj, key) : NULL;

	*found = v != NULL;
	return v ? pg_strtoint64(v) : 0;
}

static void
read_side_clock(Jsonb *sides, const char *alias, SideClock *c)
{
	Jsonb	   *entry = sides ? stm_option_jsonb(sides, alias) : NULL;

	memset(c, 0, sizeof(*c));
	c->watermark = side_int8(entry, "watermark_us", &c->has_watermark);
	c->idle_clock_at = side_int8(entry, "idle_clock_us", &c->has_idle_clock);
	{
		bool		found;

		c->delay_us = side_int8(entry, "delay_us", &found);
		c->idle_timeout_us = side_int8(entry, "idle_timeout_us", &found);
	}
}

/* The stream's watermark from its sides': the policy over the watermarked sides. */
static TimestampTz
combine(bool max_policy, const bool *watermarked, const SideClock *c)
{
	TimestampTz w = 0;
	bool		any = false;

	for (int s = 0; s < 2; s++)
	{
		TimestampTz side_w = c[s].has_watermark ? c[s].watermark : STM_UNIX_EPOCH;

		if (!watermarked[s])
			continue;
		w = !any ? side_w : max_policy ? Max(w, side_w) : Min(w, side_w);
		any = true;
	}
	return any ? w : STM_UNIX_EPOCH;
}

/*
 * The watermark the next batch will run with is at least *floor: the one
 * stm_ssjoin_watermark gives at the end of this batch, from the sides'
 * clocks and this batch's largest event times, without the idle advances
 * (which only move it further).  A new row whose expiry is <= *floor is
 * evicted by the next batch, and every row that could still match it
 * would be late there: after this batch's pairs it can match nothing.
 * False when the stream has no watermark.
 */
static bool
next_watermark_floor(StmJoinRun *run, TimestampTz *floor)
{
	StmStreamJoin *j = run->j;
	SideClock	c[2];
	bool		watermarked[2];

	if (!j->sides[0].has_delay && !j->sides[1].has_delay)
		return false;
	for (int s = 0; s < 2; s++)
	{
		StmJoinSide *side = &j->sides[s];
		SideRun    *sr = &run->sides[s];

		read_side_clock(run->prev_sides, side->alias, &c[s]);
		watermarked[s] = side->has_delay;
		if (side->has_delay && sr->has_max_event_time)
		{
			TimestampTz cand = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
																	   TimestampTzGetDatum(sr->max_event_time),
																	   IntervalPGetDatum(&side->delay)));

			c[s].watermark = c[s].has_watermark ? Max(c[s].watermark, cand) : cand;
			c[s].has_watermark = true;
		}
	}
	*floor = combine(j->max_policy, watermarked, c);
	if (run->has_watermark)
		*floor = Max(*floor, run->watermark);
	return true;
}

static int64
interval_us(const Interval *iv)
{
	return iv->time + (int64) iv->day * USECS_PER_DAY + (int64) iv->month * 30 * USECS_PER_DAY;
}

/*
 * The stream's watermark after a batch (SPEC 3.6): each side's is max(its
 * event time seen) - its delay, or, when it had no records for its
 * idle_timeout, as if a record of now() - delay had come (3.1); the
 * stream's is the minimum of the sides' (a side that has seen nothing yet
 * counting as 1970), or the maximum by policy, and never moves back.  The
 * sides' clocks go into *sides_json for the stream's row, with the rows
 * each side's state holds after run (the batch's join, or NULL when none
 * ran): the next batch counts on from there (committed with the rows).
 */
TimestampTz
stm_ssjoin_watermark(StmStreamJoin *j, StmJoinRun *run, Jsonb *prev_sides, const bool *has_max,
					 const TimestampTz *max, TimestampTz now, TimestampTz prev_w,
					 char **sides_json)
{
	SideClock	c[2];
	bool		watermarked[2];
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int s = 0; s < 2; s++)
	{
		StmJoinSide *side = &j->sides[s];

		read_side_clock(prev_sides, side->alias, &c[s]);
		watermarked[s] = side->has_delay;
		c[s].delay_us = side->has_delay ? interval_us(&side->delay) : 0;
		c[s].idle_timeout_us = side->idle_timeout_us;
		if (!c[s].has_idle_clock || has_max[s])
		{
			c[s].idle_clock_at = now;
			c[s].has_idle_clock = true;
		}
		if (side->has_delay && has_max[s])
		{
			TimestampTz cand = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval,
																	   TimestampTzGetDatum(max[s]),
																	   IntervalPGetDatum(&side->delay)));

			c[s].watermark = c[s].has_watermark ? Max(c[s].watermark, cand) : cand;
			c[s].has_watermark = true;
		}
		else if (side->has_delay && side->idle_timeout_us > 0 &&
				 now - c[s].idle_clock_at >= side->idle_timeout_us)
		{
			TimestampTz idle = now - 2 * c[s].delay_us;

			if (!c[s].has_watermark || idle > c[s].watermark)
			{
				c[s].watermark = idle;
				c[s].has_watermark = true;
			}
			c[s].idle_clock_at = now;
		}
		if (s > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, side->alias);
		appendStringInfo(&buf, ": {\"delay_us\": " INT64_FORMAT ", \"idle_timeout_us\": " INT64_FORMAT
						 ", \"idle_clock_us\": " INT64_FORMAT,
						 c[s].delay_us, c[s].idle_timeout_us, c[s].idle_clock_at);
		if (c[s].has_watermark)
			appendStringInfo(&buf, ", \"watermark_us\": " INT64_FORMAT, c[s].watermark);
		if (run && run->done)
			appendStringInfo(&buf, ", \"state_oid\": %u, \"state_rows\": " INT64_FORMAT,
							 state_oid(run, s), run->sides[s].num_total);
		else
		{
			/* no join ran: the state is as the last batch left it */
			Jsonb	   *entry = prev_sides ? stm_option_jsonb(prev_sides, side->alias) : NULL;
			bool		has_oid;
			bool		has_rows;
			int64		oid = side_int8(entry, "state_oid", &has_oid);
			int64		rows = side_int8(entry, "state_rows", &has_rows);

			if (has_oid && has_rows)
				appendStringInfo(&buf, ", \"state_oid\": " INT64_FORMAT ", \"state_rows\": " INT64_FORMAT,
								 oid, rows);
		}
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, '}');
	*sides_json = buf.data;
	return Max(prev_w, combine(j->max_policy, watermarked, c));
}

/*
 * A batch with no records is due when a quiet side's idle advance would
 * move the stream's watermark (read from what the last batch stored).
 */
bool
stm_ssjoin_idle_due(Jsonb *sides, bool max_policy, TimestampTz prev_w, TimestampTz now)
{
	SideClock	c[2];
	bool		watermarked[2] = {false, false};
	bool		due = false;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			s = 0;

	if (sides == NULL)
		return false;
	it = JsonbIteratorInit(&sides->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE && s < 2)
	{
		if (tok != WJB_KEY)
			continue;
		read_side_clock(sides, pnstrdup(v.val.string.val, v.val.string.len), &c[s]);
		watermarked[s] = c[s].delay_us > 0 || c[s].has_watermark;
		if (c[s].idle_timeout_us > 0 && c[s].has_idle_clock &&
			now - c[s].idle_clock_at >= c[s].idle_timeout_us)
		{
			TimestampTz idle = now - 2 * c[s].delay_us;

			if (!c[s].has_watermark || idle > c[s].watermark)
			{
				c[s].watermark = idle;
				c[s].has_watermark = true;
				due = true;
			}
		}
		s++;
	}
	return due && combine(max_policy, watermarked, c) > prev_w;
}
