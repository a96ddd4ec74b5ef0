/*
 * ssjoin.c: one batch of a stream-stream join (SPEC 3.6), run by
 * PostgreSQL's planner and executor.
 *
 * Each side keeps the rows that can still match in a state table of its
 * own, streaming.join_<stream id>_<left|right> (the columns the query uses,
 * then the row's id, event time, expiry and whether it matched; an index on
 * the equality's columns and one on the expiry), written in the batch's
 * transaction.  A batch's new rows of a side are a named tuplestore of the
 * side's view's columns and the same four.  Every relation the queries read
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
 *      rows come in; an outer join's WHERE is evaluated per pair (a pair
 *      that fails it still counts as matched, as in SQL); semi and anti
 *      joins find pairs with the EXISTS's condition;
 *   4. new rows already past their expiry are not stored: on an outer side
 *      the unmatched ones give their NULL rows now, on an anti join's left
 *      side its rows;
 *   5. the other new rows are stored with whether they matched, and stored
 *      rows that matched now are marked (an outer side's), or dropped (a
 *      semi or anti join's left side: its row was given, or never will be).
 * NULL rows are the user's query with the row's side reading those rows and
 * the other side none, so its expressions and tables apply as in SQL; a
 * semi join's rows, and an anti join's, are the user's query with its
 * EXISTS true, over those rows of the left side.
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "parser/analyze.h"
#include "parser/parser.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteManip.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "aggstate.h"
#include "join.h"
#include "ssjoin.h"
#include "statetable.h"

/* the four columns every side relation has after the view's */
#define HIDDEN_ROW_ID		0
#define HIDDEN_EVENT_TIME	1
#define HIDDEN_EXPIRES_AT	2
#define HIDDEN_MATCHED		3
#define NHIDDEN				4

static const char *const hidden_names[NHIDDEN] = {
	"_stm_row_id", "_stm_event_time", "_stm_expires_at", "_stm_matched"
};
static const Oid hidden_types[NHIDDEN] = {INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, BOOLOID};

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
	bool	   *new_matched;	/* per new row (index: row id - first id) */
	bool	   *new_expired;	/* already past its expiry (not stored) */
	List	   *matched_state;	/* ids of stored rows that matched for the first time */
	Tuplestorestate *rows;		/* SIDE_ROWS: rows to give their own rows */
	int64		nrows;
	TimestampTz max_event_time;
	bool		has_max_event_time;
	StmLateRows *keep_late;
	/* progress (Spark's state operator metrics) */
	int64		num_late;
	int64		num_removed;
	int64		num_updated;
	int64		num_null_rows;
	int64		num_total;
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
	SideRun		sides[2];
	List	   *out_tlist;		/* what every query gives the batch: the output
								 * row, or the joined row of an aggregate */
	int			nout;
	StmJoinPlan **plans;		/* the runtime's kept plans, STM_SSJOIN_NPLANS */
	MemoryContext plans_cxt;
	MemoryContext cxt;			/* the batch's */
	/* the batch's row function, while a query runs */
	StmJoinRowFn fn;
	void	   *arg;
	int64		num_output;
};

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
 * the query does not use, which are not stored), then the hidden ones.
 */
static char *
state_select(SideRun *sr, const char *from)
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
	appendStringInfo(&buf, "_stm_row_id, _stm_event_time, _stm_expires_at, _stm_matched FROM %s", from);
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
 * the columns the equality compares and one on the expiry.
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
							  keys.len ? keys.data : "_stm_row_id",
							  stm_ssjoin_side_bounded(j, s) ? "_stm_expires_at" : NULL, owner);
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
		sub = analyse(state_select(sr, sr->table), env);
	else
		sub = analyse(psprintf("%s UNION ALL SELECT * FROM %s", state_select(sr, sr->table),
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
	PLAN_ROWS_RIGHT				/* NULL rows of right rows */
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
 * and both sides' ids and matched flags.
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
		JoinExpr   *join = NULL;
		ListCell   *lc;

		/* the same JoinExpr in the copy: found by its position */
		foreach(lc, q->rtable)
		{
			RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

			if (rte->rtekind == RTE_JOIN && equal(rte->joinaliasvars, j->join ? NIL : NIL))
				(void) rte;
		}
		join = (JoinExpr *) list_nth(q->jointree->fromlist, 0);
		join = stm_ssjoin_find_join(q, j);
		join->jointype = JOIN_INNER;
		rt_fetch(join->rtindex, q->rtable)->jointype = JOIN_INNER;
		/* a pair that fails the WHERE still matched, as in SQL: the WHERE is per pair */
		if (q->jointree->quals)
			pass = q->jointree->quals;
		q->jointree->quals = NULL;
	}
	side_as_relation(run, q, l, STM_JOIN_LEFT_SIDE, left_rel, env);
	side_as_relation(run, q, r, STM_JOIN_RIGHT_SIDE, right_rel, env);
	tlist = lappend(tlist, makeTargetEntry((Expr *) pass, list_length(tlist) + 1, "_stm_pass", false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 0, l, HIDDEN_ROW_ID), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 0, l, HIDDEN_MATCHED), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 1, r, HIDDEN_ROW_ID), list_length(tlist) + 1, NULL, false));
	tlist = lappend(tlist, makeTargetEntry((Expr *) hidden_var(run, 1, r, HIDDEN_MATCHED), list_length(tlist) + 1, NULL, false));
	q->targetList = tlist;
	return q;
}

/*
 * The pairs of a semi or anti join: FROM left, right WHERE the EXISTS's
 * condition (its Vars moved to this query's levels), giving the left row's
 * id and matched flag.
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
	q->targetList = list_make2(makeTargetEntry((Expr *) hidden_var(run, 0, 1, HIDDEN_ROW_ID), 1, "id", false),
							   makeTargetEntry((Expr *) hidden_var(run, 0, 1, HIDDEN_MATCHED), 2, "matched", false));
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
