/*
 * aggregate.c: aggregates in partial mode (SPEC 3: "any aggregate that
 * PostgreSQL can compute in partial mode").
 *
 * The transition, combine, serialize, deserialize and final functions come
 * from pg_aggregate and are called as the executor's Agg nodes call them in
 * a partial aggregation: transition and serialize as the partial Agg
 * (AGGSPLIT_INITIAL_SERIAL), deserialize, combine and final as the Finalize
 * Agg (AGGSPLIT_FINAL_DESERIAL).  Aggregates of other extensions rely on
 * what those nodes give: the AggState's aggregate API (StmAggRuntime), each
 * call's collation and fn_expr, and states that are in memory, never
 * toasted.  A state read back from the state table may be compressed or out
 * of line; it is detoasted before its deserialize function sees it (tdigest's
 * reads its argument without detoasting, as a Finalize Agg's input never
 * needs it).  The rules for strict functions and for by-reference states
 * follow nodeAgg.c (advance_transition_function, advance_combine_function,
 * finalize_aggregate).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_aggregate.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/nodeAgg.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "optimizer/planner.h"
#include "parser/parse_agg.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "aggregate.h"

/* The steps of a partial aggregation, as AggGetAggref() tells them apart. */
typedef enum StmAggStep
{
	STEP_PARTIAL,				/* transition, serialize: the partial Agg */
	STEP_COMBINE,				/* deserialize, combine: the Finalize Agg */
	STEP_FINAL					/* final function: the Finalize Agg */
} StmAggStep;

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

/*
 * The Aggrefs of the two steps, as the planner makes them for a partial
 * aggregation (convert_combining_aggrefs): the partial step's, and the final
 * step's, whose argument is the partial step's result.
 */
static void
split_aggref(Aggref *agg, Oid transtype, Aggref **partial, Aggref **final)
{
	Aggref	   *p = copyObject(agg);
	Aggref	   *f = makeNode(Aggref);

	p->aggtranstype = transtype;
	memcpy(f, p, sizeof(Aggref));
	mark_partial_aggref(p, AGGSPLIT_INITIAL_SERIAL);
	f->args = list_make1(makeTargetEntry((Expr *) p, 1, NULL, false));
	mark_partial_aggref(f, AGGSPLIT_FINAL_DESERIAL);
	*partial = p;
	*final = f;
}

/* Point the AggState at aggregate i in a step, as nodeAgg.c sets curpertrans and curperagg. */
static Node *
enter_step(StmAggRuntime *rt, int i, StmAggStep step)
{
	AggState   *as = rt->aggstate;

	as->curpertrans = step == STEP_PARTIAL ? &rt->partial[i] : &rt->final[i];
	as->curperagg = step == STEP_FINAL ? &rt->peragg[i] : NULL;
	as->aggsplit = as->curpertrans->aggref->aggsplit;
	return (Node *) as;
}


/*
 * As nodeAgg.c's ExecInitAgg: the current user (the stream's owner, in a
 * batch) may execute the aggregate, and the aggregate's owner its support
 * functions.  Checked when the stream's query is analysed: at create time
 * and in every batch.
 */
void
stm_agg_check_permissions(Form_pg_aggregate form)
{
	Oid			fns[5] = {form->aggtransfn, form->aggcombinefn, form->aggserialfn,
	form->aggdeserialfn, form->aggfinalfn};
	Oid			agg_owner;
	HeapTuple	proc;
	AclResult	aclresult;

	aclresult = pg_proc_aclcheck(form->aggfnoid, GetUserId(), ACL_EXECUTE);
	if (aclresult != ACLCHECK_OK)
		aclcheck_error(aclresult, OBJECT_AGGREGATE, get_func_name(form->aggfnoid));
	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(form->aggfnoid));
	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", form->aggfnoid);
	agg_owner = ((Form_pg_proc) GETSTRUCT(proc))->proowner;
	ReleaseSysCache(proc);
	for (int i = 0; i < (int) lengthof(fns); i++)
	{
		if (!OidIsValid(fns[i]))
			continue;
		aclresult = pg_proc_aclcheck(fns[i], agg_owner, ACL_EXECUTE);
		if (aclresult != ACLCHECK_OK)
			aclcheck_error(aclresult, OBJECT_FUNCTION, get_func_name(fns[i]));
	}
}

/*
 * The aggregates' support functions, their AggState and contexts, for one
 * batch, in the current memory context; the states live in state_cxt (the
 * aggcontext's memory; stm_agg_set_state_context moves it).
 */
StmAggRuntime *
stm_agg_init(List *aggrefs, MemoryContext state_cxt)
{
	StmAggRuntime *rt = palloc0(sizeof(StmAggRuntime));
	int			n = Max(list_length(aggrefs), 1);
	int			maxargs = 2;	/* combine and deserialize */
	ListCell   *lc;
	int			i = 0;

	rt->naggs = list_length(aggrefs);
	rt->fns = palloc0(sizeof(StmAggFn) * n);
	rt->partial = palloc0(sizeof(AggStatePerTransData) * n);
	rt->final = palloc0(sizeof(AggStatePerTransData) * n);
	rt->peragg = palloc0(sizeof(AggStatePerAggData) * n);
	rt->aggcontext = CreateStandaloneExprContext();
	/* the aggcontext's memory is the states' context, the caller's */
	MemoryContextDelete(rt->aggcontext->ecxt_per_tuple_memory);
	rt->aggcontext->ecxt_per_tuple_memory = state_cxt;
	rt->state_cxt = state_cxt;
	rt->tmpcontext = CreateStandaloneExprContext();
	/* what fmgr.h's aggregate API reads (nodeAgg.c), for hashed grouping */
	rt->aggstate = makeNode(AggState);
	rt->aggstate->numaggs = rt->aggstate->numtrans = rt->naggs;
	rt->aggstate->peragg = rt->peragg;
	rt->aggstate->pertrans = rt->final;
	rt->aggstate->hashcontext = rt->aggcontext;
	rt->aggstate->aggcontexts = &rt->aggcontext;
	rt->aggstate->curaggcontext = rt->aggcontext;
	rt->aggstate->tmpcontext = rt->tmpcontext;

	foreach(lc, aggrefs)
	{
		Aggref	   *agg = lfirst_node(Aggref, lc);
		StmAggFn   *fn = &rt->fns[i];
		Oid			inputtypes[FUNC_MAX_ARGS];
		int			ninputs = get_aggregate_argtypes(agg, inputtypes);
		HeapTuple	tup;
		Form_pg_aggregate form;
		Datum		d;
		bool		isnull;
		Expr	   *expr;
		ListCell   *la;
		int			a = 0;

		tup = SearchSysCache1(AGGFNOID, ObjectIdGetDatum(agg->aggfnoid));
		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for aggregate %u", agg->aggfnoid);
		form = (Form_pg_aggregate) GETSTRUCT(tup);
		fn->aggfnoid = agg->aggfnoid;
		fn->collation = agg->inputcollid;
		fn->transtype = stm_agg_transtype(agg);
		fn->final_extra = form->aggfinalextra;
		fn->nfinalargs = fn->final_extra ? ninputs + 1 : 1;

		/* fn_expr too, so that polymorphic functions learn their argument types */
		fmgr_info(form->aggtransfn, &fn->transfn);
		build_aggregate_transfn_expr(inputtypes, ninputs, 0, agg->aggvariadic, fn->transtype,
									 fn->collation, form->aggtransfn, InvalidOid, &expr, NULL);
		fn->transfn.fn_expr = (Node *) expr;
		fmgr_info(form->aggcombinefn, &fn->combinefn);
		build_aggregate_transfn_expr(&fn->transtype, 1, 0, false, fn->transtype,
									 fn->collation, form->aggcombinefn, InvalidOid, &expr, NULL);
		fn->combinefn.fn_expr = (Node *) expr;
		fn->has_serial = OidIsValid(form->aggserialfn);
		if (fn->has_serial)
		{
			fmgr_info(form->aggserialfn, &fn->serialfn);
			build_aggregate_serialfn_expr(form->aggserialfn, &expr);
			fn->serialfn.fn_expr = (Node *) expr;
			fmgr_info(form->aggdeserialfn, &fn->deserialfn);
			build_aggregate_deserialfn_expr(form->aggdeserialfn, &expr);
			fn->deserialfn.fn_expr = (Node *) expr;
		}
		fn->has_final = OidIsValid(form->aggfinalfn);
		if (fn->has_final)
		{
			fmgr_info(form->aggfinalfn, &fn->finalfn);
			build_aggregate_finalfn_expr(inputtypes, fn->nfinalargs, fn->transtype, agg->aggtype,
										 fn->collation, form->aggfinalfn, &expr);
			fn->finalfn.fn_expr = (Node *) expr;
		}
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

		/* what AggGetAggref() and AggStateIsShared() return in each step */
		split_aggref(agg, fn->transtype, &rt->partial[i].aggref, &rt->final[i].aggref);
		rt->peragg[i].aggref = rt->final[i].aggref;
		rt->peragg[i].transno = i;

		fn->nargs = list_length(agg->args);
		maxargs = Max(maxargs, Max(fn->nargs + 1, fn->nfinalargs));
		fn->args = palloc0(sizeof(ExprState *) * Max(fn->nargs, 1));
		foreach(la, agg->args)
		{
			TargetEntry *tle = lfirst_node(TargetEntry, la);

			fn->args[a++] = ExecInitExpr(expression_planner(tle->expr), NULL);
		}
		i++;
	}
	rt->fcinfo = palloc0(SizeForFunctionCallInfo(maxargs));
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

/*
 * The end of the batch's aggregation, as ExecEndAgg: the callbacks that
 * support functions registered with AggRegisterCallback() run (the states'
 * memory is reset with them; the caller deletes it).  As in nodeAgg.c,
 * callbacks do not run on error: the batch's memory goes then with
 * everything in it.
 */
void
stm_agg_end(StmAggRuntime *rt)
{
	ReScanExprContext(rt->aggcontext);
	FreeExprContext(rt->tmpcontext, true);
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

	/* short-term memory lasts one input row, as nodeAgg.c's tmpcontext */
	ResetExprContext(rt->tmpcontext);
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
		InitFunctionCallInfoData(*fcinfo, &fn->transfn, fn->nargs + 1, fn->collation,
								 enter_step(rt, i, STEP_PARTIAL), NULL);
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
	InitFunctionCallInfoData(*fcinfo, &fn->serialfn, 1, InvalidOid,
							 enter_step(rt, i, STEP_PARTIAL), NULL);
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
		/* in memory, as a Finalize Agg's input: the table may have toasted it */
		struct varlena *ser = PG_DETOAST_DATUM(stored);

		InitFunctionCallInfoData(*fcinfo, &fn->deserialfn, 2, InvalidOid,
								 enter_step(rt, i, STEP_COMBINE), NULL);
		fcinfo->args[0].value = PointerGetDatum(ser);
		fcinfo->args[0].isnull = false;
		/* the dummy second argument that nodeAgg.c passes */
		fcinfo->args[1].value = PointerGetDatum(NULL);
		fcinfo->args[1].isnull = false;
		v->value = FunctionCallInvoke(fcinfo);
		v->isnull = fcinfo->isnull;
		if ((Pointer) ser != DatumGetPointer(stored))
			pfree(ser);
	}
	else if (fn->translen == -1)
	{
		/* a plain copy, as transition values are */
		v->value = PointerGetDatum(PG_DETOAST_DATUM_COPY(stored));
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
	InitFunctionCallInfoData(*fcinfo, &fn->combinefn, 2, fn->collation,
							 enter_step(rt, i, STEP_COMBINE), NULL);
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

/*
 * The aggregate's result for a group, as finalize_aggregate: with
 * finalfunc_extra the arguments after the state are NULLs, and a strict
 * final function is not called with a NULL.
 */
Datum
stm_agg_finalize(StmAggRuntime *rt, int i, StmAggValue *v, bool *isnull)
{
	StmAggFn   *fn = &rt->fns[i];
	FunctionCallInfo fcinfo = rt->fcinfo;
	bool		anynull = v->isnull;
	Datum		result = (Datum) 0;

	if (!fn->has_final)
	{
		*isnull = v->isnull;
		return v->value;
	}
	/* the final function may reset the short-term memory as it likes */
	ResetExprContext(rt->tmpcontext);
	InitFunctionCallInfoData(*fcinfo, &fn->finalfn, fn->nfinalargs, fn->collation,
							 enter_step(rt, i, STEP_FINAL), NULL);
	fcinfo->args[0].value = v->value;
	fcinfo->args[0].isnull = v->isnull;
	for (int a = 1; a < fn->nfinalargs; a++)
	{
		fcinfo->args[a].value = (Datum) 0;
		fcinfo->args[a].isnull = true;
		anynull = true;
	}
	if (fn->finalfn.fn_strict && anynull)
		*isnull = true;
	else
	{
		result = FunctionCallInvoke(fcinfo);
		*isnull = fcinfo->isnull;
	}
	/* AggGetAggref() names the final step only in final functions */
	rt->aggstate->curperagg = NULL;
	return result;
}
