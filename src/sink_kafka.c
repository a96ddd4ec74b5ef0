/*
 * sink_kafka.c: the Kafka sink (SPEC 6.1), through the outbox (outbox.c).
 *
 * create_kafka_sink stores a named sink (streaming.sinks).  A stream that
 * names it as its sink writes its output rows, in the batch's transaction,
 * as messages into the outbox; nothing reaches Kafka before the commit.
 * After it, the outbox delivers them in (batch_id, seq) order through this
 * file's transport, an idempotent producer (enable.idempotence, acks=all,
 * and retries until delivered: message.timeout.ms = 0) whose delivery
 * reports tell the outbox what became of each message.  A crash or an
 * outage leaves the messages in the outbox, and they are produced again, in
 * the same order, with the same key, value and headers (streaming-stream,
 * streaming-batch-id, streaming-seq): at-least-once, and repeats can be
 * recognised.
 *
 * What is the Kafka sink's own: its arguments, the messages, and the
 * producer.
 *
 * Messages: the key from key_columns (one column: its text form, a bytea
 * column its bytes; several: a JSON object by column name; default: the
 * window and group columns in update and complete mode, none in append
 * mode); the value as format says: json (row_to_json of the output row:
 * PostgreSQL's own JSON, numbers and booleans as such, timestamps in ISO
 * 8601 with their offset, NULL as null; the same bytes written directly
 * for rows of built-in scalar types, fast_row_json), csv (quoted as COPY
 * quotes), text (the one column besides the key, in its text form), bytes (that column,
 * a bytea) or avro (the row as a record in the Confluent wire format,
 * avro.c: its schema registered under <topic>-value when a stream is
 * created on the sink, and again, once per runtime, by the batches, which
 * gives them its id; key_format avro: the key columns the same way under
 * <topic>-key); delete_key (a session merged away) is a tombstone, a NULL
 * value on the key.
 *
 * The producer (StmOutboxTransport): made at the first delivery, after the
 * stored kafka_options were checked again; per partition it keeps the
 * outbox's order through retries, and messages never time out in it, so
 * while the brokers are down they stay in flight and are not produced
 * twice.  A message Kafka refuses as too large is reported so, and the
 * outbox makes it a dead letter.  No call into PostgreSQL from librdkafka's
 * threads: its callbacks run in rd_kafka_poll on ours and only record what
 * they are told; the configuration is never logged (it holds credentials).
 */
#include "postgres.h"

#include <malloc.h>

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/pg_type.h"
#include "common/jsonapi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "api.h"
#include "avro.h"
#include "catalog.h"
#include "guc.h"
#include "kafka_conf.h"
#include "kafka_probe.h"
#include "options.h"
#include "outbox.h"
#include "schema_registry.h"
#include "sink.h"
#include "sink_kafka.h"
#include "source.h"

PG_FUNCTION_INFO_V1(streaming_create_kafka_sink);
PG_FUNCTION_INFO_V1(streaming_drop_kafka_sink);

typedef enum SinkFormat
{
	SINK_JSON,
	SINK_CSV,
	SINK_TEXT,
	SINK_BYTES,
	SINK_AVRO
} SinkFormat;

/* An Avro schema the sink registered (under <topic>-value or -key), and its id. */
typedef struct SinkSchema
{
	char	   *text;			/* NULL: none registered yet */
	int32		id;
} SinkSchema;

/* An open Kafka sink: one per runtime (a worker's life, a run_batch). */
typedef struct KafkaSink
{
	StmOutboxSink base;			/* first: the outbox's, and what batch.c reads */
	Oid			sink_owner;
	char	   *bootstrap;
	char	   *topic;
	SinkFormat	format;
	List	   *key_columns;	/* names; NIL: the default */
	List	   *kafka_options;	/* StmOptionPair */
	bool		key_avro;		/* key_format avro */
	StmRegistry *registry;		/* avro: the schema registry */
	SinkSchema	value_schema;	/* avro: the rows' schema, registered once per runtime */
	SinkSchema	key_schema;		/* key_format avro: the keys' */

	/* the producer, made by the first delivery */
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	char		error[STM_KAFKA_ERROR_LEN];	/* librdkafka's last error (error_cb) */
	int			stream_name_len;	/* the streaming-stream header's */
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
	StmOutboxWriter *outbox;	/* the batch's messages go there */
	MemoryContext row_cxt;		/* one message's encoding, reset after each */
	int			nkey;			/* key columns (outputs) */
	int		   *key_att;
	int			value_att;		/* text, bytes: the value's column */
	TupleDesc	row_desc;		/* json: the output row, blessed */
	JsonCol    *json_cols;		/* json: how each column is written; NULL: row_to_json */
	StringInfoData json_buf;	/* json: the value being encoded (a bytea) */
	StmAvroWriter *avro_value;	/* avro: the rows' encoder */
	StmAvroWriter *avro_key;	/* key_format avro: the keys' */
	TupleDesc	key_desc;		/* several key columns: them, blessed */
	FmgrInfo   *out_funcs;		/* per output: its type's output function */
	Datum		stream_name;	/* for row_to_json's fallback */
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
	if (strcmp(name, "avro") == 0)
		return SINK_AVRO;
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
	static const char *const formats[] = {"json", "csv", "text", "bytes", "avro", NULL};
	static const char *const key_formats[] = {"avro", NULL};
	static const char *const required[] = {"bootstrap_servers", "topic", "format",
	"kafka_options", NULL};
	char	   *format;
	char	   *topic;
	char	   *key_format = stm_arg_lower(stm_option_text(o, "key_format"));

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
						 "Valid formats are \"json\", \"csv\", \"text\", \"bytes\" and \"avro\".");
	if (key_format)
	{
		stm_arg_check_choice("key_format", key_format, key_formats, "The only key_format is \"avro\".");
		o = stm_option_set_text(o, "key_format", key_format);
	}
	if ((strcmp(format, "avro") == 0 || key_format) && !stm_option_given(o, "schema_registry"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"avro\" needs schema_registry", key_format ? "key_format" : "format"),
				 errhint("Give schema_registry => '{\"url\": \"http://registry:8081\"}'.")));
	if (strcmp(format, "avro") != 0 && !key_format && stm_option_given(o, "schema_registry"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema_registry is only for format \"avro\" and key_format \"avro\"")));
	if (stm_option_given(o, "schema_registry"))
		stm_registry_check_options(stm_option_jsonb(o, "schema_registry"));
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

static char *avro_schemas(const char *sink, const char *topic, bool avro, bool key_avro,
						  const StmSinkOutput *output, const char *stream, int nkey,
						  const int *key_att, char **key_schema);

/* create_stream: can the sink take the stream's output? */
static void
kafka_sink_check_output(StmSinkTarget *target, const StmSinkOutput *output)
{
	StmSinkDef *sink = target->named;
	int			nkey;
	int		   *key_att;
	int			value_att;

	if (output->mode == STM_OUTPUT_UPSERT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("output_mode \"upsert\" needs a sink table, not Kafka sink \"%s\"", sink->name),
				 errdetail("Upsert mode applies each row to a table by its key."),
				 errhint("Use output_mode \"append\": the Kafka sink's key_columns key each message, as a compacted topic wants.")));
	message_columns(sink->name, stm_option_elements(sink->options, "key_columns"),
					format_of(stm_option_text(sink->options, "format")), output, target->stream,
					&nkey, &key_att, &value_att);
	/* the Avro schemas can be made of the output (its column names are Avro names) */
	(void) avro_schemas(sink->name, stm_option_text(sink->options, "topic"),
						format_of(stm_option_text(sink->options, "format")) == SINK_AVRO,
						stm_option_given(sink->options, "key_format"), output, target->stream,
						nkey, key_att, NULL);
}

/*
 * format avro, key_format avro: the schemas of the stream's rows and keys
 * (stm_avro_record_schema), records named after the topic (and _key);
 * NULL when the sink writes no such.  key_schema: where the key's goes.
 */
static char *
avro_schemas(const char *sink, const char *topic, bool avro, bool key_avro,
			 const StmSinkOutput *output, const char *stream, int nkey, const int *key_att,
			 char **key_schema)
{
	char	   *what = psprintf("stream \"%s\" (Kafka sink \"%s\")", stream, sink);
	char	   *value = NULL;

	if (avro)
		value = stm_avro_record_schema(output->desc, output->desc->natts, NULL, topic, what);
	if (key_schema)
		*key_schema = NULL;
	if (key_avro && nkey > 0)
	{
		char	   *k = stm_avro_record_schema(output->desc, nkey, key_att,
											   psprintf("%s_key", topic), what);

		if (key_schema)
			*key_schema = k;
	}
	return value;
}

/* The id of schema under subject: registered (or found) once, then as cached. */
static int32
register_schema(StmRegistry *reg, SinkSchema *cache, MemoryContext cxt, const char *subject,
				const char *schema)
{
	if (cache->text && strcmp(cache->text, schema) == 0)
		return cache->id;
	cache->id = stm_registry_register(reg, subject, schema);
	cache->text = MemoryContextStrdup(cxt, schema);
	return cache->id;
}

/*
 * create_stream on an Avro sink: the rows' schema (and the keys') is
 * registered under <topic>-value (<topic>-key), as producers with a
 * registry do, so that readers find it before the first row.
 */
static void
kafka_sink_create_output(StmSinkTarget *target, const StmSinkOutput *output)
{
	StmSinkDef *sink = target->named;
	Jsonb	   *o = sink->options;
	char	   *topic = stm_option_text(o, "topic");
	int			nkey;
	int		   *key_att;
	int			value_att;
	char	   *key_schema;
	char	   *value_schema;
	StmRegistry *reg;

	message_columns(sink->name, stm_option_elements(o, "key_columns"),
					format_of(stm_option_text(o, "format")), output, target->stream,
					&nkey, &key_att, &value_att);
	value_schema = avro_schemas(sink->name, topic, format_of(stm_option_text(o, "format")) == SINK_AVRO,
								stm_option_given(o, "key_format"), output, target->stream,
								nkey, key_att, &key_schema);
	if (value_schema == NULL && key_schema == NULL)
		return;
	reg = stm_registry_open(stm_option_jsonb(o, "schema_registry"),
							psprintf("Kafka sink \"%s\"", sink->name));
	if (value_schema)
		(void) stm_registry_register(reg, psprintf("%s-value", topic), value_schema);
	if (key_schema)
		(void) stm_registry_register(reg, psprintf("%s-key", topic), key_schema);
}


/* ---- batches ------------------------------------------------------------ */

static const StmOutboxTransport kafka_transport;
static JsonCol *json_columns(TupleDesc desc);

/* "key": "value" of JSON, for a dead letter's position */
static void
append_json_member(StringInfo buf, const char *key, const char *value)
{
	if (buf->len > 0)
		appendStringInfoString(buf, ", ");
	escape_json(buf, key);
	appendStringInfoString(buf, ": ");
	escape_json(buf, value);
}

/*
 * open: the sink's definition, read once per runtime, and its outbox.  The
 * stream's owner must (still) have the privileges of the sink's owner: a
 * stream writes with the sink's settings and credentials.
 */
static StmSink *
kafka_sink_open(StmStreamDef *def)
{
	KafkaSink  *ks = palloc0(sizeof(KafkaSink));
	StmSinkDef *sd = stm_catalog_get_sink_of_stream(def);
	Jsonb	   *o = sd->options;
	StringInfoData position;

	if (!has_privs_of_role(def->owner, sd->owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" may not write to Kafka sink \"%s\"",
						GetUserNameFromId(def->owner, false), sd->name),
				 errdetail("Stream \"%s\" writes to it, but its owner no longer has the privileges of the sink's owner \"%s\".",
						   def->name, GetUserNameFromId(sd->owner, false))));
	ks->sink_owner = sd->owner;
	ks->bootstrap = stm_option_text(o, "bootstrap_servers");
	ks->topic = stm_option_text(o, "topic");
	ks->format = format_of(stm_option_text(o, "format"));
	ks->key_columns = stm_option_elements(o, "key_columns");
	ks->kafka_options = stm_option_pairs(o, "kafka_options");
	ks->key_avro = stm_option_given(o, "key_format");
	if (ks->format == SINK_AVRO || ks->key_avro)
		ks->registry = stm_registry_open(stm_option_jsonb(o, "schema_registry"),
										 psprintf("Kafka sink \"%s\"", sd->name));

	ks->base.name = sd->name;
	ks->base.destination = psprintf("Kafka topic \"%s\" of sink \"%s\"", ks->topic, sd->name);
	initStringInfo(&position);
	append_json_member(&position, "sink", sd->name);
	append_json_member(&position, "topic", ks->topic);
	ks->base.position = position.data;
	ks->base.timeout_setting = "streaming.kafka_timeout";
	ks->base.timeout_ms = &stm_guc_kafka_timeout_ms;
	stm_outbox_open(&ks->base, def, &stm_kafka_sink_routine, &kafka_transport);
	ks->stream_name_len = strlen(ks->base.base.stream_name);
	return &ks->base.base;
}

/* The batch's writer: the outbox's, and what encodes the messages. */
static StmSinkBatch *
kafka_sink_begin_batch(StmSink *sink, const StmSinkOutput *output, int64 batch_id, EState *estate)
{
	KafkaSink  *ks = (KafkaSink *) sink;
	KafkaSinkBatch *kb = palloc0(sizeof(KafkaSinkBatch));
	TupleDesc	desc = output->desc;

	kb->base.sink = sink;
	kb->base.output = output;
	kb->base.batch_id = batch_id;
	kb->base.estate = estate;
	kb->base.deferred = true;
	kb->outbox = stm_outbox_begin_batch(&ks->base, batch_id, estate);
	kb->stream_name = CStringGetTextDatum(sink->stream_name);

	message_columns(ks->base.name, ks->key_columns, ks->format, output, sink->stream_name,
					&kb->nkey, &kb->key_att, &kb->value_att);
	kb->out_funcs = palloc0(sizeof(FmgrInfo) * Max(desc->natts, 1));
	for (int i = 0; i < desc->natts; i++)
	{
		Oid			func;
		bool		varlena;

		getTypeOutputInfo(TupleDescAttr(desc, i)->atttypid, &func, &varlena);
		fmgr_info(func, &kb->out_funcs[i]);
	}
	if (ks->format == SINK_AVRO || ks->key_avro)
	{
		/* the schemas' ids: registered once per runtime (the query may change them) */
		MemoryContext cxt = GetMemoryChunkContext(ks);
		char	   *key_schema;
		char	   *value_schema = avro_schemas(ks->base.name, ks->topic, ks->format == SINK_AVRO,
												ks->key_avro, output, sink->stream_name,
												kb->nkey, kb->key_att, &key_schema);

		if (value_schema)
			kb->avro_value = stm_avro_writer_new(desc, desc->natts, NULL, value_schema,
												 register_schema(ks->registry, &ks->value_schema, cxt,
																 psprintf("%s-value", ks->topic), value_schema));
		if (key_schema)
			kb->avro_key = stm_avro_writer_new(desc, kb->nkey, kb->key_att, key_schema,
											   register_schema(ks->registry, &ks->key_schema, cxt,
															   psprintf("%s-key", ks->topic), key_schema));
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
	return &kb->base;
}

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
	if (kb->avro_key)
		return PointerGetDatum(stm_avro_encode(kb->avro_key, values, nulls));
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
		case SINK_AVRO:
			return PointerGetDatum(stm_avro_encode(kb->avro_value, values, nulls));
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


/* One message into the outbox: the row's key and value (none: a tombstone). */
static void
write_message(KafkaSinkBatch *kb, Datum *values, bool *nulls, bool tombstone)
{
	bool		keynull;
	bool		valuenull = true;
	Datum		key;
	Datum		value = (Datum) 0;
	bytea	   *k;
	bytea	   *v;
	MemoryContext old;

	old = MemoryContextSwitchTo(kb->row_cxt);
	key = encode_key(kb, values, nulls, &keynull);
	if (!tombstone)
		value = encode_value(kb, values, nulls, &valuenull);
	k = keynull ? NULL : DatumGetByteaPP(key);
	v = valuenull ? NULL : DatumGetByteaPP(value);
	MemoryContextSwitchTo(old);
	stm_outbox_write(kb->outbox, k ? VARDATA_ANY(k) : NULL, k ? VARSIZE_ANY_EXHDR(k) : 0,
					 v ? VARDATA_ANY(v) : NULL, v ? VARSIZE_ANY_EXHDR(v) : 0);
	MemoryContextReset(kb->row_cxt);
}

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

	stm_outbox_end_batch(kb->outbox);
	MemoryContextDelete(kb->row_cxt);
}

/* ---- the producer: the outbox's transport ------------------------------- */

/*
 * librdkafka's delivery report of each message, in rd_kafka_poll on our
 * thread: handed to the outbox, which only records it.  Reports of every
 * message, not only of failures: the outbox needs each one's outcome, and
 * learns it while later messages are still being sent; the messages are
 * freed by the thread that made them.  A delivery clears the last error
 * (opaque: error_cb's buffer).
 */
static void
dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	StmOutboxOutcome outcome;

	if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		outcome = STM_OUTBOX_DELIVERED;
		((char *) opaque)[0] = '\0';
	}
	else if (m->err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ||
			 m->err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE)
		outcome = STM_OUTBOX_TOO_LARGE;
	else
		outcome = STM_OUTBOX_FAILED;
	stm_outbox_report(m->_private, outcome, (int) m->err);
}

/*
 * The producer, made at the first delivery, in a transaction.  The stored
 * kafka_options are checked again first, for the sink's owner and the
 * stream's (SPEC 7), and the stream's owner must still have the sink
 * owner's privileges; the sink's own settings come last, so nothing
 * overrides them.
 */
static void
kafka_connect(StmOutboxSink *sink, int64 max_in_flight)
{
	KafkaSink  *ks = (KafkaSink *) sink;
	rd_kafka_conf_t *conf;
	char		errstr[512];
	ListCell   *lc;

	if (!has_privs_of_role(sink->base.owner, ks->sink_owner))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("role \"%s\" may not write to Kafka sink \"%s\"",
						GetUserNameFromId(sink->base.owner, false), sink->name),
				 errdetail("Stream \"%s\" writes to it, but its owner no longer has the privileges of the sink's owner.",
						   sink->base.stream_name)));
	stm_kafka_recheck_options("sink", sink->name, ks->kafka_options, ks->sink_owner,
							  sink->base.owner, STM_KAFKA_PRODUCER);
	foreach(lc, ks->kafka_options)
		check_fixed_option(((StmOptionPair *) lfirst(lc))->key);

	/*
	 * librdkafka mallocs each message and its headers (six chunks) and
	 * frees them once reported: with glibc's fastbins every free that
	 * merges into a large chunk consolidated them again, which cost more
	 * than producing (measured with reports of failures only; with every
	 * report served here, fastbins were still slower, bench/kafka_sink.sh).
	 * Measured again with the source's consumer in the same process
	 * (issue 21): per 1M messages the worker took 4.58 and 4.59 CPU s
	 * with this, 4.87 and 4.74 s without, interleaved in one session.
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
	/* the outbox tracks what is in flight: at most so many */
	stm_kafka_conf_set(conf, "queue.buffering.max.messages", psprintf(INT64_FORMAT, max_in_flight));
	stm_kafka_conf_set(conf, "queue.buffering.max.kbytes", psprintf("%d", stm_guc_batch_memory_kb));
	rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
	ks->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (ks->rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("could not create the Kafka producer of sink \"%s\"", sink->name),
				 errdetail("%s", errstr)));
	}
	ks->rkt = rd_kafka_topic_new(ks->rk, ks->topic, NULL);
	if (ks->rkt == NULL)
	{
		rd_kafka_destroy(ks->rk);
		ks->rk = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open Kafka topic \"%s\" of sink \"%s\"", ks->topic, sink->name),
				 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	}
}

/*
 * The producer goes: what it still holds is purged (its rows stay in the
 * outbox, to be produced again), then it is destroyed.  A purged message is
 * reported as failed.
 */
static void
kafka_disconnect(StmOutboxSink *sink)
{
	KafkaSink  *ks = (KafkaSink *) sink;

	if (ks->rk == NULL)
		return;
	rd_kafka_purge(ks->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	/* serves the purged messages' reports */
	(void) rd_kafka_flush(ks->rk, 1000);
	rd_kafka_topic_destroy(ks->rkt);
	rd_kafka_destroy(ks->rk);
	ks->rk = NULL;
	ks->rkt = NULL;
}

/* librdkafka's last error, for a message ("" when it reported none) */
static const char *
kafka_last_error(StmOutboxSink *sink)
{
	KafkaSink  *ks = (KafkaSink *) sink;

	return ks->error[0] ? ks->error : "no answer";
}

/*
 * The stream's last_error for err, the topic's error in its metadata or a
 * message's in its report (delivery): a missing topic, a refusal, or else
 * what could not be done.
 */
static void
topic_error(KafkaSink *ks, rd_kafka_resp_err_t err, bool delivery, char *text, size_t len)
{
	if (err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
		snprintf(text, len,
				 "Kafka topic \"%s\" of sink \"%s\" does not exist; its rows wait in the outbox",
				 ks->topic, ks->base.name);
	else if (err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
			 err == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED)
		snprintf(text, len,
				 "the Kafka brokers refused sink \"%s\" access to topic \"%s\": %s; its rows wait in the outbox",
				 ks->base.name, ks->topic, rd_kafka_err2str(err));
	else if (delivery)
		snprintf(text, len,
				 "could not deliver to Kafka topic \"%s\" of sink \"%s\": %s; its rows wait in the outbox",
				 ks->topic, ks->base.name, rd_kafka_err2str(err));
	else
		snprintf(text, len,
				 "Kafka topic \"%s\" of sink \"%s\" cannot be written: %s; its rows wait in the outbox",
				 ks->topic, ks->base.name, rd_kafka_err2str(err));
}

/*
 * Is the topic there, and may we write to it?  A topic that does not exist
 * or refuses us is a lasting error, brokers out of reach or a topic still
 * being made are waiting.
 */
static StmOutboxCheck
kafka_check_topic(StmOutboxSink *sink, int timeout_ms, char *text, size_t len)
{
	KafkaSink  *ks = (KafkaSink *) sink;
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;
	rd_kafka_resp_err_t terr;

	err = rd_kafka_metadata(ks->rk, 0, ks->rkt, &md, Max(timeout_ms, 1));
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		snprintf(text, len, "could not reach the Kafka brokers of sink \"%s\" (%s): %s: %s",
				 sink->name, ks->bootstrap, rd_kafka_err2str(err), kafka_last_error(sink));
		return STM_OUTBOX_DEST_WAIT;
	}
	terr = md->topic_cnt > 0 ? md->topics[0].err : RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART;
	rd_kafka_metadata_destroy(md);
	if (terr == RD_KAFKA_RESP_ERR_NO_ERROR)
		return STM_OUTBOX_DEST_OK;
	if (terr == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
	{
		snprintf(text, len, "Kafka topic \"%s\" of sink \"%s\" is not available yet: %s",
				 ks->topic, sink->name, rd_kafka_err2str(terr));
		return STM_OUTBOX_DEST_WAIT;
	}
	topic_error(ks, terr, false, text, len);
	return STM_OUTBOX_DEST_ERROR;
}

/* What a failed delivery says, as the stream's last_error. */
static void
kafka_describe_failure(StmOutboxSink *sink, int error, char *text, size_t len)
{
	topic_error((KafkaSink *) sink, (rd_kafka_resp_err_t) error, true, text, len);
}

/* A dead letter's error: the message's size, the topic, Kafka's answer. */
static char *
kafka_describe_refusal(StmOutboxSink *sink, int64 bytes, int error)
{
	return psprintf("message of " INT64_FORMAT " bytes (key and value) is too large for Kafka topic %s: %s",
					bytes, ((KafkaSink *) sink)->topic, rd_kafka_err2str((rd_kafka_resp_err_t) error));
}

/*
 * Produce one message (ref its report's opaque) with its headers:
 * streaming-stream, streaming-batch-id, streaming-seq (in the order of the
 * jsonb the view streaming.outbox shows them in), which librdkafka takes
 * on success only.
 */
static StmOutboxOutcome
kafka_send(StmOutboxSink *sink, const StmOutboxMsg *msg, void *ref, int *error)
{
	KafkaSink  *ks = (KafkaSink *) sink;
	rd_kafka_headers_t *hdrs = rd_kafka_headers_new(3);
	char		b[MAXINT8LEN + 1];
	char		s[MAXINT8LEN + 1];
	rd_kafka_resp_err_t err;
	int			blen = pg_lltoa(msg->batch_id, b);
	int			slen = pg_lltoa(msg->seq, s);

	/* lengths given: no strlen of each per message */
	rd_kafka_header_add(hdrs, "streaming-seq", sizeof("streaming-seq") - 1, s, slen);
	rd_kafka_header_add(hdrs, "streaming-stream", sizeof("streaming-stream") - 1,
						sink->base.stream_name, ks->stream_name_len);
	rd_kafka_header_add(hdrs, "streaming-batch-id", sizeof("streaming-batch-id") - 1, b, blen);
	err = rd_kafka_producev(ks->rk,
							RD_KAFKA_V_RKT(ks->rkt),
							RD_KAFKA_V_PARTITION(RD_KAFKA_PARTITION_UA),
							RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
							RD_KAFKA_V_KEY((void *) msg->key, msg->keylen),
							RD_KAFKA_V_VALUE((void *) msg->value, msg->valuelen),
							RD_KAFKA_V_HEADERS(hdrs),
							RD_KAFKA_V_OPAQUE(ref),
							RD_KAFKA_V_END);
	if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		return STM_OUTBOX_IN_FLIGHT;
	rd_kafka_headers_destroy(hdrs);
	*error = (int) err;
	if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
		return STM_OUTBOX_NO_ROOM;
	return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE ? STM_OUTBOX_TOO_LARGE : STM_OUTBOX_FAILED;
}

/* Delivery reports (dr_msg_cb), waiting up to timeout_ms for them. */
static void
kafka_poll(StmOutboxSink *sink, int timeout_ms)
{
	rd_kafka_poll(((KafkaSink *) sink)->rk, timeout_ms);
}

/* An idempotent producer's fatal error: it cannot go on. */
static bool
kafka_fatal_error(StmOutboxSink *sink, char *text, size_t len)
{
	char		fatal[512];

	if (rd_kafka_fatal_error(((KafkaSink *) sink)->rk, fatal, sizeof(fatal)) == RD_KAFKA_RESP_ERR_NO_ERROR)
		return false;
	snprintf(text, len, "the Kafka producer of sink \"%s\" failed: %s; its rows wait in the outbox",
			 sink->name, fatal);
	return true;
}

static const StmOutboxTransport kafka_transport = {
	.connect = kafka_connect,
	.check_destination = kafka_check_topic,
	.send = kafka_send,
	.poll = kafka_poll,
	.fatal_error = kafka_fatal_error,
	.disconnect = kafka_disconnect,
	.describe_failure = kafka_describe_failure,
	.describe_refusal = kafka_describe_refusal,
	.last_error = kafka_last_error,
};

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
	.capacity = stm_outbox_capacity,
	.after_commit = stm_outbox_after_commit,
	.deliver = stm_outbox_deliver,
	.close = stm_outbox_close,
	.validate = kafka_sink_validate,
	.probe = stm_kafka_probe_sink,
	.check_output = kafka_sink_check_output,
	.create_output = kafka_sink_create_output,
	.pending = stm_outbox_pending,
	.discard = stm_outbox_discard,
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
