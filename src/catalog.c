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
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "storage/proc.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "sql.h"

#ifndef STM_EXTVERSION
#error "STM_EXTVERSION (the Makefile's EXTVERSION) must be defined"
#endif

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

	if (stm_extension_row(&owner, &installed) && installed != NULL &&
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

StmOutputMode
stm_catalog_parse_output_mode(const char *name)
{
	if (strcmp(name, "update") == 0)
		return STM_OUTPUT_UPDATE;
	if (strcmp(name, "complete") == 0)
		return STM_OUTPUT_COMPLETE;
	if (strcmp(name, "append") == 0)
		return STM_OUTPUT_APPEND;
	if (strcmp(name, "upsert") == 0)
		return STM_OUTPUT_UPSERT;
	elog(ERROR, "unrecognized output_mode \"%s\" in streaming.stream_defs", name);
	return STM_OUTPUT_APPEND;	/* keep compiler quiet */
}

static const char *const output_mode_names[] = {
	[STM_OUTPUT_APPEND] = "append",
	[STM_OUTPUT_UPDATE] = "update",
	[STM_OUTPUT_COMPLETE] = "complete",
	[STM_OUTPUT_UPSERT] = "upsert",
};

const char *
stm_catalog_output_mode_name(StmOutputMode mode)
{
	return output_mode_names[mode];
}

static const char *const status_names[] = {
	[STM_STATUS_RUNNING] = "running",
	[STM_STATUS_WAITING] = "waiting",
	[STM_STATUS_STOPPED] = "stopped",
	[STM_STATUS_FAILED] = "failed",
	[STM_STATUS_FINISHED] = "finished",
	[STM_STATUS_MOVED] = "moved",
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
	"dedup_keys, dedup_within_watermark, late_rows, idle_timeout, " \
	"(extract(epoch FROM idle_timeout) * 1000000)::bigint AS idle_timeout_us, idle_clock_at, last_error, " \
	"sink_name, (SELECT k.kind FROM streaming.sinks k WHERE k.name = sink_name) AS sink_kind, " \
	"parallel_workers, other_source, watermarks, multiple_watermark_policy, side_watermarks, key_columns, state_rows, source_started_at"

/* A text[] column as a List of strings (NIL for NULL). */
static List *
get_text_list(CatalogRow *row, const char *name)
{
	bool		isnull;
	Datum		d = get_value(row, name, &isnull);
	List	   *result = NIL;
	Datum	   *elems;
	int			n;

	if (isnull)
		return NIL;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, &n);
	for (int i = 0; i < n; i++)
		result = lappend(result, TextDatumGetCString(elems[i]));
	return result;
}

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
	s->trigger_kind = stm_catalog_parse_trigger(s->trigger, &s->trigger_interval_ms, &s->trigger_continuous);
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
	s->dedup_keys = get_text_list(&row, "dedup_keys");
	s->dedup_within_watermark = get_bool(&row, "dedup_within_watermark");
	s->keep_late_rows = strcmp(get_text(&row, "late_rows"), "keep") == 0;
	d = get_value(&row, "idle_timeout", &isnull);
	s->has_idle_timeout = !isnull;
	if (!isnull)
		s->idle_timeout = *DatumGetIntervalP(d);
	d = get_value(&row, "idle_timeout_us", &isnull);
	s->idle_timeout_us = isnull ? 0 : DatumGetInt64(d);
	s->idle_clock_at = DatumGetTimestampTz(get_value(&row, "idle_clock_at", &isnull));
	s->last_error = get_text(&row, "last_error");
	s->sink_name = get_text(&row, "sink_name");
	s->sink_kind = get_text(&row, "sink_kind");
	d = get_value(&row, "parallel_workers", &isnull);
	s->parallel_workers = isnull ? -1 : DatumGetInt32(d);
	s->other_source = get_text(&row, "other_source");
	d = get_value(&row, "watermarks", &isnull);
	s->watermarks = isnull ? NULL : DatumGetJsonbPCopy(d);
	s->max_watermark_policy = strcmp(get_text(&row, "multiple_watermark_policy"), "max") == 0;
	d = get_value(&row, "side_watermarks", &isnull);
	s->side_watermarks = isnull ? NULL : DatumGetJsonbPCopy(d);
	s->key_columns = get_text_list(&row, "key_columns");
	d = get_value(&row, "state_rows", &isnull);
	s->state_rows = isnull ? NULL : DatumGetJsonbPCopy(d);
	d = get_value(&row, "source_started_at", &isnull);
	s->has_source_started_at = !isnull;
	s->source_started_at = isnull ? 0 : DatumGetTimestampTz(d);
	return s;
}

/* Reads a looked-up row into a struct, in the current memory context. */
typedef void *(*RowReader) (HeapTuple tuple, TupleDesc desc);

typedef struct Lookup
{
	RowReader	read;
	void	   *result;
} Lookup;

static void
lookup_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	Lookup	   *l = arg;

	if (l->result == NULL)
		l->result = l->read(tuple, desc);
}

/*
 * The row of a catalog table whose key column equals key, read by read;
 * NULL when there is none.  With a valid visible_to, only a row that role
 * may act on (its owner, a member of the owning role, a superuser): the
 * SQL functions see no other role's streams, sources or sinks (SPEC 7).
 * With lock, the row is locked FOR UPDATE until the transaction ends.
 */
static void *
lookup(const char *select, const char *key_column, Oid key_type, Datum key, bool lock,
	   Oid visible_to, RowReader read)
{
	StmSql		q;
	Lookup		l = {read, NULL};

	stm_sql_init(&q, psprintf("%s WHERE %s = :key "
							  "AND (:visible_to::oid IS NULL OR pg_has_role(:visible_to, owner, 'USAGE'))%s",
							  select, key_column, lock ? " FOR UPDATE" : ""));
	stm_sql_param(&q, "key", key_type, key, false);
	stm_sql_oid(&q, "visible_to", visible_to);
	(void) stm_catalog_run(&q, SPI_OK_SELECT, lookup_row, &l);
	return l.result;
}

static void *
read_stream(HeapTuple tuple, TupleDesc desc)
{
	return stream_from_tuple(CurrentMemoryContext, tuple, desc);
}

#define SELECT_STREAM "SELECT " STREAM_COLUMNS " FROM streaming.stream_defs"

/*
 * Look up a stream the current user may act on, by name; raises "does not
 * exist" unless missing_ok (another role's stream does not exist for it).
 */
StmStreamDef *
stm_catalog_get_stream(const char *name, bool missing_ok)
{
	StmStreamDef *s = lookup(SELECT_STREAM, "name", TEXTOID, CStringGetTextDatum(name), false,
							 GetUserId(), read_stream);

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
	return lookup(SELECT_STREAM, "name", TEXTOID, CStringGetTextDatum(name), false,
				  InvalidOid, read_stream) != NULL;
}

/* By id; with lock, the row is locked FOR UPDATE until the transaction ends. */
StmStreamDef *
stm_catalog_get_stream_by_id(int32 id, bool lock)
{
	return lookup(SELECT_STREAM, "id", INT4OID, Int32GetDatum(id), lock, InvalidOid, read_stream);
}

static void *
read_source(HeapTuple tuple, TupleDesc desc)
{
	CatalogRow	row = {CurrentMemoryContext, tuple, desc};
	StmSourceDef *s = palloc0(sizeof(StmSourceDef));

	s->name = get_text(&row, "name");
	s->kind = get_text(&row, "kind");
	s->view = get_oid(&row, "view");
	s->owner = get_oid(&row, "owner");
	return s;
}

#define SELECT_SOURCE "SELECT name, kind, view::oid AS view, owner::oid AS owner FROM streaming.sources"

/* A source the current user owns (or may act for), by name, as stm_catalog_get_stream. */
StmSourceDef *
stm_catalog_get_source(const char *name, bool missing_ok)
{
	StmSourceDef *s = lookup(SELECT_SOURCE, "name", TEXTOID, CStringGetTextDatum(name), false,
							 GetUserId(), read_source);

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
	return lookup(SELECT_SOURCE, "name", TEXTOID, CStringGetTextDatum(name), false,
				  InvalidOid, read_source) != NULL;
}

/* The source a stream reads (whoever owns it: the stream's owner may read its view). */
StmSourceDef *
stm_catalog_get_source_of_stream(StmStreamDef *def)
{
	StmSourceDef *s = lookup(SELECT_SOURCE, "name", TEXTOID, CStringGetTextDatum(def->source),
							 false, InvalidOid, read_source);

	if (s == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" of stream \"%s\" does not exist", def->source, def->name)));
	return s;
}

/* The right side's source of a stream that joins two (whoever owns it). */
StmSourceDef *
stm_catalog_get_other_source_of_stream(StmStreamDef *def)
{
	StmSourceDef *s = lookup(SELECT_SOURCE, "name", TEXTOID, CStringGetTextDatum(def->other_source),
							 false, InvalidOid, read_source);

	if (s == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" of stream \"%s\" does not exist", def->other_source, def->name)));
	return s;
}

static StmSourceDef *
copy_source(const StmSourceDef *s)
{
	StmSourceDef *c = palloc(sizeof(StmSourceDef));

	*c = *s;
	c->name = pstrdup(s->name);
	c->kind = pstrdup(s->kind);
	return c;
}

/*
 * The source whose view this is, or NULL.  A source found is remembered
 * for the rest of the statement (the transaction and its command id): the
 * analysis of a stream's query asks for each of its views more than once,
 * once a batch.
 */
StmSourceDef *
stm_catalog_get_source_by_view(Oid view)
{
	static LocalTransactionId memo_lxid = InvalidLocalTransactionId;
	static CommandId memo_cid;
	static Oid	memo_view;
	static StmSourceDef *memo;	/* in TopTransactionContext */
	StmSourceDef *s;
	MemoryContext old;

	if (memo_lxid == MyProc->lxid && memo_cid == GetCurrentCommandId(false) && memo_view == view)
		return copy_source(memo);
	s = lookup(SELECT_SOURCE, "view", REGCLASSOID, ObjectIdGetDatum(view), false,
			   InvalidOid, read_source);
	if (s == NULL)
		return NULL;
	old = MemoryContextSwitchTo(TopTransactionContext);
	memo = copy_source(s);
	MemoryContextSwitchTo(old);
	memo_lxid = MyProc->lxid;
	memo_cid = GetCurrentCommandId(false);
	memo_view = view;
	return s;
}

static void *
read_options(HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;

	return DatumGetJsonbPCopy(stm_sql_get_datum(tuple, desc, "options", &isnull));
}

/* A source's options, as stored (streaming.sources.options). */
Jsonb *
stm_catalog_source_options(const char *source)
{
	Jsonb	   *result = lookup("SELECT options, owner FROM streaming.sources", "name", TEXTOID,
								CStringGetTextDatum(source), false, InvalidOid, read_options);

	if (result == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", source)));
	return result;
}

static void *
read_sink(HeapTuple tuple, TupleDesc desc)
{
	CatalogRow	row = {CurrentMemoryContext, tuple, desc};
	StmSinkDef *s = palloc0(sizeof(StmSinkDef));
	bool		isnull;

	s->name = get_text(&row, "name");
	s->kind = get_text(&row, "kind");
	s->options = DatumGetJsonbPCopy(get_value(&row, "options", &isnull));
	s->owner = get_oid(&row, "owner");
	return s;
}

#define SELECT_SINK "SELECT name, kind, options, owner::oid AS owner FROM streaming.sinks"

/* A named sink the current user owns (or may act for), as stm_catalog_get_source. */
StmSinkDef *
stm_catalog_get_sink(const char *name, bool missing_ok)
{
	StmSinkDef *s = lookup(SELECT_SINK, "name", TEXTOID, CStringGetTextDatum(name), false,
						   GetUserId(), read_sink);

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
	return lookup(SELECT_SINK, "name", TEXTOID, CStringGetTextDatum(name), false,
				  InvalidOid, read_sink) != NULL;
}

/* The named sink a stream writes to, whoever owns it. */
StmSinkDef *
stm_catalog_get_sink_of_stream(StmStreamDef *def)
{
	StmSinkDef *s = lookup(SELECT_SINK, "name", TEXTOID, CStringGetTextDatum(def->sink_name),
						   false, InvalidOid, read_sink);

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

static void
option_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	List	  **result = arg;
	char	  **row = palloc0(sizeof(char *) * desc->natts);

	for (int c = 0; c < desc->natts; c++)
		row[c] = SPI_getvalue(tuple, desc, c + 1);
	*result = lappend(*result, row);
}

/*
 * Rows of a query over one source's options: sql_expr is a SELECT evaluated
 * LATERAL with "s" bound to the source's row.  Each list element is a char*
 * array with one entry per output column (NULL for SQL NULL).
 */
List *
stm_catalog_source_option_list(const char *source, const char *sql_expr)
{
	List	   *result = NIL;
	StmSql		q;

	stm_sql_init(&q, psprintf("SELECT t.* FROM streaming.sources s, LATERAL (%s) t WHERE s.name = :source",
							  sql_expr));
	stm_sql_text(&q, "source", source);
	(void) stm_catalog_run(&q, SPI_OK_SELECT, option_row, &result);
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
	StmSql		q;

	stm_sql_init(&q, "UPDATE streaming.stream_defs SET status = :status, "
				 "last_error = CASE WHEN :last_error IS NOT NULL THEN :last_error "
				 "WHEN :clear_error THEN NULL ELSE last_error END, "
				 "failures = CASE WHEN :failures >= 0 THEN :failures ELSE failures END "
				 "WHERE id = :id");
	stm_sql_int4(&q, "id", stream_id);
	stm_sql_text(&q, "status", stm_catalog_status_name(status));
	stm_sql_text(&q, "last_error", last_error);
	stm_sql_bool(&q, "clear_error", clear_error);
	stm_sql_int4(&q, "failures", failures);
	(void) stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL);
}

/* Remember (or clear, with NULL) why the source could not be reached. */
void
stm_catalog_set_source_error(int32 stream_id, const char *error)
{
	StmSql		q;

	stm_sql_init(&q, "UPDATE streaming.stream_defs SET source_error = :error "
				 "WHERE id = :id AND source_error IS DISTINCT FROM :error");
	stm_sql_int4(&q, "id", stream_id);
	stm_sql_text(&q, "error", error);
	(void) stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL);
}

/* the parts of stm_catalog_record_batch's statement */
#define RECORD_BATCH_INSERT \
	"INSERT INTO streaming.batches (stream_id, batch_id, started_at, duration, " \
	"num_input_rows, num_output_rows, num_bad_rows, max_event_time, watermark, " \
	"start_positions, end_positions, data_loss, num_state_rows, num_late_rows, " \
	"num_dedup_rows, num_delivered_rows, state_operators) " \
	"VALUES (:stream_id, :batch_id, :started_at, clock_timestamp() - :started_at, " \
	":num_input_rows, :num_output_rows, :num_bad_rows, :max_event_time, :watermark, " \
	":start_positions, :end_positions, :data_loss, :num_state_rows, :num_late_rows, " \
	":num_dedup_rows, :num_delivered_rows, :state_operators)"
#define RECORD_BATCH_UPDATE \
	"UPDATE streaming.stream_defs SET last_batch_id = :batch_id, watermark = :watermark, " \
	"no_data_batch_due = :no_data_batch_due, " \
	"idle_clock_at = coalesce(:idle_clock_at, idle_clock_at), " \
	"failures = 0, last_error = NULL, source_error = :source_error, " \
	"side_watermarks = coalesce(:side_watermarks, side_watermarks), " \
	"state_rows = :state_rows WHERE id = :stream_id"

/*
 * What this process last trimmed a stream's progress to, in which
 * transaction: every row of the stream up to trimmed_to is gone once that
 * transaction committed, as batch ids only grow (reset deletes them all).
 */
static int32 trimmed_stream = -1;
static int64 trimmed_to;
static TransactionId trimmed_xid = InvalidTransactionId;

/*
 * A committed batch: its progress row, the trim of the stream's progress
 * to its last history rows, and the stream's row after it, in the batch's
 * transaction, as one statement (a continuous stream runs hundreds of
 * batches a second: each statement's executor start, locks and SPI
 * connection were a good part of a small batch).  The statement's parts
 * share its snapshot: the trim never sees the row inserted (history >= 1
 * keeps it anyway), and the progress row's foreign key check runs after
 * the statement, on the stream's row this statement wrote.
 *
 * The trim: after this process's own committed trim, only the rows since
 * need deleting: the DELETE of every row up to upto walked the index
 * entries of all the rows deleted since the table's last VACUUM (a
 * continuous stream deletes a thousand a second: 0.64 ms of each batch a
 * minute after a VACUUM, most of its time).  Any other case (another
 * stream, ids that went back, a trim rolled back) deletes everything up to
 * upto, as before.  An earlier trim in this transaction counts too: its
 * delete commits or aborts with ours.
 */
void
stm_catalog_record_batch(const StmBatchProgress *p, int history)
{
	StmSql		q;
	int64		upto = p->batch_id - history;
	bool		since_last = trimmed_stream == p->stream_id && upto >= trimmed_to &&
		TransactionIdIsValid(trimmed_xid) &&
		(TransactionIdIsCurrentTransactionId(trimmed_xid) || TransactionIdDidCommit(trimmed_xid));

	stm_sql_init(&q, since_last ?
				 "WITH progress AS (" RECORD_BATCH_INSERT "), "
				 "trimmed AS (DELETE FROM streaming.batches WHERE stream_id = :stream_id "
				 "AND batch_id > :trimmed_to AND batch_id <= :upto) "
				 RECORD_BATCH_UPDATE :
				 "WITH progress AS (" RECORD_BATCH_INSERT "), "
				 "trimmed AS (DELETE FROM streaming.batches WHERE stream_id = :stream_id "
				 "AND batch_id <= :upto) "
				 RECORD_BATCH_UPDATE);
	stm_sql_int4(&q, "stream_id", p->stream_id);
	stm_sql_int8(&q, "batch_id", p->batch_id);
	stm_sql_timestamptz(&q, "started_at", p->started_at, false);
	stm_sql_int8(&q, "num_input_rows", p->num_input_rows);
	stm_sql_int8(&q, "num_output_rows", p->num_output_rows);
	stm_sql_int8(&q, "num_bad_rows", p->num_bad_rows);
	stm_sql_timestamptz(&q, "max_event_time", p->max_event_time, !p->has_max_event_time);
	stm_sql_timestamptz(&q, "watermark", p->watermark, !p->has_watermark);
	stm_sql_jsonb(&q, "start_positions", p->start_positions);
	stm_sql_jsonb(&q, "end_positions", p->end_positions);
	stm_sql_jsonb(&q, "data_loss", p->data_loss);
	stm_sql_int8(&q, "num_state_rows", p->num_state_rows);
	stm_sql_int8(&q, "num_late_rows", p->num_late_rows);
	stm_sql_int8(&q, "num_dedup_rows", p->num_dedup_rows);
	stm_sql_int8(&q, "num_delivered_rows", p->num_delivered_rows);
	stm_sql_jsonb(&q, "state_operators", p->state_operators);
	if (since_last)
		stm_sql_int8(&q, "trimmed_to", trimmed_to);
	stm_sql_int8(&q, "upto", upto);
	stm_sql_bool(&q, "no_data_batch_due", p->no_data_batch_due);
	stm_sql_timestamptz(&q, "idle_clock_at", p->idle_clock_at, p->idle_clock_at == 0);
	stm_sql_text(&q, "source_error", p->source_error);
	stm_sql_jsonb(&q, "side_watermarks", p->side_watermarks);
	stm_sql_jsonb(&q, "state_rows", p->state_rows);
	if (stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL) != 1)
		elog(ERROR, "could not record batch " INT64_FORMAT " of stream %d: its row is gone",
			 p->batch_id, p->stream_id);
	trimmed_stream = p->stream_id;
	trimmed_to = upto;
	trimmed_xid = GetCurrentTransactionId();
}

/*
 * When the stream's last batch started (min_offsets_per_trigger waits at
 * most max_trigger_delay from then): the newest batch's start, else when
 * the stream was created, but never before since.
 */
TimestampTz
stm_catalog_last_trigger(int32 stream_id, TimestampTz since)
{
	Oid			argtype = INT4OID;
	Datum		arg = Int32GetDatum(stream_id);
	bool		isnull;
	Datum		d;

	/* the newest batch by the primary key: batches start in batch_id order */
	d = stm_catalog_value("SELECT coalesce((SELECT started_at FROM streaming.batches WHERE stream_id = $1 "
						  "ORDER BY batch_id DESC LIMIT 1), "
						  "(SELECT created_at FROM streaming.stream_defs WHERE id = $1))",
						  1, &argtype, &arg, &isnull);
	return !isnull && DatumGetTimestampTz(d) > since ? DatumGetTimestampTz(d) : since;
}

/*
 * The trigger on streaming.stream_defs that makes a restored stream stopped
 * (SPEC 1): a row inserted enabled, or running or waiting, is a restore's
 * (create_stream inserts a stream stopped, then starts it), and a restore
 * must not consume or produce by surprise, as logical replication restores
 * its subscriptions disabled.  A WARNING names the stream (pg_dump's
 * scripts set client_min_messages to warning).
 */
PG_FUNCTION_INFO_V1(streaming_restore_stopped);

Datum
streaming_restore_stopped(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	int			cols[2];
	Datum		values[2];
	bool		nulls[2] = {false, false};
	bool		isnull;
	bool		enabled;
	char	   *status;
	char	   *name;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "streaming.restore_stopped() must be a BEFORE INSERT row trigger");
	tuple = trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	cols[0] = SPI_fnumber(desc, "enabled");
	cols[1] = SPI_fnumber(desc, "status");
	enabled = DatumGetBool(heap_getattr(tuple, cols[0], desc, &isnull)) && !isnull;
	status = SPI_getvalue(tuple, desc, cols[1]);
	if (!enabled && status != NULL && strcmp(status, "running") != 0 && strcmp(status, "waiting") != 0)
		return PointerGetDatum(tuple);
	name = SPI_getvalue(tuple, desc, SPI_fnumber(desc, "name"));
	ereport(WARNING,
			(errmsg("stream \"%s\" is restored stopped", name),
			 errdetail("A restored stream neither reads its source nor writes its sink until it is started."),
			 errhint("Start it with streaming.start(%s) where it should run.", quote_literal_cstr(name))));
	values[0] = BoolGetDatum(false);
	values[1] = CStringGetTextDatum("stopped");
	return PointerGetDatum(heap_modify_tuple_by_cols(tuple, desc, 2, cols, values, nulls));
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
 * trigger: '0' or any interval (processing time), 'available_now', 'once'
 * or 'continuous': batches as '0' schedules them, the sources read for
 * latency (*continuous).
 */
StmTriggerKind
stm_catalog_parse_trigger(const char *trigger, int64 *interval_ms, bool *continuous)
{
	Interval   *iv;

	*interval_ms = 0;
	*continuous = pg_strcasecmp(trigger, "continuous") == 0;
	if (pg_strcasecmp(trigger, "available_now") == 0)
		return STM_TRIGGER_AVAILABLE_NOW;
	if (pg_strcasecmp(trigger, "once") == 0)
		return STM_TRIGGER_ONCE;
	if (*continuous)
		return STM_TRIGGER_INTERVAL;
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
	StmSql		q;

	stm_sql_init(&q, psprintf("UPDATE streaming.stream_defs SET %s WHERE id = :id", set_clause));
	stm_sql_int4(&q, "id", stream_id);
	(void) stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL);
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

static void
returned_id(void *arg, HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;

	*(int32 *) arg = DatumGetInt32(stm_sql_get_datum(tuple, desc, "id", &isnull));
}

/* A text[] of the list's strings, or NULL for none. */
static ArrayType *
text_array(List *strings)
{
	Datum	   *elems;
	int			n = 0;
	ListCell   *lc;

	if (strings == NIL)
		return NULL;
	elems = palloc(sizeof(Datum) * list_length(strings));
	foreach(lc, strings)
		elems[n++] = CStringGetTextDatum(lfirst(lc));
	return construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT);
}

/*
 * A new stream's row (create_stream): its definition as def gives it;
 * started when def->enabled.  Returns its id.
 */
int32
stm_catalog_insert_stream(const StmStreamDef *def)
{
	StmSql		q;
	ArrayType  *keys = text_array(def->dedup_keys);
	ArrayType  *key_columns = text_array(def->key_columns);
	int32		id = -1;

	stm_sql_init(&q, "INSERT INTO streaming.stream_defs (name, source, query, sink, output_mode, "
				 "watermark_delay, event_time, trigger, late_rows, idle_timeout, enabled, status, "
				 "search_path, sink_function, dedup_keys, dedup_within_watermark, owner, sink_name, "
				 "parallel_workers, other_source, watermarks, multiple_watermark_policy, key_columns) "
				 "VALUES (:name, :source, :query, :sink::oid::regclass, :output_mode, "
				 ":watermark_delay, :event_time, :trigger, :late_rows, :idle_timeout, false, "
				 "'stopped', :search_path, "
				 ":sink_function::oid::regprocedure, :dedup_keys, :dedup_within_watermark, "
				 ":owner::oid::regrole, :sink_name, :parallel_workers, :other_source, :watermarks, "
				 ":multiple_watermark_policy, :key_columns) RETURNING id");
	stm_sql_text(&q, "name", def->name);
	stm_sql_text(&q, "source", def->source);
	stm_sql_text(&q, "query", def->query);
	stm_sql_oid(&q, "sink", def->sink);
	stm_sql_text(&q, "output_mode", stm_catalog_output_mode_name(def->output_mode));
	stm_sql_param(&q, "watermark_delay", INTERVALOID, IntervalPGetDatum(&def->watermark_delay),
				  !def->has_watermark);
	stm_sql_text(&q, "event_time", def->event_time);
	stm_sql_text(&q, "trigger", def->trigger);
	stm_sql_text(&q, "late_rows", def->keep_late_rows ? "keep" : "drop");
	stm_sql_param(&q, "idle_timeout", INTERVALOID, IntervalPGetDatum(&def->idle_timeout),
				  !def->has_idle_timeout);
	stm_sql_text(&q, "search_path", def->search_path);
	stm_sql_oid(&q, "sink_function", def->sink_function);
	stm_sql_param(&q, "dedup_keys", TEXTARRAYOID, PointerGetDatum(keys), keys == NULL);
	stm_sql_bool(&q, "dedup_within_watermark", def->dedup_within_watermark);
	stm_sql_oid(&q, "owner", def->owner);
	stm_sql_text(&q, "sink_name", def->sink_name);
	stm_sql_param(&q, "parallel_workers", INT4OID, Int32GetDatum(def->parallel_workers),
				  def->parallel_workers < 0);
	stm_sql_text(&q, "other_source", def->other_source);
	stm_sql_param(&q, "watermarks", JSONBOID, PointerGetDatum(def->watermarks), def->watermarks == NULL);
	stm_sql_text(&q, "multiple_watermark_policy", def->max_watermark_policy ? "max" : "min");
	stm_sql_param(&q, "key_columns", TEXTARRAYOID, PointerGetDatum(key_columns), key_columns == NULL);
	(void) stm_catalog_run(&q, SPI_OK_INSERT_RETURNING, returned_id, &id);
	/* inserted stopped: a row inserted running is a restore's (restore_stopped) */
	if (def->enabled)
		update_stream(id, "enabled = true, status = 'running'");
	return id;
}
