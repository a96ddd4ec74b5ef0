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

#include "catalog/pg_aggregate.h"

#include "fmgr.h"
#include "nodes/execnodes.h"
#include "nodes/primnodes.h"

typedef struct StmAggFn
{
	Oid			aggfnoid;
	Oid			collation;		/* input collation: transfn, combinefn, finalfn */
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

/*
 * The aggregates of a stream for one batch.  The AggState passed as the
 * support functions' context is set up as far as the aggregate API of
 * fmgr.h reads it, as a partial Agg (transition, serialize) and a Finalize
 * Agg (deserialize, combine, final) set it up: AggCheckCallContext() finds
 * aggcontext, AggGetAggref() the Aggref of the current step,
 * AggGetTempMemoryContext() tmpcontext, AggStateIsShared() false, and
 * AggRegisterCallback() registers on aggcontext, whose callbacks
 * stm_agg_end() runs.
 */
typedef struct StmAggRuntime
{
	int			naggs;
	StmAggFn   *fns;
	MemoryContext state_cxt;	/* transition states: aggcontext's memory */
	ExprContext *aggcontext;
	ExprContext *tmpcontext;
	AggStatePerTrans partial;	/* per aggregate: the partial step's Aggref */
	AggStatePerTrans final;		/* per aggregate: the final step's Aggref */
	AggStatePerAgg peragg;		/* per aggregate: its final function's */
	AggState   *aggstate;
	FunctionCallInfo fcinfo;
} StmAggRuntime;

extern void stm_agg_check_permissions(Form_pg_aggregate form);
extern Oid	stm_agg_transtype(Aggref *agg);
extern Oid	stm_agg_storedtype(Aggref *agg);
extern StmAggRuntime *stm_agg_init(List *aggrefs, MemoryContext state_cxt);
extern MemoryContext stm_agg_set_state_context(StmAggRuntime *rt, MemoryContext cxt);
extern void stm_agg_end(StmAggRuntime *rt);
extern void stm_agg_group_init(StmAggRuntime *rt, StmAggValue *vals);
extern void stm_agg_advance(StmAggRuntime *rt, StmAggValue *vals, ExprContext *econtext);
extern Datum stm_agg_store(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull);
extern void stm_agg_load(StmAggRuntime *rt, int i, Datum stored, bool isnull, StmAggValue *v);
extern void stm_agg_combine(StmAggRuntime *rt, int i, StmAggValue *into, StmAggValue *from);
extern Datum stm_agg_finalize(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull);

#endif
