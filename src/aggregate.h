/*
 * aggregate.h: PostgreSQL aggregates run in partial mode by a stream.
 *
 * A batch advances transition states with each aggregate's transition
 * function, merges them with the stored states using its combine function,
 * stores them (serialized when the state type is internal) and finalizes
 * them for output: the same steps as a parallel aggregate's partial and
 * final stages.
 */
#ifndef STM_AGGREGATE_H
#define STM_AGGREGATE_H

#include "fmgr.h"
#include "nodes/execnodes.h"
#include "nodes/primnodes.h"

typedef struct StmAggFn
{
	Oid			aggfnoid;
	FmgrInfo	transfn;
	FmgrInfo	combinefn;
	FmgrInfo	serialfn;
	FmgrInfo	deserialfn;
	FmgrInfo	finalfn;
	bool		has_serial;
	bool		has_final;
	bool		final_extra;	/* finalfn takes the aggregate's arguments too */
	int			nfinalargs;
	Oid			transtype;
	int16		translen;
	bool		transbyval;
	Oid			storedtype;		/* transtype, or bytea for internal states */
	Datum		initval;
	bool		initval_isnull;
	int			nargs;
	ExprState **args;			/* arguments, over the source row */
} StmAggFn;

/* One aggregate's state in one group. */
typedef struct StmAggValue
{
	Datum		value;
	bool		isnull;
	bool		notrans;		/* strict transfn, no initval: first input becomes the state */
} StmAggValue;

typedef struct StmAggRuntime
{
	int			naggs;
	StmAggFn   *fns;
	MemoryContext state_cxt;	/* transition states live here */
	AggState   *aggstate;		/* passed as context: AggCheckCallContext works */
	FunctionCallInfo fcinfo;
} StmAggRuntime;

extern Oid	stm_agg_transtype(Aggref *agg);
extern Oid	stm_agg_storedtype(Aggref *agg);
extern StmAggRuntime *stm_agg_init(List *aggrefs, MemoryContext state_cxt);
extern MemoryContext stm_agg_set_state_context(StmAggRuntime *rt, MemoryContext cxt);
extern void stm_agg_group_init(StmAggRuntime *rt, StmAggValue *vals);
extern void stm_agg_advance(StmAggRuntime *rt, StmAggValue *vals, ExprContext *econtext);
extern Datum stm_agg_store(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull);
extern void stm_agg_load(StmAggRuntime *rt, int i, Datum stored, bool isnull, StmAggValue *v);
extern void stm_agg_combine(StmAggRuntime *rt, int i, StmAggValue *into, StmAggValue *from);
extern Datum stm_agg_finalize(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull);

#endif
