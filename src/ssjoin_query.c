/*
 * ssjoin_query.c: the shape of a stream query that joins two sources
 * (SPEC 3.6), analysed from PostgreSQL's own parse tree.
 *
 * Shapes:
 *   FROM a [INNER|LEFT|RIGHT|FULL] JOIN b ON cond   a JoinExpr whose two
 *                                                   sides hold one source each
 *   FROM a, b WHERE cond                            inner
 *   FROM a WHERE [NOT] EXISTS (SELECT FROM b WHERE cond)   left semi / anti
 * in each the joined rows may also join tables (SPEC 3.5), and a and b may
 * be one source under two aliases (a self-join, read once per batch).
 *
 * The condition must compare the two sides with at least one equality (=,
 * or IS NOT DISTINCT FROM).  Its time part bounds how long a row of each
 * side can still find a partner, as Spark derives its state watermarks
 * (StreamingSymmetricHashJoinHelper): for a conjunct
 *
 *     A.t + a  <  B.t + b        (or <=, >, >=; BETWEEN is two of them)
 *
 * over the sides' event-time columns, A.t < B.t + (b - a): a row of B can
 * only meet rows of A up to B.t + (b - a), and since rows at or below the
 * watermark W are late, a row of B can no longer match once
 * B.t + (b - a) <= W (strict: once B.t + (b - a) - 1us <= W).  So each
 * conjunct bounds one side, and the tightest bound of a side is its
 * eviction bound: its rows expire at event time + offset.  Equal windows,
 * streaming.tumble(A.t, d) = streaming.tumble(B.t, d), bound both sides:
 * a row meets only partners before its window's end, so it expires at its
 * window's end minus 1us.
 *
 * Worked example (SPEC 3.6): p.t BETWEEN o.t AND o.t + interval '30
 * minutes' is p.t >= o.t and p.t <= o.t + 30m.  The second bounds the
 * orders: an order meets payments up to o.t + 30m and expires there.  The
 * first is o.t <= p.t + 0: a payment meets orders up to p.t and expires
 * at p.t.  With W = 12:00 an order of 11:29 is evicted (11:59 <= 12:00),
 * one of 11:31 is kept, and a payment of 12:00 or before is late.
 *
 * streaming.tumble() in a join condition is evaluated as date_bin() with
 * the same size and origin (stm_ssjoin_prepare), which is what it means.
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parsetree.h"
#include "rewrite/rewriteManip.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "options.h"
#include "ssjoin.h"
#include "window.h"

/* ---- finding the sources ---------------------------------------------- */

static bool
is_source_rte(RangeTblEntry *rte)
{
	return rte->rtekind == RTE_RELATION && rte->relkind == RELKIND_VIEW &&
		stm_catalog_get_source_by_view(rte->relid) != NULL;
}

typedef struct CountSources
{
	int			n;
} CountSources;

static bool
count_sources_walker(Node *node, CountSources *ctx)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblEntry))
	{
		if (is_source_rte((RangeTblEntry *) node))
			ctx->n++;
		return false;
	}
	if (IsA(node, Query))
		return query_tree_walker((Query *) node, count_sources_walker, ctx,
								 QTW_EXAMINE_RTES_BEFORE);
	return expression_tree_walker(node, count_sources_walker, ctx);
}

/* How many times the query reads a source, anywhere in it. */
static int
count_sources(Query *q)
{
	CountSources ctx = {0};

	(void) query_tree_walker(q, count_sources_walker, &ctx, QTW_EXAMINE_RTES_BEFORE);
	return ctx.n;
}

/* Does the query read two (or more) sources: a stream-stream join? */
bool
stm_ssjoin_reads_two(Query *q)
{
	return count_sources(q) >= 2;
}

/* ---- streaming.tumble() in a join condition ----------------------------- */

static Node *
tumble_to_date_bin(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Query))
		return (Node *) query_tree_mutator((Query *) node, tumble_to_date_bin, context, 0);
	if (IsA(node, FuncExpr) && stm_window_kind(((FuncExpr *) node)->funcid) == STM_WINDOW_TUMBLE)
	{
		FuncExpr   *f = (FuncExpr *) node;
		StmWindowSpec spec;
		List	   *args;

		stm_window_spec(f, &spec);
		args = list_make3(lsecond(f->args),
						  expression_tree_mutator(linitial(f->args), tumble_to_date_bin, context),
						  list_length(f->args) > 2 ? lthird(f->args) :
						  (Node *) makeConst(TIMESTAMPTZOID, -1, InvalidOid, sizeof(TimestampTz),
											 TimestampTzGetDatum(STM_UNIX_EPOCH), false,
											 FLOAT8PASSBYVAL));
		return (Node *) makeFuncExpr(F_DATE_BIN_INTERVAL_TIMESTAMPTZ_TIMESTAMPTZ, TIMESTAMPTZOID,
									 args, InvalidOid, InvalidOid, COERCE_EXPLICIT_CALL);
	}
	return expression_tree_mutator(node, tumble_to_date_bin, context);
}

/*
 * Before the window checks: in the FROM clause and WHERE of a query that
 * joins two sources, streaming.tumble() is the window start, date_bin()
 * with its size and origin, so that equal windows can be a join condition.
 */
void
stm_ssjoin_prepare(Query *q)
{
	if (!stm_ssjoin_reads_two(q))
		return;
	q->jointree = (FromExpr *) tumble_to_date_bin((Node *) q->jointree, NULL);
}

/* ---- the shape ------------------------------------------------------------ */

static void
refuse_shape(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("this join of two sources is not supported"),
			 errdetail("%s", detail),
			 errhint("Join two sources with JOIN ... ON, LEFT, RIGHT or FULL JOIN, a comma and WHERE, "
					 "or WHERE [NOT] EXISTS (SELECT FROM other_source WHERE ...).")));
}

/* Is range-table entry rtindex in this part of the join tree? */
static bool
tree_has(Node *node, int rtindex)
{
	if (node == NULL)
		return false;
	if (IsA(node, RangeTblRef))
		return ((RangeTblRef *) node)->rtindex == rtindex;
	if (IsA(node, JoinExpr))
		return tree_has(((JoinExpr *) node)->larg, rtindex) ||
			tree_has(((JoinExpr *) node)->rarg, rtindex);
	if (IsA(node, FromExpr))
	{
		ListCell   *lc;

		foreach(lc, ((FromExpr *) node)->fromlist)
			if (tree_has(lfirst(lc), rtindex))
				return true;
	}
	return false;
}

/* The lowest JoinExpr with one source on each side, or NULL (a comma join). */
static JoinExpr *
joining_expr(Node *node, int a, int b)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) node;
		JoinExpr   *below;

		if ((below = joining_expr(j->larg, a, b)) != NULL ||
			(below = joining_expr(j->rarg, a, b)) != NULL)
			return below;
		if ((tree_has(j->larg, a) && tree_has(j->rarg, b)) ||
			(tree_has(j->larg, b) && tree_has(j->rarg, a)))
			return j;
		return NULL;
	}
	if (IsA(node, FromExpr))
	{
		ListCell   *lc;

		foreach(lc, ((FromExpr *) node)->fromlist)
		{
			JoinExpr   *j = joining_expr(lfirst(lc), a, b);

			if (j)
				return j;
		}
	}
	return NULL;
}

/*
 * A table joined so that it could emit rows without a source row (a source
 * on the nullable side of an outer join with a table) is refused, as for
 * one source (SPEC 3.5); the join of the two sources itself may be outer.
 */
static void
check_table_joins(Node *node, JoinExpr *sources_join, int a, int b)
{
	if (node == NULL)
		return;
	if (IsA(node, JoinExpr))
	{
		JoinExpr   *j = (JoinExpr *) node;

		if (j != sources_join && j->jointype != JOIN_INNER &&
			((j->jointype == JOIN_FULL && (tree_has(node, a) || tree_has(node, b))) ||
			 (j->jointype == JOIN_LEFT && (tree_has(j->rarg, a) || tree_has(j->rarg, b))) ||
			 (j->jointype == JOIN_RIGHT && (tree_has(j->larg, a) || tree_has(j->larg, b)))))
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("a source cannot be on the nullable side of an outer join with a table"),
					 errdetail("The join would emit table rows without a source row, which a stream cannot do.")));
		check_table_joins(j->larg, sources_join, a, b);
		check_table_joins(j->rarg, sources_join, a, b);
	}
	else if (IsA(node, FromExpr))
	{
		ListCell   *lc;

		foreach(lc, ((FromExpr *) node)->fromlist)
			check_table_joins(lfirst(lc), sources_join, a, b);
	}
}

static void
init_side(StmJoinSide *side, RangeTblEntry *rte, int rtindex)
{
	side->view = rte->relid;
	side->source = stm_catalog_get_source_by_view(rte->relid)->name;
	side->alias = rte->alias ? pstrdup(rte->alias->aliasname) : pstrdup(side->source);
	side->rtindex = rtindex;
}

/* A top-level conjunct of the WHERE that is [NOT] EXISTS over a source. */
static SubLink *
exists_over_source(Node *qual, bool *negated)
{
	SubLink    *sl = NULL;

	*negated = false;
	if (IsA(qual, BoolExpr) && ((BoolExpr *) qual)->boolop == NOT_EXPR)
	{
		qual = linitial(((BoolExpr *) qual)->args);
		*negated = true;
	}
	if (IsA(qual, SubLink) && ((SubLink *) qual)->subLinkType == EXISTS_SUBLINK)
		sl = (SubLink *) qual;
	if (sl == NULL || count_sources((Query *) sl->subselect) == 0)
		return NULL;
	return sl;
}

/* left semi / anti: FROM a WHERE [NOT] EXISTS (SELECT FROM b WHERE cond) */
static void
analyze_exists(Query *q, StmStreamJoin *j, int left_rtindex)
{
	List	   *conjuncts = make_ands_implicit((Expr *) q->jointree->quals);
	ListCell   *lc;
	Query	   *sub;
	RangeTblEntry *rte;

	foreach(lc, conjuncts)
	{
		bool		negated;
		SubLink    *sl = exists_over_source(lfirst(lc), &negated);

		if (sl == NULL)
			continue;
		if (j->sublink)
			refuse_shape("The query has more than one EXISTS over a source.");
		j->sublink = sl;
		j->type = negated ? STM_JOIN_ANTI : STM_JOIN_SEMI;
	}
	if (j->sublink == NULL)
		refuse_shape("The second source must be in the FROM clause, or in a [NOT] EXISTS that is a condition of the WHERE clause.");
	sub = (Query *) j->sublink->subselect;
	if (list_length(sub->rtable) != 1 || count_sources(sub) != 1 ||
		!is_source_rte(linitial_node(RangeTblEntry, sub->rtable)) ||
		sub->hasSubLinks || sub->groupClause || sub->hasAggs || sub->cteList)
		refuse_shape("The EXISTS of a semi or anti join reads the other source only, with a WHERE clause.");
	rte = linitial_node(RangeTblEntry, sub->rtable);
	init_side(&j->sides[STM_JOIN_LEFT_SIDE], rt_fetch(left_rtindex, q->rtable), left_rtindex);
	init_side(&j->sides[STM_JOIN_RIGHT_SIDE], rte, 1);
}

/* The AND-ed conjuncts of a condition, nested ANDs (BETWEEN) flattened. */
static List *
conjuncts_of(Node *cond)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, make_ands_implicit((Expr *) cond))
	{
		Node	   *c = lfirst(lc);

		if (IsA(c, BoolExpr) && ((BoolExpr *) c)->boolop == AND_EXPR)
			result = list_concat(result, conjuncts_of(c));
		else
			result = lappend(result, c);
	}
	return result;
}

/* ---- which side an expression reads ------------------------------------ */

#define SIDE_LEFT 1
#define SIDE_RIGHT 2
#define SIDE_OTHER 4

typedef struct SideWalk
{
	StmStreamJoin *j;
	int			level;			/* query level walked, 0: the stream query */
	int			right_level;	/* the level of the right side's range table */
	int			found;			/* SIDE_* bits */
	bool		collect;		/* record used columns */
} SideWalk;

static bool
side_walker(Node *node, SideWalk *ctx)
{
	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		Var		   *v = (Var *) node;
		int			level = ctx->level - (int) v->varlevelsup;	/* the Var's own query level */
		int			side = -1;

		if (level == 0 && v->varno == ctx->j->sides[STM_JOIN_LEFT_SIDE].rtindex)
			side = STM_JOIN_LEFT_SIDE;
		else if (level == ctx->right_level && v->varno == ctx->j->sides[STM_JOIN_RIGHT_SIDE].rtindex)
			side = STM_JOIN_RIGHT_SIDE;
		if (side < 0)
		{
			if (level == 0 || level == ctx->right_level)
				ctx->found |= SIDE_OTHER;
			return false;
		}
		ctx->found |= side == STM_JOIN_LEFT_SIDE ? SIDE_LEFT : SIDE_RIGHT;
		if (ctx->collect)
		{
			StmJoinSide *s = &ctx->j->sides[side];

			if (v->varattno == 0)
			{
				/* the whole row: every column */
				Relation	rel = relation_open(s->view, AccessShareLock);
				int			natts = RelationGetNumberOfAttributes(rel);

				relation_close(rel, AccessShareLock);
				for (int a = 1; a <= natts; a++)
					s->used = bms_add_member(s->used, a);
			}
			else
				s->used = bms_add_member(s->used, v->varattno);
		}
		return false;
	}
	if (IsA(node, Query))
	{
		bool		result;

		ctx->level++;
		result = query_tree_walker((Query *) node, side_walker, ctx, 0);
		ctx->level--;
		return result;
	}
	return expression_tree_walker(node, side_walker, ctx);
}

/* The sides an expression of the condition reads (SIDE_* bits). */
static int
expr_sides(StmStreamJoin *j, Node *expr, int level)
{
	SideWalk	ctx = {j, level, j->sublink ? 1 : 0, 0, false};

	(void) side_walker(expr, &ctx);
	return ctx.found;
}

/* The columns of each side that the query uses, anywhere in it. */
static void
collect_used_columns(StmStreamJoin *j, Query *q)
{
	SideWalk	ctx = {j, 0, j->sublink ? 1 : 0, 0, true};

	(void) query_tree_walker(q, side_walker, &ctx, 0);
}

/* The join's condition: ON, the WHERE of a comma join, or the EXISTS's WHERE. */
static Node *
join_condition(StmStreamJoin *j, Query *q, int *level)
{
	*level = j->sublink ? 1 : 0;
	if (j->sublink)
		return ((Query *) j->sublink->subselect)->jointree->quals;
	if (j->join)
		return j->join->quals;
	return q->jointree->quals;
}

/* a = b between the two sides, or a IS NOT DISTINCT FROM b */
static bool
is_side_equality(StmStreamJoin *j, Node *conjunct, int level, Node **l, Node **r)
{
	Node	   *a;
	Node	   *b;
	int			sa;
	int			sb;

	if (IsA(conjunct, OpExpr) && list_length(((OpExpr *) conjunct)->args) == 2)
	{
		OpExpr	   *op = (OpExpr *) conjunct;
		Oid			type = exprType(linitial(op->args));

		if (!op_mergejoinable(op->opno, type) && !op_hashjoinable(op->opno, type))
			return false;
		a = linitial(op->args);
		b = lsecond(op->args);
	}
	else if (IsA(conjunct, BoolExpr) && ((BoolExpr *) conjunct)->boolop == NOT_EXPR &&
			 IsA(linitial(((BoolExpr *) conjunct)->args), DistinctExpr))
	{
		DistinctExpr *d = linitial(((BoolExpr *) conjunct)->args);

		a = linitial(d->args);
		b = lsecond(d->args);
	}
	else
		return false;
	sa = expr_sides(j, a, level);
	sb = expr_sides(j, b, level);
	if (sa == SIDE_LEFT && sb == SIDE_RIGHT)
	{
		*l = a;
		*r = b;
		return true;
	}
	if (sa == SIDE_RIGHT && sb == SIDE_LEFT)
	{
		*l = b;
		*r = a;
		return true;
	}
	return false;
}

/*
 * A conjunct over side s alone, as an expression over the side's view row
 * (varno 1, this query level), or NULL when it has sublinks (they are left
 * to the executor's run of the whole condition).
 */
static Node *
own_qual(StmStreamJoin *j, Node *c, int level, int s)
{
	Node	   *e = copyObject(c);

	if (checkExprHasSubLink(e))
		return NULL;
	if (level == 1 && s == STM_JOIN_LEFT_SIDE)
		IncrementVarSublevelsUp(e, -1, 1);
	ChangeVarNodes(e, j->sides[s].rtindex, 1, 0);
	return e;
}

/* The equalities between the sides; their plain columns key the state tables. */
static void
find_equalities(StmStreamJoin *j, Query *q)
{
	int			level;
	Node	   *cond = join_condition(j, q, &level);
	ListCell   *lc;

	foreach(lc, conjuncts_of(cond))
	{
		Node	   *l;
		Node	   *r;

		int			sides = expr_sides(j, lfirst(lc), level);

		/* over one side alone: a row that fails it can match nothing (Spark's preJoinFilter) */
		if (sides == SIDE_LEFT || sides == SIDE_RIGHT)
		{
			int			s = sides == SIDE_LEFT ? STM_JOIN_LEFT_SIDE : STM_JOIN_RIGHT_SIDE;
			Node	   *qual = own_qual(j, lfirst(lc), level, s);

			if (qual)
				j->sides[s].own_quals = lappend(j->sides[s].own_quals, qual);
			continue;
		}
		if (!is_side_equality(j, lfirst(lc), level, &l, &r))
			continue;
		j->has_equality = true;
		if (IsA(l, Var) && IsA(r, Var))
		{
			j->sides[STM_JOIN_LEFT_SIDE].key_attnos =
				list_append_unique_int(j->sides[STM_JOIN_LEFT_SIDE].key_attnos, ((Var *) l)->varattno);
			j->sides[STM_JOIN_RIGHT_SIDE].key_attnos =
				list_append_unique_int(j->sides[STM_JOIN_RIGHT_SIDE].key_attnos, ((Var *) r)->varattno);
		}
	}
}

/*
 * A query that reads two sources (SPEC 3.6): its join type and its two
 * sides.  source_rtes: the stream query's own range-table entries that are
 * sources (the caller found them); a source read anywhere else is the
 * right side of a semi or anti join, or refused.
 */
StmStreamJoin *
stm_ssjoin_analyze(Query *q, List *source_rtes)
{
	StmStreamJoin *j = palloc0(sizeof(StmStreamJoin));
	int			nsources = count_sources(q);
	int			rt[2];
	int			n = 0;
	ListCell   *lc;

	if (nsources > 2)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a stream query may read at most two sources"),
				 errdetail("It reads sources %d times; joins of three or more sources are not supported yet.",
						   nsources)));
	foreach(lc, source_rtes)
	{
		for (int i = 0; i < list_length(q->rtable); i++)
			if (list_nth(q->rtable, i) == lfirst(lc))
				rt[n] = i + 1;
		n++;
	}
	if (n == 2)
	{
		for (int i = 0; i < 2; i++)
			if (!tree_has((Node *) q->jointree, rt[i]))
				refuse_shape("A source must be in the FROM clause of the stream query.");
		j->join = joining_expr((Node *) q->jointree, rt[0], rt[1]);
		if (j->join && !tree_has(j->join->larg, rt[0]))
		{
			int			t = rt[0];

			rt[0] = rt[1];
			rt[1] = t;
		}
		switch (j->join ? j->join->jointype : JOIN_INNER)
		{
			case JOIN_INNER:
				j->type = STM_JOIN_INNER;
				break;
			case JOIN_LEFT:
				j->type = STM_JOIN_LEFT;
				break;
			case JOIN_RIGHT:
				j->type = STM_JOIN_RIGHT;
				break;
			case JOIN_FULL:
				j->type = STM_JOIN_FULL;
				break;
			default:
				refuse_shape("Only inner, left, right and full joins of two sources are supported.");
		}
		init_side(&j->sides[STM_JOIN_LEFT_SIDE], rt_fetch(rt[0], q->rtable), rt[0]);
		init_side(&j->sides[STM_JOIN_RIGHT_SIDE], rt_fetch(rt[1], q->rtable), rt[1]);
		check_table_joins((Node *) q->jointree, j->join, rt[0], rt[1]);
	}
	else if (n == 1)
		analyze_exists(q, j, rt[0]);
	else
		refuse_shape("A source must be in the FROM clause of the stream query.");
	j->self_join = j->sides[0].view == j->sides[1].view;
	if (j->self_join && strcmp(j->sides[0].alias, j->sides[1].alias) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("a source joined with itself needs an alias on each side"),
				 errhint("Write FROM %s a JOIN %s b ON ...", quote_identifier(j->sides[0].source),
						 quote_identifier(j->sides[0].source))));
	{
		int			level;

		j->condition = join_condition(j, q, &level);
	}
	collect_used_columns(j, q);
	find_equalities(j, q);
	return j;
}

const char *
stm_ssjoin_type_name(StmJoinType type)
{
	static const char *const names[] = {"inner", "left outer", "right outer", "full outer",
	"left semi", "left anti"};

	return names[type];
}

/* ---- watermarks and the time condition ---------------------------------- */

/* An interval constant in microseconds; false for NULL or one with months. */
static bool
interval_const_us(Node *node, int64 *us)
{
	Interval   *iv;

	if (!IsA(node, Const) || ((Const *) node)->consttype != INTERVALOID ||
		((Const *) node)->constisnull)
		return false;
	iv = DatumGetIntervalP(((Const *) node)->constvalue);
	if (iv->month != 0)
		return false;
	*us = iv->time + (int64) iv->day * USECS_PER_DAY;
	return true;
}

/* One side of a time comparison: a side's event time plus a constant. */
typedef struct TimeTerm
{
	int			side;
	int64		offset_us;
} TimeTerm;

/* Which side's event-time column this Var is, or -1. */
static int
time_var_side(StmStreamJoin *j, Var *v, int level)
{
	int			vlevel = level - (int) v->varlevelsup;
	int			right_level = j->sublink ? 1 : 0;

	if (vlevel == 0 && v->varno == j->sides[STM_JOIN_LEFT_SIDE].rtindex &&
		v->varattno == j->sides[STM_JOIN_LEFT_SIDE].time_att)
		return STM_JOIN_LEFT_SIDE;
	if (vlevel == right_level && v->varno == j->sides[STM_JOIN_RIGHT_SIDE].rtindex &&
		v->varattno == j->sides[STM_JOIN_RIGHT_SIDE].time_att)
		return STM_JOIN_RIGHT_SIDE;
	return -1;
}

/* e is t, t + interval, interval + t or t - interval, t a side's event time */
static bool
time_term(StmStreamJoin *j, Node *e, int level, TimeTerm *term)
{
	while (IsA(e, RelabelType))
		e = (Node *) ((RelabelType *) e)->arg;
	if (IsA(e, Var))
	{
		term->side = time_var_side(j, (Var *) e, level);
		term->offset_us = 0;
		return term->side >= 0;
	}
	if (IsA(e, OpExpr) && list_length(((OpExpr *) e)->args) == 2)
	{
		OpExpr	   *op = (OpExpr *) e;
		int64		us;

		set_opfuncid(op);
		if (op->opfuncid == F_TIMESTAMPTZ_PL_INTERVAL && interval_const_us(lsecond(op->args), &us) &&
			time_term(j, linitial(op->args), level, term))
		{
			term->offset_us += us;
			return true;
		}
		if (op->opfuncid == F_INTERVAL_PL_TIMESTAMPTZ && interval_const_us(linitial(op->args), &us) &&
			time_term(j, lsecond(op->args), level, term))
		{
			term->offset_us += us;
			return true;
		}
		if (op->opfuncid == F_TIMESTAMPTZ_MI_INTERVAL && interval_const_us(lsecond(op->args), &us) &&
			time_term(j, linitial(op->args), level, term))
		{
			term->offset_us -= us;
			return true;
		}
	}
	return false;
}

/* A range bound for a side: kept when tighter than what it has. */
static void
tighten(StmJoinSide *side, int64 offset_us, bool strict)
{
	StmJoinBound *b = &side->bound;

	if (!b->has_range || offset_us < b->offset_us ||
		(offset_us == b->offset_us && strict && !b->strict))
	{
		b->has_range = true;
		b->offset_us = offset_us;
		b->strict = strict;
	}
}

/* date_bin(size, t, origin) over a side's event time: its size, origin and side */
static bool
window_term(StmStreamJoin *j, Node *e, int level, int *side, int64 *size_us, TimestampTz *origin)
{
	FuncExpr   *f;
	TimeTerm	t;
	Node	   *o;

	if (!IsA(e, FuncExpr) || ((FuncExpr *) e)->funcid != F_DATE_BIN_INTERVAL_TIMESTAMPTZ_TIMESTAMPTZ)
		return false;
	f = (FuncExpr *) e;
	o = lthird(f->args);
	if (!interval_const_us(linitial(f->args), size_us) || *size_us <= 0 ||
		!time_term(j, lsecond(f->args), level, &t) || t.offset_us != 0 ||
		!IsA(o, Const) || ((Const *) o)->constisnull)
		return false;
	*side = t.side;
	*origin = DatumGetTimestampTz(((Const *) o)->constvalue);
	return true;
}

/*
 * What one conjunct of the condition says of the sides' times (the
 * derivation in the file's header): A.t + a OP B.t + b bounds B when OP
 * is < or <= (a partner in A is at most B.t + (b - a)), A when it is > or
 * >=, both when it is =; equal windows bound both.
 */
static void
bound_from_conjunct(StmStreamJoin *j, Node *c, int level)
{
	OpExpr	   *op;
	TimeTerm	l;
	TimeTerm	r;
	int			ls;
	int			rs;
	int64		lsize;
	int64		rsize;
	TimestampTz lorigin;
	TimestampTz rorigin;

	if (!IsA(c, OpExpr) || list_length(((OpExpr *) c)->args) != 2)
		return;
	op = (OpExpr *) c;
	set_opfuncid(op);
	if (op->opfuncid == F_TIMESTAMPTZ_EQ &&
		window_term(j, linitial(op->args), level, &ls, &lsize, &lorigin) &&
		window_term(j, lsecond(op->args), level, &rs, &rsize, &rorigin) &&
		ls != rs && lsize == rsize && lorigin == rorigin)
	{
		for (int s = 0; s < 2; s++)
		{
			j->sides[s].bound.has_window = true;
			j->sides[s].bound.window_us = lsize;
			j->sides[s].bound.origin = lorigin;
		}
		return;
	}
	if (!time_term(j, linitial(op->args), level, &l) || !time_term(j, lsecond(op->args), level, &r) ||
		l.side == r.side)
		return;
	switch (op->opfuncid)
	{
		case F_TIMESTAMPTZ_LT:
		case F_TIMESTAMPTZ_LE:
			/* l.t < r.t + (r.off - l.off): bounds r's partners */
			tighten(&j->sides[r.side], r.offset_us - l.offset_us, op->opfuncid == F_TIMESTAMPTZ_LT);
			break;
		case F_TIMESTAMPTZ_GT:
		case F_TIMESTAMPTZ_GE:
			tighten(&j->sides[l.side], l.offset_us - r.offset_us, op->opfuncid == F_TIMESTAMPTZ_GT);
			break;
		case F_TIMESTAMPTZ_EQ:
			tighten(&j->sides[r.side], r.offset_us - l.offset_us, false);
			tighten(&j->sides[l.side], l.offset_us - r.offset_us, false);
			break;
		default:
			break;
	}
}

/* The watermarks entry of a side: by its alias, else by its source's name. */
static Jsonb *
side_watermark(Jsonb *watermarks, StmJoinSide *side)
{
	Jsonb	   *entry = stm_option_jsonb(watermarks, side->alias);

	return entry ? entry : stm_option_jsonb(watermarks, side->source);
}

static void
bind_side(StmJoinSide *side, Jsonb *entry)
{
	char	   *column = stm_option_text(entry, "event_time");
	char	   *delay = stm_option_text(entry, "delay");
	char	   *idle = stm_option_text(entry, "idle_timeout");
	AttrNumber	attno;

	if (column == NULL || delay == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the watermark of \"%s\" needs \"event_time\" and \"delay\"", side->alias),
				 errhint("Give watermarks => '{\"%s\": {\"event_time\": \"column\", \"delay\": \"10 minutes\"}, ...}'.",
						 side->alias)));
	attno = get_attnum(side->view, column);
	if (attno == InvalidAttrNumber)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("event_time column \"%s\" of \"%s\" does not exist in source \"%s\"",
						column, side->alias, side->source)));
	if (get_atttype(side->view, attno) != TIMESTAMPTZOID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of source \"%s\" must be of type timestamptz", column, side->source),
				 errdetail("It is of type %s.", format_type_be(get_atttype(side->view, attno)))));
	side->time_att = attno;
	side->used = bms_add_member(side->used, attno);
	side->delay = *DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(delay),
														 ObjectIdGetDatum(InvalidOid),
														 Int32GetDatum(-1)));
	side->has_delay = true;
	if (side->delay.time < 0 || side->delay.day < 0 || side->delay.month < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the watermark delay of \"%s\" must not be negative", side->alias)));
	if (idle)
	{
		Interval   *iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(idle),
															   ObjectIdGetDatum(InvalidOid),
															   Int32GetDatum(-1)));

		side->idle_timeout_us = iv->time + (int64) iv->day * USECS_PER_DAY +
			(int64) iv->month * 30 * USECS_PER_DAY;
		if (side->idle_timeout_us <= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the idle_timeout of \"%s\" must be greater than zero", side->alias)));
	}
}

/*
 * The watermarks argument ({"alias or source": {"event_time": column,
 * "delay": interval, "idle_timeout": interval}, ...}) and the
 * multiple_watermark_policy ('min' | 'max'): each side's event-time
 * column and delay, then the sides' eviction bounds from the condition.
 */
void
stm_ssjoin_bind_watermarks(StmStreamJoin *j, Jsonb *watermarks, const char *policy)
{
	ListCell   *lc;

	if (policy && strcmp(policy, "min") != 0 && strcmp(policy, "max") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid value for multiple_watermark_policy: \"%s\"", policy),
				 errhint("Valid values are \"min\" and \"max\".")));
	j->max_policy = policy && strcmp(policy, "max") == 0;
	if (watermarks)
	{
		JsonbIterator *it;
		JsonbValue	v;
		JsonbIteratorToken tok;

		if (!JB_ROOT_IS_OBJECT(watermarks))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("watermarks must be a JSON object keyed by the join's aliases or sources")));
		it = JsonbIteratorInit(&watermarks->root);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			char	   *key;
			bool		known = false;

			if (tok != WJB_KEY)
				continue;
			key = pnstrdup(v.val.string.val, v.val.string.len);
			for (int s = 0; s < 2; s++)
				known |= strcmp(key, j->sides[s].alias) == 0 || strcmp(key, j->sides[s].source) == 0;
			if (!known)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("watermarks names \"%s\", which is neither an alias nor a source of the join", key),
						 errdetail("The join's sides are \"%s\" (source \"%s\") and \"%s\" (source \"%s\").",
								   j->sides[0].alias, j->sides[0].source,
								   j->sides[1].alias, j->sides[1].source)));
			tok = JsonbIteratorNext(&it, &v, true);
			if (v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("the watermark of \"%s\" must be a JSON object", key)));
		}
		for (int s = 0; s < 2; s++)
		{
			Jsonb	   *entry = side_watermark(watermarks, &j->sides[s]);

			if (entry)
				bind_side(&j->sides[s], entry);
		}
	}

	/* the bounds, from the condition's conjuncts over the event-time columns */
	foreach(lc, conjuncts_of(j->condition))
		bound_from_conjunct(j, lfirst(lc), j->sublink ? 1 : 0);
	j->max_bound_us = 0;
	for (int s = 0; s < 2; s++)
	{
		StmJoinBound *b = &j->sides[s].bound;

		j->time_condition |= b->has_range || b->has_window;
		if (b->has_range)
			j->max_bound_us = Max(j->max_bound_us, b->offset_us);
		if (b->has_window)
			j->max_bound_us = Max(j->max_bound_us, b->window_us);
	}
}

/* Are the side's stored rows ever evicted: it has a bound and the stream a watermark? */
bool
stm_ssjoin_side_bounded(StmStreamJoin *j, int side)
{
	StmJoinBound *b = &j->sides[side].bound;

	return (b->has_range || b->has_window) &&
		(j->sides[0].has_delay || j->sides[1].has_delay);
}

/* When a row of event time t can no longer match (StmJoinBound). */
TimestampTz
stm_ssjoin_expiry(const StmJoinBound *b, TimestampTz t)
{
	TimestampTz expiry = DT_NOEND;

	if (b->has_range)
		expiry = t + b->offset_us - (b->strict ? 1 : 0);
	if (b->has_window)
	{
		TimestampTz start = DatumGetTimestampTz(
			DirectFunctionCall3(timestamptz_bin,
								IntervalPGetDatum(&(Interval) {.time = b->window_us}),
								TimestampTzGetDatum(t), TimestampTzGetDatum(b->origin)));

		expiry = Min(expiry, start + b->window_us - 1);
	}
	return expiry;
}

/*
 * create_stream's refusals (SPEC 3.6), with messages that name what is
 * missing: an equality between the sides; for outer, semi and anti joins
 * watermarks on both sides and a time condition that lets the rows that
 * wait for their NULL row (or their anti row) be evicted.  An inner join
 * whose state grows without bound gets a WARNING, as in Spark.
 */
void
stm_ssjoin_check(StmStreamJoin *j, const char *stream)
{
	bool		outer_needs[2] = {
		j->type == STM_JOIN_LEFT || j->type == STM_JOIN_FULL ||
		j->type == STM_JOIN_SEMI || j->type == STM_JOIN_ANTI,
		j->type == STM_JOIN_RIGHT || j->type == STM_JOIN_FULL
	};

	if (!j->has_equality)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the join of \"%s\" and \"%s\" needs an equality between them",
						j->sides[0].alias, j->sides[1].alias),
				 errdetail("A stream-stream join matches rows by a key: its condition must compare a column "
						   "(or expression) of each side with = or IS NOT DISTINCT FROM."),
				 errhint("Add a condition such as %s.key = %s.key.", j->sides[0].alias, j->sides[1].alias)));
	if (j->type != STM_JOIN_INNER)
	{
		for (int s = 0; s < 2; s++)
			if (!j->sides[s].has_delay)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("a %s join of two sources needs watermarks on both sides",
								stm_ssjoin_type_name(j->type)),
						 errdetail("\"%s\" has no watermark.", j->sides[s].alias),
						 errhint("Give watermarks => '{\"%s\": {\"event_time\": \"column\", \"delay\": \"10 minutes\"}, \"%s\": {...}}'.",
								 j->sides[0].alias, j->sides[1].alias)));
		for (int s = 0; s < 2; s++)
			if (outer_needs[s] && !stm_ssjoin_side_bounded(j, s))
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("a %s join of two sources needs a time condition that bounds how long a row of \"%s\" can match",
								stm_ssjoin_type_name(j->type), j->sides[s].alias),
						 errdetail("Its rows wait for a match until no row that could still match them can arrive; "
								   "without a bound they wait forever."),
						 errhint("Compare the event times, e.g. %s.t BETWEEN %s.t AND %s.t + interval '1 hour', "
								 "or their windows, streaming.tumble(%s.t, '5 minutes') = streaming.tumble(%s.t, '5 minutes').",
								 j->sides[1 - s].alias, j->sides[s].alias, j->sides[s].alias,
								 j->sides[0].alias, j->sides[1].alias)));
		return;
	}
	for (int s = 0; s < 2; s++)
		if (!stm_ssjoin_side_bounded(j, s))
			ereport(WARNING,
					(errmsg("the state of \"%s\" in stream \"%s\" grows without bound",
							j->sides[s].alias, stream),
					 errdetail("Without watermarks and a time condition that bounds how long a row of \"%s\" can match, "
							   "every row of it is kept.", j->sides[s].alias),
					 errhint("Give watermarks and compare the sides' event times in the join condition.")));
}
