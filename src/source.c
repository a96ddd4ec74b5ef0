/*
 * source.c: what every source kind shares (source.h): finding a kind's
 * routine, opening a source from its catalog row, the declared columns of
 * its view, a row's position as text, parsing a record as the source
 * handed it, the checks of arguments that kinds share, the chunk size at
 * the head of a parallel helper's share.
 */
#include "postgres.h"

#include <time.h>

#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "parser/parse_type.h"
#include "parser/parser.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/wait_event.h"

#include "api.h"
#include "catalog.h"
#include "avro.h"
#include "debezium.h"
#include "options.h"
#include "source.h"

/*
 * How long this process has slept in fetch callbacks waiting for records
 * to arrive, since it started (the batch's "waiting for records" against
 * its time on a CPU, streaming.log_batches).
 */
static int64 source_waited_us = 0;

/* the kinds, registered by _PG_init (streaming.c) */
#define MAX_SOURCE_KINDS 8
static const StmSourceRoutine *source_kinds[MAX_SOURCE_KINDS];
static int	nsource_kinds = 0;

void
stm_source_register(const StmSourceRoutine *routine)
{
	if (nsource_kinds >= MAX_SOURCE_KINDS)
		elog(ERROR, "too many source kinds");
	source_kinds[nsource_kinds++] = routine;
}

const StmSourceRoutine *
stm_source_routine(const char *kind)
{
	for (int i = 0; i < nsource_kinds; i++)
		if (strcmp(source_kinds[i]->kind, kind) == 0)
			return source_kinds[i];
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized source kind \"%s\"", kind)));
	return NULL;				/* keep compiler quiet */
}

/* What a source's options say of its records, and what to do with bad ones. */
static void
fill_base(StmSource *base, StmSourceDef *def, Oid stream_owner)
{
	char	   *format;
	char	   *bad;
	char	   *delimiter;

	memset(base, 0, sizeof(StmSource));
	base->routine = stm_source_routine(def->kind);
	base->name = pstrdup(def->name);
	base->owner = def->owner;
	base->stream_owner = stream_owner;
	base->options = stm_catalog_source_options(def->name);
	format = stm_option_text(base->options, "format");
	base->format = format ? stm_parse_format(format) : STM_FORMAT_NONE;
	base->envelope = stm_parse_envelope(stm_option_text(base->options, "envelope"));
	base->key_avro = stm_option_given(base->options, "key_format");
	/* the schemas a registry gives stay cached for the runtime */
	if (base->format == STM_FORMAT_AVRO || base->key_avro)
		base->avro = stm_avro_reader_open(base->options,
										  psprintf("source \"%s\"", def->name));
	base->has_columns = stm_option_given(base->options, "columns");
	delimiter = stm_option_text(base->options, "csv_delimiter");
	base->csv_delimiter = delimiter ? delimiter[0] : ',';
	bad = stm_option_text(base->options, "on_bad_record");
	base->on_bad_record = bad == NULL || strcmp(bad, "dead_letter") == 0 ? STM_BAD_RECORD_DEAD_LETTER :
		strcmp(bad, "skip") == 0 ? STM_BAD_RECORD_SKIP : STM_BAD_RECORD_FAIL;
	base->nmeta = list_length(base->routine->metadata_columns(base->options));
}

/*
 * Open a source for a stream of stream_owner (InvalidOid: for the source's
 * owner alone), in the current memory context, which it dies with.
 */
StmSource *
stm_source_open(StmSourceDef *def, Oid stream_owner, bool for_batches)
{
	StmSource	base;

	fill_base(&base, def, stream_owner);
	return base.routine->open(&base, for_batches);
}

void
stm_source_close(StmSource *src)
{
	if (src && src->routine->close)
		src->routine->close(src);
}

/*
 * The idle worker's sleep (no records in the last plan): until one of the
 * sources says records may have arrived (source.h: wait_fd, ready), the
 * latch is set, or timeout_ms pass; sources without a descriptor (or not
 * open yet: the runtime's first batch has not opened them, NULL) only
 * shorten nothing.  Returns true when a source says records may have
 * arrived.
 */
bool
stm_source_wait(StmSource **sources, int n, long timeout_ms)
{
	WaitEventSet *set;
	WaitEvent	event;
	int			fired;

	for (int i = 0; i < n; i++)
		if (sources[i] && sources[i]->routine->wait_fd && sources[i]->routine->ready &&
			sources[i]->routine->wait_fd(sources[i]) >= 0 && sources[i]->routine->ready(sources[i]))
			return true;
	set = CreateWaitEventSet(CurrentMemoryContext, n + 2);
	AddWaitEventToSet(set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	for (int i = 0; i < n; i++)
	{
		int			fd = sources[i] && sources[i]->routine->wait_fd ?
			sources[i]->routine->wait_fd(sources[i]) : -1;

		if (fd >= 0)
			AddWaitEventToSet(set, WL_SOCKET_READABLE, fd, NULL, NULL);
	}
	fired = WaitEventSetWait(set, timeout_ms, &event, 1, PG_WAIT_EXTENSION);
	FreeWaitEventSet(set);
	ResetLatch(MyLatch);
	return fired > 0 && (event.events & WL_SOCKET_READABLE) != 0;
}

/*
 * Have none of the sources a record for the next batch?  Only when each
 * can say so (wait_fd, ready): then nothing arrives unseen while the
 * worker sleeps on their descriptors.
 */
bool
stm_source_quiet(StmSource **sources, int n)
{
	for (int i = 0; i < n; i++)
		if (sources[i] == NULL || !sources[i]->routine->wait_fd || !sources[i]->routine->ready ||
			sources[i]->routine->wait_fd(sources[i]) < 0 || sources[i]->routine->ready(sources[i]))
			return false;
	return n > 0;
}

/* Arguments of a create function that may not be NULL (SPEC 5): keys ends with NULL. */
void
stm_source_require_options(Jsonb *options, const char *const *keys)
{
	for (int i = 0; keys[i]; i++)
		if (!stm_option_given(options, keys[i]))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" must not be null", keys[i])));
}

/* A row's position as JSON text, from its metadata columns. */
char *
stm_source_position(StmSource *src, const Datum *meta, const bool *meta_nulls)
{
	StringInfoData buf;

	initStringInfo(&buf);
	src->routine->position_json(src, meta, meta_nulls, &buf);
	return buf.data;
}

/*
 * A record's declared columns, as the batch wants them: the fields the
 * source split (converted as they are), or the payload parsed by the
 * source's format.  A record the source could not read raises the error
 * the source kept for it, so it goes where bad records go.
 */
void
stm_source_parse(StmParser *parser, const StmRecord *rec, Datum *values, bool *nulls)
{
	if (rec->error)
		ReThrowError(rec->error);
	if (rec->fields)
		stm_parse_fields(parser, rec->fields, rec->nfields, rec->data, rec->len,
						 values, nulls);
	else
		stm_parse_record(parser, rec->data, rec->len, values, nulls);
	stm_parse_key(parser, rec->key, rec->key_len, values, nulls);
}

/*
 * The column of a change stream's cdc_op in the view of its source (SPEC
 * 2.1.2: a source with an envelope), or InvalidAttrNumber when the view
 * is not of such a source.
 */
AttrNumber
stm_source_change_column(Oid view)
{
	StmSourceDef *def = stm_catalog_get_source_by_view(view);

	if (def == NULL || !stm_option_given(stm_catalog_source_options(def->name), "envelope"))
		return InvalidAttrNumber;
	return get_attnum(view, "cdc_op");
}

/* A numeric argument that must be greater than zero when given. */
void
stm_source_check_positive(Jsonb *options, const char *key)
{
	char	   *v = stm_option_text(options, key);

	if (v != NULL && pg_strtoint64(v) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be greater than zero", key),
				 errdetail("The value given was %s.", v)));
}

/* An interval argument that must be greater than zero when given. */
void
stm_source_check_positive_interval(Jsonb *options, const char *key)
{
	char	   *v = stm_option_text(options, key);

	if (v != NULL &&
		!stm_arg_check_sql("SELECT $1::interval > interval '0'", TEXTOID, CStringGetTextDatum(v)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be greater than zero", key)));
}

/*
 * The columns a format takes: csv needs declared columns (by position),
 * text and bytes take none (one value column), json either.
 */
void
stm_source_check_columns(const char *format, bool has_columns)
{
	if (strcmp(format, "csv") == 0 && !has_columns)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("format \"csv\" needs columns"),
				 errhint("Give the columns in order, for example columns => 'order_id bigint, amount numeric'.")));
	if ((strcmp(format, "text") == 0 || strcmp(format, "bytes") == 0) && has_columns)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("format \"%s\" does not take columns", format),
				 errdetail("Records of this format appear as one column named value.")));
}

/* on_bad_record (SPEC 5), already lower-cased */
void
stm_source_check_on_bad_record(const char *on_bad_record)
{
	static const char *const choices[] = {"dead_letter", "skip", "fail", NULL};

	stm_arg_check_choice("on_bad_record", on_bad_record, choices,
						 "Valid values are \"dead_letter\", \"skip\" and \"fail\".");
}

/*
 * Errors in the columns argument point into its text: it is parsed as the
 * column list of a CREATE TABLE.
 */
#define COLUMNS_PREFIX_LEN ((int) sizeof("CREATE TABLE streaming_columns (") - 1)

static void
columns_error_callback(void *arg)
{
	StmArgErrorContext *ctx = arg;
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

/*
 * The columns a source's format adds after the row's, which the parser
 * fills: a change event's cdc_op and cdc_ts (SPEC 2.1.2), an Avro key as
 * kafka_key_avro (2.1.1).
 */
static List *
format_columns(Jsonb *options)
{
	static const StmMetaColumn columns[] = {
		{"cdc_op", "pg_catalog.text"},
		{"cdc_ts", "pg_catalog.timestamptz"},
		{"kafka_key_avro", "pg_catalog.jsonb"}
	};
	List	   *result = NIL;

	if (stm_option_given(options, "envelope"))
		result = list_make2((void *) &columns[0], (void *) &columns[1]);
	if (stm_option_given(options, "key_format"))
		result = lappend(result, (void *) &columns[2]);
	return result;
}

/*
 * The declared columns of a source's view (StmMetaColumn), before its
 * metadata columns: 'a bigint, b numeric(10,2)' parsed with PostgreSQL's
 * grammar (as the column list of a CREATE TABLE) and its types resolved;
 * without columns, one value column of the format (json: jsonb, text:
 * text, bytes: bytea); none when the source has no format (its rows are
 * all metadata, as the rate source's).  The format's own columns follow
 * (format_columns).
 */
List *
stm_source_declared_columns(Jsonb *options, const StmSourceRoutine *routine)
{
	char	   *columns = stm_option_text(options, "columns");
	char	   *format = stm_option_text(options, "format");
	List	   *extra = format_columns(options);
	List	   *reserved = list_concat(routine->metadata_columns(options), extra);
	List	   *result = NIL;
	ErrorContextCallback errcb;
	StmArgErrorContext colctx;
	List	   *raw;
	CreateStmt *cs;
	ListCell   *lc;

	if (columns == NULL)
	{
		StmMetaColumn *c = palloc(sizeof(StmMetaColumn));

		if (format == NULL)
			return NIL;
		c->name = "value";
		c->type = strcmp(format, "json") == 0 ? "pg_catalog.jsonb" :
			strcmp(format, "bytes") == 0 ? "pg_catalog.bytea" : "pg_catalog.text";
		return lcons(c, extra);
	}

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
	foreach(lc, cs->tableElts)
	{
		ColumnDef  *col = (ColumnDef *) lfirst(lc);
		StmMetaColumn *c;
		Oid			typid;
		int32		typmod;
		ListCell   *lc2;

		if (!IsA(col, ColumnDef) || col->constraints != NIL || col->raw_default ||
			col->collClause)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("columns may only give names and types"),
					 errdetail("The columns given were \"%s\".", columns)));
		foreach(lc2, reserved)
			if (strcmp(col->colname, ((StmMetaColumn *) lfirst(lc2))->name) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column name \"%s\" is reserved for %s metadata",
								col->colname, routine->display_name)));
		for (lc2 = list_head(cs->tableElts); lfirst(lc2) != col; lc2 = lnext(cs->tableElts, lc2))
			if (strcmp(((ColumnDef *) lfirst(lc2))->colname, col->colname) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_DUPLICATE_COLUMN),
						 errmsg("column \"%s\" is given more than once in columns", col->colname)));
		typenameTypeIdAndMod(NULL, col->typeName, &typid, &typmod);
		c = palloc(sizeof(StmMetaColumn));
		c->name = pstrdup(col->colname);
		c->type = format_type_extended(typid, typmod,
									   FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
		result = lappend(result, c);
	}
	error_context_stack = errcb.previous;
	return list_concat(result, extra);
}

/*
 * A parallel helper's share (share_bounds) begins with the batch's chunk
 * size, a line of its own: the helper's source never plans, yet reads in
 * the chunks the leader's plan was given.
 */
void
stm_source_share_begin(StringInfo buf, int chunk_size)
{
	appendStringInfo(buf, "%d\n", chunk_size);
}

/* The chunk size at the head of a share; returns the rest of it, the kind's bounds. */
const char *
stm_source_share_chunk_size(const char *bounds, int *chunk_size)
{
	const char *eol = strchr(bounds, '\n');
	char	   *line;

	if (eol == NULL)
		elog(ERROR, "malformed share bounds: %s", bounds);
	line = pnstrdup(bounds, eol - bounds);
	*chunk_size = pg_strtoint32(line);
	if (*chunk_size <= 0)
		elog(ERROR, "malformed share bounds: chunk size %s", line);
	pfree(line);
	return eol + 1;
}

/* A fetch slept us microseconds waiting for records (stm_source_waited_us). */
void
stm_source_note_wait(int64 us)
{
	source_waited_us += us;
}

int64
stm_source_waited_us(void)
{
	return source_waited_us;
}

/*
 * How long the calling thread has waited for a CPU while runnable, in
 * microseconds (Linux's schedstat run delay), or -1 where it is not known.
 */
int64
stm_thread_runq_us(void)
{
	FILE	   *f = fopen("/proc/thread-self/schedstat", "r");
	unsigned long long on_cpu;
	unsigned long long delay;
	int			n;

	if (f == NULL)
		return -1;
	n = fscanf(f, "%llu %llu", &on_cpu, &delay);
	fclose(f);
	return n == 2 ? (int64) (delay / 1000) : -1;
}

/* The calling thread's time on a CPU, in microseconds (user + system). */
int64
stm_thread_cpu_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (int64) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * When the stream's last batch started (min_offsets_per_trigger), read
 * from the catalog the first time a plan asks, in the batch's transaction:
 * most plans never ask, and a continuous stream plans hundreds of times a
 * second.
 */
TimestampTz
stm_plan_last_trigger(StmPlanContext *ctx)
{
	if (!ctx->has_last_trigger)
	{
		ctx->last_trigger = stm_catalog_last_trigger(ctx->stream_id, ctx->last_trigger_since);
		ctx->has_last_trigger = true;
	}
	return ctx->last_trigger;
}
