/*
 * scaleout.c: past one server (SPEC 8) on Kafka's and PostgreSQL's own
 * distribution: each server runs the same stream over its share of the
 * partitions, with its positions, state and sink in its own tables and
 * exactly-once on its own; combine.c reads the partial states of all of
 * them.  Here: the share ('i/n': the partitions p with p % n = i, or
 * 'i,j/n' for several residues; new partitions included), changing it
 * (alter_kafka_source), and moving a stream's share to another server with
 * its positions and state (export_share, import_share).
 *
 * The rules that keep every record counted once over all servers:
 *   - a partition's position lives on one server at a time.  export_share
 *     takes what it exports away in the same transaction as it returns it;
 *     import_share refuses a partition the stream has a position in.
 *   - alter_kafka_source keeps every stored position: those of partitions
 *     that leave the share are not read any more, until export_share moves
 *     them to the server that takes the partitions over (or until the share
 *     takes them back, and the stream reads on from them).
 *   - a group's partial state holds what one server read of it; the
 *     combine view adds the servers up, so state stays where it was made
 *     when only positions move (adding a server), and moves with the
 *     positions when a server gives its whole share away (export_share
 *     without share): then the importing server combines it into its own
 *     groups with the aggregates' combine functions, as a batch merges, and
 *     brings its sink up to date, and the exporting stream is 'moved': it
 *     cannot start again (it would read again what the other server reads)
 *     until it imports a share itself or is reset.
 *
 * The exported data is jsonb: its format, the stream, the source's share,
 * the positions (positions.c's parts), and for a whole share the watermark,
 * the layout of the partial states (combine.c; import checks it is the
 * same here) and every group's row of the state table, values in their
 * types' text form (DateStyle ISO, extra_float_digits 3, as postgres_fdw
 * sends values), read back with the types' input functions as the stream's
 * owner.  Internal states are bytes their deserialize functions trust:
 * combine.c's rule for them applies to imports too.
 *
 * Streams with dedup_keys, session windows, or a source that is not Kafka
 * have no share to move (refused, saying so).
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "aggstate.h"
#include "api.h"
#include "catalog.h"
#include "combine.h"
#include "guc.h"
#include "options.h"
#include "positions.h"
#include "query.h"
#include "runtime.h"
#include "scaleout.h"
#include "shmem.h"
#include "sink.h"
#include "source_kafka.h"

PG_FUNCTION_INFO_V1(streaming_alter_kafka_source);
PG_FUNCTION_INFO_V1(streaming_export_share);
PG_FUNCTION_INFO_V1(streaming_import_share);

#define EXPORT_FORMAT "streaming share"
#define EXPORT_VERSION 1

/* ---- shares ------------------------------------------------------------- */

static void
share_error(const char *text, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid value for share: \"%s\"", text),
			 errdetail("%s", detail),
			 errhint("A share is 'i/n', the partitions p with p %% n = i, or 'i,j/n' for several; for example '0/2' and '1/2' split the partitions between two servers.")));
}

/* A non-negative integer of the share's text, or -1. */
static int64
share_number(const char **p)
{
	int64		n = 0;
	bool		digits = false;

	while (**p == ' ')
		(*p)++;
	while (**p >= '0' && **p <= '9')
	{
		n = n * 10 + (**p - '0');
		if (n > STM_SHARE_MAX_MODULUS)
			n = STM_SHARE_MAX_MODULUS + 1;	/* too large either way */
		digits = true;
		(*p)++;
	}
	while (**p == ' ')
		(*p)++;
	return digits ? n : -1;
}

/* 'i/n' or 'i,j,.../n' (the create and alter functions' share argument). */
StmPartitionShare *
stm_share_parse(const char *text)
{
	StmPartitionShare *share = palloc0(sizeof(StmPartitionShare));
	const char *slash = strchr(text, '/');
	const char *p;
	List	   *residues = NIL;
	int64		n;
	ListCell   *lc;

	if (slash == NULL)
		share_error(text, "It has no \"/\".");
	p = slash + 1;
	n = share_number(&p);
	if (n < 0 || *p != '\0')
		share_error(text, "n, after the \"/\", must be a whole number.");
	if (n < 1 || n > STM_SHARE_MAX_MODULUS)
		share_error(text, psprintf("n must be between 1 and %d.", STM_SHARE_MAX_MODULUS));
	p = text;
	for (;;)
	{
		int64		i = share_number(&p);

		if (i < 0 || (*p != ',' && *p != '/'))
			share_error(text, "Before the \"/\" must come i, or several separated by commas, each a whole number.");
		if (i >= n)
			share_error(text, psprintf("Each i must be between 0 and n - 1 (%d).", (int) n - 1));
		residues = lappend_int(residues, (int) i);
		if (*p++ == '/')
			break;
	}
	share->modulus = (int32) n;
	share->residues = palloc0(sizeof(bool) * n);
	foreach(lc, residues)
	{
		if (share->residues[lfirst_int(lc)])
			share_error(text, psprintf("%d is given twice.", lfirst_int(lc)));
		share->residues[lfirst_int(lc)] = true;
	}
	return share;
}

bool
stm_share_contains(const StmPartitionShare *share, int32 partition)
{
	return partition >= 0 && share->residues[partition % share->modulus];
}

/* The share's normal form: residues ascending, "0,2/4". */
char *
stm_share_format(const StmPartitionShare *share)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int r = 0; r < share->modulus; r++)
		if (share->residues[r])
			appendStringInfo(&buf, "%s%d", buf.len > 0 ? "," : "", r);
	appendStringInfo(&buf, "/%d", share->modulus);
	return buf.data;
}

/* The partitions outside the share, as a share; NULL when it has them all. */
static StmPartitionShare *
share_complement(const StmPartitionShare *share)
{
	StmPartitionShare *c = palloc0(sizeof(StmPartitionShare));
	bool		any = false;

	c->modulus = share->modulus;
	c->residues = palloc0(sizeof(bool) * share->modulus);
	for (int r = 0; r < share->modulus; r++)
	{
		c->residues[r] = !share->residues[r];
		any |= c->residues[r];
	}
	return any ? c : NULL;
}

/*
 * Does share b hold a partition that share a does not (NULL: every
 * partition)?  The pattern repeats every lcm(n_a, n_b) partitions; past a
 * million, assume it does.
 */
static bool
share_adds(const StmPartitionShare *a, const StmPartitionShare *b)
{
	int64		x;
	int64		y;
	int64		g;
	int64		h;
	int64		lcm;

	if (a == NULL)
		return false;
	x = a->modulus;
	y = b ? b->modulus : 1;
	for (g = x, h = y; h != 0;)
	{
		int64		t = g % h;

		g = h;
		h = t;
	}
	lcm = x / g * y;
	if (lcm > 1000000)
		return true;
	for (int64 p = 0; p < lcm; p++)
		if ((b == NULL || b->residues[p % y]) && !a->residues[p % x])
			return true;
	return false;
}

/* A Kafka source's share (NULL: every partition it subscribes to). */
static StmPartitionShare *
source_share(Jsonb *options)
{
	return stm_option_given(options, "share") ?
		stm_share_parse(stm_option_text(options, "share")) : NULL;
}

/* ---- what the functions share ------------------------------------------- */

void
stm_scaleout_check_runnable(StmStreamDef *def)
{
	if (def->status == STM_STATUS_MOVED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the share of stream \"%s\" was moved to another server", def->name),
				 errdetail("streaming.export_share() gave its positions and state away: run here, the stream would read again what the other server reads."),
				 errhint("Drop it, give it a share with streaming.import_share(), or start it from scratch after streaming.reset().")));
}

/* The stream's row locked, once it is stopped: no worker, no run_batch. */
static StmStreamDef *
lock_stopped_stream(StmStreamDef *def, const char *function)
{
	if (def->enabled || stm_shmem_stream_pid(MyDatabaseId, def->id) != 0 ||
		!stm_lock_stream(def->id, false))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("stream \"%s\" is running", def->name),
				 errhint("Stop it first with streaming.stop(): %s works on stopped streams.", function)));
	return stm_catalog_get_stream_by_id(def->id, true);
}

/* A stream whose share may move: its source is Kafka's, no dedup state. */
static StmSourceDef *
check_movable(StmStreamDef *def)
{
	StmSourceDef *src = stm_catalog_get_source_of_stream(def);

	if (strcmp(src->kind, "kafka") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream \"%s\" reads %s source \"%s\", which has no share to move",
						def->name, src->kind, src->name),
				 errdetail("Only streams over Kafka sources are split across servers.")));
	if (def->has_dedup)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the share of stream \"%s\" cannot move: it has dedup_keys", def->name),
				 errdetail("Its keys seen are not moved with its share.")));
	return src;
}

/* The query as batches analyse it; session windows refused. */
static StmQueryInfo *
analyse_movable(StmStreamDef *def)
{
	int			nest;
	StmQueryInfo *qi = stm_query_analyze_stored(def, &nest);

	AtEOXact_GUC(true, nest);
	if (qi->ssjoin)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the share of stream \"%s\" cannot move: it joins two sources", def->name),
				 errdetail("Its join state holds rows of both sources' partitions, which are not moved with a share.")));
	if (qi->agg && qi->agg->window.kind == STM_WINDOW_SESSION)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("the share of stream \"%s\" cannot move: it has session windows", def->name),
				 errdetail("Sessions from two servers may overlap and would have to merge.")));
	return qi;
}

/* Values as text the way postgres_fdw sends them: the same on every server. */
static int
pin_transfer_settings(void)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("datestyle", "ISO", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("intervalstyle", "postgres", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("extra_float_digits", "3", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

static void
append_position_json(StringInfo buf, StmPosition *p)
{
	appendStringInfoString(buf, "{\"part\": ");
	escape_json(buf, p->part);
	appendStringInfo(buf, ", \"part_no\": %d, \"position\": " INT64_FORMAT ", \"end_position\": ",
					 p->part_no, p->position);
	if (p->has_end)
		appendStringInfo(buf, INT64_FORMAT, p->end_position);
	else
		appendStringInfoString(buf, "null");
	appendStringInfo(buf, ", \"detail\": %s}", p->detail ? p->detail : "null");
}

/*
 * Positions as progress shows them ({"topic": {"0": offset}}), of the
 * partitions the source reads (the next batch's start is the same).
 */
static char *
positions_progress_json(List *positions, Jsonb *options)
{
	StringInfoData buf;
	const char *topic = NULL;
	ListCell   *lc;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	foreach(lc, positions)
	{
		StmPosition *p = lfirst(lc);

		if (!stm_kafka_source_reads(options, p->part, p->part_no))
			continue;
		if (topic == NULL || strcmp(topic, p->part) != 0)
		{
			if (topic != NULL)
				appendStringInfoString(&buf, "}, ");
			escape_json(&buf, p->part);
			appendStringInfoString(&buf, ": {");
			topic = p->part;
		}
		else
			appendStringInfoString(&buf, ", ");
		appendStringInfo(&buf, "\"%d\": " INT64_FORMAT, p->part_no, p->position);
	}
	if (topic != NULL)
		appendStringInfoChar(&buf, '}');
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static int
position_cmp(const ListCell *a, const ListCell *b)
{
	StmPosition *pa = lfirst(a);
	StmPosition *pb = lfirst(b);
	int			c = strcmp(pa->part, pb->part);

	return c != 0 ? c : (pa->part_no > pb->part_no) - (pa->part_no < pb->part_no);
}

static List *
sorted_positions(int32 stream_id, const char *source)
{
	List	   *positions = stm_positions_read(stream_id, source);

	list_sort(positions, position_cmp);
	return positions;
}

/* ---- alter_kafka_source ------------------------------------------------- */

/*
 * streaming.alter_kafka_source(name, share => 'i/n'): the source's share,
 * while none of its streams runs (NULL: unchanged).  Every stored position
 * is kept (the file's banner); a NOTICE names what the servers must do.
 */
Datum
streaming_alter_kafka_source(PG_FUNCTION_ARGS)
{
	char	   *name;
	StmSourceDef *src;
	Jsonb	   *options;
	StmPartitionShare *old_share;
	StmPartitionShare *new_share;
	StmPartitionShare *outside;
	char	   *share_text;
	List	   *ids;
	ListCell   *lc;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	(void) stm_catalog_check_version(ERROR);
	name = stm_arg_name(fcinfo);
	src = stm_catalog_get_source(name, false);
	stm_catalog_check_owner("source", name, src->owner);
	if (strcmp(src->kind, "kafka") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("source \"%s\" is not a Kafka source", name),
				 errdetail("It is a %s source; alter_kafka_source changes Kafka sources.", src->kind)));
	if (PG_ARGISNULL(1))
		PG_RETURN_VOID();
	options = stm_catalog_source_options(name);
	if (stm_option_given(options, "partitions"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("share cannot be combined with partitions"),
				 errdetail("Source \"%s\" reads the partitions its partitions argument names.", name)));
	new_share = stm_share_parse(text_to_cstring(PG_GETARG_TEXT_PP(1)));
	share_text = stm_share_format(new_share);
	old_share = source_share(options);

	/* every stream of the source stopped, its row locked until commit */
	values[0] = CStringGetTextDatum(name);
	ids = stm_catalog_strings("SELECT id::text FROM streaming.stream_defs WHERE source = $1 OR other_source = $1 ORDER BY id",
							  1, types, values);
	foreach(lc, ids)
	{
		StmStreamDef *def = stm_catalog_get_stream_by_id(pg_strtoint32(lfirst(lc)), false);

		if (def->enabled || stm_shmem_stream_pid(MyDatabaseId, def->id) != 0 ||
			!stm_lock_stream(def->id, false))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_IN_USE),
					 errmsg("source \"%s\" is read by stream \"%s\", which is running", name, def->name),
					 errhint("Stop the source's streams first with streaming.stop(): a share changes while they are stopped.")));
		(void) stm_catalog_get_stream_by_id(def->id, true);
	}

	values[1] = CStringGetTextDatum(share_text);
	stm_catalog_exec("UPDATE streaming.sources SET options = options || jsonb_build_object('share', $2::text) "
					 "WHERE name = $1", 2, types, values, NULL, SPI_OK_UPDATE);

	/* what the servers have to do now */
	outside = share_complement(new_share);
	foreach(lc, ids)
	{
		StmStreamDef *def = stm_catalog_get_stream_by_id(pg_strtoint32(lfirst(lc)), false);
		ListCell   *lp;
		int			n = 0;

		foreach(lp, stm_positions_read(def->id, name))
			if (!stm_share_contains(new_share, ((StmPosition *) lfirst(lp))->part_no))
				n++;
		if (n > 0)
			ereport(NOTICE,
					(errmsg_plural("stream \"%s\" keeps its position in %d partition outside share %s",
								   "stream \"%s\" keeps its positions in %d partitions outside share %s",
								   n, def->name, n, share_text),
					 errdetail("This server does not read them any more."),
					 errhint("Move them to the server that takes them over: streaming.export_share('%s', share => '%s') here, then streaming.import_share() there.",
							 def->name, stm_share_format(outside))));
	}
	if (ids != NIL && share_adds(old_share, new_share))
		ereport(NOTICE,
				(errmsg("share %s of source \"%s\" holds partitions that share %s did not",
						share_text, name, stm_share_format(old_share)),
				 errdetail("A stream reads a partition it has no position in from the earliest offset."),
				 errhint("If another server read them, import their positions with streaming.import_share() before starting the streams.")));
	PG_RETURN_VOID();
}

/* ---- export_share ------------------------------------------------------- */

/* Every group's row of the state table, as a JSON array of texts each. */
static void
append_state_rows(StringInfo buf, StmStreamDef *def, StmAggQuery *agg)
{
	Oid			save_userid;
	int			save_sec_context;
	int			nest;
	Portal		portal;

	/* as the stream's owner, who may read its state table (statetable.c) */
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	nest = pin_transfer_settings();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	SPI_connect();
	portal = SPI_cursor_open_with_args(NULL, psprintf("SELECT %s FROM %s ORDER BY group_key",
													  stm_aggstate_group_columns(agg),
													  stm_aggstate_table(def->id)),
									   0, NULL, NULL, NULL, true, 0);
	appendStringInfoString(buf, "[");
	for (bool first = true;;)
	{
		SPI_cursor_fetch(portal, true, 1000);
		if (SPI_processed == 0)
			break;
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			HeapTuple	tup = SPI_tuptable->vals[r];

			appendStringInfoString(buf, first ? "[" : ", [");
			first = false;
			for (int c = 1; c <= SPI_tuptable->tupdesc->natts; c++)
			{
				char	   *v = SPI_getvalue(tup, SPI_tuptable->tupdesc, c);

				if (c > 1)
					appendStringInfoString(buf, ", ");
				if (v)
					escape_json(buf, v);
				else
					appendStringInfoString(buf, "null");
			}
			appendStringInfoChar(buf, ']');
		}
		SPI_freetuptable(SPI_tuptable);
	}
	appendStringInfoChar(buf, ']');
	SPI_cursor_close(portal);
	SPI_finish();
	AtEOXact_GUC(true, nest);
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/*
 * streaming.export_share(stream, share => NULL): with the stream stopped,
 * the positions of share's partitions (which the source must no longer
 * read: narrow it first) or, without share, everything the stream has:
 * every position, its watermark and its partial states; returned as jsonb
 * for import_share on another server and taken away here in the same
 * transaction (the stream is then 'moved').
 */
Datum
streaming_export_share(PG_FUNCTION_ARGS)
{
	char	   *name;
	StmStreamDef *def;
	StmSourceDef *src;
	Jsonb	   *options;
	StmPartitionShare *local;
	StmPartitionShare *share = NULL;
	StmQueryInfo *qi;
	List	   *positions;
	List	   *chosen = NIL;
	List	   *kept = NIL;
	ListCell   *lc;
	StringInfoData buf;

	(void) stm_catalog_check_version(ERROR);
	name = stm_arg_name(fcinfo);
	def = stm_catalog_get_stream(name, false);
	stm_catalog_check_owner("stream", name, def->owner);
	def = lock_stopped_stream(def, "export_share");
	if (def->status == STM_STATUS_MOVED)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the share of stream \"%s\" was moved to another server already", name)));
	src = check_movable(def);
	options = stm_catalog_source_options(src->name);
	local = source_share(options);
	qi = analyse_movable(def);
	if (!PG_ARGISNULL(1))
		share = stm_share_parse(text_to_cstring(PG_GETARG_TEXT_PP(1)));

	positions = sorted_positions(def->id, src->name);
	foreach(lc, positions)
	{
		StmPosition *p = lfirst(lc);

		if (share == NULL || stm_share_contains(share, p->part_no))
		{
			if (share && stm_kafka_source_reads(options, p->part, p->part_no))
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("stream \"%s\" still reads partition %d of topic \"%s\"", name, p->part_no, p->part),
						 errdetail("Source \"%s\" has share %s, which holds it.", src->name,
								   local ? stm_share_format(local) : "(every partition)"),
						 errhint("Narrow the share first with streaming.alter_kafka_source('%s', share => ...).",
								 src->name)));
			chosen = lappend(chosen, p);
		}
		else
			kept = lappend(kept, p);
	}
	if (share && chosen == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("stream \"%s\" has no positions in share %s", name, stm_share_format(share))));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"format\": ");
	escape_json(&buf, EXPORT_FORMAT);
	appendStringInfo(&buf, ", \"version\": %d, \"stream\": ", EXPORT_VERSION);
	escape_json(&buf, def->name);
	appendStringInfoString(&buf, ", \"source\": ");
	escape_json(&buf, src->name);
	appendStringInfoString(&buf, ", \"share\": ");
	if (share || local)
		escape_json(&buf, stm_share_format(share ? share : local));
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoString(&buf, ", \"positions\": [");
	foreach(lc, chosen)
	{
		if (foreach_current_index(lc) > 0)
			appendStringInfoString(&buf, ", ");
		append_position_json(&buf, lfirst(lc));
	}
	appendStringInfoString(&buf, "], \"watermark\": ");
	if (share == NULL && def->has_watermark_value)
		escape_json(&buf, timestamptz_to_str(def->watermark_value));
	else
		appendStringInfoString(&buf, "null");
	appendStringInfoString(&buf, ", \"layout\": ");
	if (share == NULL && qi->agg)
	{
		appendStringInfoString(&buf, stm_combine_layout(qi->agg, stm_combine_state_table(def->id)));
		appendStringInfoString(&buf, ", \"state\": ");
		append_state_rows(&buf, def, qi->agg);
	}
	else
		appendStringInfoString(&buf, "null, \"state\": null");
	appendStringInfoChar(&buf, '}');

	/* what was exported is no longer here */
	if (share)
		stm_positions_replace(def->id, src->name, kept);
	else
	{
		Oid			type = INT4OID;
		Datum		value = Int32GetDatum(def->id);

		stm_positions_forget(def->id);
		stm_api_clear_state_tables(def->id, false);
		stm_catalog_exec("UPDATE streaming.stream_defs SET status = 'moved', source_error = NULL, "
						 "last_error = NULL WHERE id = $1", 1, &type, &value, NULL, SPI_OK_UPDATE);
	}
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

/* ---- import_share ------------------------------------------------------- */

/* What import_share reads of the exported data. */
typedef struct ShareData
{
	char	   *format;
	int			version;
	char	   *stream;
	char	   *share;
	char	   *watermark;
	char	   *layout;
	bool		has_state;
	List	   *positions;		/* StmPosition */
	List	   *rows;			/* char **: a state row's texts */
	int			ncols;
	int			bad_ncols;		/* the first row's length that is not ncols, else -1 */
} ShareData;

static void
share_header_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	ShareData  *d = arg;
	char	   *version = stm_sql_get_text(tuple, desc, "version");
	char	   *has_state = stm_sql_get_text(tuple, desc, "has_state");

	d->format = stm_sql_get_text(tuple, desc, "format");
	d->version = version ? pg_strtoint32(version) : -1;
	d->stream = stm_sql_get_text(tuple, desc, "stream");
	d->share = stm_sql_get_text(tuple, desc, "share");
	d->watermark = stm_sql_get_text(tuple, desc, "watermark");
	d->layout = stm_sql_get_text(tuple, desc, "layout");
	d->has_state = has_state && strcmp(has_state, "t") == 0;
}

static void
share_position_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	ShareData  *d = arg;
	char	   *end = stm_sql_get_text(tuple, desc, "end_position");
	StmPosition *p = stm_position_make(stm_sql_get_text(tuple, desc, "part"),
									   pg_strtoint32(stm_sql_get_text(tuple, desc, "part_no")),
									   pg_strtoint64(stm_sql_get_text(tuple, desc, "position")),
									   end ? pg_strtoint64(end) : 0);

	p->has_end = end != NULL;
	p->detail = stm_sql_get_text(tuple, desc, "detail");
	d->positions = lappend(d->positions, p);
}

static void
share_state_row(void *arg, HeapTuple tuple, TupleDesc desc)
{
	ShareData  *d = arg;
	bool		isnull;
	Datum		values = stm_sql_get_datum(tuple, desc, "v", &isnull);
	Datum	   *elems;
	bool	   *elnulls;
	int			n;
	char	  **row;

	deconstruct_array(DatumGetArrayTypeP(values), TEXTOID, -1, false, TYPALIGN_INT, &elems, &elnulls, &n);
	/* checked once the layout is known to be this stream's (import_share) */
	if (n != d->ncols && d->bad_ncols < 0)
		d->bad_ncols = n;
	row = palloc(sizeof(char *) * n);
	for (int i = 0; i < n; i++)
		row[i] = elnulls[i] ? NULL : TextDatumGetCString(elems[i]);
	d->rows = lappend(d->rows, row);
}

static void
bad_data(const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("data is not a share exported by streaming.export_share()"),
			 errdetail("%s", detail)));
}

/* The exported data, read by PostgreSQL's jsonb functions. */
static ShareData *
read_share_data(Jsonb *data, int ncols)
{
	ShareData  *d = palloc0(sizeof(ShareData));
	StmSql		q;
	Datum		jd = JsonbPGetDatum(data);

	d->ncols = ncols;
	d->bad_ncols = -1;
	stm_sql_init(&q, "SELECT d ->> 'format' AS format, d ->> 'version' AS version, d ->> 'stream' AS stream, "
				 "d ->> 'share' AS share, d ->> 'watermark' AS watermark, "
				 "CASE WHEN jsonb_typeof(d -> 'layout') = 'object' THEN (d -> 'layout')::text END AS layout, "
				 "jsonb_typeof(d -> 'state') = 'array' AS has_state "
				 "FROM (SELECT :data AS d) t WHERE jsonb_typeof(d) = 'object' "
				 "AND jsonb_typeof(d -> 'positions') = 'array'");
	stm_sql_param(&q, "data", JSONBOID, jd, false);
	if (stm_sql_run(&q, SPI_OK_SELECT, share_header_row, d) == 0 || d->format == NULL ||
		strcmp(d->format, EXPORT_FORMAT) != 0)
		bad_data("It must be an object with \"format\": \"" EXPORT_FORMAT "\" and an array of positions.");
	if (d->version != EXPORT_VERSION)
		bad_data(psprintf("Its version is %d; this server reads version %d.", d->version, EXPORT_VERSION));

	stm_sql_init(&q, "SELECT p ->> 'part' AS part, p ->> 'part_no' AS part_no, p ->> 'position' AS position, "
				 "p ->> 'end_position' AS end_position, "
				 "CASE WHEN jsonb_typeof(p -> 'detail') IN ('object', 'array') THEN (p -> 'detail')::text END AS detail "
				 "FROM jsonb_array_elements(:data -> 'positions') WITH ORDINALITY AS t(p, o) ORDER BY o");
	stm_sql_param(&q, "data", JSONBOID, jd, false);
	PG_TRY();
	{
		(void) stm_sql_run(&q, SPI_OK_SELECT, share_position_row, d);
	}
	PG_CATCH();
	{
		FlushErrorState();
		bad_data("Each position must be {\"part\": topic, \"part_no\": partition, \"position\": offset, ...}.");
	}
	PG_END_TRY();

	if (d->has_state)
	{
		stm_sql_init(&q, "SELECT ARRAY(SELECT e FROM jsonb_array_elements_text(r) WITH ORDINALITY AS x(e, i) ORDER BY i) AS v "
					 "FROM jsonb_array_elements(:data -> 'state') WITH ORDINALITY AS t(r, o) ORDER BY o");
		stm_sql_param(&q, "data", JSONBOID, jd, false);
		(void) stm_sql_run(&q, SPI_OK_SELECT, share_state_row, d);
	}
	return d;
}

/* The event time's column of the source view, as batches find it (-1: none). */
static int
event_time_att(StmStreamDef *def, StmSourceDef *src)
{
	Relation	view;
	int			att = -1;

	if (def->event_time == NULL)
		return -1;
	view = table_open(src->view, AccessShareLock);
	for (int i = 0; i < RelationGetDescr(view)->natts; i++)
		if (strcmp(NameStr(TupleDescAttr(RelationGetDescr(view), i)->attname), def->event_time) == 0)
			att = i;
	table_close(view, AccessShareLock);
	return att;
}

/* A text of the data as a value of type typid (its input function). */
static Datum
input_value(const char *text, Oid typid, int32 typmod, bool *isnull)
{
	Oid			infunc;
	Oid			ioparam;

	*isnull = text == NULL;
	if (text == NULL)
		return (Datum) 0;
	getTypeInputInfo(typid, &infunc, &ioparam);
	return OidInputFunctionCall(infunc, (char *) text, ioparam, typmod);
}

/*
 * The imported groups combined into the stream's state as a batch of
 * partial groups (stm_aggbatch_add_partial: as parallel helpers' groups),
 * the sink brought up to date as the output mode says; as the stream's
 * owner, in a restricted security context, as batches run; the rows it
 * writes counted in progress.
 */
static void
merge_state(StmStreamDef *def, StmSourceDef *src, ShareData *d, StmBatchProgress *progress,
			bool has_watermark, TimestampTz watermark)
{
	Oid			save_userid;
	int			save_sec_context;
	int			guc_nest;
	int			nest;
	StmQueryInfo *qi;
	StmAggQuery *agg;
	StmRuntime *rt;
	StmSinkBatch *sb;
	StmAggBatch *ab;
	EState	   *estate;
	int			naggs;
	Datum	   *values;
	bool	   *nulls;
	int64		nlate;
	ListCell   *lc;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(def->owner, save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	qi = stm_query_analyze_stored(def, &guc_nest);
	agg = qi->agg;
	naggs = list_length(agg->aggrefs);
	nest = pin_transfer_settings();
	rt = stm_runtime_create(def->id);
	estate = CreateExecutorState();
	sb = stm_sink_begin_batch(stm_runtime_open_sink(rt, def),
							  stm_sink_output(qi, def->output_mode, def->key_columns),
							  progress->batch_id, estate);
	ab = stm_aggbatch_begin(agg, def->id, def->output_mode, sb, has_watermark, watermark,
							event_time_att(def, src), NULL);
	values = palloc(sizeof(Datum) * (1 + agg->nkeys + naggs));
	nulls = palloc(sizeof(bool) * (1 + agg->nkeys + naggs));
	foreach(lc, d->rows)
	{
		char	  **row = lfirst(lc);

		/* a row: window_start, window_end, the keys, the states */
		values[0] = input_value(row[0], TIMESTAMPTZOID, -1, &nulls[0]);
		for (int k = 0; k < agg->nkeys; k++)
		{
			int32		typmod = agg->key_typmods[k];
			Oid			base = getBaseTypeAndTypmod(agg->key_types[k], &typmod);

			values[1 + k] = input_value(row[2 + k], base, typmod, &nulls[1 + k]);
		}
		for (int i = 0; i < naggs; i++)
			values[1 + agg->nkeys + i] = input_value(row[2 + agg->nkeys + i],
													 stm_agg_storedtype(list_nth(agg->aggrefs, i)), -1,
													 &nulls[1 + agg->nkeys + i]);
		stm_aggbatch_add_partial(ab, values, nulls);
	}
	/* counted: the next batch counts again (no state_rows stored) */
	stm_aggbatch_finish(ab, NULL, NULL, &progress->num_state_rows, &nlate);
	stm_sink_end_batch(sb);
	progress->num_output_rows = sb->rows;
	/* a sink that delivers after the commit counts its rows as they arrive */
	progress->num_delivered_rows = sb->deferred ? 0 : sb->rows;
	FreeExecutorState(estate);
	stm_runtime_close(rt);
	AtEOXact_GUC(true, nest);
	AtEOXact_GUC(true, guc_nest);
	SetUserIdAndSecContext(save_userid, save_sec_context);
}

/*
 * streaming.import_share(stream, data): with the stream stopped, what
 * export_share gave on another server: its positions join the stream's
 * (partitions its source reads, none it has a position in), its partial
 * states are combined into the stream's groups and its sink is brought up
 * to date, its watermark taken if later; recorded as a batch that read
 * nothing.
 */
Datum
streaming_import_share(PG_FUNCTION_ARGS)
{
	char	   *name;
	StmStreamDef *def;
	StmSourceDef *src;
	Jsonb	   *options;
	StmQueryInfo *qi;
	ShareData  *d;
	List	   *before;
	List	   *after;
	ListCell   *lc;
	StmBatchProgress progress = {0};
	bool		has_watermark;
	TimestampTz watermark;
	int			ncols;

	(void) stm_catalog_check_version(ERROR);
	name = stm_arg_name(fcinfo);
	stm_arg_require(fcinfo, 1, "data");
	def = stm_catalog_get_stream(name, false);
	stm_catalog_check_owner("stream", name, def->owner);
	def = lock_stopped_stream(def, "import_share");
	src = check_movable(def);
	options = stm_catalog_source_options(src->name);
	qi = analyse_movable(def);
	ncols = qi->agg ? 2 + qi->agg->nkeys + list_length(qi->agg->aggrefs) : 0;
	d = read_share_data(PG_GETARG_JSONB_P(1), ncols);

	/* the same stream: its partial states' layout */
	if (d->has_state)
	{
		char	   *local;
		Oid			types[2] = {JSONBOID, JSONBOID};
		Datum		values[2];
		bool		isnull;

		if (qi->agg == NULL || d->layout == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("the exported share holds partial states, but stream \"%s\" has no aggregates", name)));
		local = stm_combine_layout(qi->agg, stm_combine_state_table(def->id));
		values[0] = DirectFunctionCall1(jsonb_in, CStringGetDatum(local));
		values[1] = DirectFunctionCall1(jsonb_in, CStringGetDatum(d->layout));
		if (!DatumGetBool(stm_catalog_value("SELECT $1 = $2", 2, types, values, &isnull)))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("the exported share is of a stream that differs from stream \"%s\"", name),
					 errdetail("Its partial states are %s; here they are %s.", d->layout, local),
					 errhint("Import a share into the same stream definition as the one it was exported from.")));
		if (d->bad_ncols >= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a state row of the exported share has %d values, not %d", d->bad_ncols, d->ncols)));
		stm_combine_check_trusted_states(qi->agg->aggrefs, "an imported share");
	}

	/* positions: partitions this source reads, and none the stream has */
	before = sorted_positions(def->id, src->name);
	foreach(lc, d->positions)
	{
		StmPosition *p = lfirst(lc);
		ListCell   *lb;

		if (!stm_kafka_source_reads(options, p->part, p->part_no))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("source \"%s\" of stream \"%s\" does not read partition %d of topic \"%s\"",
							src->name, name, p->part_no, p->part),
					 stm_option_given(options, "share") ?
					 errhint("Widen its share first with streaming.alter_kafka_source('%s', share => ...).", src->name) : 0));
		foreach(lb, before)
		{
			StmPosition *b = lfirst(lb);

			if (b->part_no == p->part_no && strcmp(b->part, p->part) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
						 errmsg("stream \"%s\" has a position in partition %d of topic \"%s\" already",
								name, p->part_no, p->part),
						 errdetail("It is at offset " INT64_FORMAT "; the import is at offset " INT64_FORMAT ": it would read records twice or skip them.",
								   b->position, p->position)));
		}
	}

	/* the later watermark: the one a server that saw both would have */
	has_watermark = def->has_watermark_value;
	watermark = def->has_watermark_value ? def->watermark_value : STM_UNIX_EPOCH;
	if (d->watermark)
	{
		TimestampTz w = DatumGetTimestampTz(DirectFunctionCall3(timestamptz_in, CStringGetDatum(d->watermark),
																ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));

		if (!has_watermark || w > watermark)
			watermark = w;
		has_watermark = true;
	}

	progress.stream_id = def->id;
	progress.batch_id = def->last_batch_id + 1;
	progress.started_at = GetCurrentTimestamp();
	if (d->has_state && d->rows != NIL)
		merge_state(def, src, d, &progress, def->has_watermark, watermark);
	stm_positions_write(def->id, src->name, d->positions);
	after = sorted_positions(def->id, src->name);
	progress.start_positions = positions_progress_json(before, options);
	progress.end_positions = positions_progress_json(after, options);
	progress.has_watermark = has_watermark && def->has_watermark;
	progress.watermark = watermark;
	stm_catalog_record_batch(&progress, stm_guc_progress_history);
	if (def->status == STM_STATUS_MOVED)
		stm_catalog_set_status(def->id, STM_STATUS_STOPPED, NULL, true, -1);
	PG_RETURN_VOID();
}
