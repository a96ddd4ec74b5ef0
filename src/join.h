/*
 * join.h: stream queries that read tables besides their source, run by
 * PostgreSQL's planner and executor over the batch's source rows.
 */
#ifndef STM_JOIN_H
#define STM_JOIN_H

#include "executor/tuptable.h"
#include "utils/queryenvironment.h"
#include "utils/relcache.h"
#include "utils/tuplestore.h"

#include "query.h"

typedef struct StmJoinPlan StmJoinPlan;
typedef struct StmJoin StmJoin;

/* takes each row the query gives (a sink row, or the joined row) */
typedef void (*StmJoinRowFn) (void *arg, TupleTableSlot *slot);

extern StmJoin *stm_join_begin(StmJoinPlan **cache, MemoryContext cache_cxt, StmQueryInfo *qi,
							   TupleDesc source_desc, const char *query_text);
extern void stm_join_add(StmJoin *j, TupleTableSlot *slot);
extern void stm_join_run(StmJoin *j, StmJoinRowFn fn, void *arg);

/* what stream-stream joins (ssjoin.c) share with it */
extern List *stm_join_row_targetlist(Query *q, StmQueryInfo *qi, TupleDesc source_desc);
extern void stm_join_strip_aggregation(Query *q);
extern void stm_join_rte_as_tuplestore(Query *q, int rtindex, TupleDesc desc, const char *name);
extern EphemeralNamedRelation stm_join_enr(const char *name, TupleDesc desc,
										   Tuplestorestate *rows, double nrows);
extern void stm_join_exec(StmJoinPlan **cache, MemoryContext cache_cxt, Query *query,
						  const char *query_text, QueryEnvironment *env,
						  StmJoinRowFn fn, void *arg);

#endif
