/*
 * aggregate.c: aggregates in partial mode (SPEC 3: "any aggregate that
 * PostgreSQL can compute in partial mode").
 *
 * The transition, combine, serialize, deserialize and final functions come
 * from pg_aggregate and are called as the executor's Agg node calls them,
 * with an AggState as context so that AggCheckCallContext() finds the memory
 * context the states live in.  The rules for strict functions and for
 * by-reference states follow nodeAgg.c (advance_transition_function,
 * advance_combine_function).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_agg.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "aggregate.h"

#define MAX_AGG_ARGS 8

/* The state type of an aggregate call, polymorphism resolved (as the planner does). */
Oid
stm_agg_transtype(Aggref *agg)
{
	HeapTuple	tup;
	Oid			transtype;
	Oid			inputTypes[FUNC_MAX_ARGS];
	int			nargs;

	tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(agg->aggfnoid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for aggregate %u", agg->aggfnoid);
	transtype = ((Form_pg_aggregate) GETSTRUCT(tup))->aggtranstype;
	ReleaseSysCache(tup);
	nargs = get_aggregate_argtypes(agg, inputTypes);
	return resolve_aggregate_transtype(agg->aggfnoid, transtype, inputTypes, nargs);
}

/* How a state is kept in the state table: serialized when internal. */
Oid
stm_agg_storedtype(Aggref *agg)
{
	Oid			transtype = stm_agg_transtype(agg);

	return transtype == INTERNALOID ? BYTEAOID : transtype;
}

StmAggRuntime *
stm_agg_init(List *aggrefs, MemoryContext state_cxt)
{
	StmAggRuntime *rt = palloc0(sizeof(StmAggRuntime));
	ListCell   *lc;
	int			i = 0;
	ExprContext *econtext = makeNode(ExprContext);

	rt->naggs = list_length(aggrefs);
	rt->fns = palloc0(sizeof(StmAggFn) * Max(rt->naggs, 1));
	rt->state_cxt = state_cxt;
	/* only curaggcontext is read by AggCheckCallContext */
	econtext->ecxt_per_tuple_memory = state_cxt;
	rt->aggstate = makeNode(AggState);
	rt->aggstate->curaggcontext = econtext;
	rt->fcinfo = palloc0(SizeForFunctionCallInfo(MAX_AGG_ARGS + 1));

	foreach(lc, aggrefs)
	{
		Aggref	   *agg = lfirst_node(Aggref, lc);
		StmAggFn   *fn = &rt->fns[i++];
		HeapTuple	tup;
		Form_pg_aggregate form;
		Datum		d;
		bool		isnull;
		ListCell   *la;
		int			a = 0;

		tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(agg->aggfnoid));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for aggregate %u", agg->aggfnoid);
		form = (Form_pg_aggregate) GETSTRUCT(tup);
		fn->aggfnoid = agg->aggfnoid;
		fmgr_info(form->aggtransfn, &fn->transfn);
		fmgr_info(form->aggcombinefn, &fn->combinefn);
		fn->has_serial = OidIsValid(form->aggserialfn);
		if (fn->has_serial)
		{
			fmgr_info(form->aggserialfn, &fn->serialfn);
			fmgr_info(form->aggdeserialfn, &fn->deserialfn);
		}
		fn->has_final = OidIsValid(form->aggfinalfn);
		if (fn->has_final)
			fmgr_info(form->aggfinalfn, &fn->finalfn);
		fn->final_extra = form->aggfinalextra;
		fn->nfinalargs = fn->final_extra ? list_length(agg->args) + 1 : 1;
		fn->transtype = stm_agg_transtype(agg);
		get_typlenbyval(fn->transtype, &fn->translen, &fn->transbyval);
		fn->storedtype = fn->transtype == INTERNALOID ? BYTEAOID : fn->transtype;
		d = SysCacheGetAttr(AGGFNOID, tup, Anum_pg_aggregate_agginitval, &isnull);
		fn->initval_isnull = isnull;
		if (!isnull)
		{
			Oid			typinput,
						typioparam;
			char	   *str = TextDatumGetCString(d);

			getTypeInputInfo(fn->transtype, &typinput, &typioparam);
			fn->initval = OidInputFunctionCall(typinput, str, typioparam, -1);
		}
		ReleaseSysCache(tup);

		fn->nargs = list_length(agg->args);
		if (fn->nargs > MAX_AGG_ARGS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("aggregates with more than %d arguments are not supported in a stream query",
							MAX_AGG_ARGS)));
		fn->args = palloc0(sizeof(ExprState *) * Max(fn->nargs, 1));
		foreach(la, agg->args)
		{
			TargetEntry *tle = lfirst_node(TargetEntry, la);

			fn->args[a++] = ExecInitExpr(expression_planner(tle->expr), NULL);
		}
	}
	return rt;
}

/*
 * Where new and combined states are allocated from now on (the states'
 * context and the aggregates' aggcontext); returns the previous one.  A
 * batch merges each group into the state table in a context of its own,
 * reset after the group.
 */
MemoryContext
stm_agg_set_state_context(StmAggRuntime *rt, MemoryContext cxt)
{
	MemoryContext old = rt->state_cxt;

	rt->state_cxt = cxt;
	rt->aggstate->curaggcontext->ecxt_per_tuple_memory = cxt;
	return old;
}

/* A new group: every state starts at its initial value. */
void
stm_agg_group_init(StmAggRuntime *rt, StmAggValue *vals)
{
	for (int i = 0; i < rt->naggs; i++)
	{
		StmAggFn   *fn = &rt->fns[i];

		vals[i].isnull = fn->initval_isnull;
		vals[i].notrans = fn->initval_isnull;
		vals[i].value = (Datum) 0;
		if (!fn->initval_isnull)
		{
			MemoryContext old = MemoryContextSwitchTo(rt->state_cxt);

			vals[i].value = datumCopy(fn->initval, fn->transbyval, fn->translen);
			MemoryContextSwitchTo(old);
		}
	}
}

/* Keep a new by-reference state in the states' context, free the old one. */
static void
keep_state(StmAggRuntime *rt, StmAggFn *fn, StmAggValue *v, Datum newval, bool newnull)
{
	if (!fn->transbyval && DatumGetPointer(newval) != DatumGetPointer(v->value))
	{
		if (!newnull)
		{
			MemoryContext old = MemoryContextSwitchTo(rt->state_cxt);

			newval = datumCopy(newval, fn->transbyval, fn->translen);
			MemoryContextSwitchTo(old);
		}
		if (!v->isnull)
			pfree(DatumGetPointer(v->value));
	}
	v->value = newval;
	v->isnull = newnull;
}

/* Feed one input row (the econtext's scan tuple) to every aggregate. */
void
stm_agg_advance(StmAggRuntime *rt, StmAggValue *vals, ExprContext *econtext)
{
	FunctionCallInfo fcinfo = rt->fcinfo;

	for (int i = 0; i < rt->naggs; i++)
	{
		StmAggFn   *fn = &rt->fns[i];
		StmAggValue *v = &vals[i];
		bool		anynull = false;
		Datum		newval;
		MemoryContext old;

		for (int a = 0; a < fn->nargs; a++)
		{
			fcinfo->args[a + 1].value = ExecEvalExprSwitchContext(fn->args[a], econtext,
																  &fcinfo->args[a + 1].isnull);
			anynull |= fcinfo->args[a + 1].isnull;
		}
		if (fn->transfn.fn_strict)
		{
			if (anynull)
				continue;
			if (v->notrans)
			{
				/* the first input is the state (the state type is the input type) */
				old = MemoryContextSwitchTo(rt->state_cxt);
				v->value = datumCopy(fcinfo->args[1].value, fn->transbyval, fn->translen);
				MemoryContextSwitchTo(old);
				v->isnull = false;
				v->notrans = false;
				continue;
			}
			if (v->isnull)
				continue;
		}
		InitFunctionCallInfoData(*fcinfo, &fn->transfn, fn->nargs + 1, InvalidOid,
								 (Node *) rt->aggstate, NULL);
		fcinfo->args[0].value = v->value;
		fcinfo->args[0].isnull = v->isnull;
		old = MemoryContextSwitchTo(econtext->ecxt_per_tuple_memory);
		newval = FunctionCallInvoke(fcinfo);
		MemoryContextSwitchTo(old);
		keep_state(rt, fn, v, newval, fcinfo->isnull);
		v->notrans = false;
	}
}

/* The state as stored in the state table: serialized when internal. */
Datum
stm_agg_store(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull)
{
	StmAggFn   *fn = &rt->fns[i];
	FunctionCallInfo fcinfo = rt->fcinfo;
	Datum		result;

	*isnull = v->isnull;
	if (v->isnull || !fn->has_serial)
		return v->value;
	InitFunctionCallInfoData(*fcinfo, &fn->serialfn, 1, InvalidOid, (Node *) rt->aggstate, NULL);
	fcinfo->args[0].value = v->value;
	fcinfo->args[0].isnull = false;
	result = FunctionCallInvoke(fcinfo);
	*isnull = fcinfo->isnull;
	return result;
}

/* A stored state back as a transition state. */
void
stm_agg_load(StmAggRuntime *rt, int i, Datum stored, bool isnull, StmAggValue *v)
{
	StmAggFn   *fn = &rt->fns[i];
	FunctionCallInfo fcinfo = rt->fcinfo;
	MemoryContext old = MemoryContextSwitchTo(rt->state_cxt);

	v->notrans = false;
	v->isnull = isnull;
	if (isnull)
		v->value = (Datum) 0;
	else if (fn->has_serial)
	{
		InitFunctionCallInfoData(*fcinfo, &fn->deserialfn, 2, InvalidOid, (Node *) rt->aggstate, NULL);
		fcinfo->args[0].value = stored;
		fcinfo->args[0].isnull = false;
		fcinfo->args[1].value = (Datum) 0;
		fcinfo->args[1].isnull = true;
		v->value = FunctionCallInvoke(fcinfo);
		v->isnull = fcinfo->isnull;
	}
	else
		v->value = datumCopy(stored, fn->transbyval, fn->translen);
	MemoryContextSwitchTo(old);
}

/* into := combine(into, from), as advance_combine_function does. */
void
stm_agg_combine(StmAggRuntime *rt, int i, StmAggValue *into, StmAggValue *from)
{
	StmAggFn   *fn = &rt->fns[i];
	FunctionCallInfo fcinfo = rt->fcinfo;
	Datum		newval;
	MemoryContext old;

	if (fn->combinefn.fn_strict)
	{
		if (from->isnull || from->notrans)
			return;
		if (into->isnull || into->notrans)
		{
			old = MemoryContextSwitchTo(rt->state_cxt);
			into->value = datumCopy(from->value, fn->transbyval, fn->translen);
			MemoryContextSwitchTo(old);
			into->isnull = false;
			into->notrans = false;
			return;
		}
	}
	InitFunctionCallInfoData(*fcinfo, &fn->combinefn, 2, InvalidOid, (Node *) rt->aggstate, NULL);
	fcinfo->args[0].value = into->value;
	fcinfo->args[0].isnull = into->isnull;
	fcinfo->args[1].value = from->value;
	fcinfo->args[1].isnull = from->isnull;
	old = MemoryContextSwitchTo(rt->state_cxt);
	newval = FunctionCallInvoke(fcinfo);
	MemoryContextSwitchTo(old);
	keep_state(rt, fn, into, newval, fcinfo->isnull);
	into->notrans = false;
}

/* The aggregate's result for a group. */
Datum
stm_agg_finalize(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull)
{
	StmAggFn   *fn = &rt->fns[i];
	FunctionCallInfo fcinfo = rt->fcinfo;
	Datum		result;

	if (!fn->has_final)
	{
		*isnull = v->isnull;
		return v->value;
	}
	InitFunctionCallInfoData(*fcinfo, &fn->finalfn, fn->nfinalargs, InvalidOid,
							 (Node *) rt->aggstate, NULL);
	fcinfo->args[0].value = v->value;
	fcinfo->args[0].isnull = v->isnull;
	for (int a = 1; a < fn->nfinalargs; a++)
	{
		fcinfo->args[a].value = (Datum) 0;
		fcinfo->args[a].isnull = true;
	}
	if (fn->finalfn.fn_strict && v->isnull)
	{
		*isnull = true;
		return (Datum) 0;
	}
	result = FunctionCallInvoke(fcinfo);
	*isnull = fcinfo->isnull;
	return result;
}
