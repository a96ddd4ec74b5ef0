/*
 * window.c: window calls.
 *
 * The SQL functions exist so that stream queries parse and analyse like any
 * query; a stream recognises them in its GROUP BY by their OIDs and assigns
 * windows itself.  Called anywhere else they raise an error.  Their size
 * arguments are checked when the stream is created: they must be constant,
 * fixed durations (no months or years, as date_bin) greater than zero, and a
 * hop's slide may not be larger than its size.
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "window.h"

PG_FUNCTION_INFO_V1(streaming_tumble);
PG_FUNCTION_INFO_V1(streaming_hop);
PG_FUNCTION_INFO_V1(streaming_session);
PG_FUNCTION_INFO_V1(streaming_window_start);
PG_FUNCTION_INFO_V1(streaming_window_end);

static void
only_in_streams(const char *call)
{
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s can only be used in a stream query", call),
			 errdetail("Window calls go in the GROUP BY of a query given to streaming.create_stream(), "
					   "and streaming.window_start() and streaming.window_end() in its select list.")));
}

Datum
streaming_tumble(PG_FUNCTION_ARGS)
{
	only_in_streams("streaming.tumble()");
	PG_RETURN_NULL();
}

Datum
streaming_hop(PG_FUNCTION_ARGS)
{
	only_in_streams("streaming.hop()");
	PG_RETURN_NULL();
}

Datum
streaming_session(PG_FUNCTION_ARGS)
{
	only_in_streams("streaming.session()");
	PG_RETURN_NULL();
}

Datum
streaming_window_start(PG_FUNCTION_ARGS)
{
	only_in_streams("streaming.window_start()");
	PG_RETURN_NULL();
}

Datum
streaming_window_end(PG_FUNCTION_ARGS)
{
	only_in_streams("streaming.window_end()");
	PG_RETURN_NULL();
}

/* Which window call funcid is, if any: a function of schema streaming. */
StmWindowKind
stm_window_kind(Oid funcid)
{
	char	   *name;
	Oid			nsp = get_func_namespace(funcid);

	if (!OidIsValid(nsp) || nsp != get_namespace_oid("streaming", true))
		return STM_WINDOW_NONE;
	name = get_func_name(funcid);
	if (strcmp(name, "tumble") == 0)
		return STM_WINDOW_TUMBLE;
	if (strcmp(name, "hop") == 0)
		return STM_WINDOW_HOP;
	if (strcmp(name, "session") == 0)
		return STM_WINDOW_SESSION;
	if (strcmp(name, "window_start") == 0)
		return STM_WINDOW_START;
	if (strcmp(name, "window_end") == 0)
		return STM_WINDOW_END;
	return STM_WINDOW_NONE;
}

/* A constant argument of a window call, folded; NULL and non-constants refused. */
static Datum
constant_arg(FuncExpr *call, int argno, const char *argname, const char *fname)
{
	Node	   *arg = eval_const_expressions(NULL, (Node *) list_nth(call->args, argno));

	if (!IsA(arg, Const))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the %s of %s must be a constant", argname, fname)));
	if (((Const *) arg)->constisnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("the %s of %s must not be null", argname, fname)));
	return ((Const *) arg)->constvalue;
}

/* A window length: a fixed duration greater than zero, in microseconds. */
static int64
duration_arg(FuncExpr *call, int argno, const char *argname, const char *fname)
{
	Interval   *iv = DatumGetIntervalP(constant_arg(call, argno, argname, fname));
	char	   *text = DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(iv)));
	int64		us;

	if (iv->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the %s of %s must be a fixed duration", argname, fname),
				 errdetail("The %s given was \"%s\"; months and years have no fixed length.",
						   argname, text)));
	us = iv->time + (int64) iv->day * USECS_PER_DAY;
	if (us <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the %s of %s must be greater than zero", argname, fname),
				 errdetail("The %s given was \"%s\".", argname, text)));
	return us;
}

/* Check a window call of a GROUP BY and take its constant arguments. */
void
stm_window_spec(FuncExpr *call, StmWindowSpec *spec)
{
	int			nargs = list_length(call->args);

	memset(spec, 0, sizeof(*spec));
	spec->kind = stm_window_kind(call->funcid);
	spec->ts = linitial(call->args);
	/* the default origin is the Unix epoch */
	spec->origin = STM_UNIX_EPOCH;
	switch (spec->kind)
	{
		case STM_WINDOW_TUMBLE:
			spec->size_us = duration_arg(call, 1, "size", "streaming.tumble()");
			if (nargs > 2)
				spec->origin = DatumGetTimestampTz(constant_arg(call, 2, "origin", "streaming.tumble()"));
			break;
		case STM_WINDOW_HOP:
			spec->size_us = duration_arg(call, 1, "size", "streaming.hop()");
			spec->slide_us = duration_arg(call, 2, "slide", "streaming.hop()");
			if (spec->slide_us > spec->size_us)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("the slide of streaming.hop() must not be larger than its size"),
						 errdetail("The size given was \"%s\" and the slide \"%s\".",
								   DatumGetCString(DirectFunctionCall1(interval_out, constant_arg(call, 1, "size", "streaming.hop()"))),
								   DatumGetCString(DirectFunctionCall1(interval_out, constant_arg(call, 2, "slide", "streaming.hop()"))))));
			if (nargs > 3)
				spec->origin = DatumGetTimestampTz(constant_arg(call, 3, "origin", "streaming.hop()"));
			break;
		case STM_WINDOW_SESSION:
			spec->size_us = duration_arg(call, 1, "gap", "streaming.session()");
			break;
		default:
			elog(ERROR, "not a window call");
	}
}
