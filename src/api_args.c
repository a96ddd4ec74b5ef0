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

/* Run a boolean check query with one jsonb/text argument. */
bool
stm_arg_check_sql(const char *sql, Oid argtype, Datum arg)
{
	bool		result = false;
	int			nest = stm_catalog_pin_search_path();

	SPI_connect();
	if (SPI_execute_with_args(sql, 1, &argtype, &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "check query failed");
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		result = !isnull && DatumGetBool(d);
	}
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
	return result;
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
	Oid		   *types;
	Datum	   *values;
	int			n;
	Jsonb	   *result;
	int			nest;
	bool		isnull;

	if (!HeapTupleIsValid(proc))
		elog(ERROR, "cache lookup failed for function %u", fcinfo->flinfo->fn_oid);
	nargs = get_func_arg_info(proc, &argtypes, &argnames, &argmodes);
	ReleaseSysCache(proc);

	/* NULL arguments are left out; nulls inside a value (a jsonb) are kept */
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT jsonb_build_object(");
	types = palloc(sizeof(Oid) * nargs);
	values = palloc(sizeof(Datum) * nargs);
	n = 0;
	for (int i = 1; i < nargs; i++)
	{
		if (PG_ARGISNULL(i))
			continue;
		appendStringInfo(&sql, "%s%s, $%d", n > 0 ? ", " : "",
						 quote_literal_cstr(argnames[i]), n + 1);
		types[n] = argtypes[i];
		values[n] = PG_GETARG_DATUM(i);
		n++;
	}
	appendStringInfoChar(&sql, ')');

	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (SPI_execute_with_args(sql.data, n, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "could not gather the arguments");
	/* into the caller's memory context, out of SPI's */
	result = DatumGetJsonbP(SPI_datumTransfer(SPI_getbinval(SPI_tuptable->vals[0],
															SPI_tuptable->tupdesc, 1, &isnull),
											  false, -1));
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
	return result;
}
