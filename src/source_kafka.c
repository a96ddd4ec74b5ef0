/*
 * source_kafka.c: the Kafka source.
 *
 * Positions are ours: streaming.offsets holds, per stream and partition, the
 * next offset to read, and is written in the batch's transaction.  The
 * consumer never uses consumer-group offsets: each partition is consumed with
 * librdkafka's explicit per-partition consumption (rd_kafka_consume_start at
 * a given offset), and restarted at the stored offset whenever the local
 * queue is not exactly there (first batch, or after a rolled-back batch).
 *
 * A batch's bounds are fixed before it reads anything (as Spark does): the
 * end of each partition is its high watermark when the batch is planned, cut
 * by max_offsets_per_trigger.  The end of a partition is never guessed from
 * an empty fetch.  Messages fetched past a batch's end stay held for the next
 * batch.
 *
 * Invariants: no call into PostgreSQL from librdkafka's threads (the error
 * callback only copies a string, and runs in rd_kafka_poll on our thread);
 * every rd_kafka_message_t is destroyed by the batch that fetched it or kept
 * in a partition's held list; the client is destroyed when the memory context
 * holding the StmKafka is deleted, also on error.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "regex/regex.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "guc.h"
#include "source_kafka.h"

#define FETCH_CHUNK 1000
#define FETCH_POLL_MS 10

/* librdkafka properties a non-superuser may set (SPEC 7: an allowlist) */
static const char *const user_allowed_options[] = {
	"client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
	"sasl.username", "sasl.password", "sasl.oauthbearer.config",
	"ssl.endpoint.identification.algorithm", "ssl.ca.pem", "ssl.certificate.pem",
	"ssl.key.pem", "ssl.key.password", "ssl.cipher.suites",
	"fetch.wait.max.ms", "fetch.min.bytes", "fetch.max.bytes",
	"fetch.message.max.bytes", "fetch.error.backoff.ms", "queued.min.messages",
	"queued.max.messages.kbytes", "receive.message.max.bytes",
	"socket.timeout.ms", "socket.keepalive.enable", "metadata.max.age.ms",
	"topic.metadata.refresh.interval.ms", "reconnect.backoff.ms",
	"reconnect.backoff.max.ms", "isolation.level", "check.crcs",
	"client.rack", "broker.address.family", "api.version.request",
	"broker.version.fallback", "group.id", "connections.max.idle.ms",
	NULL
};

static void
kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	StmKafka   *kc = opaque;

	strlcpy(kc->error, reason, sizeof(kc->error));
}

static void
kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	/* librdkafka's threads must not call elog; errors reach error_cb */
}

/*
 * Validate one kafka_options entry: librdkafka must know it, and roles other
 * than superusers may only set properties on the allowlist.
 */
void
stm_kafka_check_option(const char *key, const char *value)
{
	rd_kafka_conf_t *conf;
	char		errstr[512];
	rd_kafka_conf_res_t res;

	if (strcmp(key, "bootstrap.servers") == 0 || strcmp(key, "metadata.broker.list") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kafka_options must not set \"%s\"", key),
				 errhint("Give the brokers in the bootstrap_servers argument.")));
	if (!superuser())
	{
		bool		allowed = false;

		for (int i = 0; user_allowed_options[i]; i++)
			if (strcmp(user_allowed_options[i], key) == 0)
				allowed = true;
		if (!allowed)
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("only superusers may set the Kafka client property \"%s\"", key),
					 errdetail("Properties that load code, run commands or read server files are reserved to superusers.")));
	}
	conf = rd_kafka_conf_new();
	res = rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr));
	rd_kafka_conf_destroy(conf);
	if (res != RD_KAFKA_CONF_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid kafka_options entry \"%s\"", key),
				 errdetail("%s", errstr)));
}

static void
set_conf(rd_kafka_conf_t *conf, const char *key, const char *value)
{
	char		errstr[512];

	if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid Kafka client property \"%s\"", key),
				 errdetail("%s", errstr)));
	}
}

static void
kafka_release_partition(StmKafkaPartition *p)
{
	for (int i = p->held_next; i < p->nheld; i++)
		rd_kafka_message_destroy(p->held[i]);
	if (p->held)
		free(p->held);
	p->held = NULL;
	p->nheld = p->held_next = 0;
	if (p->started)
		rd_kafka_consume_stop(p->rkt, p->partition);
	p->started = false;
}

/* Memory-context callback: the client goes away with the StmKafka. */
static void
kafka_destroy_cb(void *arg)
{
	StmKafka   *kc = arg;
	ListCell   *lc;

	if (kc->consumer_conf)
		rd_kafka_conf_destroy(kc->consumer_conf);
	kc->consumer_conf = NULL;
	if (kc->meta)
		rd_kafka_destroy(kc->meta);
	kc->meta = NULL;
	if (kc->rk == NULL)
		return;
	foreach(lc, kc->partitions)
		kafka_release_partition(lfirst(lc));
	/* topic handles are shared between partitions of a topic */
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);
		ListCell   *lc2;
		bool		first = true;

		foreach(lc2, kc->partitions)
		{
			StmKafkaPartition *q = lfirst(lc2);

			if (q == p)
				break;
			if (q->rkt == p->rkt)
				first = false;
		}
		if (first)
			rd_kafka_topic_destroy(p->rkt);
	}
	rd_kafka_destroy(kc->rk);
	kc->rk = NULL;
}

static int64
option_int(char *v, int64 dflt)
{
	return v ? pg_strtoint64(v) : dflt;
}

/*
 * Open the source's client in the current memory context (it is destroyed
 * with that context).  for_batches: also load what batches need.
 */
StmKafka *
stm_kafka_open(const char *source, bool for_batches)
{
	StmKafka   *kc = palloc0(sizeof(StmKafka));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	rd_kafka_conf_t *conf;
	rd_kafka_conf_t *meta_conf;
	char		errstr[512];
	List	   *rows;
	char	  **o;
	ListCell   *lc;

	kc->cxt = CurrentMemoryContext;
	kc->source = pstrdup(source);
	initStringInfo(&kc->data_loss);
	rows = stm_catalog_source_option_list(source,
										  "SELECT s.options->>'bootstrap_servers', s.options->>'topic_pattern', "
										  "s.options->>'starting_offsets', s.options->>'format', "
										  "(s.options ? 'columns')::text, s.options->>'max_offsets_per_trigger', "
										  "s.options->>'min_offsets_per_trigger', "
										  "(extract(epoch FROM (s.options->>'max_trigger_delay')::interval) * 1000)::bigint, "
										  "s.options->>'fail_on_data_loss', s.options->>'include_headers', "
										  "s.options->>'on_bad_record'");
	if (rows == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" does not exist", source)));
	o = linitial(rows);
	kc->bootstrap = o[0];
	kc->topic_pattern = o[1];
	kc->starting_offsets = o[2];
	kc->format = stm_parse_format(o[3]);
	kc->has_columns = strcmp(o[4], "true") == 0;
	kc->max_offsets_per_trigger = option_int(o[5], 0);
	kc->min_offsets_per_trigger = option_int(o[6], 0);
	kc->max_trigger_delay_ms = option_int(o[7], 15 * 60 * 1000);
	kc->fail_on_data_loss = strcmp(o[8], "true") == 0;
	kc->include_headers = strcmp(o[9], "true") == 0;
	kc->on_bad_record = o[10];

	rows = stm_catalog_source_option_list(source,
										  "SELECT jsonb_array_elements_text(s.options->'topics')");
	foreach(lc, rows)
		kc->topics = lappend(kc->topics, ((char **) lfirst(lc))[0]);
	rows = stm_catalog_source_option_list(source,
										  "SELECT t.key, p.value FROM jsonb_each(s.options->'partitions') t, "
										  "jsonb_array_elements_text(t.value) p");
	foreach(lc, rows)
	{
		StmKafkaPartition *p = palloc0(sizeof(StmKafkaPartition));

		p->topic = ((char **) lfirst(lc))[0];
		p->partition = pg_strtoint32(((char **) lfirst(lc))[1]);
		kc->assign = lappend(kc->assign, p);
	}

	conf = rd_kafka_conf_new();
	set_conf(conf, "bootstrap.servers", kc->bootstrap);
	set_conf(conf, "client.id", "streaming");
	set_conf(conf, "enable.partition.eof", "true");
	set_conf(conf, "auto.offset.reset", "error");
	set_conf(conf, "enable.auto.commit", "false");
	set_conf(conf, "enable.auto.offset.store", "false");
	/* as Spark: end offsets are high watermarks, read them all */
	set_conf(conf, "isolation.level", "read_uncommitted");
	/* prefetch by bytes, not by message count (open_consumer) */
	set_conf(conf, "queued.min.messages", "1000000");
	set_conf(conf, "fetch.wait.max.ms", "100");
	rd_kafka_conf_set_opaque(conf, kc);
	rd_kafka_conf_set_error_cb(conf, kafka_error_cb);
	rd_kafka_conf_set_log_cb(conf, kafka_log_cb);

	rows = stm_catalog_source_option_list(source,
										  "SELECT key, value FROM jsonb_each_text(s.options->'kafka_options')");
	foreach(lc, rows)
	{
		char	   *key = ((char **) lfirst(lc))[0];

		set_conf(conf, key, ((char **) lfirst(lc))[1]);
		if (strcmp(key, "queued.max.messages.kbytes") == 0 ||
			strcmp(key, "fetch.message.max.bytes") == 0)
			kc->user_prefetch = true;
	}

	/*
	 * Two clients: one fetches, one asks for metadata and offsets.  A broker
	 * answers the requests of one connection in order, so on the fetching
	 * connection they would wait behind each long-polling fetch.  The
	 * fetching one is made once the partitions are known (open_consumer).
	 */
	meta_conf = rd_kafka_conf_dup(conf);
	kc->consumer_conf = conf;
	cb->func = kafka_destroy_cb;
	cb->arg = kc;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	kc->meta = rd_kafka_new(RD_KAFKA_CONSUMER, meta_conf, errstr, sizeof(errstr));
	if (kc->meta == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create Kafka client for source \"%s\"", source),
				 errdetail("%s", errstr)));
	return kc;
}

/*
 * The fetching client, made when the first plan knows how many partitions
 * the source reads: their prefetch shares half of streaming.batch_memory
 * (the batch's groups have the other half, guc.h).  Each partition's local
 * queue is kept under batch_memory / (4 * partitions), and a fetch of it
 * gets no more than that either (librdkafka overshoots the queue by one
 * fetch); librdkafka's bookkeeping of each record comes on top.  Partitions
 * added later get the same share.  kafka_options that set these properties
 * win.
 */
static void
open_consumer(StmKafka *kc, int npartitions)
{
	char		errstr[512];
	char		buf[32];
	int			share_kb;

	if (kc->rk != NULL)
		return;
	share_kb = stm_guc_batch_memory_kb / (4 * Max(npartitions, 1));
	share_kb = Max(64, Min(16384, share_kb));
	if (!kc->user_prefetch)
	{
		snprintf(buf, sizeof(buf), "%d", share_kb);
		set_conf(kc->consumer_conf, "queued.max.messages.kbytes", buf);
		snprintf(buf, sizeof(buf), "%d", share_kb * 1024);
		set_conf(kc->consumer_conf, "fetch.message.max.bytes", buf);
	}
	kc->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc->consumer_conf, errstr, sizeof(errstr));
	if (kc->rk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create Kafka client for source \"%s\"", kc->source),
				 errdetail("%s", errstr)));
	kc->consumer_conf = NULL;	/* rd_kafka_new took it */
}

void
stm_kafka_close(StmKafka *kc)
{
	kafka_destroy_cb(kc);
}

static bool
topic_wanted(StmKafka *kc, const char *topic)
{
	ListCell   *lc;

	if (kc->topic_pattern)
	{
		char	   *anchored = psprintf("^(?:%s)$", kc->topic_pattern);

		return RE_compile_and_execute(cstring_to_text(anchored), (char *) topic,
									  strlen(topic), REG_ADVANCED, C_COLLATION_OID,
									  0, NULL);
	}
	foreach(lc, kc->topics)
		if (strcmp(lfirst(lc), topic) == 0)
			return true;
	return false;
}

static StmKafkaPartition *
find_partition(StmKafka *kc, const char *topic, int32 partition)
{
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);

		if (p->partition == partition && strcmp(p->topic, topic) == 0)
			return p;
	}
	return NULL;
}

static int
partition_cmp(const ListCell *a, const ListCell *b)
{
	StmKafkaPartition *pa = lfirst(a);
	StmKafkaPartition *pb = lfirst(b);
	int			c = strcmp(pa->topic, pb->topic);

	if (c != 0)
		return c;
	return (pa->partition > pb->partition) - (pa->partition < pb->partition);
}

static void
add_partition(StmKafka *kc, const char *topic, int32 partition)
{
	StmKafkaPartition *p;
	ListCell   *lc;

	MemoryContext oldcxt;

	if (find_partition(kc, topic, partition))
		return;
	oldcxt = MemoryContextSwitchTo(kc->cxt);
	p = palloc0(sizeof(StmKafkaPartition));
	p->topic = pstrdup(topic);
	p->partition = partition;
	p->topic_text = CStringGetTextDatum(topic);
	p->limit = -1;
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *q = lfirst(lc);

		if (strcmp(q->topic, topic) == 0)
			p->rkt = q->rkt;
	}
	if (p->rkt == NULL)
		p->rkt = rd_kafka_topic_new(kc->rk, topic, NULL);
	if (p->rkt == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not open Kafka topic \"%s\"", topic),
				 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	kc->partitions = lappend(kc->partitions, p);
	list_sort(kc->partitions, partition_cmp);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * Learn the partitions the source reads now: the assigned ones, or every
 * partition of the subscribed or matching topics (new ones are picked up).
 */
void
stm_kafka_refresh_partitions(StmKafka *kc)
{
	const struct rd_kafka_metadata *md;
	rd_kafka_resp_err_t err;
	ListCell   *lc;

	if (kc->assign != NIL)
	{
		open_consumer(kc, list_length(kc->assign));
		foreach(lc, kc->assign)
		{
			StmKafkaPartition *a = lfirst(lc);

			add_partition(kc, a->topic, a->partition);
		}
		return;
	}

	err = rd_kafka_metadata(kc->meta, 1, NULL, &md, stm_guc_kafka_timeout_ms);
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not read Kafka metadata from \"%s\"", kc->bootstrap),
				 errdetail("%s", rd_kafka_err2str(err))));
	PG_TRY();
	{
		int			wanted = 0;

		for (int t = 0; t < md->topic_cnt; t++)
			if (md->topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR && topic_wanted(kc, md->topics[t].topic))
				wanted += md->topics[t].partition_cnt;
		open_consumer(kc, wanted);
		for (int t = 0; t < md->topic_cnt; t++)
		{
			const struct rd_kafka_metadata_topic *topic = &md->topics[t];

			if (topic->err != RD_KAFKA_RESP_ERR_NO_ERROR || !topic_wanted(kc, topic->topic))
				continue;
			for (int p = 0; p < topic->partition_cnt; p++)
				add_partition(kc, topic->topic, topic->partitions[p].id);
		}
	}
	PG_FINALLY();
	{
		rd_kafka_metadata_destroy(md);
	}
	PG_END_TRY();
}

/*
 * One ListOffsets round for every partition: offset -1 asks for the high
 * watermark, -2 for the log start.  (rd_kafka_query_watermark_offsets, one
 * partition at a time, ignores its timeout in librdkafka 2.0.2 while the
 * brokers are down; this call honours it.)
 */
static void
list_offsets(StmKafka *kc, int64 which)
{
	rd_kafka_topic_partition_list_t *list;
	rd_kafka_resp_err_t err;
	ListCell   *lc;
	int			i = 0;

	if (kc->partitions == NIL)
		return;
	list = rd_kafka_topic_partition_list_new(list_length(kc->partitions));
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);

		rd_kafka_topic_partition_list_add(list, p->topic, p->partition)->offset = which;
	}
	err = rd_kafka_offsets_for_times(kc->meta, list, stm_guc_kafka_timeout_ms);
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);
		rd_kafka_topic_partition_t *tp = &list->elems[i++];
		rd_kafka_resp_err_t perr = err != RD_KAFKA_RESP_ERR_NO_ERROR ? err : tp->err;

		if (perr != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			rd_kafka_topic_partition_list_destroy(list);
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not get the offsets of Kafka topic \"%s\" partition %d",
							p->topic, p->partition),
					 errdetail("%s", rd_kafka_err2str(perr))));
		}
		if (which == RD_KAFKA_OFFSET_END)
			p->high = tp->offset;
		else
			p->low = tp->offset;
	}
	rd_kafka_topic_partition_list_destroy(list);
}

/* Low and high watermarks of every known partition, as the brokers say now. */
void
stm_kafka_query_watermarks(StmKafka *kc)
{
	list_offsets(kc, RD_KAFKA_OFFSET_END);
	list_offsets(kc, RD_KAFKA_OFFSET_BEGINNING);
}

/* starting_offsets for a partition seen in the stream's first batch */
static int64
starting_offset(StmKafka *kc, StmKafkaPartition *p)
{
	List	   *rows;
	int64		off;

	if (strcmp(kc->starting_offsets, "earliest") == 0)
		return p->low;
	if (strcmp(kc->starting_offsets, "latest") == 0)
		return p->high;
	rows = stm_catalog_source_option_list(kc->source,
										  psprintf("SELECT (s.options->>'starting_offsets')::jsonb -> %s ->> %s",
												   quote_literal_cstr(p->topic),
												   quote_literal_cstr(psprintf("%d", p->partition))));
	if (rows == NIL || ((char **) linitial(rows))[0] == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("starting_offsets of source \"%s\" gives no offset for partition %d of topic \"%s\"",
						kc->source, p->partition, p->topic),
				 errhint("Give every partition an offset, -2 for earliest or -1 for latest.")));
	off = pg_strtoint64(((char **) linitial(rows))[0]);
	if (off == -2)
		return p->low;
	if (off == -1)
		return p->high;
	return off;
}

static void
note_data_loss(StmKafka *kc, StmKafkaPartition *p, int64 from, int64 to)
{
	if (kc->fail_on_data_loss)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("records of Kafka topic \"%s\" partition %d are no longer available",
						p->topic, p->partition),
				 errdetail("The stream was to read from offset " INT64_FORMAT
						   ", but the partition now starts at offset " INT64_FORMAT
						   " and ends before offset " INT64_FORMAT
						   " (retention, or the topic was deleted and created again).",
						   from, p->low, p->high),
				 errhint("To skip the lost records and go on, create the source with fail_on_data_loss => false.")));
	appendStringInfo(&kc->data_loss, "%s{\"topic\": ", kc->data_loss.len > 0 ? ", " : "");
	escape_json(&kc->data_loss, p->topic);
	appendStringInfo(&kc->data_loss,
					 ", \"partition\": %d, \"from_offset\": " INT64_FORMAT ", \"resumed_at\": " INT64_FORMAT "}",
					 p->partition, from, to);
}

/*
 * Fix the next batch's bounds [start, end) of every partition from the stored
 * positions and the current high watermarks.  Returns the number of offsets
 * the batch covers; 0 when there is nothing (or not yet enough) to read.
 */
int64
stm_kafka_plan(StmKafka *kc, int32 stream_id, bool initialized,
			   TimestampTz last_trigger)
{
	ListCell   *lc;
	bool		any_stored;
	int64		total = 0;
	Oid			argtype = INT4OID;
	Datum		arg = Int32GetDatum(stream_id);
	int			nest;

	resetStringInfo(&kc->data_loss);
	if (kc->rk)
		rd_kafka_poll(kc->rk, 0);
	rd_kafka_poll(kc->meta, 0);
	stm_kafka_refresh_partitions(kc);

	foreach(lc, kc->partitions)
		((StmKafkaPartition *) lfirst(lc))->stored = false;
	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (SPI_execute_with_args("SELECT topic, partition, next_offset FROM streaming.offsets WHERE stream_id = $1",
							  1, &argtype, &arg, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.offsets");
	/* starting_offsets apply to the stream's first plan only */
	any_stored = initialized || SPI_processed > 0;
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *topic = SPI_getvalue(tup, desc, 1);
		int32		part = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		StmKafkaPartition *p = find_partition(kc, topic, part);

		if (p)
		{
			p->stored = true;
			p->start = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		}
	}
	SPI_finish();
	stm_catalog_unpin_search_path(nest);

	stm_kafka_query_watermarks(kc);
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);

		if (!p->stored)
			p->start = any_stored ? p->low : starting_offset(kc, p);
		if (p->start < p->low || p->start > p->high)
		{
			note_data_loss(kc, p, p->start, p->low);
			p->start = p->low;
		}
		p->end = p->high;
		/* available_now: what was there at the first plan, and no more */
		if (kc->bounded)
		{
			if (!kc->limits_fixed)
				p->limit = p->high;
			else if (p->limit < 0)
				p->limit = p->start;
			p->end = Max(p->start, Min(p->end, p->limit));
		}
		total += p->end - p->start;
	}
	kc->limits_fixed = kc->bounded;

	/* max_offsets_per_trigger: split over partitions by their lag (Spark's rateLimit) */
	if (kc->max_offsets_per_trigger > 0 && total > kc->max_offsets_per_trigger)
	{
		double		limit = (double) kc->max_offsets_per_trigger;
		int64		capped = 0;

		foreach(lc, kc->partitions)
		{
			StmKafkaPartition *p = lfirst(lc);
			double		prorate = limit * ((double) (p->end - p->start) / (double) total);
			double		step = prorate < 1 ? ceil(prorate) : floor(prorate);

			p->end = Min(p->end, p->start + (int64) step);
			capped += p->end - p->start;
		}
		total = capped;
	}

	/* min_offsets_per_trigger: wait for enough records, but not past max_trigger_delay */
	if (kc->min_offsets_per_trigger > 0 && total < kc->min_offsets_per_trigger &&
		!TimestampDifferenceExceeds(last_trigger, GetCurrentTimestamp(),
									(int) Min(kc->max_trigger_delay_ms, INT_MAX)))
	{
		foreach(lc, kc->partitions)
		{
			StmKafkaPartition *p = lfirst(lc);

			p->end = p->start;
		}
		total = 0;
	}
	return total;
}

/* Keep messages fetched past the batch's end for the next batch. */
static void
stash_rest(StmKafkaPartition *p, rd_kafka_message_t **msgs, int from, int n)
{
	int			keep = n - from;

	Assert(p->nheld == p->held_next);
	if (p->held)
		free(p->held);
	p->held = malloc(sizeof(rd_kafka_message_t *) * keep);
	if (p->held == NULL)
		ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
	memcpy(p->held, msgs + from, sizeof(rd_kafka_message_t *) * keep);
	p->nheld = keep;
	p->held_next = 0;
}

/*
 * Make the local queue of a partition deliver from its batch start, so that
 * every partition of the batch fetches in the background from the beginning.
 */
static void
position_partition(StmKafkaPartition *p)
{
	if (p->end <= p->start || (p->started && p->pos == p->start))
		return;
	kafka_release_partition(p);
	if (rd_kafka_consume_start(p->rkt, p->partition, p->start) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not start consuming Kafka topic \"%s\" partition %d",
						p->topic, p->partition),
				 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	p->started = true;
	p->pos = p->start;
}

/*
 * Take up to FETCH_CHUNK messages of the batch from one partition: held ones
 * first, then what its local queue has (waiting at most timeout_ms).  Moves
 * p->next on; returns how many messages were put in msgs.
 */
static int
take_messages(StmKafka *kc, StmKafkaPartition *p, rd_kafka_message_t **msgs,
			  int timeout_ms)
{
	rd_kafka_message_t *got[FETCH_CHUNK];
	int			n = 0;
	ssize_t		ngot;

	while (p->held_next < p->nheld && n < FETCH_CHUNK &&
		   p->held[p->held_next]->offset < p->end)
	{
		msgs[n] = p->held[p->held_next++];
		p->next = msgs[n]->offset + 1;
		n++;
	}
	if (n > 0)
		return n;
	if (p->held_next < p->nheld)
	{
		/* the held messages are all past the end: a gap (compaction, markers) */
		p->next = p->end;
		return 0;
	}

	/*
	 * consume_batch waits until it has all it asked for: when waiting, ask
	 * for one message, which returns as soon as anything arrives.
	 */
	ngot = rd_kafka_consume_batch(p->rkt, p->partition, timeout_ms, got,
								  timeout_ms > 0 ? 1 : Min(FETCH_CHUNK, p->end - p->next));
	if (ngot < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not fetch from Kafka topic \"%s\" partition %d",
						p->topic, p->partition),
				 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	for (int i = 0; i < ngot; i++)
	{
		rd_kafka_message_t *m = got[i];

		if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			p->next = Max(p->next, m->offset);
			rd_kafka_message_destroy(m);
		}
		else if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			rd_kafka_resp_err_t err = m->err;

			strlcpy(kc->error, rd_kafka_message_errstr(m), sizeof(kc->error));
			rd_kafka_message_destroy(m);
			if (err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
				err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE)
			{
				for (int j = i + 1; j < ngot; j++)
					rd_kafka_message_destroy(got[j]);
				for (int j = 0; j < n; j++)
					rd_kafka_message_destroy(msgs[j]);
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("offset " INT64_FORMAT " of Kafka topic \"%s\" partition %d is out of range",
								p->next, p->topic, p->partition),
						 errdetail("%s", kc->error)));
			}
		}
		else if (m->offset < p->next)
			rd_kafka_message_destroy(m);	/* already handed out */
		else if (m->offset >= p->end)
		{
			stash_rest(p, got, i, ngot);
			break;
		}
		else
		{
			msgs[n++] = m;
			p->next = m->offset + 1;
		}
	}
	return n;
}

/* Give a chunk of messages to fn; they are destroyed after, also on error. */
static void
hand_over(StmKafkaChunkFn fn, void *arg, StmKafkaPartition *p,
		  rd_kafka_message_t **msgs, int n)
{
	PG_TRY();
	{
		fn(arg, p, msgs, n);
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			rd_kafka_message_destroy(msgs[i]);
	}
	PG_END_TRY();
}

/*
 * Read [start, end) of every partition of the batch, handing chunks of
 * messages to fn.  Partitions are served round-robin from what their local
 * queues hold, so parsing one partition overlaps fetching the others.
 * Messages are destroyed after fn returns (also when it raises an error).
 */
void
stm_kafka_fetch(StmKafka *kc, StmKafkaChunkFn fn, void *arg)
{
	rd_kafka_message_t *msgs[FETCH_CHUNK];
	int			waited_ms = 0;
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);

		position_partition(p);
		p->next = p->start;
		/* until the batch ends, the local queue is not where the catalog says */
		if (p->end > p->start)
			p->pos = -1;
	}

	for (;;)
	{
		bool		pending = false;
		bool		progress = false;
		StmKafkaPartition *waiting_on = NULL;

		CHECK_FOR_INTERRUPTS();
		foreach(lc, kc->partitions)
		{
			StmKafkaPartition *p = lfirst(lc);
			int			n;

			if (p->next >= p->end)
				continue;
			n = take_messages(kc, p, msgs, 0);
			if (n == 0)
			{
				if (p->next < p->end)
				{
					pending = true;
					waiting_on = waiting_on ? waiting_on : p;
				}
				continue;
			}
			progress = true;
			hand_over(fn, arg, p, msgs, n);
			if (p->next < p->end)
				pending = true;
		}
		if (!pending)
			break;
		if (progress)
		{
			waited_ms = 0;
			continue;
		}

		/* nothing anywhere: block briefly on one partition, serve callbacks */
		rd_kafka_poll(kc->rk, 0);
		{
			int			n = take_messages(kc, waiting_on, msgs, FETCH_POLL_MS);

			if (n > 0)
			{
				waited_ms = 0;
				hand_over(fn, arg, waiting_on, msgs, n);
				continue;
			}
		}
		waited_ms += FETCH_POLL_MS;
		if (waited_ms >= stm_guc_kafka_timeout_ms)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("timed out fetching from Kafka topic \"%s\" partition %d at offset " INT64_FORMAT,
							waiting_on->topic, waiting_on->partition, waiting_on->next),
					 kc->error[0] ? errdetail("%s", kc->error) : 0));
	}

	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);

		if (p->end > p->start)
			p->pos = p->end;
	}
}

/* Write every partition's new position (end of this batch). */
void
stm_kafka_save_positions(StmKafka *kc, int32 stream_id)
{
	Oid			types[5] = {INT4OID, TEXTOID, INT4OID, INT8OID, INT8OID};
	ListCell   *lc;
	SPIPlanPtr	plan;
	int			nest = stm_catalog_pin_search_path();

	SPI_connect();
	plan = SPI_prepare("INSERT INTO streaming.offsets AS o (stream_id, topic, partition, next_offset, high_watermark) "
					   "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (stream_id, topic, partition) "
					   "DO UPDATE SET next_offset = EXCLUDED.next_offset, high_watermark = EXCLUDED.high_watermark",
					   5, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare offsets upsert");
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);
		Datum		values[5];

		values[0] = Int32GetDatum(stream_id);
		values[1] = CStringGetTextDatum(p->topic);
		values[2] = Int32GetDatum(p->partition);
		values[3] = Int64GetDatum(p->end);
		values[4] = Int64GetDatum(p->high);
		if (SPI_execute_plan(plan, values, NULL, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not write streaming.offsets");
	}
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
}

/* {"topic":{"0":offset,...},...} of the batch's start or end (Spark's shape) */
char *
stm_kafka_positions_json(StmKafka *kc, bool end)
{
	StringInfoData buf;
	ListCell   *lc;
	const char *topic = NULL;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	foreach(lc, kc->partitions)
	{
		StmKafkaPartition *p = lfirst(lc);

		if (topic == NULL || strcmp(topic, p->topic) != 0)
		{
			if (topic != NULL)
				appendStringInfoString(&buf, "}, ");
			escape_json(&buf, p->topic);
			appendStringInfoString(&buf, ": {");
			topic = p->topic;
		}
		else
			appendStringInfoString(&buf, ", ");
		appendStringInfo(&buf, "\"%d\": " INT64_FORMAT, p->partition, end ? p->end : p->start);
	}
	if (topic != NULL)
		appendStringInfoChar(&buf, '}');
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

static Datum
bytes_datum(const void *data, size_t len)
{
	bytea	   *b = palloc(len + VARHDRSZ);

	SET_VARSIZE(b, len + VARHDRSZ);
	memcpy(VARDATA(b), data, len);
	return PointerGetDatum(b);
}

/* kafka_headers: [{"key": k, "value": v}, ...]; values that are not text go hex-encoded */
static Datum
headers_datum(rd_kafka_message_t *msg, bool *isnull)
{
	rd_kafka_headers_t *hdrs;
	StringInfoData buf;
	const char *name;
	const void *val;
	size_t		size;

	if (rd_kafka_message_headers(msg, &hdrs) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		*isnull = true;
		return (Datum) 0;
	}
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; i++)
	{
		appendStringInfoString(&buf, i > 0 ? ", {\"key\": " : "{\"key\": ");
		escape_json(&buf, name);
		appendStringInfoString(&buf, ", \"value\": ");
		if (val == NULL)
			appendStringInfoString(&buf, "null");
		else if (pg_verifymbstr(val, size, true) && memchr(val, 0, size) == NULL)
			escape_json(&buf, pnstrdup(val, size));
		else
		{
			char	   *hex = palloc(size * 2 + 3);

			hex[0] = '\\';
			hex[1] = 'x';
			hex[hex_encode(val, size, hex + 2) + 2] = '\0';
			escape_json(&buf, hex);
		}
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, ']');
	*isnull = false;
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

/*
 * Metadata columns: kafka_topic, kafka_partition, kafka_offset,
 * kafka_timestamp, kafka_key, and kafka_headers when include_headers.
 */
void
stm_kafka_fill_metadata(StmKafka *kc, StmKafkaPartition *part,
						rd_kafka_message_t *msg, Datum *values, bool *nulls)
{
	rd_kafka_timestamp_type_t tstype;
	int64_t		ts = rd_kafka_message_timestamp(msg, &tstype);

	values[0] = part->topic_text;
	nulls[0] = false;
	values[1] = Int32GetDatum(msg->partition);
	nulls[1] = false;
	values[2] = Int64GetDatum(msg->offset);
	nulls[2] = false;
	nulls[3] = (tstype == RD_KAFKA_TIMESTAMP_NOT_AVAILABLE || ts < 0);
	values[3] = nulls[3] ? (Datum) 0 :
		TimestampTzGetDatum(ts * 1000 + STM_UNIX_EPOCH);
	nulls[4] = (msg->key == NULL);
	values[4] = nulls[4] ? (Datum) 0 : bytes_datum(msg->key, msg->key_len);
	if (kc->include_headers)
		values[5] = headers_datum(msg, &nulls[5]);
}
