/*
 * api.c: SQL-callable functions (SPEC 2.1, 3, 4).
 *
 * Every function checks all of its arguments before it creates anything, so
 * a bad argument leaves nothing behind (and the transaction would roll back
 * anything anyway).  Workers are asked for only after commit, through a
 * transaction callback, so that a worker always sees the committed row;
 * stop() tells the worker to finish its batch and waits for it to exit, and
 * asks for it again if the stopping transaction aborts.
 */
#include "postgres.h"

#include "access/relation.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "parser/parse_type.h"
#include "parser/parser.h"
#include "pgstat.h"
#include "regex/regex.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/regproc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "aggstate.h"
#include "api.h"
#include "dedup.h"
#include "batch.h"
#include "catalog.h"
#include "guc.h"
#include "parse.h"
#include "query.h"
#include "shmem.h"
#include "source_kafka.h"

PG_FUNCTION_INFO_V1(streaming_create_kafka_source);
PG_FUNCTION_INFO_V1(streaming_drop_source);
PG_FUNCTION_INFO_V1(streaming_create_stream);
PG_FUNCTION_INFO_V1(streaming_drop_stream);
PG_FUNCTION_INFO_V1(streaming_start);
PG_FUNCTION_INFO_V1(streaming_stop);
PG_FUNCTION_INFO_V1(streaming_reset);
PG_FUNCTION_INFO_V1(streaming_run_batch);
PG_FUNCTION_INFO_V1(streaming_process_available);
PG_FUNCTION_INFO_V1(streaming_worker_pids);

static const char *const kafka_meta_columns[] = {
	"kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp",
	"kafka_key", "kafka_headers"
};

/* ---- commit-time actions ------------------------------------------------ */

typedef struct PendingWorker
{
	Oid			dboid;
	int32		stream_id;
	Oid			owner;
} PendingWorker;

static List *want_on_commit = NIL;
static List *want_on_abort = NIL;

static void
queue_want(List **list, int32 stream_id, Oid owner)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	PendingWorker *p = palloc(sizeof(PendingWorker));

	p->dboid = MyDatabaseId;
	p->stream_id = stream_id;
	p->owner = owner;
	*list = lappend(*list, p);
	MemoryContextSwitchTo(old);
}

static void
stm_xact_callback(XactEvent event, void *arg)
{
	List	   *apply = NIL;
	ListCell   *lc;

	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
		apply = want_on_commit;
	else if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		apply = want_on_abort;
	else
		return;
	if (stm_shmem_available())
	{
		foreach(lc, apply)
		{
			PendingWorker *p = lfirst(lc);

			(void) stm_shmem_want_stream(p->dboid, p->stream_id, p->owner);
		}
	}
	list_free_deep(want_on_commit);
	list_free_deep(want_on_abort);
	want_on_commit = want_on_abort = NIL;
}

void
stm_api_init(void)
{
	RegisterXactCallback(stm_xact_callback, NULL);
}

/* If this transaction aborts, the stream's worker is wanted again. */
void
stm_api_want_again_on_abort(int32 stream_id, Oid owner)
{
	queue_want(&want_on_abort, stream_id, owner);
}

/*
 * The lock that makes one stream run in one place: a worker holds it for its
 * life (session), run_batch for its transaction.  Returns false if taken.
 */
bool
stm_lock_stream(int32 stream_id, bool session)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, STM_ADVISORY_LOCK_CLASS, (uint32) stream_id, 2);
	return LockAcquire(&tag, ExclusiveLock, session, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Wait for the stream's lock (held by a run_batch in another transaction). */
void
stm_wait_stream_lock(int32 stream_id)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, STM_ADVISORY_LOCK_CLASS, (uint32) stream_id, 2);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}

/* Every dedup key must be a column of the source. */
static void
check_dedup_keys(Oid view, ArrayType *keys)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(keys, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *key = TextDatumGetCString(elems[i]);

		if (get_attnum(view, key) == InvalidAttrNumber)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("dedup key \"%s\" is not a column of source \"%s\"", key, get_rel_name(view))));
	}
}

/* True when the (qualified) relation exists. */
static bool
to_regclass_name(const char *name)
{
	return OidIsValid(RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(name)),
									   NoLock, true));
}

/* ---- argument checks ---------------------------------------------------- */

static void
require_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", argname)));
}

static char *
text_arg(FunctionCallInfo fcinfo, int argno)
{
	return PG_ARGISNULL(argno) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(argno));
}

/*
 * The name argument of the control functions: required.  Their first step,
 * so the catalog's version is checked here, before they read the catalog.
 */
static char *
name_arg(FunctionCallInfo fcinfo)
{
	(void) stm_catalog_check_version(ERROR);
	require_arg(fcinfo, 0, "name");
	return text_arg(fcinfo, 0);
}

static bool
bool_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	require_arg(fcinfo, argno, argname);
	return PG_GETARG_BOOL(argno);
}

/* Keyword arguments are case-insensitive, as in Spark. */
static char *
keyword_arg(FunctionCallInfo fcinfo, int argno)
{
	char	   *v = text_arg(fcinfo, argno);

	return v ? str_tolower(v, strlen(v), DEFAULT_COLLATION_OID) : NULL;
}

/*
 * Errors raised while an argument is checked by PostgreSQL's own code (a
 * parser, a regex compiler) get a context line naming the argument, and
 * syntax error positions point into the argument's text, not into the
 * calling statement.
 */
typedef struct ArgErrorContext
{
	const char *argname;
	const char *text;
} ArgErrorContext;

static void
arg_error_callback(void *arg)
{
	ArgErrorContext *ctx = arg;
	int			pos = geterrposition();

	if (pos > 0)
	{
		errposition(0);
		internalerrposition(pos);
		internalerrquery(ctx->text);
	}
	errcontext("in argument \"%s\"", ctx->argname);
}

#define ARG_ERRCONTEXT_BEGIN(argname_, text_) \
	do { \
		ArgErrorContext argctx_ = {(argname_), (text_)}; \
		ErrorContextCallback errcb_; \
		errcb_.callback = arg_error_callback; \
		errcb_.arg = &argctx_; \
		errcb_.previous = error_context_stack; \
		error_context_stack = &errcb_;
#define ARG_ERRCONTEXT_END() \
		error_context_stack = errcb_.previous; \
	} while (0)

static void
check_choice(const char *argname, const char *value, const char *const *choices,
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
static bool
spi_check(const char *sql, Oid argtype, Datum arg)
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
static void
spi_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	int			nest = stm_catalog_pin_search_path();
	int			rc;

	SPI_connect();
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	if (rc != expect)
		elog(ERROR, "SPI failed (%s): %s", SPI_result_code_string(rc), sql);
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
}

/* Change the catalog: as the extension's owner (catalog.c), after the caller was checked. */
static void
catalog_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	StmCatalogScope scope = stm_catalog_begin();
	int			rc;

	SPI_connect();
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	if (rc != expect)
		elog(ERROR, "SPI failed (%s): %s", SPI_result_code_string(rc), sql);
	SPI_finish();
	stm_catalog_end(scope);
}

/* True when str is valid input for the type; used for nicer messages. */
static bool
parses_as(const char *str, Oid typid)
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
 * Parse 'a bigint, b numeric(10,2)' with PostgreSQL's grammar (as the column
 * list of a CREATE TABLE) and resolve the types.  Returns a ColumnDef list
 * whose typeName carries the resolved type and typmod.
 */
#define COLUMNS_PREFIX_LEN ((int) sizeof("CREATE TABLE streaming_columns (") - 1)

static void
columns_error_callback(void *arg)
{
	ArgErrorContext *ctx = arg;
	int			pos = geterrposition();

	if (pos > COLUMNS_PREFIX_LEN)
	{
		errposition(0);
		internalerrposition(pos - COLUMNS_PREFIX_LEN);
		internalerrquery(ctx->text);
	}
	else if (pos > 0)
		errposition(0);
	errcontext("in argument \"%s\"", ctx->argname);
}

static List *
parse_columns(const char *columns, Oid **types, int32 **typmods)
{
	ErrorContextCallback errcb;
	ArgErrorContext colctx;
	List	   *raw;
	CreateStmt *cs;
	ListCell   *lc;
	int			n = 0;

	/* positions in errors count from the start of the columns text */
	colctx.argname = "columns";
	colctx.text = columns;
	errcb.callback = columns_error_callback;
	errcb.arg = &colctx;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	raw = raw_parser(psprintf("CREATE TABLE streaming_columns (%s)", columns), RAW_PARSE_DEFAULT);
	if (list_length(raw) != 1 || !IsA(linitial_node(RawStmt, raw)->stmt, CreateStmt))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid columns: \"%s\"", columns),
				 errhint("Give a column list such as 'order_id bigint, amount numeric, event_time timestamptz'.")));
	cs = (CreateStmt *) linitial_node(RawStmt, raw)->stmt;
	if (cs->tableElts == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("columns must name at least one column")));
	*types = palloc(sizeof(Oid) * list_length(cs->tableElts));
	*typmods = palloc(sizeof(int32) * list_length(cs->tableElts));
	foreach(lc, cs->tableElts)
	{
		ColumnDef  *col = (ColumnDef *) lfirst(lc);

		if (!IsA(col, ColumnDef) || col->constraints != NIL || col->raw_default ||
			col->collClause)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("columns may only give names and types"),
					 errdetail("The columns given were \"%s\".", columns)));
		for (int i = 0; i < (int) lengthof(kafka_meta_columns); i++)
			if (strcmp(col->colname, kafka_meta_columns[i]) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column name \"%s\" is reserved for Kafka metadata", col->colname)));
		for (ListCell *lc2 = list_head(cs->tableElts); lfirst(lc2) != col; lc2 = lnext(cs->tableElts, lc2))
			if (strcmp(((ColumnDef *) lfirst(lc2))->colname, col->colname) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column \"%s\" is given more than once in columns", col->colname)));
		typenameTypeIdAndMod(NULL, col->typeName, &(*types)[n], &(*typmods)[n]);
		n++;
	}
	error_context_stack = errcb.previous;
	return cs->tableElts;
}

static char *
qualified_type(Oid typid, int32 typmod)
{
	return format_type_extended(typid, typmod,
								FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
}

/* ---- sources ------------------------------------------------------------ */

Datum
streaming_create_kafka_source(PG_FUNCTION_ARGS)
{
	static const char *const formats[] = {"json", "csv", "text", "bytes", NULL};
	static const char *const bad_record_choices[] = {"dead_letter", "skip", "fail", NULL};
	char	   *name;
	char	   *bootstrap;
	char	   *topic_pattern = text_arg(fcinfo, 3);
	char	   *starting = text_arg(fcinfo, 5);
	char	   *starting_kw = keyword_arg(fcinfo, 5);
	char	   *format;
	char	   *columns = text_arg(fcinfo, 7);
	char	   *on_bad_record;
	int			nmodes = 0;
	RangeVar   *rv;
	Oid			nspid;
	char	   *qualified;
	StringInfoData view_sql;
	Oid			view;
	Datum		values[17];
	char		nulls[17];
	Oid			types[17] = {TEXTOID, OIDOID, TEXTOID, TEXTARRAYOID, TEXTOID, JSONBOID, TEXTOID,
		TEXTOID, TEXTOID, INT8OID, INT8OID, INTERVALOID, BOOLOID, BOOLOID, TEXTOID, JSONBOID, OIDOID};

	(void) stm_catalog_check_version(ERROR);
	require_arg(fcinfo, 0, "name");
	require_arg(fcinfo, 1, "bootstrap_servers");
	require_arg(fcinfo, 5, "starting_offsets");
	require_arg(fcinfo, 6, "format");
	require_arg(fcinfo, 10, "max_trigger_delay");
	require_arg(fcinfo, 11, "fail_on_data_loss");
	require_arg(fcinfo, 12, "include_headers");
	require_arg(fcinfo, 13, "on_bad_record");
	require_arg(fcinfo, 14, "kafka_options");
	name = text_arg(fcinfo, 0);
	bootstrap = text_arg(fcinfo, 1);
	format = keyword_arg(fcinfo, 6);
	on_bad_record = keyword_arg(fcinfo, 13);
	if (strcmp(starting_kw, "earliest") == 0 || strcmp(starting_kw, "latest") == 0)
		starting = starting_kw;

	if (name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("source name must not be empty")));
	if (strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("source name \"%s\" is too long", name),
				 errdetail("Names may be at most %d bytes long.", NAMEDATALEN - 1)));
	if (stm_catalog_source_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("source \"%s\" already exists", name)));
	if (bootstrap[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bootstrap_servers must not be empty"),
				 errhint("Give a comma-separated list of host:port.")));

	nmodes = !PG_ARGISNULL(2) + !PG_ARGISNULL(3) + !PG_ARGISNULL(4);
	if (nmodes != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("exactly one of topics, topic_pattern and partitions must be given"),
				 errdetail("%d of them were given.", nmodes)));
	if (!PG_ARGISNULL(2) &&
		!spi_check("SELECT cardinality($1) > 0 AND NOT EXISTS (SELECT 1 FROM unnest($1) t WHERE t IS NULL OR t = '')",
				   TEXTARRAYOID, PG_GETARG_DATUM(2)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("topics must be a non-empty array of topic names"),
				 errhint("For example ARRAY['orders'].")));
	if (topic_pattern)
	{
		if (topic_pattern[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("topic_pattern must not be empty")));
		/* compiles the pattern: an invalid one raises its own error */
		ARG_ERRCONTEXT_BEGIN("topic_pattern", topic_pattern);
		(void) RE_compile_and_execute(cstring_to_text(topic_pattern), "", 0,
									  REG_ADVANCED, C_COLLATION_OID, 0, NULL);
		ARG_ERRCONTEXT_END();
	}
	if (!PG_ARGISNULL(4) &&
		!spi_check("SELECT jsonb_typeof($1) = 'object' AND $1 <> '{}' AND NOT EXISTS ("
				   "SELECT 1 FROM jsonb_each($1) t WHERE jsonb_typeof(t.value) <> 'array' "
				   "OR jsonb_array_length(t.value) = 0 OR EXISTS (SELECT 1 FROM jsonb_array_elements(t.value) e "
				   "WHERE jsonb_typeof(e) <> 'number' OR e::numeric < 0 OR e::numeric <> trunc(e::numeric)))",
				   JSONBOID, PG_GETARG_DATUM(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partitions must map topic names to arrays of partition numbers"),
				 errhint("For example '{\"orders\": [0, 1, 2]}'.")));

	if (strcmp(starting, "earliest") != 0 && strcmp(starting, "latest") != 0)
	{
		if (!parses_as(starting, JSONBOID) ||
			!spi_check("SELECT jsonb_typeof($1::jsonb) = 'object' AND NOT EXISTS ("
					   "SELECT 1 FROM jsonb_each($1::jsonb) t WHERE jsonb_typeof(t.value) <> 'object' "
					   "OR EXISTS (SELECT 1 FROM jsonb_each(t.value) p WHERE p.key !~ '^[0-9]+$' "
					   "OR jsonb_typeof(p.value) <> 'number' OR p.value::numeric < -2 "
					   "OR p.value::numeric <> trunc(p.value::numeric)))",
					   TEXTOID, CStringGetTextDatum(starting)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid value for starting_offsets: \"%s\"", starting),
					 errhint("Use 'earliest', 'latest' or JSON such as '{\"orders\": {\"0\": 42, \"1\": -2}}' (-2 is earliest, -1 latest).")));
	}

	check_choice("format", format, formats,
				 "Valid formats are \"json\", \"csv\", \"text\" and \"bytes\".");
	if (strcmp(format, "csv") == 0 && columns == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("format \"csv\" needs columns"),
				 errhint("Give the columns in order, for example columns => 'order_id bigint, amount numeric'.")));
	if ((strcmp(format, "text") == 0 || strcmp(format, "bytes") == 0) && columns != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("format \"%s\" does not take columns", format),
				 errdetail("Records of this format appear as one column named value.")));
	if (!PG_ARGISNULL(8) && PG_GETARG_INT64(8) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_offsets_per_trigger must be greater than zero"),
				 errdetail("The value given was " INT64_FORMAT ".", PG_GETARG_INT64(8))));
	if (!PG_ARGISNULL(9) && PG_GETARG_INT64(9) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_offsets_per_trigger must be greater than zero"),
				 errdetail("The value given was " INT64_FORMAT ".", PG_GETARG_INT64(9))));
	if (!spi_check("SELECT $1 > interval '0'", INTERVALOID, PG_GETARG_DATUM(10)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_trigger_delay must be greater than zero")));
	check_choice("on_bad_record", on_bad_record, bad_record_choices,
				 "Valid values are \"dead_letter\", \"skip\" and \"fail\".");

	/* kafka_options: an object of scalars that librdkafka accepts */
	{
		Datum		opts = PG_GETARG_DATUM(14);
		List	   *pairs;
		ListCell   *lc;
		int			nest;

		if (!spi_check("SELECT jsonb_typeof($1) = 'object' AND NOT EXISTS ("
					   "SELECT 1 FROM jsonb_each($1) t WHERE jsonb_typeof(t.value) IN ('object', 'array', 'null'))",
					   JSONBOID, opts))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("kafka_options must be a JSON object of strings, numbers or booleans"),
					 errhint("For example '{\"security.protocol\": \"SASL_SSL\"}'.")));
		nest = stm_catalog_pin_search_path();
		SPI_connect();
		{
			Oid			t = JSONBOID;

			if (SPI_execute_with_args("SELECT key, value FROM jsonb_each_text($1)", 1, &t, &opts,
									  NULL, true, 0) != SPI_OK_SELECT)
				elog(ERROR, "could not read kafka_options");
		}
		pairs = NIL;
		for (uint64 i = 0; i < SPI_processed; i++)
		{
			char	  **kv = SPI_palloc(sizeof(char *) * 2);

			kv[0] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
			kv[1] = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
			pairs = lappend(pairs, kv);
		}
		foreach(lc, pairs)
		{
			char	  **kv = (char **) lfirst(lc);

			stm_kafka_check_option(kv[0], kv[1], GetUserId());
		}
		SPI_finish();
		stm_catalog_unpin_search_path(nest);
	}

	/* the view: the declared columns (or value), then the metadata */
	rv = makeRangeVar(NULL, name, -1);
	nspid = RangeVarGetCreationNamespace(rv);
	qualified = quote_qualified_identifier(get_namespace_name(nspid), name);
	initStringInfo(&view_sql);
	appendStringInfo(&view_sql, "CREATE VIEW %s AS SELECT ", qualified);
	if (columns)
	{
		Oid		   *coltypes;
		int32	   *coltypmods;
		List	   *cols = parse_columns(columns, &coltypes, &coltypmods);
		int			i = 0;

		ListCell   *lc;

		foreach(lc, cols)
		{
			ColumnDef  *col = lfirst_node(ColumnDef, lc);

			appendStringInfo(&view_sql, "CAST(NULL AS %s) AS %s, ",
							 qualified_type(coltypes[i], coltypmods[i]),
							 quote_identifier(col->colname));
			i++;
		}
	}
	else if (strcmp(format, "json") == 0)
		appendStringInfoString(&view_sql, "CAST(NULL AS pg_catalog.jsonb) AS value, ");
	else if (strcmp(format, "text") == 0)
		appendStringInfoString(&view_sql, "CAST(NULL AS pg_catalog.text) AS value, ");
	else
		appendStringInfoString(&view_sql, "CAST(NULL AS pg_catalog.bytea) AS value, ");
	appendStringInfoString(&view_sql,
						   "CAST(NULL AS pg_catalog.text) AS kafka_topic, "
						   "CAST(NULL AS pg_catalog.int4) AS kafka_partition, "
						   "CAST(NULL AS pg_catalog.int8) AS kafka_offset, "
						   "CAST(NULL AS pg_catalog.timestamptz) AS kafka_timestamp, "
						   "CAST(NULL AS pg_catalog.bytea) AS kafka_key");
	if (PG_GETARG_BOOL(12))
		appendStringInfoString(&view_sql, ", CAST(NULL AS pg_catalog.jsonb) AS kafka_headers");
	appendStringInfoString(&view_sql, " WHERE false");
	spi_exec(view_sql.data, 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	CommandCounterIncrement();
	view = get_relname_relid(name, nspid);
	/* DROP EXTENSION ... CASCADE takes the source views with it */
	{
		ObjectAddress view_addr;
		ObjectAddress ext_addr;

		ObjectAddressSet(view_addr, RelationRelationId, view);
		ObjectAddressSet(ext_addr, ExtensionRelationId, get_extension_oid("streaming", false));
		recordDependencyOn(&view_addr, &ext_addr, DEPENDENCY_NORMAL);
	}
	spi_exec(psprintf("COMMENT ON VIEW %s IS %s", qualified,
					  quote_literal_cstr(psprintf("Columns of streaming source \"%s\"; stream queries read it, selecting from it returns no rows.", name))),
			 0, NULL, NULL, NULL, SPI_OK_UTILITY);

	for (int i = 0; i < 16; i++)
		nulls[i] = ' ';
	values[0] = CStringGetTextDatum(name);
	values[1] = ObjectIdGetDatum(view);
	values[2] = CStringGetTextDatum(bootstrap);
	/* arguments 2..14 map to parameters 4..16 */
	for (int arg = 2; arg <= 14; arg++)
	{
		int			param = arg + 1;

		if (PG_ARGISNULL(arg))
			nulls[param] = 'n';
		else
			values[param] = PG_GETARG_DATUM(arg);
	}
	/* keywords are stored as normalised */
	values[6] = CStringGetTextDatum(starting);
	values[7] = CStringGetTextDatum(format);
	values[14] = CStringGetTextDatum(on_bad_record);
	values[16] = ObjectIdGetDatum(GetUserId());
	nulls[16] = ' ';
	catalog_exec("INSERT INTO streaming.sources (name, kind, view, options, owner) VALUES ($1, 'kafka', $2::oid::regclass, "
			 "jsonb_strip_nulls(jsonb_build_object('bootstrap_servers', $3, 'topics', to_jsonb($4), "
			 "'topic_pattern', $5, 'partitions', $6, 'starting_offsets', $7, 'format', $8, 'columns', $9, "
			 "'max_offsets_per_trigger', $10, 'min_offsets_per_trigger', $11, 'max_trigger_delay', $12::text, "
			 "'fail_on_data_loss', $13, 'include_headers', $14, 'on_bad_record', $15, 'kafka_options', $16)), "
			 "$17::oid::regrole)",
			 17, types, values, nulls, SPI_OK_INSERT);
	PG_RETURN_VOID();
}

/* Drop a source the caller was checked for: refused while streams read it. */
void
stm_api_drop_source(StmSourceDef *src)
{
	Oid			type = TEXTOID;
	Datum		arg = CStringGetTextDatum(src->name);
	List	   *users;

	users = stm_catalog_source_option_list(src->name,
										   "SELECT string_agg(quote_ident(d.name), ', ' ORDER BY d.name) "
										   "FROM streaming.stream_defs d WHERE d.source = s.name HAVING count(*) > 0");
	if (users != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("source \"%s\" is used by streams", src->name),
				 errdetail("Streams reading it: %s.", ((char **) linitial(users))[0]),
				 errhint("Drop those streams first with streaming.drop_stream().")));
	catalog_exec("DELETE FROM streaming.sources WHERE name = $1", 1, &type, &arg, NULL, SPI_OK_DELETE);
	if (get_rel_name(src->view) != NULL)
		spi_exec(psprintf("DROP VIEW %s",
						  quote_qualified_identifier(get_namespace_name(get_rel_namespace(src->view)),
													 get_rel_name(src->view))),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
}

Datum
streaming_drop_source(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	StmSourceDef *src = stm_catalog_get_source(name, false);

	stm_catalog_check_owner("source", name, src->owner);
	stm_api_drop_source(src);
	PG_RETURN_VOID();
}

/* ---- streams ------------------------------------------------------------ */

static void
require_workers(const char *stream)
{
	if (!stm_shmem_available())
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("streaming must be loaded via shared_preload_libraries to start stream \"%s\"", stream),
				 errhint("Add streaming to shared_preload_libraries in postgresql.conf and restart the server, "
						 "or create the stream with start => false and run its batches with streaming.run_batch().")));
}

/*
 * What aggregate streams need: a watermark on the window's event time (or,
 * without a window, on event_time, which closes groups only when it is a
 * GROUP BY column); every window and group column in the select list (they
 * key the sink).  Returns the event-time column to store: the window's
 * when there is a watermark, or event_time.
 */
static char *
check_aggregate_stream(StmQueryInfo *qi, const char *output_mode, bool has_watermark,
					   const char *event_time, const char *late_rows)
{
	StmAggQuery *agg = qi->agg;
	bool		in_output[FUNC_MAX_ARGS + 1] = {false};
	char	   *window_column = NULL;

	if (agg->window.kind != STM_WINDOW_NONE)
		window_column = get_attname(qi->source_view, ((Var *) agg->window.ts)->varattno, false);
	if (strcmp(output_mode, "append") == 0 && !has_watermark)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"append\" needs a watermark on an aggregate query"),
				 errdetail("In append mode a group's row is written once, when the watermark closes its window."),
				 errhint("Give watermark => '10 minutes', or use output_mode 'update' or 'complete'.")));
	if (window_column == NULL)
	{
		AttrNumber	attno = event_time ? get_attnum(qi->source_view, event_time) : InvalidAttrNumber;

		/* without a window, groups close only when the event time is one of them (as Spark) */
		if (strcmp(output_mode, "append") == 0 && stm_agg_time_key(agg, attno) < 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("output_mode \"append\" needs the event-time column among the GROUP BY columns of a query without a window"),
					 errdetail("In append mode a group's row is written once, when the watermark passes its event time."),
					 errhint("Group by a window call such as streaming.tumble(event_time, '5 minutes'), "
							 "or by the event_time column itself, or use output_mode 'update' or 'complete'.")));
	}
	else if (event_time && strcmp(event_time, window_column) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event_time of a windowed query must name the window's column \"%s\"", window_column),
				 errdetail("The event_time given was \"%s\".", event_time)));
	if (agg->nkeys > FUNC_MAX_ARGS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a stream query may group by at most %d expressions", FUNC_MAX_ARGS)));
	for (int i = 0; i < qi->noutputs; i++)
		if (agg->out_group_col[i] >= 0)
			in_output[agg->out_group_col[i]] = true;
	if (agg->window.kind != STM_WINDOW_NONE && !in_output[0])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the select list of an aggregate stream must include the window"),
				 errhint("Add streaming.window_start() AS window_start: the sink's key is the window and the groups.")));
	for (int k = 1; k <= agg->nkeys; k++)
		if (!in_output[k])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the select list of an aggregate stream must include every GROUP BY expression"),
					 errdetail("GROUP BY expression %d is not in the select list.", k),
					 errhint("The sink's key is the window and the groups.")));
	if (window_column == NULL)
		return event_time ? pstrdup(event_time) : NULL;
	return has_watermark ? window_column : NULL;
}

Datum
streaming_create_stream(PG_FUNCTION_ARGS)
{
	static const char *const modes[] = {"append", "update", "complete", NULL};
	static const char *const late_choices[] = {"drop", "keep", NULL};
	char	   *name;
	char	   *query;
	char	   *sink_name;
	char	   *output_mode;
	char	   *event_time = text_arg(fcinfo, 5);
	char	   *trigger;
	char	   *late_rows;
	bool		start;
	int64		interval_ms;
	StmQueryInfo *qi;
	StmSourceDef *src;
	RangeVar   *sink_rv;
	Oid			sink_oid;
	Datum		values[16];
	char		nulls[16];
	Oid			types[16] = {TEXTOID, TEXTOID, TEXTOID, OIDOID, TEXTOID, INTERVALOID, TEXTOID,
		TEXTOID, TEXTOID, INTERVALOID, BOOLOID, TEXTOID, OIDOID, TEXTARRAYOID, BOOLOID, OIDOID};
	int32		stream_id;
	StmCatalogScope scope;

	(void) stm_catalog_check_version(ERROR);
	require_arg(fcinfo, 0, "name");
	require_arg(fcinfo, 1, "query");
	require_arg(fcinfo, 3, "output_mode");
	require_arg(fcinfo, 7, "dedup_within_watermark");
	require_arg(fcinfo, 8, "trigger");
	require_arg(fcinfo, 10, "late_rows");
	require_arg(fcinfo, 12, "start");
	name = text_arg(fcinfo, 0);
	query = text_arg(fcinfo, 1);
	sink_name = PG_ARGISNULL(2) ? name : text_arg(fcinfo, 2);
	output_mode = keyword_arg(fcinfo, 3);
	trigger = text_arg(fcinfo, 8);
	late_rows = keyword_arg(fcinfo, 10);
	start = PG_GETARG_BOOL(12);

	if (name[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("stream name must not be empty")));
	if (strlen(name) >= NAMEDATALEN)
		ereport(ERROR,
				(errcode(ERRCODE_NAME_TOO_LONG),
				 errmsg("stream name \"%s\" is too long", name),
				 errdetail("Names may be at most %d bytes long.", NAMEDATALEN - 1)));
	if (stm_catalog_stream_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("stream \"%s\" already exists", name)));
	check_choice("output_mode", output_mode, modes,
				 "Valid output modes are \"append\", \"update\" and \"complete\".");
	check_choice("late_rows", late_rows, late_choices,
				 "Valid values are \"drop\" and \"keep\".");
	if (pg_strcasecmp(trigger, "available_now") != 0 && pg_strcasecmp(trigger, "once") != 0 &&
		!parses_as(trigger, INTERVALOID))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid trigger \"%s\"", trigger),
				 errhint("Use a processing-time interval such as '30 seconds' (or '0'), 'available_now' or 'once'.")));
	(void) stm_catalog_parse_trigger(trigger, &interval_ms);
	if (!PG_ARGISNULL(6) &&
		!spi_check("SELECT cardinality($1) > 0 AND NOT EXISTS (SELECT 1 FROM unnest($1) k WHERE k IS NULL OR k = '')",
				   TEXTARRAYOID, PG_GETARG_DATUM(6)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_keys must be a non-empty array of source column names")));
	if (PG_GETARG_BOOL(7) && (PG_ARGISNULL(6) || PG_ARGISNULL(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("dedup_within_watermark needs dedup_keys and a watermark")));
	if (!PG_ARGISNULL(9))
	{
		Oid			fn = PG_GETARG_OID(9);
		HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
		Form_pg_proc proc;

		if (!HeapTupleIsValid(tup))
			elog(ERROR, "cache lookup failed for function %u", fn);
		proc = (Form_pg_proc) GETSTRUCT(tup);
		if (proc->pronargs != 2 || proc->proargtypes.values[0] != INT8OID ||
			proc->proargtypes.values[1] != REGCLASSOID || proc->prokind != PROKIND_FUNCTION)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("sink_function %s must be a function of (batch_id bigint, batch regclass)",
							format_procedure(fn))));
		ReleaseSysCache(tup);
		if (!PG_ARGISNULL(2))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a stream with a sink_function has no sink table"),
					 errhint("Give either sink or sink_function.")));
		if (pg_proc_aclcheck(fn, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied for function %s", format_procedure(fn))));
	}
	if (!PG_ARGISNULL(4) && !spi_check("SELECT $1 >= interval '0'", INTERVALOID, PG_GETARG_DATUM(4)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("watermark must not be negative")));
	if (!PG_ARGISNULL(11) && !spi_check("SELECT $1 > interval '0'", INTERVALOID, PG_GETARG_DATUM(11)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle_timeout must be greater than zero")));
	if (!PG_ARGISNULL(11) && PG_ARGISNULL(4))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("idle_timeout needs a watermark"),
				 errdetail("idle_timeout advances the watermark while the source is idle."),
				 errhint("Give watermark => '10 minutes' too.")));
	if (start)
		require_workers(name);

	/* the query, through PostgreSQL's parser and analyser */
	ARG_ERRCONTEXT_BEGIN("query", query);
	qi = stm_query_analyze(query);
	ARG_ERRCONTEXT_END();
	src = stm_catalog_get_source_by_view(qi->source_view);
	if (src == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("relation \"%s\" is not a streaming source", get_rel_name(qi->source_view)),
				 errhint("Create sources with streaming.create_kafka_source().")));
	ExecCheckRTPerms(qi->query->rtable, true);
	if (qi->agg == NULL && strcmp(output_mode, "complete") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("output_mode \"complete\" needs an aggregate query"),
				 errdetail("A query without aggregates writes each input row once; use \"append\".")));
	if (qi->agg)
		event_time = check_aggregate_stream(qi, output_mode, !PG_ARGISNULL(4), event_time,
											late_rows);
	if (!PG_ARGISNULL(4) && event_time == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("watermark needs an event-time column"),
				 errhint("Give event_time => 'column' naming a timestamptz column of source \"%s\".", src->name)));
	if (event_time)
	{
		Relation	view = relation_open(src->view, AccessShareLock);
		TupleDesc	desc = RelationGetDescr(view);
		int			found = -1;

		for (int i = 0; i < desc->natts; i++)
			if (strcmp(NameStr(TupleDescAttr(desc, i)->attname), event_time) == 0)
				found = i;
		if (found < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("event_time column \"%s\" does not exist in source \"%s\"", event_time, src->name)));
		if (TupleDescAttr(desc, found)->atttypid != TIMESTAMPTZOID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of source \"%s\" must be of type timestamptz", event_time, src->name),
					 errdetail("It is of type %s.", format_type_be(TupleDescAttr(desc, found)->atttypid))));
		relation_close(view, NoLock);
	}

	/* the sink: an existing compatible table, or a new one */
	/* the default sink is named exactly like the stream; a given one is SQL */
	if (PG_ARGISNULL(2))
		sink_rv = makeRangeVar(NULL, name, -1);
	else
	{
		ARG_ERRCONTEXT_BEGIN("sink", sink_name);
		sink_rv = makeRangeVarFromNameList(stringToQualifiedNameList(sink_name));
		ARG_ERRCONTEXT_END();
	}
	sink_oid = PG_ARGISNULL(9) ? RangeVarGetRelid(sink_rv, RowExclusiveLock, true) : InvalidOid;
	if (!PG_ARGISNULL(9))
		;						/* foreachBatch: no sink table */
	else if (OidIsValid(sink_oid))
	{
		Relation	rel = table_open(sink_oid, NoLock);

		if (rel->rd_rel->relkind != RELKIND_RELATION &&
			rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
			ereport(ERROR,
					(errcode(ERRCODE_WRONG_OBJECT_TYPE),
					 errmsg("sink \"%s\" is not a table", sink_name)));
		stm_query_check_sink(qi, rel, name, qi->agg && strcmp(output_mode, "update") == 0);
		table_close(rel, NoLock);
	}
	else
	{
		Oid			nspid = RangeVarGetCreationNamespace(sink_rv);
		char	   *qualified = quote_qualified_identifier(get_namespace_name(nspid), sink_rv->relname);

		spi_exec(stm_query_sink_ddl(qi, qualified, strcmp(output_mode, "append") != 0),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
		CommandCounterIncrement();
		sink_oid = get_relname_relid(sink_rv->relname, nspid);
	}

	for (int i = 0; i < 15; i++)
		nulls[i] = ' ';
	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(src->name);
	values[2] = CStringGetTextDatum(query);
	values[3] = ObjectIdGetDatum(sink_oid);
	if (!OidIsValid(sink_oid))
		nulls[3] = 'n';
	values[12] = PG_ARGISNULL(9) ? (Datum) 0 : PG_GETARG_DATUM(9);
	nulls[12] = PG_ARGISNULL(9) ? 'n' : ' ';
	values[13] = PG_ARGISNULL(6) ? (Datum) 0 : PG_GETARG_DATUM(6);
	nulls[13] = PG_ARGISNULL(6) ? 'n' : ' ';
	values[14] = BoolGetDatum(PG_GETARG_BOOL(7));
	values[4] = CStringGetTextDatum(output_mode);
	if (PG_ARGISNULL(4))
		nulls[5] = 'n';
	else
		values[5] = PG_GETARG_DATUM(4);
	if (event_time)
		values[6] = CStringGetTextDatum(event_time);
	else
		nulls[6] = 'n';
	values[7] = CStringGetTextDatum(trigger);
	values[8] = CStringGetTextDatum(late_rows);
	if (PG_ARGISNULL(11))
		nulls[9] = 'n';
	else
		values[9] = PG_GETARG_DATUM(11);
	values[10] = BoolGetDatum(start);
	values[11] = CStringGetTextDatum(GetConfigOption("search_path", false, false));

	values[15] = ObjectIdGetDatum(GetUserId());
	nulls[15] = ' ';
	scope = stm_catalog_begin();
	SPI_connect();
	if (SPI_execute_with_args("INSERT INTO streaming.stream_defs (name, source, query, sink, output_mode, "
							  "watermark_delay, event_time, trigger, late_rows, idle_timeout, enabled, status, search_path, "
							  "sink_function, dedup_keys, dedup_within_watermark, owner) "
							  "VALUES ($1, $2, $3, $4::oid::regclass, $5, $6, $7, $8, $9, $10, $11, "
							  "CASE WHEN $11 THEN 'running' ELSE 'stopped' END, $12, $13::oid::regprocedure, $14, $15, "
							  "$16::oid::regrole) RETURNING id",
							  16, types, values, nulls, false, 0) != SPI_OK_INSERT_RETURNING)
		elog(ERROR, "could not insert into streaming.stream_defs");
	{
		bool		isnull;

		stream_id = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	}
	SPI_finish();
	stm_catalog_end(scope);

	if (qi->agg)
		stm_aggstate_create(stream_id, qi->agg, GetUserId());
	if (!PG_ARGISNULL(6))
	{
		check_dedup_keys(src->view, PG_GETARG_ARRAYTYPE_P(6));
		stm_dedup_create(stream_id, GetUserId());
	}
	if (start)
		queue_want(&want_on_commit, stream_id, GetUserId());
	PG_RETURN_VOID();
}

/*
 * Ask the stream's worker to finish its batch and exit, and wait until it
 * has.  If this transaction aborts, the worker is asked for again.
 */
static void
stop_worker(StmStreamDef *def)
{
	TimestampTz deadline;

	if (!stm_shmem_available())
		return;
	if (def->enabled)
		queue_want(&want_on_abort, def->id, def->owner);
	stm_shmem_unwant_stream(MyDatabaseId, def->id);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60 * 1000);
	while (stm_shmem_stream_pid(MyDatabaseId, def->id) != 0)
	{
		if (GetCurrentTimestamp() > deadline)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("timed out waiting for the worker of stream \"%s\" to stop", def->name)));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 10, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* The stream's state and dedup tables: dropped, or emptied (reset). */
static void
clear_state_tables(int32 stream_id, bool drop)
{
	char	   *tables[2] = {stm_aggstate_table(stream_id), stm_dedup_table(stream_id)};

	for (int i = 0; i < 2; i++)
		if (to_regclass_name(tables[i]))
			spi_exec(psprintf(drop ? "DROP TABLE %s" : "DELETE FROM %s", tables[i]),
					 0, NULL, NULL, NULL, drop ? SPI_OK_UTILITY : SPI_OK_DELETE);
}

/*
 * Drop a stream the caller was checked for: stop its worker, then its row
 * (positions, history, dead letters and late rows go with it: ON DELETE
 * CASCADE), its state tables and, with drop_sink, its sink table.
 */
void
stm_api_drop_stream(StmStreamDef *def, bool drop_sink)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);
	const char *name = def->name;

	stop_worker(def);
	def = stm_catalog_get_stream_by_id(def->id, true);
	if (def == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" was dropped meanwhile", name)));
	catalog_exec("DELETE FROM streaming.stream_defs WHERE id = $1", 1, &type, &value, NULL, SPI_OK_DELETE);
	clear_state_tables(def->id, true);
	if (drop_sink && OidIsValid(def->sink) && get_rel_name(def->sink) != NULL)
		spi_exec(psprintf("DROP TABLE %s",
						  quote_qualified_identifier(get_namespace_name(get_rel_namespace(def->sink)),
													 get_rel_name(def->sink))),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
}

Datum
streaming_drop_stream(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	bool		drop_sink = bool_arg(fcinfo, 1, "drop_sink");
	StmStreamDef *def = stm_catalog_get_stream(name, false);

	stm_catalog_check_owner("stream", name, def->owner);
	stm_api_drop_stream(def, drop_sink);
	PG_RETURN_VOID();
}

Datum
streaming_start(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);

	stm_catalog_check_owner("stream", name, def->owner);
	require_workers(name);
	catalog_exec("UPDATE streaming.stream_defs SET enabled = true, status = 'running', "
			 "failures = 0, last_error = NULL WHERE id = $1",
			 1, &type, &value, NULL, SPI_OK_UPDATE);
	queue_want(&want_on_commit, def->id, def->owner);
	PG_RETURN_VOID();
}

Datum
streaming_stop(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);

	stm_catalog_check_owner("stream", name, def->owner);
	stop_worker(def);
	catalog_exec("UPDATE streaming.stream_defs SET enabled = false, status = 'stopped' WHERE id = $1",
			 1, &type, &value, NULL, SPI_OK_UPDATE);
	PG_RETURN_VOID();
}

Datum
streaming_reset(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(def->id);

	stm_catalog_check_owner("stream", name, def->owner);
	if (stm_shmem_stream_pid(MyDatabaseId, def->id) != 0 || !stm_lock_stream(def->id, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("stream \"%s\" is running", name),
				 errhint("Stop it first with streaming.stop().")));
	(void) stm_catalog_get_stream_by_id(def->id, true);
	catalog_exec("DELETE FROM streaming.offsets WHERE stream_id = $1", 1, &type, &value, NULL, SPI_OK_DELETE);
	catalog_exec("DELETE FROM streaming.batches WHERE stream_id = $1", 1, &type, &value, NULL, SPI_OK_DELETE);
	clear_state_tables(def->id, false);
	catalog_exec("UPDATE streaming.stream_defs SET last_batch_id = NULL, watermark = NULL, failures = 0, "
			 "positions_initialized = false, no_data_batch_due = false, idle_clock_at = now(), "
			 "last_error = NULL, source_error = NULL, "
			 "status = CASE WHEN enabled THEN status ELSE 'stopped' END WHERE id = $1",
			 1, &type, &value, NULL, SPI_OK_UPDATE);
	PG_RETURN_VOID();
}

Datum
streaming_run_batch(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	StmRuntime *rt;
	int64		batch_id;

	stm_catalog_check_owner("stream", name, def->owner);
	/* a worker holds the lock for its life: refuse; another run_batch: wait */
	if (stm_shmem_stream_pid(MyDatabaseId, def->id) == 0)
		stm_wait_stream_lock(def->id);
	if (!stm_lock_stream(def->id, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("stream \"%s\" is being run by a background worker", name),
				 errhint("Stop it with streaming.stop() to run batches by hand, or wait with streaming.process_available().")));
	rt = stm_runtime_create(def->id);
	rt->started_at = 0;			/* waits count from the last batch only */
	batch_id = stm_batch_run(rt);
	stm_kafka_close(rt->kafka);
	if (batch_id < 0)
		PG_RETURN_NULL();
	PG_RETURN_INT64(batch_id);
}

/*
 * Wait until the stream's worker has committed every record that was in the
 * source when the call started (Spark's processAllAvailable).
 */
Datum
streaming_process_available(PG_FUNCTION_ARGS)
{
	char	   *name = name_arg(fcinfo);
	Interval   *timeout = (require_arg(fcinfo, 1, "timeout"), PG_GETARG_INTERVAL_P(1));
	StmStreamDef *def = stm_catalog_get_stream(name, false);
	StmKafka   *kc;
	TimestampTz deadline;
	int64		timeout_ms;
	StringInfoData targets;
	ListCell   *lc;
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];

	stm_catalog_check_owner("stream", name, def->owner);
	timeout_ms = timeout->time / 1000 + (int64) timeout->day * 86400000 +
		(int64) timeout->month * 30 * 86400000;
	if (timeout_ms <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must be greater than zero")));
	if (!def->enabled && strcmp(def->status, "finished") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("stream \"%s\" is not running", name),
				 errhint("Start it with streaming.start(), or run its batches with streaming.run_batch().")));

	/* what is available now: every partition's high watermark */
	kc = stm_kafka_open(stm_catalog_get_source_of_stream(def), def->owner, false);
	stm_kafka_refresh_partitions(kc);
	initStringInfo(&targets);
	appendStringInfoChar(&targets, '[');
	stm_kafka_query_watermarks(kc);
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);
		int64		hi = p->high;

		if (hi == 0)
			continue;
		appendStringInfo(&targets, "%s{\"topic\": ", targets.len > 1 ? ", " : "");
		escape_json(&targets, p->topic);
		appendStringInfo(&targets, ", \"partition\": %d, \"offset\": " INT64_FORMAT "}",
						 p->partition, hi);
	}
	appendStringInfoChar(&targets, ']');
	stm_kafka_close(kc);

	values[0] = Int32GetDatum(def->id);
	values[1] = CStringGetTextDatum(targets.data);
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	for (;;)
	{
		bool		done = false;
		char	   *status = NULL;
		char	   *last_error = NULL;
		int			nest = stm_catalog_pin_search_path();

		SPI_connect();
		if (SPI_execute_with_args("SELECT NOT EXISTS (SELECT 1 FROM jsonb_to_recordset($2::jsonb) "
								  "AS t(topic text, partition int, \"offset\" bigint) "
								  "LEFT JOIN streaming.offsets o ON o.stream_id = $1 AND o.topic = t.topic "
								  "AND o.partition = t.partition WHERE coalesce(o.next_offset, -1) < t.\"offset\") "
								  "AND NOT d.no_data_batch_due, "
								  "d.status, d.last_error FROM streaming.stream_defs d WHERE d.id = $1",
								  2, types, values, NULL, false, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not read streaming.offsets");
		if (SPI_processed > 0)
		{
			bool		isnull;

			done = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
			status = pstrdup(SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2));
			last_error = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
			if (last_error)
				last_error = pstrdup(last_error);
		}
		SPI_finish();
		stm_catalog_unpin_search_path(nest);

		if (status == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("stream \"%s\" was dropped", name)));
		if (done)
			break;
		if (strcmp(status, "failed") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream \"%s\" failed", name),
					 last_error ? errdetail("%s", last_error) : 0));
		if (strcmp(status, "stopped") == 0 || strcmp(status, "finished") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("stream \"%s\" stopped before it processed all available records", name)));
		if (GetCurrentTimestamp() > deadline)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("timed out waiting for stream \"%s\" to process the available records", name),
					 last_error ? errdetail("Last error: %s", last_error) : 0));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 20, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	PG_RETURN_VOID();
}

/*
 * (stream_id, pid, problem) of every stream of this database that should
 * run and that the caller may see (SPEC 7): pid is NULL while it has no
 * worker, and problem says why (the launcher could not start one, or it
 * keeps exiting).
 */
Datum
streaming_worker_pids(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (!stm_shmem_available())
		return (Datum) 0;
	LWLockAcquire(stm_shared->lock, LW_SHARED);
	for (int i = 0; i < stm_shared->nslots; i++)
	{
		StmWorkerSlot *slot = &stm_shared->slots[i];
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		/* only the caller's streams, as the views show them */
		if (!slot->in_use || slot->dboid != MyDatabaseId ||
			(slot->pid == 0 && (!slot->wanted || slot->problem[0] == '\0')) ||
			!has_privs_of_role(GetUserId(), slot->owner))
			continue;
		values[0] = Int32GetDatum(slot->stream_id);
		values[1] = Int32GetDatum(slot->pid);
		nulls[1] = slot->pid == 0;
		values[2] = CStringGetTextDatum(slot->problem);
		nulls[2] = slot->problem[0] == '\0';
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(stm_shared->lock);
	return (Datum) 0;
}
