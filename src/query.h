/*
 * query.h: a stream's query, analysed by PostgreSQL's parser, and its
 * compiled per-row form.
 */
#ifndef STM_QUERY_H
#define STM_QUERY_H

#include "nodes/execnodes.h"
#include "nodes/parsenodes.h"
#include "utils/relcache.h"

typedef struct StmQueryInfo
{
	Query	   *query;
	Oid			source_view;
	int			noutputs;
	char	  **out_names;
	Oid		   *out_types;
	int32	   *out_typmods;
} StmQueryInfo;

/* Per-row evaluation: WHERE, then one expression per sink column. */
typedef struct StmProjector
{
	ExprState  *qual;
	int			nsink;
	ExprState **exprs;			/* NULL: the column gets NULL */
} StmProjector;

extern StmQueryInfo *stm_query_analyze(const char *sql);
extern void stm_query_check_sink(StmQueryInfo *qi, Relation sink, const char *stream);
extern char *stm_query_sink_ddl(StmQueryInfo *qi, const char *qualified_name);
extern StmProjector *stm_query_compile(StmQueryInfo *qi, Relation sink, EState *estate);
extern bool stm_query_project(StmProjector *pj, ExprContext *econtext,
							  Datum *values, bool *nulls);

#endif
