/*
 * sink_kafka.c: the Kafka sink (SPEC 6.1), through an outbox.
 *
 * create_kafka_sink stores a named sink (streaming.sinks).  A stream that
 * names it as its sink writes its output rows, in the batch's transaction,
 * as messages into the outbox: chunks of consecutive messages, a row of
 * streaming.outbox_chunks each (outbox.c), seq counting from 0 in each
 * batch in the order the batch wrote them; the view streaming.outbox shows
 * a message to a row, with its headers.  Nothing reaches Kafka before the
 * commit.  After it, the stream's own worker (deliver) reads the outbox in
 * (batch_id, seq) order, produces every message with an idempotent
 * producer (enable.idempotence, acks=all, and retries until delivered:
 * message.timeout.ms = 0) and deletes the chunks whose messages Kafka
 * confirmed, in a transaction that also counts them in their batch's
 * progress row.  A crash or an outage in between leaves the chunks in the
 * outbox, and their messages are produced again, in the same order, with
 * the same key, value and headers (streaming-stream, streaming-batch-id,
 * streaming-seq): at-least-once, and repeats can be recognised.
 *
 * Messages: the key from key_columns (one column: its text form, a bytea
 * column its bytes; several: a JSON object by column name; default: the
 * window and group columns in update and complete mode, none in append
 * mode); the value as format says: json (row_to_json of the output row:
 * PostgreSQL's own JSON, numbers and booleans as such, timestamps in ISO
 * 8601 with their offset, NULL as null; the same bytes written directly
 * for rows of built-in scalar types, fast_row_json), csv (quoted as COPY
 * quotes), text (the one column besides the key, in its text form) or bytes (that column,
 * a bytea); delete_key (a session merged away) is a tombstone, a NULL
 * value on the key.
 *
 * Invariants:
 * - a stream's outbox never holds more than streaming.outbox_max_rows rows:
 *   capacity bounds the batch's input by the room left (and half the
 *   bound, so batches and deliveries overlap), and a batch that
 *   writes more anyway fails (53000 while rows wait: the stream waits and
 *   runs it again after the delivery; 54000 when the outbox was empty: it
 *   can never fit);
 * - per partition, messages reach Kafka in outbox order: the idempotent
 *   producer keeps its order through retries, messages never time out, and
 *   after a failed delivery everything not delivered is produced again from
 *   the outbox's first row;
 * - a chunk leaves the outbox only once each of its messages was reported
 *   delivered (librdkafka's delivery report) or refused by Kafka as too large:
 *   such a message goes to dead_letters with its outbox position, counted
 *   in the batch's num_rejected_rows, and the rest go on;
 * - no call into PostgreSQL from librdkafka's threads: its callbacks run in
 *   rd_kafka_poll on ours and only record what they are told; the
 *   configuration is never logged (it holds credentials).
 */
#include "postgres.h"

#include <malloc.h>

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "common/jsonapi.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "api.h"
#include "catalog.h"
#include "guc.h"
#include "kafka_conf.h"
#include "kafka_probe.h"
#include "options.h"
#include "outbox.h"
#include "sink.h"
#include "sink_kafka.h"
#include "sink_table.h"
#include "source.h"

PG_FUNCTION_INFO_V1(streaming_create_kafka_sink);
PG_FUNCTION_INFO_V1(streaming_drop_kafka_sink);

#define OUTBOX_NATTS 5			/* stream_id, batch_id, first_seq, nmsgs, messages */
#define ROUND_ROWS 10000		/* messages produced together, and confirmed in one transaction */
#define POLL_MS 10
#define DEAD_LETTER_RAW_MAX 65536	/* dead_letters.raw keeps this much (SPEC 5) */
#define STATUS_LEN 1024
#define STAGE_BYTES ((Size) stm_guc_batch_memory_kb * 1024 / 4)	/* messages kept for delivery */

typedef enum SinkFormat
{
	SINK_JSON,
	SINK_CSV,
	SINK_TEXT,
	SINK_BYTES
} SinkFormat;

/* What became of a produced message. */
typedef enum MsgState
{
	MSG_IN_FLIGHT,
	MSG_DELIVERED,
	MSG_TOO_LARGE,				/* refused as too large: a dead letter */
	MSG_FAILED					/* stays in the outbox, produced again later */
} MsgState;

typedef struct Round Round;

/* One produced message; librdkafka's per-message opaque. */
typedef struct OutMsg
{
	Round	   *round;
	int64		batch_id;
	int64		seq;
	int64		chunk_seq;		/* its outbox chunk: first_seq and nmsgs */
	int			chunk_n;
	MsgState	state;
	rd_kafka_resp_err_t err;
} OutMsg;

/* Outbox rows read in one go and produced together, oldest first. */
struct Round
{
	int			alloc;			/* room for so many */
	int			n;				/* produced */
	int			ndone;			/* reported */
	OutMsg	   *msgs;
};

/* A chunk of the last batch, as it went into the outbox (its messages' bytes). */
typedef struct StagedChunk
{
	int64		first_seq;
	int			nmsgs;
	char	   *data;
	int			len;
} StagedChunk;

/* An open Kafka sink: one per runtime (a worker's life, a run_batch). */
typedef struct KafkaSink
{
	StmSink		base;			/* first: what batch.c reads */
	MemoryContext cxt;
	char	   *name;			/* the sink's */
	Oid			sink_owner;
	char	   *bootstrap;
	char	   *topic;
	SinkFormat	format;
	List	   *key_columns;	/* names; NIL: the default */
	List	   *kafka_options;	/* StmOptionPair */
	Oid			outbox_relid;
	TupleDesc	outbox_desc;

	/* the outbox */
	int64		outbox_rows;	/* rows of committed batches in it (in flight too) */
	int64		batch_rows;		/* rows the batch in progress wrote */

	/*
	 * The last batch's chunks as it wrote them (a prefix of them, up to
	 * STAGE_BYTES): after its commit they are produced from here, and the
	 * outbox is read only for what is not (a crash, an outage, a large
	 * batch).
	 */
	MemoryContext stage_cxt;
	int64		stage_batch;
	StagedChunk *stage;
	int			nstage;
	int			stage_next;		/* the first chunk not produced yet (in part) */
	int			stage_alloc;
	Size		stage_bytes;
	bool		staging;		/* the batch in progress is being kept */
	bool		stage_ready;	/* its batch committed, with stage_rows rows */
	bool		stage_started;	/* some of it was produced */
	int64		stage_rows;

	/* the producer, made by the first delivery */
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	char		error[STM_KAFKA_ERROR_LEN];	/* librdkafka's last error (error_cb) */
	bool		topic_ok;		/* the topic's metadata was fine since the last failure */
	List	   *rounds;			/* Round, in flight, oldest first */
	int64		in_flight;		/* messages of those rounds not finalized yet */
	int64		max_in_flight;	/* at most (their OutMsgs: a quarter of batch_memory) */
	bool		queue_full;		/* the last try to produce found no room */
	bool		have_cursor;	/* rows up to the cursor are produced */
	int64		cursor_batch;
	int64		cursor_seq;
	int64		cursor_chunk;	/* the chunk of cursor_seq */
	bool		failed;			/* a delivery failed: produce nothing new until the
								 * rounds drain, then start again from the outbox */

	/*
	 * The chunk whose messages finish_rounds is counting: it leaves the
	 * outbox once all of them, from its first, were done in a row.
	 */
	int64		carry_batch;
	int64		carry_chunk;	/* its first_seq; -1: none */
	int			carry_n;
	int			carry_seen;
	int			carry_delivered;
	bool		carry_ok;		/* none of them failed */
	List	   *carry_rejected; /* seqs of those refused as too large */
	rd_kafka_resp_err_t fail_err;
	char		waiting[STATUS_LEN];
	char		error_msg[STATUS_LEN];
} KafkaSink;

/*
 * A column of a json value, as row_to_json writes it (json.c's categories
 * of built-in types); a row with another type goes through row_to_json.
 */
typedef enum JsonColKind
{
	JCOL_INT,					/* int2, int4, int8: always a valid number */
	JCOL_NUMBER,				/* float4, float8, numeric: quoted if not a JSON number */
	JCOL_BOOL,
	JCOL_DATETIME,				/* date, timestamp, timestamptz: ISO 8601, quoted */
	JCOL_JSON,					/* json, jsonb: as they are */
	JCOL_STRING					/* anything else built in: its text, escaped */
} JsonColKind;

typedef struct JsonCol
{
	JsonColKind kind;
	Oid			typid;			/* the base type */
	char	   *prefix;			/* {"name": or ,"name": */
} JsonCol;

/* One batch's writer. */
typedef struct KafkaSinkBatch
{
	StmSinkBatch base;			/* first */
	StmSinkBatch *outbox;		/* the table writer of streaming.outbox */
	StmSinkOutput outbox_output;
	MemoryContext row_cxt;		/* one message's encoding, reset after each */
	int64		seq;
	int64		start_rows;		/* the outbox's rows when the batch began */
	int			nkey;			/* key columns (outputs) */
	int		   *key_att;
	int			value_att;		/* text, bytes: the value's column */
	TupleDesc	row_desc;		/* json: the output row, blessed */
	JsonCol    *json_cols;		/* json: how each column is written; NULL: row_to_json */
	StringInfoData json_buf;	/* json: the value being encoded (a bytea) */
	TupleDesc	key_desc;		/* several key columns: them, blessed */
	FmgrInfo   *out_funcs;		/* per output: its type's output function */
	Datum		stream_name;	/* for row_to_json's fallback */
	StringInfoData chunk;		/* the outbox chunk being filled */
	int64		chunk_seq;		/* its first message's seq */
	int			chunk_n;		/* its messages */
} KafkaSinkBatch;

/* ---- options ----------------------------------------------------------- */

/* Properties the sink sets itself: its guarantees (SPEC 6.1) rest on them. */
static const char *const fixed_options[] = {
	"enable.idempotence", "acks", "request.required.acks", "message.timeout.ms",
	"delivery.timeout.ms", "transactional.id", "enable.gapless.guarantee",
	"queue.buffering.max.messages", "queue.buffering.max.kbytes",
	"delivery.report.only.error",
	NULL
};

static void
check_fixed_option(const char *key)
{
	for (int i = 0; fixed_options[i]; i++)
		if (strcmp(fixed_options[i], key) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("kafka_options of a Kafka sink must not set \"%s\"", key),
					 errdetail("The sink's producer is idempotent (enable.idempotence, acks=all), retries until Kafka confirms each message, and queues at most streaming.batch_memory.")));
}

static SinkFormat
format_of(const char *name)
{
	if (strcmp(name, "csv") == 0)
		return SINK_CSV;
	if (strcmp(name, "text") == 0)
		return SINK_TEXT;
	if (strcmp(name, "bytes") == 0)
		return SINK_BYTES;
	return SINK_JSON;
}

/* Kafka's rule for topic names: 1 to 249 of [a-zA-Z0-9._-], not "." or "..". */
static bool
valid_topic_name(const char *t)
{
	size_t		len = strlen(t);

	if (len == 0 || len > 249 || strcmp(t, ".") == 0 || strcmp(t, "..") == 0)
		return false;
	for (const char *p = t; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			  (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' || *p == '-'))
			return false;
	return true;
}

/* create_kafka_sink's arguments (SPEC 6.1) */
static Jsonb *
kafka_sink_validate(Jsonb *o, Oid role)
{
	static const char *const formats[] = {"json", "csv", "text", "bytes", NULL};
	static const char *const required[] = {"bootstrap_servers", "topic", "format",
	"kafka_options", NULL};
	char	   *format;
	char	   *topic;

	stm_source_require_options(o, required);
	format = stm_arg_lower(stm_option_text(o, "format"));
	topic = stm_option_text(o, "topic");
	if (stm_option_text(o, "bootstrap_servers")[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bootstrap_servers must not be empty"),
				 errhint("Give a comma-separated list of host:port.")));
	if (!valid_topic_name(topic))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid Kafka topic name \"%s\"", topic),
				 errdetail("A topic name is 1 to 249 ASCII letters, digits, '.', '_' and '-', and not \".\" or \"..\".")));
	stm_arg_check_choice("format", format, formats,
						 "Valid formats are \"json\", \"csv\", \"text\" and \"bytes\".");
	if (stm_option_given(o, "key_columns") &&
		!stm_arg_check_sql("SELECT jsonb_array_length($1) > 0 AND NOT EXISTS ("
						   "SELECT 1 FROM jsonb_array_elements($1) e WHERE jsonb_typeof(e) <> 'string' OR e #>> '{}' = '') "
						   "AND jsonb_array_length($1) = (SELECT count(DISTINCT e) FROM jsonb_array_elements($1) e)",
						   JSONBOID, JsonbPGetDatum(stm_option_jsonb(o, "key_columns"))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("key_columns must be a non-empty array of distinct column names")));

	/* kafka_options: an object of scalars that librdkafka accepts for a producer */
	stm_kafka_check_options(o, role, STM_KAFKA_PRODUCER, check_fixed_option);
	return stm_option_set_text(o, "format", format);
}

/*
 * Which output columns make a message's key and, for text and bytes, its
 * value (-1 otherwise).  Errors say what does not fit: at create_stream,
 * and again in every batch (the query is analysed again each time).
 */
static void
message_columns(const char *sink, List *key_columns, SinkFormat format,
				const StmSinkOutput *out, const char *stream,
				int *nkey, int **key_att, int *value_att)
{
	TupleDesc	desc = out->desc;
	int		   *atts = palloc(sizeof(int) * Max(desc->natts, 1));
	bool	   *in_key = palloc0(sizeof(bool) * Max(desc->natts, 1));
	int			n = 0;
	int			nvalue = 0;
	ListCell   *lc;

	foreach(lc, key_columns)
	{
		const char *name = lfirst(lc);
		int			att = -1;

		for (int i = 0; i < desc->natts; i++)
			if (strcmp(NameStr(TupleDescAttr(desc, i)->attname), name) == 0)
				att = i;
		if (att < 0)
		{
			StringInfoData cols;

			initStringInfo(&cols);
			for (int i = 0; i < desc->natts; i++)
				appendStringInfo(&cols, "%s%s", i ? ", " : "",
								 quote_identifier(NameStr(TupleDescAttr(desc, i)->attname)));
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("key column \"%s\" of Kafka sink \"%s\" is not an output column of stream \"%s\"",
							name, sink, stream),
					 errdetail("The stream's output columns are %s.", cols.data)));
		}
		if (out->deletes && !out->is_key[att])
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("key column \"%s\" of Kafka sink \"%s\" is not a window or group column of stream \"%s\"",
							name, sink, stream),
					 errdetail("In update mode a session merged into another is removed by a tombstone on its key, "
							   "and a removed session has only its window and group columns.")));
		atts[n++] = att;
		in_key[att] = true;
	}
	/* the default: the window and group columns, except in append mode */
	if (key_columns == NIL && out->mode != STM_OUTPUT_APPEND)
		for (int i = 0; i < desc->natts; i++)
			if (out->is_key[i])
			{
				atts[n++] = i;
				in_key[i] = true;
			}

	*value_att = -1;
	if (format == SINK_TEXT || format == SINK_BYTES)
	{
		StringInfoData cols;

		initStringInfo(&cols);
		for (int i = 0; i < desc->natts; i++)
			if (!in_key[i])
			{
				appendStringInfo(&cols, "%s%s", nvalue ? ", " : "",
								 quote_identifier(NameStr(TupleDescAttr(desc, i)->attname)));
				*value_att = i;
				nvalue++;
			}
		if (nvalue != 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("format \"%s\" of Kafka sink \"%s\" needs exactly one output column besides the key columns",
							format == SINK_TEXT ? "text" : "bytes", sink),
					 nvalue == 0 ?
					 errdetail("Stream \"%s\" has none.", stream) :
					 errdetail("Stream \"%s\" has %d: %s.", stream, nvalue, cols.data),
					 errhint("Use format \"json\" or \"csv\" for rows of several columns.")));
		if (format == SINK_BYTES && TupleDescAttr(desc, *value_att)->atttypid != BYTEAOID)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("format \"bytes\" of Kafka sink \"%s\" needs a bytea column, but column \"%s\" of stream \"%s\" is of type %s",
							sink, NameStr(TupleDescAttr(desc, *value_att)->attname), stream,
							format_type_be(TupleDescAttr(desc, *value_att)->atttypid)),
					 errhint("Cast the column to bytea in the query, or use format \"text\".")));
	}
	*nkey = n;
	*key_att = atts;
}

/* create_stream: can the sink take the stream's output? */
static void
kafka_sink_check_output(StmSinkDef *sink, const StmSinkOutput *output, const char *stream)
{
	int			nkey;
	int		   *key_att;
	int			value_att;

	message_columns(sink->name, stm_option_elements(sink->options, "key_columns"),
					format_of(stm_option_text(sink->options, "format")), output, stream,
					&nkey, &key_att, &value_att);
}

/* ---- the outbox --------------------------------------------------------- */

/* Messages of the stream in the outbox, in a fresh snapshot. */
static int64
outbox_count(int32 stream_id)
{
	Oid			type = INT4OID;
	Datum		arg = Int32GetDatum(stream_id);
	int64		n = 0;
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args("SELECT sum(nmsgs)::bigint FROM streaming.outbox_chunks WHERE stream_id = $1",
							  1, &type, &arg, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.outbox_chunks");
	if (SPI_processed > 0)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		n = isnull ? 0 : DatumGetInt64(d);
	}
	SPI_finish();
	stm_catalog_end(scope);
	return n;
}

/*
 * The stream's messages in the outbox, up to limit (or a chunk's more), by
 * its primary key in a fresh snapshot: a sum over the table would read it
 * whole, dead rows of delivered batches too, while process_available polls.
 */
static int64
kafka_sink_pending(int32 stream_id, int64 limit)
{
	Relation	rel = table_open(get_relname_relid("outbox_chunks", get_namespace_oid("streaming", false)),
								 AccessShareLock);
	Relation	idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ScanKeyData key;
	IndexScanDesc scan;
	int64		n = 0;

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(stream_id));
	scan = index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	while (n < limit && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;

		n += DatumGetInt32(slot_getattr(slot, 4, &isnull));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return n;
}

/* drop_stream: what is left of the stream's messages goes. */
static void
kafka_sink_discard(int32 stream_id)
{
	Oid			type = INT4OID;
	Datum		arg = Int32GetDatum(stream_id);

	stm_catalog_exec("DELETE FROM streaming.outbox_chunks WHERE stream_id = $1", 1, &type, &arg, NULL,
					 SPI_OK_DELETE);
}

/* ---- batches ------------------------------------------------------------ */

static void destroy_producer(KafkaSink *ks);
static JsonCol *json_columns(TupleDesc desc);

static void
kafka_sink_reset_cb(void *arg)
{
	destroy_producer((KafkaSink *) arg);
}

/*
 * open: the sink's definition, read once per runtime, and the outbox's
 * rows.  The stream's owner must (still) have the privileges of the sink's
 * owner: a stream writes with the sink's settings and credentials.
 */
static StmSink *
kafka_sink_open(StmStreamDef *def)
{
	KafkaSink  *ks = palloc0(sizeof(KafkaSink));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	StmSinkDef *sd = stm_catalog_get_sink_of_stream(def);
	Jsonb	   *o = sd->options;

	if (!has_privs_of_role(def->owner, sd->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" may not write to Kafka sink \"%s\"",
						GetUserNameFromId(def->owner, false), sd->name),
				 errdetail("Stream \"%s\" writes to it, but its owner no longer has the privileges of the sink's owner \"%s\".",
						   def->name, GetUserNameFromId(sd->owner, false))));
	ks->base.routine = &stm_kafka_sink_routine;
	ks->base.stream_id = def->id;
	ks->base.stream_name = pstrdup(def->name);
	ks->base.owner = def->owner;
	ks->cxt = CurrentMemoryContext;
	ks->name = sd->name;
	ks->sink_owner = sd->owner;
	ks->bootstrap = stm_option_text(o, "bootstrap_servers");
	ks->topic = stm_option_text(o, "topic");
	ks->format = format_of(stm_option_text(o, "format"));
	ks->key_columns = stm_option_elements(o, "key_columns");
	ks->kafka_options = stm_option_pairs(o, "kafka_options");
	ks->outbox_relid = get_relname_relid("outbox_chunks", get_namespace_oid("streaming", false));
	if (!OidIsValid(ks->outbox_relid))
		elog(ERROR, "streaming.outbox_chunks is missing");
	ks->outbox_desc = CreateTemplateTupleDesc(OUTBOX_NATTS);
	TupleDescInitEntry(ks->outbox_desc, 1, "stream_id", INT4OID, -1, 0);
	TupleDescInitEntry(ks->outbox_desc, 2, "batch_id", INT8OID, -1, 0);
	TupleDescInitEntry(ks->outbox_desc, 3, "first_seq", INT8OID, -1, 0);
	TupleDescInitEntry(ks->outbox_desc, 4, "nmsgs", INT4OID, -1, 0);
	TupleDescInitEntry(ks->outbox_desc, 5, "messages", BYTEAOID, -1, 0);
	ks->carry_chunk = -1;
	ks->outbox_rows = outbox_count(def->id);
	ks->stage_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming Kafka sink stage",
										  ALLOCSET_DEFAULT_SIZES);
	cb->func = kafka_sink_reset_cb;
	cb->arg = ks;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	return &ks->base;
}

/*
 * Before a batch: the outbox's room.  The runtime knows the outbox's rows
 * exactly: they were counted when it opened the sink, and since then only
 * its own batches added rows (after_commit) and its own deliveries deleted
 * them (a stream runs in one place at a time).
 */
static int64
kafka_sink_capacity(StmSink *sink, const char **why)
{
	KafkaSink  *ks = (KafkaSink *) sink;

	if (ks->outbox_rows >= stm_guc_outbox_max_rows)
	{
		*why = psprintf("the Kafka sink \"%s\" is behind: the outbox holds " INT64_FORMAT
						" rows of the stream (streaming.outbox_max_rows = %d)",
						ks->name, ks->outbox_rows, stm_guc_outbox_max_rows);
		return 0;
	}

	/*
	 * At most half the outbox: the batch after it finds room while this
	 * one's messages are still in flight, so it runs as they are sent
	 * (deliver's busy) instead of waiting for their delivery
	 */
	return Min(stm_guc_outbox_max_rows - ks->outbox_rows, Max(stm_guc_outbox_max_rows / 2, 1));
}

/* The batch's writer: the outbox's, and what encodes the messages. */
static StmSinkBatch *
kafka_sink_begin_batch(StmSink *sink, const StmSinkOutput *output, int64 batch_id, EState *estate)
{
	KafkaSink  *ks = (KafkaSink *) sink;
	KafkaSinkBatch *kb = palloc0(sizeof(KafkaSinkBatch));
	TupleDesc	desc = output->desc;
	StmCatalogScope scope;

	kb->base.sink = sink;
	kb->base.output = output;
	kb->base.batch_id = batch_id;
	kb->base.estate = estate;
	kb->base.deferred = true;
	ks->batch_rows = 0;
	MemoryContextReset(ks->stage_cxt);
	ks->stage = NULL;
	ks->nstage = ks->stage_alloc = 0;
	ks->stage_next = 0;
	ks->stage_started = false;
	ks->stage_bytes = 0;
	ks->stage_batch = batch_id;
	ks->stage_ready = false;
	ks->staging = true;
	kb->start_rows = ks->outbox_rows;
	kb->stream_name = CStringGetTextDatum(ks->base.stream_name);
	initStringInfo(&kb->chunk);
	appendStringInfoSpaces(&kb->chunk, VARHDRSZ);	/* the row's varlena header */

	message_columns(ks->name, ks->key_columns, ks->format, output, ks->base.stream_name,
					&kb->nkey, &kb->key_att, &kb->value_att);
	kb->out_funcs = palloc0(sizeof(FmgrInfo) * Max(desc->natts, 1));
	for (int i = 0; i < desc->natts; i++)
	{
		Oid			func;
		bool		varlena;

		getTypeOutputInfo(TupleDescAttr(desc, i)->atttypid, &func, &varlena);
		fmgr_info(func, &kb->out_funcs[i]);
	}
	if (ks->format == SINK_JSON)
	{
		kb->row_desc = BlessTupleDesc(CreateTupleDescCopy(desc));
		kb->json_cols = json_columns(desc);
		initStringInfo(&kb->json_buf);
	}
	if (kb->nkey > 1)
	{
		TupleDesc	kd = CreateTemplateTupleDesc(kb->nkey);

		for (int k = 0; k < kb->nkey; k++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, kb->key_att[k]);

			TupleDescInitEntry(kd, k + 1, NameStr(att->attname), att->atttypid, att->atttypmod, 0);
			TupleDescInitEntryCollation(kd, k + 1, att->attcollation);
		}
		kb->key_desc = BlessTupleDesc(kd);
	}
	/* a first block that one message fits in survives each reset: no malloc per row */
	kb->row_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming Kafka message",
										64 * 1024, 64 * 1024, 8 * 1024 * 1024);

	/* the outbox is the extension owner's: opened, and its INSERT checked, as that role */
	kb->outbox_output.desc = ks->outbox_desc;
	kb->outbox_output.is_key = palloc0(sizeof(bool) * OUTBOX_NATTS);
	kb->outbox_output.mode = STM_OUTPUT_APPEND;
	scope = stm_catalog_begin();
	kb->outbox = stm_table_sink_begin(sink, ks->outbox_relid, &kb->outbox_output, batch_id, estate);
	stm_catalog_end(scope);
	return &kb->base;
}

/* One column as a key or a text value: its text form, a bytea's bytes. */
static Datum
column_bytes(KafkaSinkBatch *kb, int att, Datum value)
{
	char	   *s;

	if (TupleDescAttr(kb->base.output->desc, att)->atttypid == BYTEAOID)
		return PointerGetDatum(PG_DETOAST_DATUM_PACKED(value));
	/* text and bytea are the same varlena: the bytes of the text form */
	s = OutputFunctionCall(&kb->out_funcs[att], value);
	return PointerGetDatum(cstring_to_text(s));
}

/*
 * How row_to_json writes each column (json_categorize_type), for rows of
 * built-in scalar types only: it looks each column's type up again in
 * every row, which costs more than the rest of the message.  NULL when a
 * column is of another kind (arrays, composites, user types, which may
 * have a cast to json): such rows go through row_to_json itself.
 */
static JsonCol *
json_columns(TupleDesc desc)
{
	JsonCol    *cols = palloc0(sizeof(JsonCol) * Max(desc->natts, 1));

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		Oid			typid = getBaseType(att->atttypid);
		StringInfoData name;

		if (att->attisdropped || typid >= FirstNormalObjectId ||
			OidIsValid(get_element_type(typid)) || type_is_rowtype(typid) ||
			typid == ANYARRAYOID || typid == ANYCOMPATIBLEARRAYOID)
		{
			pfree(cols);
			return NULL;
		}
		switch (typid)
		{
			case INT2OID:
			case INT4OID:
			case INT8OID:
				cols[i].kind = JCOL_INT;
				break;
			case FLOAT4OID:
			case FLOAT8OID:
			case NUMERICOID:
				cols[i].kind = JCOL_NUMBER;
				break;
			case BOOLOID:
				cols[i].kind = JCOL_BOOL;
				break;
			case DATEOID:
			case TIMESTAMPOID:
			case TIMESTAMPTZOID:
				cols[i].kind = JCOL_DATETIME;
				break;
			case JSONOID:
			case JSONBOID:
				cols[i].kind = JCOL_JSON;
				break;
			default:
				cols[i].kind = JCOL_STRING;
		}
		cols[i].typid = typid;
		initStringInfo(&name);
		appendStringInfoChar(&name, i == 0 ? '{' : ',');
		escape_json(&name, NameStr(att->attname));
		appendStringInfoChar(&name, ':');
		cols[i].prefix = name.data;
	}
	return cols;
}

/*
 * The row as row_to_json writes it (same bytes), from json_columns: a
 * bytea in kb->json_buf, valid until the next row.
 */
static Datum
fast_row_json(KafkaSinkBatch *kb, Datum *values, bool *nulls)
{
	StringInfo	buf = &kb->json_buf;
	int			natts = kb->base.output->desc->natts;

	resetStringInfo(buf);
	appendStringInfoSpaces(buf, VARHDRSZ);
	for (int i = 0; i < natts; i++)
	{
		JsonCol    *c = &kb->json_cols[i];
		char		num[MAXINT8LEN + 1];
		char		dt[MAXDATELEN + 1];
		char	   *s;

		appendStringInfoString(buf, c->prefix);
		if (nulls[i])
		{
			appendStringInfoString(buf, "null");
			continue;
		}
		switch (c->kind)
		{
			case JCOL_INT:
				if (c->typid == INT8OID)
					pg_lltoa(DatumGetInt64(values[i]), num);
				else if (c->typid == INT4OID)
					pg_ltoa(DatumGetInt32(values[i]), num);
				else
					pg_ltoa((int32) DatumGetInt16(values[i]), num);
				appendStringInfoString(buf, num);
				break;
			case JCOL_NUMBER:
				s = OutputFunctionCall(&kb->out_funcs[i], values[i]);
				if (IsValidJsonNumber(s, strlen(s)))
					appendStringInfoString(buf, s);
				else
					escape_json(buf, s);
				break;
			case JCOL_BOOL:
				appendStringInfoString(buf, DatumGetBool(values[i]) ? "true" : "false");
				break;
			case JCOL_DATETIME:
				JsonEncodeDateTime(dt, values[i], c->typid, NULL);
				appendStringInfoChar(buf, '"');
				appendStringInfoString(buf, dt);
				appendStringInfoChar(buf, '"');
				break;
			case JCOL_JSON:
				appendStringInfoString(buf, OutputFunctionCall(&kb->out_funcs[i], values[i]));
				break;
			case JCOL_STRING:
				escape_json(buf, OutputFunctionCall(&kb->out_funcs[i], values[i]));
				break;
		}
	}
	appendStringInfoChar(buf, natts == 0 ? '{' : '}');
	if (natts == 0)
		appendStringInfoChar(buf, '}');
	SET_VARSIZE(buf->data, buf->len);
	return PointerGetDatum(buf->data);
}

/* row_to_json of a row of a blessed descriptor: PostgreSQL's own JSON. */
static Datum
row_json(TupleDesc desc, Datum *values, bool *nulls)
{
	HeapTuple	tuple = heap_form_tuple(desc, values, nulls);

	return DirectFunctionCall1(row_to_json, HeapTupleGetDatum(tuple));
}

/* The message key, or NULL for none (no key columns, or one that is NULL). */
static Datum
encode_key(KafkaSinkBatch *kb, Datum *values, bool *nulls, bool *isnull)
{
	*isnull = false;
	if (kb->nkey == 0 || (kb->nkey == 1 && nulls[kb->key_att[0]]))
	{
		*isnull = true;
		return (Datum) 0;
	}
	if (kb->nkey == 1)
		return column_bytes(kb, kb->key_att[0], values[kb->key_att[0]]);
	else
	{
		Datum	   *kv = palloc(sizeof(Datum) * kb->nkey);
		bool	   *kn = palloc(sizeof(bool) * kb->nkey);

		for (int k = 0; k < kb->nkey; k++)
		{
			kv[k] = values[kb->key_att[k]];
			kn[k] = nulls[kb->key_att[k]];
		}
		return row_json(kb->key_desc, kv, kn);
	}
}

/* A CSV line of the row, quoted as COPY quotes: NULL is empty, "" an empty string. */
static Datum
csv_line(KafkaSinkBatch *kb, Datum *values, bool *nulls)
{
	TupleDesc	desc = kb->base.output->desc;
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < desc->natts; i++)
	{
		const char *s;

		if (i > 0)
			appendStringInfoChar(&buf, ',');
		if (nulls[i])
			continue;
		s = OutputFunctionCall(&kb->out_funcs[i], values[i]);
		if (s[0] == '\0' || strpbrk(s, ",\"\n\r") != NULL)
		{
			appendStringInfoChar(&buf, '"');
			for (const char *p = s; *p; p++)
			{
				if (*p == '"')
					appendStringInfoChar(&buf, '"');
				appendStringInfoChar(&buf, *p);
			}
			appendStringInfoChar(&buf, '"');
		}
		else
			appendStringInfoString(&buf, s);
	}
	return PointerGetDatum(cstring_to_text_with_len(buf.data, buf.len));
}

/* The message value in the sink's format, or NULL (a NULL text or bytes column). */
static Datum
encode_value(KafkaSinkBatch *kb, Datum *values, bool *nulls, bool *isnull)
{
	KafkaSink  *ks = (KafkaSink *) kb->base.sink;

	*isnull = false;
	switch (ks->format)
	{
		case SINK_JSON:
			if (kb->json_cols)
				return fast_row_json(kb, values, nulls);
			return row_json(kb->row_desc, values, nulls);
		case SINK_CSV:
			return csv_line(kb, values, nulls);
		case SINK_TEXT:
		case SINK_BYTES:
			if (nulls[kb->value_att])
			{
				*isnull = true;
				return (Datum) 0;
			}
			return column_bytes(kb, kb->value_att, values[kb->value_att]);
	}
	return (Datum) 0;			/* keep compiler quiet */
}

/*
 * The outbox has no room for another row of this batch: the batch rolls
 * back.  While rows wait for delivery the stream waits and runs it again
 * (53000); a batch that alone writes more than the outbox may hold never
 * fits.
 */
static void
outbox_full(KafkaSinkBatch *kb)
{
	KafkaSink  *ks = (KafkaSink *) kb->base.sink;

	if (kb->start_rows > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("the Kafka sink \"%s\" is behind: batch " INT64_FORMAT " of stream \"%s\" writes more rows than its outbox has room for",
						ks->name, kb->base.batch_id, ks->base.stream_name),
				 errdetail(INT64_FORMAT " rows wait for delivery (streaming.outbox_max_rows = %d); the batch runs again once they are delivered.",
						   kb->start_rows, stm_guc_outbox_max_rows)));
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("batch " INT64_FORMAT " of stream \"%s\" writes more than streaming.outbox_max_rows (%d) rows to its Kafka sink \"%s\"",
					kb->base.batch_id, ks->base.stream_name, stm_guc_outbox_max_rows, ks->name),
			 errhint("Raise streaming.outbox_max_rows, or make batches smaller (the source's max_offsets_per_trigger).")));
}

/* Keep a chunk of the batch for its delivery, while the stage has room. */
static void
stage_chunk(KafkaSink *ks, int64 first_seq, int nmsgs, const char *data, int len)
{
	StagedChunk *c;

	if (ks->stage_bytes + len + sizeof(StagedChunk) > STAGE_BYTES)
	{
		ks->staging = false;	/* the rest is read from the outbox */
		return;
	}
	if (ks->nstage == ks->stage_alloc)
	{
		ks->stage_alloc = Max(64, ks->stage_alloc * 2);
		ks->stage = ks->stage ?
			repalloc(ks->stage, sizeof(StagedChunk) * ks->stage_alloc) :
			MemoryContextAlloc(ks->stage_cxt, sizeof(StagedChunk) * ks->stage_alloc);
	}
	c = &ks->stage[ks->nstage++];
	c->first_seq = first_seq;
	c->nmsgs = nmsgs;
	c->len = len;
	c->data = MemoryContextAlloc(ks->stage_cxt, Max(len, 1));
	memcpy(c->data, data, len);
	ks->stage_bytes += len + sizeof(StagedChunk);
}

/*
 * The chunk being filled goes into the outbox as one row (the buffer starts
 * with room for its varlena header: the row is made from it in place), and
 * into the stage while it has room.
 */
static void
flush_chunk(KafkaSinkBatch *kb)
{
	KafkaSink  *ks = (KafkaSink *) kb->base.sink;
	Datum		row[OUTBOX_NATTS];
	bool		rownulls[OUTBOX_NATTS] = {false, false, false, false, false};

	if (kb->chunk_n == 0)
		return;
	SET_VARSIZE(kb->chunk.data, kb->chunk.len);
	row[0] = Int32GetDatum(ks->base.stream_id);
	row[1] = Int64GetDatum(kb->base.batch_id);
	row[2] = Int64GetDatum(kb->chunk_seq);
	row[3] = Int32GetDatum(kb->chunk_n);
	row[4] = PointerGetDatum(kb->chunk.data);
	stm_table_sink_insert(kb->outbox, row, rownulls);
	if (ks->staging)
		stage_chunk(ks, kb->chunk_seq, kb->chunk_n, kb->chunk.data + VARHDRSZ,
					kb->chunk.len - VARHDRSZ);
	kb->chunk.len = VARHDRSZ;
	kb->chunk_n = 0;
}

/* One message into the outbox: the row's key and value (none: a tombstone). */
static void
write_message(KafkaSinkBatch *kb, Datum *values, bool *nulls, bool tombstone)
{
	KafkaSink  *ks = (KafkaSink *) kb->base.sink;
	bool		keynull;
	bool		valuenull = true;
	Datum		key;
	Datum		value = (Datum) 0;
	bytea	   *k;
	bytea	   *v;
	int			len;
	MemoryContext old;

	if (ks->outbox_rows + ks->batch_rows >= stm_guc_outbox_max_rows)
		outbox_full(kb);
	old = MemoryContextSwitchTo(kb->row_cxt);
	key = encode_key(kb, values, nulls, &keynull);
	if (!tombstone)
		value = encode_value(kb, values, nulls, &valuenull);
	k = keynull ? NULL : DatumGetByteaPP(key);
	v = valuenull ? NULL : DatumGetByteaPP(value);
	MemoryContextSwitchTo(old);
	len = 8 + (k ? VARSIZE_ANY_EXHDR(k) : 0) + (v ? VARSIZE_ANY_EXHDR(v) : 0);
	if (kb->chunk_n > 0 && kb->chunk.len - VARHDRSZ + len > STM_OUTBOX_CHUNK_BYTES)
		flush_chunk(kb);
	if (kb->chunk_n == 0)
		kb->chunk_seq = kb->seq;
	stm_outbox_append(&kb->chunk, k ? VARDATA_ANY(k) : NULL, k ? VARSIZE_ANY_EXHDR(k) : 0,
					  v ? VARDATA_ANY(v) : NULL, v ? VARSIZE_ANY_EXHDR(v) : 0);
	MemoryContextReset(kb->row_cxt);
	kb->chunk_n++;
	kb->seq++;
	ks->batch_rows++;
}

/* insert and upsert: a message on the row's key (update mode: the group's) */
static void
kafka_sink_insert(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	write_message((KafkaSinkBatch *) batch, values, nulls, false);
}

/* a session merged away: a tombstone on its key */
static void
kafka_sink_delete_key(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	write_message((KafkaSinkBatch *) batch, values, nulls, true);
}

/* complete mode: every row goes out after every batch; nothing to forget */
static void
kafka_sink_truncate(StmSinkBatch *batch)
{
}

static void
kafka_sink_end_batch(StmSinkBatch *batch)
{
	KafkaSinkBatch *kb = (KafkaSinkBatch *) batch;

	flush_chunk(kb);
	stm_table_sink_end(kb->outbox);
	MemoryContextDelete(kb->row_cxt);
	pfree(kb->chunk.data);
}

/* The batch committed: its rows are the outbox's. */
static void
kafka_sink_after_commit(StmSink *sink)
{
	KafkaSink  *ks = (KafkaSink *) sink;

	ks->outbox_rows += ks->batch_rows;
	ks->stage_rows = ks->batch_rows;
	ks->stage_ready = ks->nstage > 0;
	ks->staging = false;
	ks->batch_rows = 0;
}

/* ---- delivery ----------------------------------------------------------- */

/*
 * The stream's outbox messages that were produced and are still in the
 * outbox: those in flight, and those of a chunk done in part (carry_*),
 * which leaves the outbox with its last message.
 */
static int64
produced_rows(KafkaSink *ks)
{
	return ks->in_flight + (ks->carry_chunk >= 0 ? ks->carry_seen : 0);
}

/*
 * librdkafka's delivery report of each message, in rd_kafka_poll on our
 * thread: recorded only.  Reports of every message, not only of failures:
 * a round (and its chunks) is known to be done as soon as its own messages
 * are, while later ones are still being sent, and the messages are freed
 * by the thread that made them.
 */
static void
dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	OutMsg	   *msg = m->_private;

	if (msg == NULL || msg->state != MSG_IN_FLIGHT)
		return;
	msg->err = m->err;
	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
		msg->state = MSG_DELIVERED;
	else if (m->err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
			 m->err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE)
		msg->state = MSG_TOO_LARGE;
	else
		msg->state = MSG_FAILED;
	msg->round->ndone++;
}

/*
 * The producer goes: what it still holds is purged (its rows stay in the
 * outbox, to be produced again), then it is destroyed.  A purged message is
 * reported as failed; one whose report was not served counts as failed too.
 */
static void
destroy_producer(KafkaSink *ks)
{
	ListCell   *lc;
	if (ks->rk == NULL)
		return;
	rd_kafka_purge(ks->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	/* serves the purged messages' reports */
	(void) rd_kafka_flush(ks->rk, 1000);
	rd_kafka_topic_destroy(ks->rkt);
	rd_kafka_destroy(ks->rk);
	ks->rk = NULL;
	ks->rkt = NULL;
	foreach(lc, ks->rounds)
	{
		Round	   *r = lfirst(lc);

		for (int i = 0; i < r->n; i++)
			if (r->msgs[i].state == MSG_IN_FLIGHT)
			{
				r->msgs[i].state = MSG_FAILED;
				r->msgs[i].err = RD_KAFKA_RESP_ERR__PURGE_INFLIGHT;
				r->ndone++;
			}
	}
	ks->topic_ok = false;
}

/*
 * The producer, made at the first delivery, in a transaction.  The stored
 * kafka_options are checked again first, for the sink's owner and the
 * stream's (SPEC 7), and the stream's owner must still have the sink
 * owner's privileges; the sink's own settings come last, so nothing
 * overrides them.
 */
static void
ensure_producer(KafkaSink *ks)
{
	rd_kafka_conf_t *conf;
	char		errstr[512];
	ListCell   *lc;

	if (ks->rk)
		return;
	if (!has_privs_of_role(ks->base.owner, ks->sink_owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" may not write to Kafka sink \"%s\"",
						GetUserNameFromId(ks->base.owner, false), ks->name),
				 errdetail("Stream \"%s\" writes to it, but its owner no longer has the privileges of the sink's owner.",
						   ks->base.stream_name)));
	stm_kafka_recheck_options("sink", ks->name, ks->kafka_options, ks->sink_owner,
							  ks->base.owner, STM_KAFKA_PRODUCER);
	foreach(lc, ks->kafka_options)
		check_fixed_option(((StmOptionPair *) lfirst(lc))->key);

	/*
	 * librdkafka mallocs each message and its headers (six chunks) and
	 * frees them once reported: with glibc's fastbins every free that
	 * merges into a large chunk consolidated them again, which cost more
	 * than producing (measured with reports of failures only; with every
	 * report served here, fastbins were still slower, bench/kafka_sink.sh).
	 */
	mallopt(M_MXFAST, 0);

	conf = stm_kafka_conf_new(ks->bootstrap, ks->error);
	/* keys to partitions as the Java producer does */
	stm_kafka_conf_set(conf, "partitioner", "murmur2_random");
	foreach(lc, ks->kafka_options)
	{
		StmOptionPair *pair = lfirst(lc);

		stm_kafka_conf_set(conf, pair->key, pair->value);
	}
	stm_kafka_conf_set(conf, "enable.idempotence", "true");
	stm_kafka_conf_set(conf, "acks", "all");
	/* never given up: an outage only delays a message, in its order */
	stm_kafka_conf_set(conf, "message.timeout.ms", "0");
	/* a report of every message (dr_msg_cb) */
	stm_kafka_conf_set(conf, "delivery.report.only.error", "false");
	/* what is in flight is tracked in OutMsgs: a quarter of batch_memory for them */
	ks->max_in_flight = Min(Max((int64) stm_guc_batch_memory_kb * 1024 / 4 / (int64) sizeof(OutMsg),
								2 * ROUND_ROWS), 10000000);
	stm_kafka_conf_set(conf, "queue.buffering.max.messages", psprintf(INT64_FORMAT, ks->max_in_flight));
	stm_kafka_conf_set(conf, "queue.buffering.max.kbytes", psprintf("%d", stm_guc_batch_memory_kb));
	rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
	ks->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (ks->rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("could not create the Kafka producer of sink \"%s\"", ks->name),
				 errdetail("%s", errstr)));
	}
	ks->rkt = rd_kafka_topic_new(ks->rk, ks->topic, NULL);
	if (ks->rkt == NULL)
	{
		rd_kafka_destroy(ks->rk);
		ks->rk = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open Kafka topic \"%s\" of sink \"%s\"", ks->topic, ks->name),
				 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	}
	ks->topic_ok = false;
}

/* librdkafka's last error, for a message ("" when it reported none) */
static const char *
last_error(KafkaSink *ks)
{
	return ks->error[0] ? ks->error : "no answer";
}

/*
 * Is the topic there, and may we write to it?  Asked before anything is
 * produced, and again after a failure: a topic that does not exist or
 * refuses us is a lasting error (last_error), brokers out of reach or a
 * topic still being made are waiting.  Returns true when it is fine.
 */
static bool
check_topic(KafkaSink *ks, int timeout_ms, StmSinkStatus *st)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;
	rd_kafka_resp_err_t terr;

	err = rd_kafka_metadata(ks->rk, 0, ks->rkt, &md, Max(timeout_ms, 1));
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		snprintf(ks->waiting, STATUS_LEN,
				 "could not reach the Kafka brokers of sink \"%s\" (%s): %s: %s",
				 ks->name, ks->bootstrap, rd_kafka_err2str(err), last_error(ks));
		st->waiting = ks->waiting;
		return false;
	}
	terr = md->topic_cnt > 0 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
	rd_kafka_metadata_destroy(md);
	switch (terr)
	{
		case RD_KAFKA_RESP_ERR_NO_ERROR:
			ks->topic_ok = true;
			return true;
		case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
			snprintf(ks->error_msg, STATUS_LEN,
					 "Kafka topic \"%s\" of sink \"%s\" does not exist; its rows wait in the outbox",
					 ks->topic, ks->name);
			st->error = ks->error_msg;
			return false;
		case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
		case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
			snprintf(ks->error_msg, STATUS_LEN,
					 "the Kafka brokers refused sink \"%s\" access to topic \"%s\": %s; its rows wait in the outbox",
					 ks->name, ks->topic, rd_kafka_err2str(terr));
			st->error = ks->error_msg;
			return false;
		case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
			snprintf(ks->waiting, STATUS_LEN,
					 "Kafka topic \"%s\" of sink \"%s\" is not available yet: %s",
					 ks->topic, ks->name, rd_kafka_err2str(terr));
			st->waiting = ks->waiting;
			return false;
		default:
			snprintf(ks->error_msg, STATUS_LEN,
					 "Kafka topic \"%s\" of sink \"%s\" cannot be written: %s; its rows wait in the outbox",
					 ks->topic, ks->name, rd_kafka_err2str(terr));
			st->error = ks->error_msg;
			return false;
	}
}

/* What a failed delivery says, as the stream's last_error. */
static void
delivery_failed(KafkaSink *ks, StmSinkStatus *st)
{
	rd_kafka_resp_err_t err = ks->fail_err;

	if (err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
		snprintf(ks->error_msg, STATUS_LEN,
				 "Kafka topic \"%s\" of sink \"%s\" does not exist; its rows wait in the outbox",
				 ks->topic, ks->name);
	else if (err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
			 err == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED)
		snprintf(ks->error_msg, STATUS_LEN,
				 "the Kafka brokers refused sink \"%s\" access to topic \"%s\": %s; its rows wait in the outbox",
				 ks->name, ks->topic, rd_kafka_err2str(err));
	else
		snprintf(ks->error_msg, STATUS_LEN,
				 "could not deliver to Kafka topic \"%s\" of sink \"%s\": %s; its rows wait in the outbox",
				 ks->topic, ks->name, rd_kafka_err2str(err));
	st->error = ks->error_msg;
}

/*
 * A message's headers: streaming-stream, streaming-batch-id, streaming-seq
 * (in the order of the jsonb the view streaming.outbox shows them in).
 */
static rd_kafka_headers_t *
message_headers(KafkaSink *ks, int64 batch_id, int64 seq)
{
	rd_kafka_headers_t *hdrs = rd_kafka_headers_new(3);
	char		b[MAXINT8LEN + 1];
	char		s[MAXINT8LEN + 1];

	pg_lltoa(batch_id, b);
	pg_lltoa(seq, s);
	rd_kafka_header_add(hdrs, "streaming-seq", -1, s, -1);
	rd_kafka_header_add(hdrs, "streaming-stream", -1, ks->base.stream_name, -1);
	rd_kafka_header_add(hdrs, "streaming-batch-id", -1, b, -1);
	return hdrs;
}

/*
 * The stream's outbox chunks in (batch_id, first_seq) order, by the primary
 * key: those of batch (chunk >= 0: with first_seq = chunk, or >= chunk if
 * from), or, batch_gt, those of every batch after batch.  A scan of the
 * extension's own table in C, as catalog scans are: the planner has no say
 * in how far it reads.
 */
static IndexScanDesc
outbox_scan(Relation rel, Relation idx, int32 stream_id, int64 batch, bool batch_gt, int64 chunk,
			bool from)
{
	ScanKeyData keys[3];
	int			n = 0;
	IndexScanDesc scan;

	ScanKeyInit(&keys[n++], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(stream_id));
	if (batch_gt)
	{
		if (batch >= 0)
			ScanKeyInit(&keys[n++], 2, BTGreaterStrategyNumber, F_INT8GT, Int64GetDatum(batch));
	}
	else
	{
		ScanKeyInit(&keys[n++], 2, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(batch));
		if (chunk >= 0)
			ScanKeyInit(&keys[n++], 3, from ? BTGreaterEqualStrategyNumber : BTEqualStrategyNumber,
						from ? F_INT8GE : F_INT8EQ, Int64GetDatum(chunk));
	}
	scan = index_beginscan(rel, idx, GetActiveSnapshot(), n, 0);
	index_rescan(scan, keys, n, NULL, 0);
	return scan;
}

/*
 * Produce one message (msg its report's opaque) with the given headers,
 * which librdkafka takes on success only.  Returns librdkafka's answer.
 */
static rd_kafka_resp_err_t
produce_message(KafkaSink *ks, OutMsg *msg, char *key, size_t keylen,
				char *value, size_t valuelen, rd_kafka_headers_t *hdrs)
{
	rd_kafka_resp_err_t err;

	err = rd_kafka_producev(ks->rk,
							RD_KAFKA_V_RKT(ks->rkt),
							RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
							RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							RD_KAFKA_V_KEY(key, keylen),
							RD_KAFKA_V_VALUE(value, valuelen),
							RD_KAFKA_V_HEADERS(hdrs),
							RD_KAFKA_V_OPAQUE(msg),
							RD_KAFKA_V_END);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		rd_kafka_headers_destroy(hdrs);
	return err;
}

/*
 * A message of round about to be produced: (batch_id, seq) in the outbox,
 * in the chunk of chunk_n messages from chunk_seq.
 */
static void
start_message(Round *round, OutMsg *msg, int64 batch_id, int64 seq, int64 chunk_seq, int chunk_n)
{
	msg->round = round;
	msg->batch_id = batch_id;
	msg->seq = seq;
	msg->chunk_seq = chunk_seq;
	msg->chunk_n = chunk_n;
	msg->state = MSG_IN_FLIGHT;
}

/*
 * What producing msg answered (err, not a full queue): the message is in
 * the round and the cursor moves past it; a message refused at once as too
 * large is done already, any other refusal stops the delivery (false).
 */
static bool
account_message(KafkaSink *ks, Round *round, OutMsg *msg, rd_kafka_resp_err_t err)
{
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		msg->err = err;
		msg->state = err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? MSG_TOO_LARGE : MSG_FAILED;
		round->ndone++;
	}
	round->n++;
	ks->in_flight++;
	ks->have_cursor = true;
	ks->cursor_batch = msg->batch_id;
	ks->cursor_seq = msg->seq;
	ks->cursor_chunk = msg->chunk_seq;
	if (msg->state == MSG_FAILED)
	{
		ks->failed = true;
		ks->fail_err = err;
		return false;
	}
	return true;
}

/* Messages of one chunk, at the most (each has two lengths of 4 bytes). */
#define CHUNK_MAX_MSGS (STM_OUTBOX_CHUNK_BYTES / 8 + 1)

/* A new round for at most n messages, at the end of the rounds in flight. */
static Round *
new_round(KafkaSink *ks, int n)
{
	MemoryContext old = MemoryContextSwitchTo(ks->cxt);
	Round	   *round = palloc0(sizeof(Round));

	round->msgs = palloc0(sizeof(OutMsg) * n);
	round->alloc = n;
	ks->rounds = lappend(ks->rounds, round);	/* before anything is produced */
	MemoryContextSwitchTo(old);
	return round;
}

/* A round that produced nothing goes. */
static void
forget_if_empty(KafkaSink *ks, Round *round)
{
	if (round->n > 0)
		return;
	ks->rounds = list_delete_ptr(ks->rounds, round);
	pfree(round->msgs);
	pfree(round);
}

typedef enum ChunkResult
{
	CHUNK_DONE,					/* every message after the cursor produced */
	CHUNK_STOPPED,				/* the producer's queue or the round is full */
	CHUNK_FAILED				/* refused: the delivery failed */
} ChunkResult;

/*
 * Produce, into round, the messages of a chunk of batch_id that come after
 * the cursor (the rest of a chunk produced in part), with their headers;
 * *nread counts them.  The stage and the outbox's rows both go through here.
 */
static ChunkResult
produce_chunk(KafkaSink *ks, Round *round, int64 batch_id, int64 first, int nmsgs,
			  const char *data, int len, int *nread)
{
	StmOutboxReader reader;
	StmOutboxMsg m;

	stm_outbox_reader_init(&reader, data, len);
	for (int64 seq = first; stm_outbox_next(&reader, &m); seq++)
	{
		OutMsg	   *msg;
		rd_kafka_resp_err_t err;

		if (ks->have_cursor && batch_id == ks->cursor_batch && seq <= ks->cursor_seq)
			continue;			/* produced already */
		if (round->n == round->alloc)
			return CHUNK_STOPPED;	/* the rest in a later round */
		msg = &round->msgs[round->n];
		start_message(round, msg, batch_id, seq, first, nmsgs);
		err = produce_message(ks, msg, (char *) m.key, m.keylen, (char *) m.value, m.valuelen,
							  message_headers(ks, batch_id, seq));
		if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
		{
			ks->queue_full = true;
			return CHUNK_STOPPED;	/* this one again, later */
		}
		(*nread)++;
		if (!account_message(ks, round, msg, err))
			return CHUNK_FAILED;
	}
	return CHUNK_DONE;
}

/*
 * Read the next messages after the cursor from the outbox, in order, and
 * produce them; in a transaction of its own.  A round ends at a chunk's end
 * once it has limit messages.  Returns false when the outbox has no more
 * after them.  A full producer queue ends the round early (the rest are
 * read again, from the cursor inside their chunk); a message refused at
 * once as too large is done already; any other refusal stops the delivery
 * (failed).
 */
static bool
produce_round(KafkaSink *ks, int limit)
{
	Round	   *round = new_round(ks, limit + CHUNK_MAX_MSGS);
	int			nread = 0;
	ChunkResult res = CHUNK_DONE;
	int64		produced_before = produced_rows(ks);
	Relation	rel;
	Relation	idx;
	TupleTableSlot *slot;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(ks->outbox_relid, AccessShareLock);
	idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	slot = table_slot_create(rel, NULL);
	/* the rest of the cursor's batch, then the batches after it */
	for (int phase = ks->have_cursor ? 0 : 1; phase < 2 && nread < limit && res == CHUNK_DONE; phase++)
	{
		/* from the cursor's chunk on: what is before it was produced */
		IndexScanDesc scan = outbox_scan(rel, idx, ks->base.stream_id,
										 ks->have_cursor ? ks->cursor_batch : -1, phase == 1,
										 phase == 0 ? ks->cursor_chunk : -1, true);

		while (nread < limit && res == CHUNK_DONE &&
			   index_getnext_slot(scan, ForwardScanDirection, slot))
		{
			bytea	   *chunk;

			slot_getallattrs(slot);
			chunk = DatumGetByteaPP(slot->tts_values[4]);
			res = produce_chunk(ks, round, DatumGetInt64(slot->tts_values[1]),
								DatumGetInt64(slot->tts_values[2]), DatumGetInt32(slot->tts_values[3]),
								VARDATA_ANY(chunk), VARSIZE_ANY_EXHDR(chunk), &nread);
		}
		index_endscan(scan);
	}
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(ks->cxt);

	forget_if_empty(ks, round);
	/* everything after the cursor was read: the outbox's messages are known exactly */
	if (nread < limit && res == CHUNK_DONE)
		ks->outbox_rows = produced_before + nread;
	return res == CHUNK_STOPPED || nread >= limit;
}

/* Let the stage go: what it held is read from the outbox when its turn comes. */
static void
drop_stage(KafkaSink *ks)
{
	MemoryContextReset(ks->stage_cxt);
	ks->stage = NULL;
	ks->nstage = ks->stage_alloc = 0;
	ks->stage_next = 0;
	ks->stage_started = false;
	ks->stage_bytes = 0;
	ks->stage_ready = false;
}

/*
 * The last batch's messages, from the stage, once every message before
 * them was produced (they are next in outbox order), in rounds of about
 * ROUND_ROWS.  A full producer queue, or max_in_flight messages in flight,
 * ends the call: the next goes on from there (stage_next, and the cursor
 * inside that chunk).  When the stage cannot be used, it goes, and the
 * messages are read from the outbox.
 */
static void
produce_stage(KafkaSink *ks)
{
	if (ks->failed ||
		(!ks->stage_started &&
		 ((ks->have_cursor && ks->cursor_batch >= ks->stage_batch) ||
		  ks->outbox_rows - ks->stage_rows != produced_rows(ks))))
	{
		drop_stage(ks);
		return;
	}
	ks->stage_started = true;
	while (ks->stage_next < ks->nstage)
	{
		Round	   *round = new_round(ks, ROUND_ROWS + CHUNK_MAX_MSGS);
		ChunkResult res = CHUNK_DONE;
		int			nread = 0;

		while (ks->stage_next < ks->nstage && round->n < ROUND_ROWS && res == CHUNK_DONE)
		{
			StagedChunk *c = &ks->stage[ks->stage_next];

			res = produce_chunk(ks, round, ks->stage_batch, c->first_seq, c->nmsgs,
								c->data, c->len, &nread);
			if (res == CHUNK_DONE)
				ks->stage_next++;
		}
		forget_if_empty(ks, round);
		if (res == CHUNK_FAILED)
			break;				/* the stage goes */
		if (res == CHUNK_STOPPED || ks->in_flight >= ks->max_in_flight)
		{
			ks->queue_full = true;
			return;
		}
	}
	drop_stage(ks);
}

/* Delete the stream's outbox chunk (batch, first_seq chunk); whether it was there. */
static bool
delete_chunk(Relation rel, Relation idx, TupleTableSlot *slot, int32 stream_id, int64 batch,
			 int64 chunk)
{
	IndexScanDesc scan = outbox_scan(rel, idx, stream_id, batch, false, chunk, false);
	bool		found = false;

	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		simple_table_tuple_delete(rel, &slot->tts_tid, GetActiveSnapshot());
		found = true;
	}
	index_endscan(scan);
	return found;
}

/* Add n rows of batch to its progress row's counter (column). */
static void
count_in_progress(int32 stream_id, int64 batch, const char *column, int64 n)
{
	Oid			types[3] = {INT4OID, INT8OID, INT8OID};
	Datum		args[3] = {Int32GetDatum(stream_id), Int64GetDatum(batch), Int64GetDatum(n)};

	stm_catalog_exec(psprintf("UPDATE streaming.batches SET %s = %s + $3 WHERE stream_id = $1 AND batch_id = $2",
							  column, column),
					 3, types, args, NULL, SPI_OK_UPDATE);
}

/* A chunk finish_rounds found done, to delete. */
typedef struct DoneChunk
{
	int64		batch_id;
	int64		chunk_seq;
	int			delivered;
} DoneChunk;

static void
reset_carry(KafkaSink *ks)
{
	ks->carry_chunk = -1;
	ks->carry_seen = ks->carry_delivered = 0;
	ks->carry_ok = true;
	list_free(ks->carry_rejected);
	ks->carry_rejected = NIL;
}

/*
 * The rounds at the head that are fully reported: the outbox chunks whose
 * messages are all done leave the outbox, their delivered messages count
 * in their batches' progress rows and the refused ones go to dead_letters
 * (num_rejected_rows); a chunk with a failed message stays (all of it is
 * produced again); one transaction.  Messages are seen in outbox order, so
 * a chunk that straddles rounds is counted on (carry_*) into the next
 * call.  Returns the messages delivered.
 */
static int64
finish_rounds(KafkaSink *ks)
{
	List	   *done = NIL;
	List	   *chunks = NIL;
	int			total = 0;
	int			nrejected = 0;
	int			rejected_alloc = 16;
	Datum	   *rb;
	Datum	   *rs;
	int64		delivered = 0;
	int64		rejected = 0;
	int64		removed = 0;
	rd_kafka_resp_err_t reject_err = RD_KAFKA_RESP_ERR_NO_ERROR;
	ListCell   *lc;
	MemoryContext old;

	while (ks->rounds != NIL && ((Round *) linitial(ks->rounds))->ndone ==
		   ((Round *) linitial(ks->rounds))->n)
	{
		done = lappend(done, linitial(ks->rounds));
		total += ((Round *) linitial(ks->rounds))->n;
		ks->rounds = list_delete_first(ks->rounds);
	}
	if (done == NIL)
		return 0;
	rb = palloc(sizeof(Datum) * rejected_alloc);
	rs = palloc(sizeof(Datum) * rejected_alloc);

	/* which chunks are done */
	old = MemoryContextSwitchTo(ks->cxt);
	foreach(lc, done)
	{
		Round	   *r = lfirst(lc);

		for (int i = 0; i < r->n; i++)
		{
			OutMsg	   *m = &r->msgs[i];

			if (!(ks->carry_chunk >= 0 && m->batch_id == ks->carry_batch &&
				  m->chunk_seq == ks->carry_chunk && m->seq == ks->carry_chunk + ks->carry_seen))
			{
				/* a chunk starts; one seen only in part stays in the outbox */
				reset_carry(ks);
				ks->carry_batch = m->batch_id;
				ks->carry_chunk = m->chunk_seq;
				ks->carry_n = m->chunk_n;
				ks->carry_seen = (int) (m->seq - m->chunk_seq);
				ks->carry_ok = m->seq == m->chunk_seq;
			}
			ks->carry_seen++;
			if (m->state == MSG_DELIVERED)
				ks->carry_delivered++;
			else if (m->state == MSG_TOO_LARGE)
			{
				ks->carry_rejected = lappend(ks->carry_rejected, palloc(sizeof(int64)));
				*(int64 *) llast(ks->carry_rejected) = m->seq;
				reject_err = m->err;
			}
			else
			{
				ks->carry_ok = false;
				if (!ks->failed)
				{
					ks->failed = true;
					ks->fail_err = m->err;
				}
			}
			if (ks->carry_seen < ks->carry_n)
				continue;
			if (ks->carry_ok)
			{
				DoneChunk  *c = palloc(sizeof(DoneChunk));
				ListCell   *rc;

				c->batch_id = ks->carry_batch;
				c->chunk_seq = ks->carry_chunk;
				c->delivered = ks->carry_delivered;
				chunks = lappend(chunks, c);
				removed += ks->carry_n;
				foreach(rc, ks->carry_rejected)
				{
					if (nrejected == rejected_alloc)
					{
						rejected_alloc *= 2;
						rb = repalloc(rb, sizeof(Datum) * rejected_alloc);
						rs = repalloc(rs, sizeof(Datum) * rejected_alloc);
					}
					rb[nrejected] = Int64GetDatum(ks->carry_batch);
					rs[nrejected++] = Int64GetDatum(*(int64 *) lfirst(rc));
				}
			}
			reset_carry(ks);
		}
	}
	MemoryContextSwitchTo(old);

	if (chunks != NIL)
	{
		Relation	rel;
		Relation	idx;
		TupleTableSlot *slot;
		int64		batch = -1;
		int64		batch_rows = 0;

		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());

		/* refused messages to dead_letters, read before their chunks go */
		if (nrejected > 0)
		{
			Oid			types[6] = {INT4OID, INT8ARRAYOID, INT8ARRAYOID, TEXTOID, TEXTOID, TEXTOID};
			Datum		args[6];
			bool		isnull;
			StmCatalogScope scope = stm_catalog_begin();

			args[0] = Int32GetDatum(ks->base.stream_id);
			args[1] = PointerGetDatum(construct_array(rb, nrejected, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			args[2] = PointerGetDatum(construct_array(rs, nrejected, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
			args[3] = CStringGetTextDatum(ks->name);
			args[4] = CStringGetTextDatum(ks->topic);
			args[5] = CStringGetTextDatum(rd_kafka_err2str(reject_err));
			SPI_connect();
			if (SPI_execute_with_args(psprintf("WITH r AS (SELECT o.batch_id, o.seq, o.key, o.value FROM streaming.outbox o, "
											   "unnest($2, $3) AS k(b, s) "
											   "WHERE o.stream_id = $1 AND o.batch_id = k.b AND o.seq = k.s), "
											   "l AS (INSERT INTO streaming.dead_letters (stream, source, position, raw, error, sqlstate, stream_id) "
											   "SELECT s.name, s.source, jsonb_build_object('sink', $4, 'topic', $5, 'batch_id', r.batch_id, 'seq', r.seq), "
											   "substring(r.value FROM 1 FOR %d), "
											   "format('message of %%s bytes (key and value) is too large for Kafka topic %%s: %%s', "
											   "coalesce(octet_length(r.key), 0) + coalesce(octet_length(r.value), 0), $5, $6), "
											   "'54000', $1 FROM r JOIN streaming.stream_defs s ON s.id = $1), "
											   "c AS (SELECT batch_id, count(*) AS n FROM r GROUP BY batch_id), "
											   "u AS (UPDATE streaming.batches b SET num_rejected_rows = b.num_rejected_rows + c.n "
											   "FROM c WHERE b.stream_id = $1 AND b.batch_id = c.batch_id) "
											   "SELECT coalesce(sum(n), 0)::bigint FROM c", DEAD_LETTER_RAW_MAX),
									  6, types, args, NULL, false, 0) != SPI_OK_SELECT)
				elog(ERROR, "could not copy a message from streaming.outbox to streaming.dead_letters");
			rejected = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
			SPI_finish();
			stm_catalog_end(scope);
			ereport(WARNING,
					(errmsg("Kafka topic \"%s\" of sink \"%s\" refused " INT64_FORMAT " messages of stream \"%s\" as too large",
							ks->topic, ks->name, rejected, ks->base.stream_name),
					 errdetail("They are in streaming.dead_letters, with their outbox position.")));
			CommandCounterIncrement();
		}

		/* the done chunks go; each batch's delivered messages to its progress row */
		rel = table_open(ks->outbox_relid, RowExclusiveLock);
		idx = index_open(RelationGetPrimaryKeyIndex(rel), RowExclusiveLock);
		slot = table_slot_create(rel, NULL);
		foreach(lc, chunks)
		{
			DoneChunk  *c = lfirst(lc);

			if (c->batch_id != batch && batch_rows > 0)
			{
				count_in_progress(ks->base.stream_id, batch, "num_delivered_rows", batch_rows);
				batch_rows = 0;
			}
			batch = c->batch_id;
			if (delete_chunk(rel, idx, slot, ks->base.stream_id, c->batch_id, c->chunk_seq))
			{
				batch_rows += c->delivered;
				delivered += c->delivered;
			}
		}
		if (batch_rows > 0)
			count_in_progress(ks->base.stream_id, batch, "num_delivered_rows", batch_rows);
		ExecDropSingleTupleTableSlot(slot);
		index_close(idx, RowExclusiveLock);
		table_close(rel, RowExclusiveLock);
		PopActiveSnapshot();
		CommitTransactionCommand();
		MemoryContextSwitchTo(ks->cxt);
	}

	ks->outbox_rows = Max(0, ks->outbox_rows - removed);
	ks->in_flight -= total;
	foreach(lc, done)
	{
		Round	   *r = lfirst(lc);

		pfree(r->msgs);
		pfree(r);
	}
	list_free(done);
	list_free_deep(chunks);
	pfree(rb);
	pfree(rs);
	return delivered;
}

/*
 * deliver (sink.h): produce what the outbox holds, in order, and delete
 * what Kafka confirmed, until everything is delivered or
 * streaming.kafka_timeout passed
 * (busy: until everything is sent or librdkafka's queue is full, if the
 * outbox is at most half full: the worker's next batch runs while
 * librdkafka sends and Kafka confirms); outside any transaction.
 * Messages still in flight then stay with the producer (they are not
 * produced twice) and the next call goes on waiting for them.  After a
 * failure, once nothing is in flight, the next call starts again from the
 * outbox's first row.
 */
static StmSinkStatus
kafka_sink_deliver(StmSink *sink, bool busy)
{
	KafkaSink  *ks = (KafkaSink *) sink;
	int			timeout_ms = stm_guc_kafka_timeout_ms;
	StmSinkStatus st = {0, false, NULL, NULL};
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	int64		delivered = 0;
	bool		more = true;
	bool		timed_out = false;
	MemoryContext old = MemoryContextSwitchTo(ks->cxt);

	if (ks->outbox_rows == 0 && ks->in_flight == 0)
	{
		MemoryContextSwitchTo(old);
		return st;				/* nothing waits */
	}
	if (ks->rk == NULL)
	{
		StartTransactionCommand();
		ensure_producer(ks);
		CommitTransactionCommand();
		MemoryContextSwitchTo(ks->cxt);
	}
	if (ks->in_flight == 0 && !ks->topic_ok && !check_topic(ks, timeout_ms, &st))
	{
		st.pending = ks->outbox_rows;
		st.full = ks->outbox_rows >= stm_guc_outbox_max_rows;
		MemoryContextSwitchTo(old);
		return st;
	}
	for (;;)
	{
		char		fatal[512];

		rd_kafka_poll(ks->rk, 0);
		if (rd_kafka_fatal_error(ks->rk, fatal, sizeof(fatal)) != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			/* the producer cannot go on: a new one next time, from the outbox's first row */
			ks->failed = true;
			ks->fail_err = RD_KAFKA_RESP_ERR__FATAL;
			destroy_producer(ks);
			delivered += finish_rounds(ks);
			snprintf(ks->error_msg, STATUS_LEN,
					 "the Kafka producer of sink \"%s\" failed: %s; its rows wait in the outbox",
					 ks->name, fatal);
			st.error = ks->error_msg;
			ks->failed = false;
			ks->have_cursor = false;
			reset_carry(ks);	/* its chunk is produced again, all of it */
			break;
		}
		delivered += finish_rounds(ks);
		if (delivered > 0)
			ks->error[0] = '\0';
		if (ks->failed && ks->in_flight == 0)
		{
			/* everything not delivered is produced again, in order, after a check of the topic */
			delivery_failed(ks, &st);
			ks->failed = false;
			ks->have_cursor = false;
			reset_carry(ks);	/* its chunk is produced again, all of it */
			ks->topic_ok = false;
			break;
		}
		/*
		 * produce while the producer has room: the last batch's messages
		 * from the stage, then the outbox's (never both at once: the stage
		 * is next in outbox order)
		 */
		ks->queue_full = false;
		if (ks->stage_ready)
			produce_stage(ks);
		if (!ks->stage_ready && !ks->failed && more && !ks->queue_full &&
			ks->outbox_rows > produced_rows(ks))
		{
			if (ks->in_flight + ROUND_ROWS + CHUNK_MAX_MSGS > ks->max_in_flight)
				ks->queue_full = true;
			else
				more = produce_round(ks, ROUND_ROWS);
		}
		if (ks->in_flight == 0 && (!more || ks->outbox_rows == 0))
			break;				/* all delivered */

		/*
		 * busy, and the next batch has room in the outbox: it runs while
		 * librdkafka sends what it holds; the rest is produced after it
		 */
		if (busy && !ks->failed && ks->outbox_rows <= stm_guc_outbox_max_rows / 2 &&
			(ks->queue_full || !more || ks->outbox_rows <= produced_rows(ks)))
			break;
		if (GetCurrentTimestamp() >= deadline)
		{
			timed_out = true;
			break;
		}
		if (!PostmasterIsAlive())
			proc_exit(1);
		rd_kafka_poll(ks->rk, POLL_MS);
	}
	st.pending = ks->outbox_rows;
	st.full = ks->outbox_rows >= stm_guc_outbox_max_rows;
	if (st.error == NULL && (st.full || (timed_out && delivered == 0 && ks->in_flight > 0)))
	{
		StringInfoData buf;

		initStringInfo(&buf);
		if (st.full)
			appendStringInfo(&buf, "the Kafka sink \"%s\" is behind: the outbox holds " INT64_FORMAT
							 " rows of the stream (streaming.outbox_max_rows = %d), the next batch waits",
							 ks->name, ks->outbox_rows, stm_guc_outbox_max_rows);
		if (timed_out && delivered == 0 && ks->in_flight > 0)
			appendStringInfo(&buf, "%scould not deliver to Kafka topic \"%s\" of sink \"%s\" within streaming.kafka_timeout: %s",
							 buf.len ? "; " : "", ks->topic, ks->name, last_error(ks));
		if (!st.full)
			appendStringInfo(&buf, "; " INT64_FORMAT " rows wait in the outbox", ks->outbox_rows);
		strlcpy(ks->waiting, buf.data, STATUS_LEN);
		pfree(buf.data);
		st.waiting = ks->waiting;
	}
	MemoryContextSwitchTo(old);
	return st;
}

static void
kafka_sink_close(StmSink *sink)
{
	destroy_producer((KafkaSink *) sink);
}

const StmSinkRoutine stm_kafka_sink_routine = {
	.kind = "kafka",
	.display_name = "Kafka",
	.open = kafka_sink_open,
	.begin_batch = kafka_sink_begin_batch,
	.insert = kafka_sink_insert,
	.upsert = kafka_sink_insert,
	.delete_key = kafka_sink_delete_key,
	.truncate = kafka_sink_truncate,
	.end_batch = kafka_sink_end_batch,
	.capacity = kafka_sink_capacity,
	.after_commit = kafka_sink_after_commit,
	.deliver = kafka_sink_deliver,
	.close = kafka_sink_close,
	.validate = kafka_sink_validate,
	.probe = stm_kafka_probe_sink,
	.check_output = kafka_sink_check_output,
	.pending = kafka_sink_pending,
	.discard = kafka_sink_discard,
};

/* streaming.create_kafka_sink(name, bootstrap_servers, topic, ...) */
Datum
streaming_create_kafka_sink(PG_FUNCTION_ARGS)
{
	return stm_api_create_sink(fcinfo, &stm_kafka_sink_routine);
}

/* streaming.drop_kafka_sink(name) */
Datum
streaming_drop_kafka_sink(PG_FUNCTION_ARGS)
{
	return stm_api_drop_sink_of_kind(fcinfo, &stm_kafka_sink_routine);
}
