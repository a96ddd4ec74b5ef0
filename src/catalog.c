/*
 * catalog.c: reading and writing the streaming.* tables.
 *
 * The catalog tables belong to the extension's owner and only that role may
 * change them (SPEC 7): every read and write here runs as the extension's
 * owner (stm_catalog_begin), with search_path pinned to pg_catalog so that
 * no user object can capture the names used, and with only built-in
 * operators on built-in types, so no user code runs with that identity.
 * The SQL functions check what the caller may do before they call in here.
 * Results are copied into the caller's memory context; SPI is never kept
 * connected.  Reads are not read-only SPI calls, so under READ COMMITTED
 * each takes a fresh snapshot: a batch that waited for another one sees its
 * commit.
 *
 * The catalog has a version, the extension's (pg_extension.extversion), and
 * the library needs the one it was built for (STM_EXTVERSION, the Makefile's
 * EXTVERSION): stm_catalog_check_version() tells them apart before anything
 * reads or writes these tables.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "storage/proc.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "catalog.h"

#ifndef STM_EXTVERSION
#error "STM_EXTVERSION (the Makefile's EXTVERSION) must be defined"
#endif

int
stm_catalog_pin_search_path(void)
{
	int			nestlevel = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

void
stm_catalog_unpin_search_path(int nestlevel)
{
	AtEOXact_GUC(true, nestlevel);
}

/*
 * The extension's row in pg_extension: its owner and its installed version
 * (NULL when it is not installed).  One index lookup, no SPI.
 */
static bool
extension_row(Oid *owner, char **version)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("streaming"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	found = HeapTupleIsValid(tup);
	if (found)
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		*owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
		*version = isnull ? NULL : TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The role that owns the extension (pg_extension.extowner), looked up once
 * per transaction.
 */
Oid
stm_catalog_extension_owner(void)
{
	static LocalTransactionId cached_lxid = InvalidLocalTransactionId;
	static Oid	cached_owner = InvalidOid;
	char	   *version;

	if (cached_lxid == MyProc->lxid && OidIsValid(cached_owner))
		return cached_owner;
	if (!extension_row(&cached_owner, &version))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("extension \"streaming\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION streaming.")));
	cached_lxid = MyProc->lxid;
	return cached_owner;
}

/*
 * Start reading or writing the catalog: as the extension's owner, with
 * search_path pinned.  stm_catalog_end puts both back; an error in between
 * is cleaned up by the (sub)transaction's abort, which restores the user id
 * and the settings.  Keeps SECURITY_RESTRICTED_OPERATION when a batch runs
 * under it.
 */
StmCatalogScope
stm_catalog_begin(void)
{
	StmCatalogScope scope;

	GetUserIdAndSecContext(&scope.save_userid, &scope.save_sec_context);
	SetUserIdAndSecContext(stm_catalog_extension_owner(),
						   scope.save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	scope.nestlevel = stm_catalog_pin_search_path();
	return scope;
}

void
stm_catalog_end(StmCatalogScope scope)
{
	stm_catalog_unpin_search_path(scope.nestlevel);
	SetUserIdAndSecContext(scope.save_userid, scope.save_sec_context);
}

/*
 * Is the catalog at the version this library was built for?  Between a new
 * package's restart and ALTER EXTENSION streaming UPDATE it is not: then
 * this reports at elevel (ERROR for SQL functions and run_batch; a waiting
 * worker logs once, then DEBUG1) and returns false.  Called in a
 * transaction, before the catalog is read.
 */
bool
stm_catalog_check_version(int elevel)
{
	Oid			owner;
	char	   *installed = NULL;

	if (extension_row(&owner, &installed) && installed != NULL &&
		strcmp(installed, STM_EXTVERSION) == 0)
		return true;
	if (installed == NULL)
		ereport(elevel,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("extension \"streaming\" is not installed in this database")));
	else
		ereport(elevel,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the streaming catalog is at version %s but the library is version %s",
						installed, STM_EXTVERSION),
				 errdetail("Streams run no batches until the catalog is at the library's version."),
				 errhint("Run ALTER EXTENSION streaming UPDATE.")));
	return false;
}

/* One statement in an SPI connection of its own, which must return expect. */
void
stm_spi_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	int			rc;

	SPI_connect();
	rc = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	if (rc != expect)
		elog(ERROR, "SPI failed (%s): %s", SPI_result_code_string(rc), sql);
	SPI_finish();
}

/* Change the catalog: as the extension's owner (catalog.c), after the caller was checked. */
void
stm_catalog_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	StmCatalogScope scope = stm_catalog_begin();

	stm_spi_exec(sql, nargs, types, values, nulls, expect);
	stm_catalog_end(scope);
}

/*
 * The first column of the first row of a query over the catalog, of a type
 * passed by value (bool, integers), read as the extension's owner; *isnull
 * when there is no row or the value is NULL.  Not a read-only query: under
 * READ COMMITTED each call sees the latest commits.
 */
Datum
stm_catalog_value(const char *sql, int nargs, Oid *types, Datum *values, bool *isnull)
{
	StmCatalogScope scope = stm_catalog_begin();
	Datum		result = (Datum) 0;

	*isnull = true;
	SPI_connect();
	if (SPI_execute_with_args(sql, nargs, types, values, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "SPI failed: %s", sql);
	if (SPI_processed > 0)
		result = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, isnull);
	SPI_finish();
	stm_catalog_end(scope);
	return result;
}

StmOutputMode
stm_catalog_parse_output_mode(const char *name)
{
	if (strcmp(name, "update") == 0)
		return STM_OUTPUT_UPDATE;
	if (strcmp(name, "complete") == 0)
		return STM_OUTPUT_COMPLETE;
	if (strcmp(name, "append") == 0)
		return STM_OUTPUT_APPEND;
	elog(ERROR, "unrecognized output_mode \"%s\" in streaming.stream_defs", name);
	return STM_OUTPUT_APPEND;	/* keep compiler quiet */
}

static const char *const status_names[] = {
	[STM_STATUS_RUNNING] = "running",
	[STM_STATUS_WAITING] = "waiting",
	[STM_STATUS_STOPPED] = "stopped",
	[STM_STATUS_FAILED] = "failed",
	[STM_STATUS_FINISHED] = "finished",
};

const char *
stm_catalog_status_name(StmStreamStatus status)
{
	return status_names[status];
}

static StmStreamStatus
parse_status(const char *name)
{
	for (int i = 0; i < lengthof(status_names); i++)
		if (strcmp(status_names[i], name) == 0)
			return (StmStreamStatus) i;
	elog(ERROR, "unrecognized status \"%s\" in streaming.stream_defs", name);
	return STM_STATUS_RUNNING;	/* keep compiler quiet */
}

/* One row of a catalog query, its columns found by name. */
typedef struct CatalogRow
{
	MemoryContext cxt;
	HeapTuple	tup;
	TupleDesc	desc;
} CatalogRow;

static int
column(CatalogRow *row, const char *name)
{
	int			col = SPI_fnumber(row->desc, name);

	if (col <= 0)
		elog(ERROR, "catalog query has no column \"%s\"", name);
	return col;
}

/* the column's value, or (Datum) 0 with *isnull */
static Datum
get_value(CatalogRow *row, const char *name, bool *isnull)
{
	return SPI_getbinval(row->tup, row->desc, column(row, name), isnull);
}

/* a text column as a string in row->cxt, or NULL */
static char *
get_text(CatalogRow *row, const char *name)
{
	char	   *v = SPI_getvalue(row->tup, row->desc, column(row, name));

	return v ? MemoryContextStrdup(row->cxt, v) : NULL;
}

static Oid
get_oid(CatalogRow *row, const char *name)
{
	bool		isnull;
	Datum		d = get_value(row, name, &isnull);

	return isnull ? InvalidOid : DatumGetObjectId(d);
}

static bool
get_bool(CatalogRow *row, const char *name)
{
	bool		isnull;
	Datum		d = get_value(row, name, &isnull);

	return !isnull && DatumGetBool(d);
}

#define STREAM_COLUMNS \
	"id, name, source, query, sink::oid AS sink, output_mode, watermark_delay, " \
	"event_time, trigger, search_path, owner::oid AS owner, enabled, status, " \
	"last_batch_id, watermark, failures, positions_initialized, no_data_batch_due, " \
	"sink_function::oid AS sink_function, dedup_keys IS NOT NULL AS has_dedup, " \
	"dedup_within_watermark, late_rows, " \
	"(extract(epoch FROM idle_timeout) * 1000000)::bigint AS idle_timeout_us, idle_clock_at, last_error, " \
	"sink_name, (SELECT k.kind FROM streaming.sinks k WHERE k.name = sink_name) AS sink_kind, " \
	"parallel_workers"

static StmStreamDef *
stream_from_tuple(MemoryContext cxt, HeapTuple tup, TupleDesc desc)
{
	StmStreamDef *s = MemoryContextAllocZero(cxt, sizeof(StmStreamDef));
	CatalogRow	row = {cxt, tup, desc};
	bool		isnull;
	Datum		d;

	s->id = DatumGetInt32(get_value(&row, "id", &isnull));
	s->name = get_text(&row, "name");
	s->source = get_text(&row, "source");
	s->query = get_text(&row, "query");
	s->sink = get_oid(&row, "sink");
	s->output_mode = stm_catalog_parse_output_mode(get_text(&row, "output_mode"));
	d = get_value(&row, "watermark_delay", &isnull);
	s->has_watermark = !isnull;
	if (!isnull)
		s->watermark_delay = *DatumGetIntervalP(d);
	s->event_time = get_text(&row, "event_time");
	s->trigger = get_text(&row, "trigger");
	s->trigger_kind = stm_catalog_parse_trigger(s->trigger, &s->trigger_interval_ms);
	s->search_path = get_text(&row, "search_path");
	s->owner = get_oid(&row, "owner");
	s->enabled = get_bool(&row, "enabled");
	s->status = parse_status(get_text(&row, "status"));
	d = get_value(&row, "last_batch_id", &isnull);
	s->last_batch_id = isnull ? -1 : DatumGetInt64(d);
	d = get_value(&row, "watermark", &isnull);
	s->has_watermark_value = !isnull;
	s->watermark_value = isnull ? 0 : DatumGetTimestampTz(d);
	s->failures = DatumGetInt32(get_value(&row, "failures", &isnull));
	s->positions_initialized = get_bool(&row, "positions_initialized");
	s->no_data_batch_due = get_bool(&row, "no_data_batch_due");
	s->sink_function = get_oid(&row, "sink_function");
	s->has_dedup = get_bool(&row, "has_dedup");
	s->dedup_within_watermark = get_bool(&row, "dedup_within_watermark");
	s->keep_late_rows = strcmp(get_text(&row, "late_rows"), "keep") == 0;
	d = get_value(&row, "idle_timeout_us", &isnull);
	s->idle_timeout_us = isnull ? 0 : DatumGetInt64(d);
	s->idle_clock_at = DatumGetTimestampTz(get_value(&row, "idle_clock_at", &isnull));
	s->last_error = get_text(&row, "last_error");
	s->sink_name = get_text(&row, "sink_name");
	s->sink_kind = get_text(&row, "sink_kind");
	s->parallel_workers = DatumGetInt32(get_value(&row, "parallel_workers", &isnull));
	return s;
}

/*
 * The stream that matches where ($1 is arg).  With a valid visible_to, only
 * a stream that role may act on (its owner, a member of the owning role, a
 * superuser): the SQL functions see no other role's streams (SPEC 7).
 */
static StmStreamDef *
get_stream(const char *where, Oid argtype, Datum arg, bool lock, Oid visible_to)
{
	MemoryContext cxt = CurrentMemoryContext;
	StmStreamDef *s = NULL;
	char	   *sql;
	Oid			types[2] = {argtype, OIDOID};
	Datum		values[2] = {arg, ObjectIdGetDatum(visible_to)};
	char		nulls[2] = {' ', OidIsValid(visible_to) ? ' ' : 'n'};
	StmCatalogScope scope = stm_catalog_begin();

	sql = psprintf("SELECT " STREAM_COLUMNS " FROM streaming.stream_defs WHERE %s "
				   "AND ($2 IS NULL OR pg_has_role($2, owner, 'USAGE'))%s",
				   where, lock ? " FOR UPDATE" : "");
	SPI_connect();
	if (SPI_execute_with_args(sql, 2, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.stream_defs");
	if (SPI_processed > 0)
		s = stream_from_tuple(cxt, SPI_tuptable->vals[0], SPI_tuptable->tupdesc);
	SPI_finish();
	stm_catalog_end(scope);
	return s;
}

/*
 * Look up a stream the current user may act on, by name; raises "does not
 * exist" unless missing_ok (another role's stream does not exist for it).
 */
StmStreamDef *
stm_catalog_get_stream(const char *name, bool missing_ok)
{
	StmStreamDef *s;

	s = get_stream("name = $1", TEXTOID, CStringGetTextDatum(name), false, GetUserId());
	if (s == NULL && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("stream \"%s\" does not exist", name)));
	return s;
}

/* True when any role has a stream of this name (names are unique). */
bool
stm_catalog_stream_exists(const char *name)
{
	return get_stream("name = $1", TEXTOID, CStringGetTextDatum(name), false, InvalidOid) != NULL;
}

/* By id; with lock, the row is locked FOR UPDATE until the transaction ends. */
StmStreamDef *
stm_catalog_get_stream_by_id(int32 id, bool lock)
{
	return get_stream("id = $1", INT4OID, Int32GetDatum(id), lock, InvalidOid);
}

/* The source that matches where ($1 is arg), visible_to as in get_stream. */
static StmSourceDef *
get_source(const char *where, Oid argtype, Datum arg, Oid visible_to)
{
	MemoryContext cxt = CurrentMemoryContext;
	StmSourceDef *s = NULL;
	Oid			types[2] = {argtype, OIDOID};
	Datum		values[2] = {arg, ObjectIdGetDatum(visible_to)};
	char		nulls[2] = {' ', OidIsValid(visible_to) ? ' ' : 'n'};
	StmCatalogScope scope = stm_catalog_begin();
	char	   *sql;

	sql = psprintf("SELECT name, kind, view::oid AS view, owner::oid AS owner FROM streaming.sources WHERE %s "
				   "AND ($2 IS NULL OR pg_has_role($2, owner, 'USAGE'))",
				   where);
	SPI_connect();
	if (SPI_execute_with_args(sql, 2, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.sources");
	if (SPI_processed > 0)
	{
		CatalogRow	row = {cxt, SPI_tuptable->vals[0], SPI_tuptable->tupdesc};

		s = MemoryContextAllocZero(cxt, sizeof(StmSourceDef));
		s->name = get_text(&row, "name");
		s->kind = get_text(&row, "kind");
		s->view = get_oid(&row, "view");
		s->owner = get_oid(&row, "owner");
	}
	SPI_finish();
	stm_catalog_end(scope);
	return s;
}

/* A source the current user owns (or may act for), by name, as get_stream. */
StmSourceDef *
stm_catalog_get_source(const char *name, bool missing_ok)
{
	StmSourceDef *s = get_source("name = $1", TEXTOID, CStringGetTextDatum(name), GetUserId());

	if (s == NULL && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", name)));
	return s;
}

/* True when any role has a source of this name. */
bool
stm_catalog_source_exists(const char *name)
{
	return get_source("name = $1", TEXTOID, CStringGetTextDatum(name), InvalidOid) != NULL;
}

/* The source a stream reads (whoever owns it: the stream's owner may read its view). */
StmSourceDef *
stm_catalog_get_source_of_stream(StmStreamDef *def)
{
	StmSourceDef *s = get_source("name = $1", TEXTOID, CStringGetTextDatum(def->source), InvalidOid);

	if (s == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" of stream \"%s\" does not exist", def->source, def->name)));
	return s;
}

/* The source whose view this is, or NULL. */
StmSourceDef *
stm_catalog_get_source_by_view(Oid view)
{
	return get_source("view = $1::oid", OIDOID, ObjectIdGetDatum(view), InvalidOid);
}

/* A source's options, as stored (streaming.sources.options). */
Jsonb *
stm_catalog_source_options(const char *source)
{
	Oid			type = TEXTOID;
	Datum		arg = CStringGetTextDatum(source);
	Jsonb	   *result = NULL;
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args("SELECT options FROM streaming.sources WHERE name = $1",
							  1, &type, &arg, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.sources");
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		result = DatumGetJsonbP(SPI_datumTransfer(d, false, -1));
	}
	SPI_finish();
	stm_catalog_end(scope);
	if (result == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", source)));
	return result;
}

/*
 * The first column of the first row of a query of the catalog with one
 * argument, as text in the caller's memory context; NULL when there is no
 * row or it is NULL.
 */
char *
stm_catalog_text(const char *sql, Oid argtype, Datum arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *result = NULL;
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args(sql, 1, &argtype, &arg, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read the streaming catalog");
	if (SPI_processed > 0)
	{
		char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		result = v ? MemoryContextStrdup(cxt, v) : NULL;
	}
	SPI_finish();
	stm_catalog_end(scope);
	return result;
}

/* The named sink that matches where ($1 is arg), visible_to as in get_stream. */
static StmSinkDef *
get_sink(const char *where, Oid argtype, Datum arg, Oid visible_to)
{
	MemoryContext cxt = CurrentMemoryContext;
	StmSinkDef *s = NULL;
	Oid			types[2] = {argtype, OIDOID};
	Datum		values[2] = {arg, ObjectIdGetDatum(visible_to)};
	char		nulls[2] = {' ', OidIsValid(visible_to) ? ' ' : 'n'};
	StmCatalogScope scope = stm_catalog_begin();
	char	   *sql;

	sql = psprintf("SELECT name, kind, options, owner::oid AS owner FROM streaming.sinks WHERE %s "
				   "AND ($2 IS NULL OR pg_has_role($2, owner, 'USAGE'))",
				   where);
	SPI_connect();
	if (SPI_execute_with_args(sql, 2, types, values, nulls, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.sinks");
	if (SPI_processed > 0)
	{
		CatalogRow	row = {cxt, SPI_tuptable->vals[0], SPI_tuptable->tupdesc};
		bool		isnull;
		MemoryContext old;

		s = MemoryContextAllocZero(cxt, sizeof(StmSinkDef));
		s->name = get_text(&row, "name");
		s->kind = get_text(&row, "kind");
		old = MemoryContextSwitchTo(cxt);
		s->options = DatumGetJsonbPCopy(get_value(&row, "options", &isnull));
		MemoryContextSwitchTo(old);
		s->owner = get_oid(&row, "owner");
	}
	SPI_finish();
	stm_catalog_end(scope);
	return s;
}

/* A named sink the current user owns (or may act for), as stm_catalog_get_source. */
StmSinkDef *
stm_catalog_get_sink(const char *name, bool missing_ok)
{
	StmSinkDef *s = get_sink("name = $1", TEXTOID, CStringGetTextDatum(name), GetUserId());

	if (s == NULL && !missing_ok)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("sink \"%s\" does not exist", name)));
	return s;
}

/* True when any role has a named sink of this name. */
bool
stm_catalog_sink_exists(const char *name)
{
	return get_sink("name = $1", TEXTOID, CStringGetTextDatum(name), InvalidOid) != NULL;
}

/* The named sink a stream writes to, whoever owns it. */
StmSinkDef *
stm_catalog_get_sink_of_stream(StmStreamDef *def)
{
	StmSinkDef *s = get_sink("name = $1", TEXTOID, CStringGetTextDatum(def->sink_name), InvalidOid);

	if (s == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("sink \"%s\" of stream \"%s\" does not exist", def->sink_name, def->name)));
	return s;
}

/* One option of a source as text (options #>> path), or NULL. */
char *
stm_catalog_source_option(const char *source, const char *path)
{
	List	   *rows = stm_catalog_source_option_list(source,
													  psprintf("SELECT s.options #>> %s",
															   quote_literal_cstr(path)));

	return rows == NIL ? NULL : ((char **) linitial(rows))[0];
}

/*
 * Rows of a query over one source's options: sql_expr is a SELECT evaluated
 * LATERAL with "s" bound to the source's row.  Each list element is a char*
 * array with one entry per output column (NULL for SQL NULL).
 */
List *
stm_catalog_source_option_list(const char *source, const char *sql_expr)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *result = NIL;
	StmCatalogScope scope = stm_catalog_begin();
	Oid			argtype = TEXTOID;
	Datum		arg = CStringGetTextDatum(source);
	char	   *sql;

	sql = psprintf("SELECT t.* FROM streaming.sources s, LATERAL (%s) t WHERE s.name = $1",
				   sql_expr);
	SPI_connect();
	if (SPI_execute_with_args(sql, 1, &argtype, &arg, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.sources");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		int			natts = SPI_tuptable->tupdesc->natts;
		char	  **row = MemoryContextAllocZero(cxt, sizeof(char *) * natts);
		MemoryContext old;

		for (int c = 0; c < natts; c++)
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, c + 1);

			row[c] = v ? MemoryContextStrdup(cxt, v) : NULL;
		}
		old = MemoryContextSwitchTo(cxt);
		result = lappend(result, row);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	stm_catalog_end(scope);
	return result;
}

/*
 * Record the stream's status.  last_error is written when given, cleared when
 * clear_error, else kept; failures < 0 keeps the counter.
 */
void
stm_catalog_set_status(int32 stream_id, StmStreamStatus status,
					   const char *last_error, bool clear_error, int failures)
{
	Oid			types[5] = {INT4OID, TEXTOID, TEXTOID, BOOLOID, INT4OID};
	Datum		values[5];
	char		nulls[5] = {' ', ' ', ' ', ' ', ' '};
	StmCatalogScope scope = stm_catalog_begin();

	values[0] = Int32GetDatum(stream_id);
	values[1] = CStringGetTextDatum(stm_catalog_status_name(status));
	if (last_error)
		values[2] = CStringGetTextDatum(last_error);
	else
		nulls[2] = 'n';
	values[3] = BoolGetDatum(clear_error);
	values[4] = Int32GetDatum(failures);
	SPI_connect();
	if (SPI_execute_with_args("UPDATE streaming.stream_defs SET status = $2, "
							  "last_error = CASE WHEN $3 IS NOT NULL THEN $3 WHEN $4 THEN NULL ELSE last_error END, "
							  "failures = CASE WHEN $5 >= 0 THEN $5 ELSE failures END "
							  "WHERE id = $1",
							  5, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update streaming.stream_defs");
	SPI_finish();
	stm_catalog_end(scope);
}

/* Remember (or clear, with NULL) why the source could not be reached. */
void
stm_catalog_set_source_error(int32 stream_id, const char *error)
{
	Oid			types[2] = {INT4OID, TEXTOID};
	Datum		values[2];
	char		nulls[2] = {' ', ' '};
	StmCatalogScope scope = stm_catalog_begin();

	values[0] = Int32GetDatum(stream_id);
	if (error)
		values[1] = CStringGetTextDatum(error);
	else
		nulls[1] = 'n';
	SPI_connect();
	if (SPI_execute_with_args("UPDATE streaming.stream_defs SET source_error = $2 "
							  "WHERE id = $1 AND source_error IS DISTINCT FROM $2",
							  2, types, values, nulls, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update streaming.stream_defs");
	SPI_finish();
	stm_catalog_end(scope);
}

/* Only the owner (or a member of the owning role, or a superuser) may act. */
void
stm_catalog_check_owner(const char *what, const char *name, Oid owner)
{
	if (!has_privs_of_role(GetUserId(), owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("must be owner of %s \"%s\"", what, name)));
}

/*
 * trigger: '0' or any interval (processing time), 'available_now' or 'once'.
 */
StmTriggerKind
stm_catalog_parse_trigger(const char *trigger, int64 *interval_ms)
{
	Interval   *iv;

	*interval_ms = 0;
	if (pg_strcasecmp(trigger, "available_now") == 0)
		return STM_TRIGGER_AVAILABLE_NOW;
	if (pg_strcasecmp(trigger, "once") == 0)
		return STM_TRIGGER_ONCE;
	if (strcmp(trigger, "0") == 0)
		return STM_TRIGGER_INTERVAL;
	iv = DatumGetIntervalP(DirectFunctionCall3(interval_in,
											   CStringGetDatum(trigger),
											   ObjectIdGetDatum(InvalidOid),
											   Int32GetDatum(-1)));
	*interval_ms = (iv->time / 1000) + (int64) iv->day * 86400000 +
		(int64) iv->month * 30 * 86400000;
	if (*interval_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger interval must not be negative"),
				 errdetail("The trigger given was \"%s\".", trigger)));
	return STM_TRIGGER_INTERVAL;
}

/* UPDATE streaming.stream_defs SET <set_clause> for one stream. */
static void
update_stream(int32 stream_id, const char *set_clause)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(stream_id);
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args(psprintf("UPDATE streaming.stream_defs SET %s WHERE id = $1", set_clause),
							  1, &type, &value, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "could not update streaming.stream_defs");
	SPI_finish();
	stm_catalog_end(scope);
}

/* The stream should no longer run (it finished or failed). */
void
stm_catalog_disable(int32 stream_id)
{
	update_stream(stream_id, "enabled = false");
}

/* The stream's first plan happened: later partitions start at earliest. */
void
stm_catalog_mark_positions_initialized(int32 stream_id)
{
	update_stream(stream_id, "positions_initialized = true");
}

/*
 * The first column of every row of a query over the catalog, as a List of
 * C strings (in the caller's memory context), read as the extension's owner.
 */
List *
stm_catalog_strings(const char *sql, int nargs, Oid *types, Datum *values)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *result = NIL;
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "SPI failed: %s", sql);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		result = lappend(result, pstrdup(SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1)));
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	stm_catalog_end(scope);
	return result;
}

/* The dedup_keys of a stream, as a list of column names. */
List *
stm_catalog_dedup_keys(int32 stream_id)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(stream_id);

	return stm_catalog_strings("SELECT unnest(dedup_keys) FROM streaming.stream_defs WHERE id = $1",
							   1, &type, &value);
}
