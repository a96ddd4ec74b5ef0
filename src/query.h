/*
 * query.h: a stream's query, analysed by PostgreSQL's parser, and its
 * compiled per-row form.
 */
#ifndef STM_QUERY_H
#define STM_QUERY_H

#include "nodes/execnodes.h"
#include "nodes/parsenodes.h"
#include "utils/relcache.h"

#include "catalog.h"
#include "window.h"

/*
 * An aggregate query (shape 2): the groups are (window, keys); each output
 * column is an expression over the group row: window_start, window_end,
 * the keys, then the aggregates' results.
 */
typedef struct StmAggQuery
{
	StmWindowSpec window;		/* kind STM_WINDOW_NONE: no window */
	int			event_time_att; /* source column of the window's event time, or -1 */
	int			nkeys;
	List	   *key_exprs;		/* planned, over the source row */
	Oid		   *key_types;
	int32	   *key_typmods;
	List	   *aggrefs;		/* distinct Aggrefs */
	List	   *outputs;		/* planned, over the group row */
	char	  **out_names;
	int		   *out_group_col;	/* output i is group column k (0: window start), else -1 */
	TupleDesc	group_desc;
} StmAggQuery;

typedef struct StmQueryInfo
{
	Query	   *query;
	StmAggQuery *agg;			/* NULL for a stateless query */
	Oid			source_view;
	int			source_rtindex; /* the source's entry in query->rtable */
	bool		planned;		/* reads tables too: run by the executor (join.c) */
	struct StmStreamJoin *ssjoin;	/* reads two sources (ssjoin_query.c), else NULL */
	int			noutputs;
	char	  **out_names;
	Oid		   *out_types;
	int32	   *out_typmods;
	Oid		   *out_collations;
} StmQueryInfo;

/* Per-row evaluation: WHERE, then one expression per output column. */
typedef struct StmProjector
{
	ExprState  *qual;
	int			nout;
	ExprState **exprs;
} StmProjector;

extern StmQueryInfo *stm_query_analyze(const char *sql);
extern StmQueryInfo *stm_query_analyze_stored(const StmStreamDef *def, int *guc_nest);
extern void stm_query_keep_analysis(void);
extern int	stm_agg_time_key(StmAggQuery *agg, AttrNumber event_time_attno);
extern ExprState *stm_query_compile_qual(StmQueryInfo *qi);
extern StmProjector *stm_query_compile(StmQueryInfo *qi);
extern List *stm_query_output_targetlist(StmQueryInfo *qi);
extern bool stm_query_project(StmProjector *pj, ExprContext *econtext,
							  Datum *values, bool *nulls);
extern void stm_query_add_output(StmQueryInfo *qi, Expr *expr, const char *name);

#endif
