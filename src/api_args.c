/*
 * api_args.c: what the SQL functions share to check their arguments.
 *
 * Every function checks all of its arguments before it creates anything, so
 * a bad argument leaves nothing behind (the transaction would roll back
 * anything anyway); errors say which argument and what is allowed (SPEC 5).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "api.h"
#include "catalog.h"
#include "sql.h"

/* ---- arguments by name ------------------------------------------------- */

/* A SQL function's arguments, read by their names (its pg_proc entry's). */
void
stm_args_init(StmArgs *args, FunctionCallInfo fcinfo)
{
	HeapTuple	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	Oid		   *argtypes;
	char	   *argmodes;

	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	args->fcinfo = fcinfo;
	args->nargs = get_func_arg_info(proc, &argtypes, &args->names, &argmodes);
	ReleaseSysCache(proc);
}

static int
arg_number(StmArgs *args, const char *name)
{
	for (int i = 0; i < args->nargs && args->names; i++)
		if (strcmp(args->names[i], name) == 0)
			return i;
	elog(ERROR, "function has no argument \"%s\"", name);
	return -1;					/* keep compiler quiet */
}

/* Was the argument given (not NULL)? */
bool
stm_args_given(StmArgs *args, const char *name)
{
	return !args->fcinfo->args[arg_number(args, name)].isnull;
}

/* The argument's value; a NULL one is an error when required, else (Datum) 0. */
Datum
stm_args_datum(StmArgs *args, const char *name, bool required)
{
	int			i = arg_number(args, name);

	if (args->fcinfo->args[i].isnull)
	{
		if (required)
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not be null", name)));
		return (Datum) 0;
	}
	return args->fcinfo->args[i].value;
}

/* A text argument as a string, or NULL (an error when required). */
char *
stm_args_text(StmArgs *args, const char *name, bool required)
{
	Datum		d = stm_args_datum(args, name, required);

	return stm_args_given(args, name) ? TextDatumGetCString(d) : NULL;
}

/* A keyword argument: case-insensitive, as in Spark. */
char *
stm_args_keyword(StmArgs *args, const char *name, bool required)
{
	return stm_arg_lower(stm_args_text(args, name, required));
}

/* A required boolean argument. */
bool
stm_args_bool(StmArgs *args, const char *name)
{
	return DatumGetBool(stm_args_datum(args, name, true));
}

/* ---- arguments by number ------------------------------------------------ */

void
stm_arg_require(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", argname)));
}

char *
stm_arg_text(FunctionCallInfo fcinfo, int argno)
{
	return PG_ARGISNULL(argno) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * The name argument of the control functions: required.  Their first step,
 * so the catalog's version is checked here, before they read the catalog.
 */
char *
stm_arg_name(FunctionCallInfo fcinfo)
{
	(void) stm_catalog_check_version(ERROR);
	stm_arg_require(fcinfo, 0, "name");
	return stm_arg_text(fcinfo, 0);
}

bool
stm_arg_bool(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	stm_arg_require(fcinfo, argno, argname);
	return PG_GETARG_BOOL(argno);
}

/* Keyword arguments are case-insensitive, as in Spark. */
char *
stm_arg_lower(const char *value)
{
	return value ? str_tolower(value, strlen(value), DEFAULT_COLLATION_OID) : NULL;
}

char *
stm_arg_keyword(FunctionCallInfo fcinfo, int argno)
{
	return stm_arg_lower(stm_arg_text(fcinfo, argno));
}

/* A source's or stream's name: not empty, and short enough to be a table's. */
void
stm_arg_check_name(const char *what, const char *name)
{
	if (name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s name must not be empty", what)));
	if (strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("%s name \"%s\" is too long", what, name),
				 errdetail("Names may be at most %d bytes long.", NAMEDATALEN - 1)));
}

/*
 * Errors raised while an argument is checked by PostgreSQL's own code (a
 * parser, a regex compiler) get a context line naming the argument, and
 * syntax error positions point into the argument's text, not into the
 * calling statement (STM_ARG_ERRCONTEXT_BEGIN in api.h).
 */
void
stm_arg_error_callback(void *arg)
{
	StmArgErrorContext *ctx = arg;
	int			pos = geterrposition();

	if (pos > 0)
	{
		errposition(0);
		internalerrposition(pos);
		internalerrquery(ctx->text);
	}
	errcontext("in argument \"%s\"", ctx->argname);
}

void
stm_arg_check_choice(const char *argname, const char *value, const char *const *choices,
			 const char *hint)
{
	for (int i = 0; choices[i]; i++)
		if (strcmp(value, choices[i]) == 0)
			return;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for %s: \"%s\"", argname, value),
			 errhint("%s", hint)));
}

typedef struct FirstBool
{
	bool		value;
} FirstBool;

static void
first_bool(void *arg, HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, 1, &isnull);

	((FirstBool *) arg)->value = !isnull && DatumGetBool(d);
}

/* Run a boolean check query of one argument ($1), as the caller, search_path pinned. */
bool
stm_arg_check_sql(const char *sql, Oid argtype, Datum arg)
{
	StmSql		q;
	FirstBool	result = {false};

	stm_sql_init(&q, sql);
	stm_sql_param(&q, NULL, argtype, arg, false);
	(void) stm_sql_run(&q, SPI_OK_SELECT, first_bool, &result);
	return result.value;
}

/* Run generated SQL as the caller (user objects: views, sinks), search_path pinned. */
void
stm_api_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	int			nest = stm_catalog_pin_search_path();

	stm_spi_exec(sql, nargs, types, values, nulls, expect);
	stm_catalog_unpin_search_path(nest);
}

/* True when str is valid input for the type; used for nicer messages. */
bool
stm_arg_parses_as(const char *str, Oid typid)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	bool		ok = true;
	Oid			infunc;
	Oid			ioparam;

	getTypeInputInfo(typid, &infunc, &ioparam);
	BeginInternalSubTransaction(NULL);
	PG_TRY();
	{
		(void) OidInputFunctionCall(infunc, (char *) str, ioparam, -1);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		ok = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	CurrentResourceOwner = oldowner;
	return ok;
}

static void
options_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;

	*(Jsonb **) arg = DatumGetJsonbPCopy(SPI_getbinval(tuple, desc, 1, &isnull));
}

/*
 * The calling function's arguments after the first (the name), by their
 * names, as a jsonb object; NULL arguments are left out.  What create
 * functions of sources and sinks store as their options.
 */
Jsonb *
stm_api_arguments_as_options(FunctionCallInfo fcinfo)
{
	HeapTuple	proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	Oid		   *argtypes;
	char	  **argnames;
	char	   *argmodes;
	int			nargs;
	StringInfoData sql;
	StmSql		q;
	Jsonb	   *result = NULL;

	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	nargs = get_func_arg_info(proc, &argtypes, &argnames, &argmodes);
	ReleaseSysCache(proc);

	/* NULL arguments are left out; nulls inside a value (a jsonb) are kept */
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT jsonb_build_object(");
	stm_sql_init(&q, NULL);
	for (int i = 1; i < nargs; i++)
	{
		if (PG_ARGISNULL(i))
			continue;
		appendStringInfo(&sql, "%s%s, :%s", q.nparams > 0 ? ", " : "",
						 quote_literal_cstr(argnames[i]), argnames[i]);
		stm_sql_param(&q, argnames[i], argtypes[i], PG_GETARG_DATUM(i), false);
	}
	appendStringInfoChar(&sql, ')');
	q.sql = sql.data;
	(void) stm_sql_run(&q, SPI_OK_SELECT, options_row, &result);
	if (result == NULL)
		elog(ERROR, "could not gather the arguments");
	return result;
}
