/*
 * source_kafka.c: the Kafka source.
 *
 * Positions are ours: streaming.positions holds, per stream and partition
 * (positions.c: the part is the topic and partition), the next offset to
 * read and the high watermark the last plan saw, and is written in the
 * batch's transaction.  The consumer never uses consumer-group offsets:
 * each partition is consumed with librdkafka's explicit per-partition
 * consumption (rd_kafka_consume_start at a given offset), and restarted at
 * the stored offset whenever the local queue is not exactly there (first
 * batch, or after a rolled-back batch).
 *
 * A batch's bounds are fixed before it reads anything (as Spark does): the
 * end of each partition is its high watermark when the batch is planned, cut
 * by max_offsets_per_trigger.  The end of a partition is never guessed from
 * an empty fetch.  Messages fetched past a batch's end stay held for the next
 * batch.  With the continuous trigger, a plan whose partitions are all
 * consumed where their stored positions say takes the high watermarks the
 * fetch responses carried (no ListOffsets round trip) and ends each
 * partition at what its consumer has delivered, so the batch never waits
 * for a fetch; the metadata is asked at most every METADATA_MAX_AGE_MS,
 * and a plan that asked it still ends there unless the answer changed
 * something (a new partition, a leader gone, a problem: then ListOffsets)
 * (plan_from_consumer).  Positions are written for the partitions that
 * moved only.
 *
 * A source that cannot be read whole is never silent: a subscribed topic
 * that is missing or refused, a pattern that matches nothing, a partition
 * whose leader cannot be reached are named in the plan's problem (the
 * stream's source_error).  Offsets are asked of each leader on its own, so a
 * leader that is down holds back its partitions only (their bounds stay
 * where they are) and the others go on; a leader that failed is given one
 * short try per plan until it answers again.  Every call that may block is
 * made in slices of STM_KAFKA_SLICE_MS with interrupt checks between them
 * (stm_check_for_interrupts: a worker told to stop gives up its batch).
 *
 * Fetching: every partition with a position is consumed all the time, from
 * its stored offset on, into one local queue that all partitions share
 * (rd_kafka_consume_start_queue), so librdkafka keeps fetching ahead while
 * the batch parses and between batches, and its prefetch bound
 * (queued.max.messages.kbytes) is one budget for the whole source: a
 * partition with nothing to read takes nothing of it (open_consumer).  The
 * batch pops chunks from that queue; a message of a partition that is done
 * with this batch (past its end, or not in it) is kept in that partition's
 * held list for the next batch, and while the held lists exceed their share
 * of the budget those partitions are paused (librdkafka then drops what it
 * queued for them and fetches it again on resume).  The queue writes a byte
 * to a pipe whenever it becomes non-empty (rd_kafka_queue_io_event_enable):
 * a batch waiting for records, and the idle worker (wait_fd, ready), sleep
 * on that pipe with their latch, never in a poll loop.
 *
 * Invariants: no call into PostgreSQL from librdkafka's threads (the error
 * callback only copies a string, and runs in rd_kafka_poll on our thread;
 * the queue's wake-up is librdkafka's own write to our pipe); every
 * rd_kafka_message_t is destroyed by the batch that fetched it or kept in a
 * partition's held list; the client is destroyed when the memory context
 * holding the KafkaSource is deleted, also on error.
 */
#include "postgres.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <unistd.h>

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "regex/regex.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "api.h"
#include "avro.h"
#include "catalog.h"
#include "guc.h"
#include "kafka_conf.h"
#include "kafka_probe.h"
#include "options.h"
#include "positions.h"
#include "schema_registry.h"
#include "scaleout.h"
#include "source.h"
#include "source_kafka.h"
#include "interrupts.h"

PG_FUNCTION_INFO_V1(streaming_create_kafka_source);

/*
 * Messages taken off librdkafka's queue per call: only the call's overhead
 * depends on it (how many records the batch gets at once is its chunk size,
 * StmPlanContext.chunk_size).
 */
#define POP_MAX 1000
#define STALL_MS 20				/* a batch waiting this long wakes librdkafka's fetchers */
#define STM_KAFKA_LOW_LATENCY_WAIT_MS 5	/* trigger continuous: a fetch with nothing held this long at most */
#define METADATA_MAX_AGE_MS 1000	/* trigger continuous: new partitions, topics gone, seen this late at most */

/* One partition the source reads. */
typedef struct KafkaPartition
{
	char	   *topic;
	Datum		topic_text;		/* the topic as a text Datum, for kafka_topic */
	int32		partition;
	rd_kafka_topic_t *rkt;
	int32		leader;			/* broker id, as the last metadata said (-1: none) */
	bool		held_back;		/* this plan could not get its offsets: it is left out */
	bool		stored;			/* has a row in streaming.positions */
	int64		stored_pos;		/* while stored: its row's position and high watermark */
	int64		stored_high;
	int64		ready;			/* plan_from_consumer: delivered up to here (-1: not used) */
	int64		start;			/* this batch reads [start, end) */
	int64		end;
	int64		low;			/* log start offset, as last queried */
	int64		high;			/* high watermark, as last queried */
	int64		limit;			/* available_now: never read past this; -1 none,
								 * -2 the high watermark when it is first known */
	bool		started;		/* consumption started at pos */
	bool		paused;			/* paused while its held list is too large */
	bool		consumed;		/* a message popped since consumption started */
	int64		popped;			/* the offset after the last message popped (-1: none) */
	int64		next;			/* while fetching: next offset to hand out */
	int64		pos;			/* next offset the local queue delivers */
	int64		eof;			/* end-of-partition seen at this offset (-1: none) */
	rd_kafka_message_t **held;	/* popped, not handed out yet (malloc'd) */
	int			nheld;
	int			held_next;
	int			held_cap;
	int64		held_bytes;
} KafkaPartition;

/* The partitions of one topic handle by number (the handle's opaque). */
typedef struct KafkaTopicMap
{
	KafkaPartition **by_id;
	int			nids;
} KafkaTopicMap;

/* An open Kafka source. */
typedef struct KafkaSource
{
	StmSource	base;			/* first: what the batch reads */
	rd_kafka_t *rk;				/* fetches */
	rd_kafka_t *meta;			/* metadata and offset queries */
	rd_kafka_conf_t *consumer_conf;	/* rk's, until rk is made (open_consumer) */
	bool		privileged;		/* superusers own source and stream: no caps */
	int64		user_queue_kb;	/* prefetch sizes kafka_options asked for (0: none) */
	int64		user_fetch_bytes;
	int64		user_fetch_max_bytes;
	bool		user_fetch_wait;	/* kafka_options set fetch.wait.max.ms or fetch.min.bytes */
	int64		user_receive_max_bytes;
	rd_kafka_queue_t *queue;	/* every partition's messages (open_consumer) */
	int			wake_fds[2];	/* the queue writes to [1] when it becomes non-empty */
	WaitEventSet *wait_set;		/* MyLatch, postmaster death, wake_fds[0] */
	int64		held_cap_bytes;	/* held messages beyond this: their partitions pause */
	int64		queue_bytes;	/* librdkafka's bound on the shared queue */
	int64		held_bytes;		/* held by all partitions */
	MemoryContext cxt;			/* where partitions are kept */
	char	   *source;			/* the source's name */
	char	   *bootstrap;
	List	   *topics;			/* subscribe: names */
	char	   *topic_pattern;	/* subscribePattern */
	StmPartitionShare *share;	/* subscribe: this server's partitions only (SPEC 8), or NULL */
	List	   *assign;			/* assign: (topic, partition) as KafkaPartition */
	char	   *starting_offsets;
	int64		max_offsets_per_trigger;	/* 0: none */
	int64		min_offsets_per_trigger;	/* 0: none */
	int64		max_trigger_delay_ms;
	bool		fail_on_data_loss;
	bool		include_headers;
	List	   *partitions;		/* KafkaPartition, all known */
	bool		limits_fixed;
	char		error[STM_KAFKA_ERROR_LEN];	/* last error reported by librdkafka */
	StringInfoData data_loss;	/* JSON array of losses found by the plan */
	StringInfoData problem;		/* what the plan could not read, and why */
	List	   *suspect_leaders;	/* broker ids whose offsets failed last time */
	TimestampTz metadata_at;	/* when refresh_partitions last ran */
	bool		clean_plan;		/* the last plan saw no problem and no data loss */
	bool		arrived;		/* a record is held that no plan has taken (ready) */
	bool		reads_shares;	/* given its bounds (set_share_bounds), never plans */
	int			chunk_size;		/* the batch's (the plan's, a helper's share's) */
	StmRecord  *records;		/* while fetching: the chunk, as the batch sees it */
	/* since the last fetch ended, for its streaming.log_batches line */
	int			restarts;		/* partitions started again (position_partition) */
	int			pauses;			/* partitions paused (flow_control) */
	int			wakes;			/* fetchers woken by a seek (wake_fetcher) */
} KafkaSource;

#define KAFKA_META_COLUMNS 5	/* without kafka_headers */

static void position_partition(KafkaSource *kc, KafkaPartition *p);
static void resume_partitions(KafkaSource *kc);
static int	pop_messages(KafkaSource *kc, bool fetching);
static void flow_control(KafkaSource *kc);
static void drain_wakeups(KafkaSource *kc);
static bool has_held(KafkaPartition *p);

/* Destroy a partition's held messages. */
static void
drop_held(KafkaSource *kc, KafkaPartition *p)
{
	for (int i = p->held_next; i < p->nheld; i++)
		rd_kafka_message_destroy(p->held[i]);
	if (p->held)
		free(p->held);
	p->held = NULL;
	p->nheld = p->held_next = p->held_cap = 0;
	kc->held_bytes -= p->held_bytes;
	p->held_bytes = 0;
}

/* Stop consuming a partition (librdkafka drops what it queued for it). */
static void
kafka_release_partition(KafkaSource *kc, KafkaPartition *p)
{
	drop_held(kc, p);
	if (p->started)
		rd_kafka_consume_stop(p->rkt, p->partition);
	p->started = false;
	p->paused = false;
	p->consumed = false;
	p->popped = -1;
	p->eof = -1;
}

/* Memory-context callback: the client goes away with the StmKafka. */
static void
kafka_destroy_cb(void *arg)
{
	KafkaSource *kc = arg;
	ListCell   *lc;

	if (kc->consumer_conf)
		rd_kafka_conf_destroy(kc->consumer_conf);
	kc->consumer_conf = NULL;
	if (kc->meta)
		rd_kafka_destroy(kc->meta);
	kc->meta = NULL;
	if (kc->wait_set)
		FreeWaitEventSet(kc->wait_set);
	kc->wait_set = NULL;
	if (kc->rk == NULL)
		return;
	foreach(lc, kc->partitions)
		kafka_release_partition(kc, lfirst(lc));
	if (kc->queue)
	{
		rd_kafka_queue_io_event_enable(kc->queue, -1, NULL, 0);
		rd_kafka_queue_destroy(kc->queue);
	}
	kc->queue = NULL;
	/* topic handles are shared between partitions of a topic */
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);
		ListCell   *lc2;
		bool		first = true;

		foreach(lc2, kc->partitions)
		{
			KafkaPartition *q = lfirst(lc2);

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
	for (int i = 0; i < 2; i++)
		if (kc->wake_fds[i] >= 0)
			close(kc->wake_fds[i]);
	kc->wake_fds[0] = kc->wake_fds[1] = -1;
}

/*
 * open: the source's clients, in the current memory context (destroyed with
 * it).  Every stored kafka_options entry is checked again first (SPEC 7).
 */
static StmSource *
kafka_open(StmSource *base, bool for_batches)
{
	KafkaSource *kc = palloc0(sizeof(KafkaSource));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	Jsonb	   *o = base->options;
	rd_kafka_conf_t *conf;
	rd_kafka_conf_t *meta_conf;
	char		errstr[512];
	List	   *user_options;
	ListCell   *lc;

	kc->base = *base;
	kc->wake_fds[0] = kc->wake_fds[1] = -1;
	kc->cxt = CurrentMemoryContext;
	kc->source = base->name;
	initStringInfo(&kc->data_loss);
	initStringInfo(&kc->problem);
	kc->bootstrap = stm_option_text(o, "bootstrap_servers");
	kc->topic_pattern = stm_option_text(o, "topic_pattern");
	kc->starting_offsets = stm_option_text(o, "starting_offsets");
	kc->max_offsets_per_trigger = stm_option_int64(o, "max_offsets_per_trigger", 0);
	kc->min_offsets_per_trigger = stm_option_int64(o, "min_offsets_per_trigger", 0);
	kc->max_trigger_delay_ms = stm_option_interval_ms(o, "max_trigger_delay", 15 * 60 * 1000);
	kc->fail_on_data_loss = stm_option_bool(o, "fail_on_data_loss", true);
	kc->include_headers = stm_option_bool(o, "include_headers", false);
	kc->topics = stm_option_elements(o, "topics");
	if (stm_option_given(o, "share"))
		kc->share = stm_share_parse(stm_option_text(o, "share"));
	foreach(lc, stm_option_pairs(o, "partitions"))
	{
		StmOptionPair *pair = lfirst(lc);
		ListCell   *lc2;

		foreach(lc2, stm_option_elements(stm_option_jsonb(o, "partitions"), pair->key))
		{
			KafkaPartition *p = palloc0(sizeof(KafkaPartition));

			p->topic = pair->key;
			p->partition = pg_strtoint32(lfirst(lc2));
			kc->assign = lappend(kc->assign, p);
		}
	}

	/* every stored property is checked before anything is built from them */
	user_options = stm_option_pairs(o, "kafka_options");
	stm_kafka_recheck_options("source", kc->source, user_options,
							  base->owner, base->stream_owner, STM_KAFKA_CONSUMER);
	kc->privileged = superuser_arg(base->owner) &&
		(!OidIsValid(base->stream_owner) || superuser_arg(base->stream_owner));

	conf = stm_kafka_conf_new(kc->bootstrap, kc->error);
	stm_kafka_conf_set(conf, "enable.partition.eof", "true");
	stm_kafka_conf_set(conf, "auto.offset.reset", "error");
	stm_kafka_conf_set(conf, "enable.auto.commit", "false");
	stm_kafka_conf_set(conf, "enable.auto.offset.store", "false");
	/* as Spark: end offsets are high watermarks, read them all */
	stm_kafka_conf_set(conf, "isolation.level", "read_uncommitted");
	/* prefetch by bytes, not by message count (open_consumer) */
	stm_kafka_conf_set(conf, "queued.min.messages", "10000000");
	stm_kafka_conf_set(conf, "fetch.wait.max.ms", "100");
	foreach(lc, user_options)
	{
		StmOptionPair *pair = lfirst(lc);

		/* the prefetch sizes are capped by batch_memory in open_consumer */
		if (strcmp(pair->key, "queued.max.messages.kbytes") == 0)
			kc->user_queue_kb = pg_strtoint64(pair->value);
		else if (strcmp(pair->key, "fetch.message.max.bytes") == 0)
			kc->user_fetch_bytes = pg_strtoint64(pair->value);
		else if (strcmp(pair->key, "fetch.max.bytes") == 0)
			kc->user_fetch_max_bytes = pg_strtoint64(pair->value);
		else if (strcmp(pair->key, "receive.message.max.bytes") == 0)
			kc->user_receive_max_bytes = pg_strtoint64(pair->value);
		else
		{
			if (strcmp(pair->key, "fetch.wait.max.ms") == 0 || strcmp(pair->key, "fetch.min.bytes") == 0)
				kc->user_fetch_wait = true;
			stm_kafka_conf_set(conf, pair->key, pair->value);
		}
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
				 errmsg("could not create Kafka client for source \"%s\"", kc->source),
				 errdetail("%s", errstr)));
	return &kc->base;
}

/*
 * The fetching client, made by the first plan.  Its prefetch gets half of
 * streaming.batch_memory (the batch's groups have the other half, guc.h),
 * one budget for all the partitions, since they share one local queue:
 *
 *   queued.max.messages.kbytes  batch_memory / 4: librdkafka's own bound on
 *                               the shared queue, a backstop: the batch pops
 *                               the queue as soon as anything is there
 *   fetch.max.bytes             batch_memory / 8: one fetch response, by
 *                               which the queue can overshoot
 *   held lists                  batch_memory / 8: what was popped and not
 *                               handed to the batch yet; past it, partitions
 *                               are paused (flow_control)
 *
 * The held lists are where the next batch's records wait while this one
 * runs (a batch cut by max_offsets_per_trigger finds them there); giving
 * them batch_memory / 4 and the queue / 8 was measured (issue 21): no
 * faster, capped or not, and 10-15 MB more RSS.
 *
 * so a partition with nothing to read takes no share, and one that is far
 * behind can use it all.  librdkafka 2.0.2 must not reach its own bound
 * in a batch: its broker thread then stops fetching until something wakes
 * it, up to 1 s later; a batch that waits STALL_MS for records wakes it
 * (kafka_fetch).
 * fetch.message.max.bytes (a partition's part of one response) is
 * librdkafka's default, 1MB, at most fetch.max.bytes.  librdkafka's
 * bookkeeping of each record comes on top.  kafka_options that set these
 * properties win when superusers own the source and the stream; anyone
 * else's are capped by the same values (SPEC 7: the limits are the
 * administrator's).
 */
static void
open_consumer(KafkaSource *kc, int npartitions)
{
	char		errstr[512];
	int64		memory = (int64) stm_guc_batch_memory_kb * 1024;
	int64		queue_kb;
	int64		fetch_bytes;
	int64		fetch_max_bytes;
	int64		receive_max_bytes;

	if (kc->rk != NULL)
		return;
	queue_kb = Max(64, memory / 4 / 1024);
	/* librdkafka wants a fetch to hold at least one message (message.max.bytes) */
	fetch_max_bytes = Max(memory / 8, 1000000);
	fetch_bytes = Min((int64) 1024 * 1024, fetch_max_bytes);
	/* a limit on one response, not an allocation: librdkafka's default */
	receive_max_bytes = Max((int64) 100000000, fetch_max_bytes + 512);
	if (kc->privileged)
	{
		queue_kb = kc->user_queue_kb > 0 ? kc->user_queue_kb : queue_kb;
		fetch_bytes = kc->user_fetch_bytes > 0 ? kc->user_fetch_bytes : fetch_bytes;
		fetch_max_bytes = kc->user_fetch_max_bytes > 0 ? kc->user_fetch_max_bytes : fetch_max_bytes;
		receive_max_bytes = kc->user_receive_max_bytes > 0 ? kc->user_receive_max_bytes :
			Max(receive_max_bytes, fetch_max_bytes + 512);
	}
	else
	{
		/* smaller values are the user's to choose, larger ones are capped */
		if (kc->user_queue_kb > 0)
			queue_kb = Min(queue_kb, kc->user_queue_kb);
		if (kc->user_fetch_bytes > 0)
			fetch_bytes = Min(fetch_bytes, kc->user_fetch_bytes);
		if (kc->user_fetch_max_bytes > 0)
			fetch_max_bytes = Max(Min(fetch_max_bytes, kc->user_fetch_max_bytes), fetch_bytes);
		if (kc->user_receive_max_bytes > 0)
			receive_max_bytes = Max(Min(receive_max_bytes, kc->user_receive_max_bytes),
									fetch_max_bytes + 512);
	}
	/*
	 * trigger continuous: a broker answers a fetch as soon as it has one
	 * record (fetch.min.bytes 1), and one with nothing holds it at most
	 * STM_KAFKA_LOW_LATENCY_WAIT_MS, the price of the next fetch when idle;
	 * the user's kafka_options win
	 */
	if (kc->base.low_latency && !kc->user_fetch_wait)
	{
		stm_kafka_conf_set(kc->consumer_conf, "fetch.min.bytes", "1");
		stm_kafka_conf_set(kc->consumer_conf, "fetch.wait.max.ms",
						   CppAsString2(STM_KAFKA_LOW_LATENCY_WAIT_MS));
	}
	kc->held_cap_bytes = Max(memory / 8, 64 * 1024);
	kc->queue_bytes = queue_kb * 1024;
	stm_kafka_conf_set(kc->consumer_conf, "queued.max.messages.kbytes", psprintf(INT64_FORMAT, queue_kb));
	stm_kafka_conf_set(kc->consumer_conf, "fetch.message.max.bytes", psprintf(INT64_FORMAT, fetch_bytes));
	stm_kafka_conf_set(kc->consumer_conf, "fetch.max.bytes", psprintf(INT64_FORMAT, fetch_max_bytes));
	stm_kafka_conf_set(kc->consumer_conf, "receive.message.max.bytes", psprintf(INT64_FORMAT, receive_max_bytes));
	/* only these four values: the configuration also holds credentials */
	ereport(DEBUG1,
			(errmsg_internal("Kafka client of source \"%s\" for %d partitions: queued.max.messages.kbytes="
							 INT64_FORMAT ", fetch.message.max.bytes=" INT64_FORMAT
							 ", fetch.max.bytes=" INT64_FORMAT ", receive.message.max.bytes=" INT64_FORMAT,
							 kc->source, npartitions, queue_kb, fetch_bytes, fetch_max_bytes,
							 receive_max_bytes)));
	kc->rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc->consumer_conf, errstr, sizeof(errstr));
	if (kc->rk == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not create Kafka client for source \"%s\"", kc->source),
				 errdetail("%s", errstr)));
	kc->consumer_conf = NULL;	/* rd_kafka_new took it */

	/*
	 * The shared queue, and its wake-up: librdkafka writes a byte to the
	 * pipe when the queue becomes non-empty (once until it is read from
	 * again), which the batch and the idle worker wait for with their latch.
	 */
	kc->queue = rd_kafka_queue_new(kc->rk);
	if (pipe(kc->wake_fds) != 0 ||
		fcntl(kc->wake_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(kc->wake_fds[1], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(kc->wake_fds[0], F_SETFD, FD_CLOEXEC) != 0 ||
		fcntl(kc->wake_fds[1], F_SETFD, FD_CLOEXEC) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create a pipe for the Kafka client of source \"%s\": %m",
						kc->source)));
	rd_kafka_queue_io_event_enable(kc->queue, kc->wake_fds[1], "1", 1);
	kc->wait_set = CreateWaitEventSet(kc->cxt, 3);
	AddWaitEventToSet(kc->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(kc->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(kc->wait_set, WL_SOCKET_READABLE, kc->wake_fds[0], NULL, NULL);
}

static void
kafka_close(StmSource *src)
{
	kafka_destroy_cb(src);
}

/* Is topic one of topics, or matched by pattern (subscribePattern)? */
static bool
topic_matches(List *topics, const char *pattern, const char *topic)
{
	ListCell   *lc;

	if (pattern)
	{
		char	   *anchored = psprintf("^(?:%s)$", pattern);

		return RE_compile_and_execute(cstring_to_text(anchored), (char *) topic,
									  strlen(topic), REG_ADVANCED, C_COLLATION_OID,
									  0, NULL);
	}
	foreach(lc, topics)
		if (strcmp(lfirst(lc), topic) == 0)
			return true;
	return false;
}

static bool
topic_wanted(KafkaSource *kc, const char *topic)
{
	return topic_matches(kc->topics, kc->topic_pattern, topic);
}

/*
 * Would a source with these options read the partition (its topics or
 * pattern and its share, or its assigned partitions)?  import_share asks
 * before it gives a stream a partition's position (scaleout.c).
 */
bool
stm_kafka_source_reads(Jsonb *options, const char *topic, int32 partition)
{
	ListCell   *lc;

	if (stm_option_given(options, "partitions"))
	{
		foreach(lc, stm_option_elements(stm_option_jsonb(options, "partitions"), topic))
			if (pg_strtoint32(lfirst(lc)) == partition)
				return true;
		return false;
	}
	if (stm_option_given(options, "share") &&
		!stm_share_contains(stm_share_parse(stm_option_text(options, "share")), partition))
		return false;
	return topic_matches(stm_option_elements(options, "topics"),
						 stm_option_text(options, "topic_pattern"), topic);
}

static KafkaPartition *
find_partition(KafkaSource *kc, const char *topic, int32 partition)
{
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->partition == partition && strcmp(p->topic, topic) == 0)
			return p;
	}
	return NULL;
}

static int
partition_cmp(const ListCell *a, const ListCell *b)
{
	KafkaPartition *pa = lfirst(a);
	KafkaPartition *pb = lfirst(b);
	int			c = strcmp(pa->topic, pb->topic);

	if (c != 0)
		return c;
	return (pa->partition > pb->partition) - (pa->partition < pb->partition);
}

static void
add_partition(KafkaSource *kc, const char *topic, int32 partition)
{
	KafkaPartition *p;
	ListCell   *lc;

	MemoryContext oldcxt;

	if (find_partition(kc, topic, partition))
		return;
	oldcxt = MemoryContextSwitchTo(kc->cxt);
	p = palloc0(sizeof(KafkaPartition));
	p->topic = pstrdup(topic);
	p->partition = partition;
	p->topic_text = CStringGetTextDatum(topic);
	p->limit = -1;
	p->eof = -1;
	p->popped = -1;
	p->ready = -1;
	foreach(lc, kc->partitions)
	{
		KafkaPartition *q = lfirst(lc);

		if (strcmp(q->topic, topic) == 0)
			p->rkt = q->rkt;
	}
	if (p->rkt == NULL)
	{
		/* the handle's opaque finds a message's partition (partition_of) */
		rd_kafka_topic_conf_t *tconf = rd_kafka_topic_conf_new();

		rd_kafka_topic_conf_set_opaque(tconf, palloc0(sizeof(KafkaTopicMap)));
		p->rkt = rd_kafka_topic_new(kc->rk, topic, tconf);
		if (p->rkt == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not open Kafka topic \"%s\"", topic),
					 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	}
	{
		KafkaTopicMap *map = rd_kafka_topic_opaque(p->rkt);

		if (partition >= map->nids)
		{
			int			n = Max(partition + 1, map->nids * 2);

			KafkaPartition **by_id = palloc0(sizeof(KafkaPartition *) * n);

			if (map->nids > 0)
				memcpy(by_id, map->by_id, sizeof(KafkaPartition *) * map->nids);
			map->by_id = by_id;
			map->nids = n;
		}
		map->by_id[partition] = p;
	}
	kc->partitions = lappend(kc->partitions, p);
	list_sort(kc->partitions, partition_cmp);
	MemoryContextSwitchTo(oldcxt);
}

/* One more reason why the plan cannot read everything. */
static void
add_problem(KafkaSource *kc, const char *fmt,...) pg_attribute_printf(2, 3);

static void
add_problem(KafkaSource *kc, const char *fmt,...)
{
	va_list		args;
	char		buf[1024];

	va_start(args, fmt);
	vsnprintf(buf, sizeof(buf), fmt, args);
	va_end(args);
	appendStringInfo(&kc->problem, "%s%s", kc->problem.len > 0 ? "; " : "", buf);
}

/*
 * The cluster's metadata (every topic), asked in slices until kafka_timeout;
 * an error when no broker answers.
 */
static const struct rd_kafka_metadata *
read_metadata(KafkaSource *kc)
{
	const struct rd_kafka_metadata *md = NULL;
	TimestampTz deadline = stm_kafka_deadline(stm_guc_kafka_timeout_ms);
	rd_kafka_resp_err_t err;

	for (;;)
	{
		err = rd_kafka_metadata(kc->meta, 1, NULL, &md, stm_kafka_slice(deadline));
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR || stm_kafka_slice(deadline) == 0)
			break;
		stm_check_for_interrupts();
		/* a refused connection fails at once: do not spin */
		if (err != RD_KAFKA_RESP_ERR__TIMED_OUT)
			pg_usleep(Min(50, stm_kafka_slice(deadline)) * 1000L);
	}
	if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not read Kafka metadata from \"%s\"", kc->bootstrap),
				 errdetail("%s", rd_kafka_err2str(err))));
	return md;
}

static const struct rd_kafka_metadata_topic *
metadata_topic(const struct rd_kafka_metadata *md, const char *name)
{
	for (int t = 0; t < md->topic_cnt; t++)
		if (strcmp(md->topics[t].topic, name) == 0)
			return &md->topics[t];
	return NULL;
}

/*
 * Learn the partitions the source reads now, and their leaders: the
 * assigned ones, or every partition of the subscribed or matching topics
 * (new ones are picked up).  What is missing or refused goes into the
 * plan's problem.
 */
static void
refresh_partitions(KafkaSource *kc)
{
	const struct rd_kafka_metadata *md = read_metadata(kc);
	ListCell   *lc;

	PG_TRY();
	{
		if (kc->assign != NIL)
		{
			open_consumer(kc, list_length(kc->assign));
			foreach(lc, kc->assign)
			{
				KafkaPartition *a = lfirst(lc);

				add_partition(kc, a->topic, a->partition);
			}
		}
		else
		{
			int			wanted = 0;
			bool		matched = false;

			for (int t = 0; t < md->topic_cnt; t++)
				if (topic_wanted(kc, md->topics[t].topic))
				{
					matched = true;
					if (md->topics[t].err == RD_KAFKA_RESP_ERR_NO_ERROR)
						for (int p = 0; p < md->topics[t].partition_cnt; p++)
							if (kc->share == NULL ||
								stm_share_contains(kc->share, md->topics[t].partitions[p].id))
								wanted++;
				}
			open_consumer(kc, wanted);
			for (int t = 0; t < md->topic_cnt; t++)
			{
				const struct rd_kafka_metadata_topic *topic = &md->topics[t];

				if (!topic_wanted(kc, topic->topic))
					continue;
				if (topic->err != RD_KAFKA_RESP_ERR_NO_ERROR)
				{
					add_problem(kc, "topic \"%s\": %s", topic->topic, rd_kafka_err2str(topic->err));
					continue;
				}
				/* share: this server's partitions, new ones included (SPEC 8) */
				for (int p = 0; p < topic->partition_cnt; p++)
					if (kc->share == NULL || stm_share_contains(kc->share, topic->partitions[p].id))
						add_partition(kc, topic->topic, topic->partitions[p].id);
			}
			if (kc->topic_pattern && !matched)
				add_problem(kc, "no topic matches topic_pattern \"%s\"", kc->topic_pattern);
			foreach(lc, kc->topics)
				if (metadata_topic(md, lfirst(lc)) == NULL)
					add_problem(kc, "topic \"%s\" does not exist", (char *) lfirst(lc));
		}

		/*
		 * every partition's leader: -1 when the metadata has none, -2 when
		 * its topic is missing or in error (a problem already says so)
		 */
		foreach(lc, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc);
			const struct rd_kafka_metadata_topic *topic = metadata_topic(md, p->topic);

			p->leader = topic && topic->err == RD_KAFKA_RESP_ERR_NO_ERROR ? -1 : -2;
			if (topic == NULL)
			{
				if (kc->assign != NIL)
					add_problem(kc, "topic \"%s\" does not exist", p->topic);
				continue;
			}
			if (topic->err != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				if (kc->assign != NIL)
					add_problem(kc, "topic \"%s\": %s", p->topic, rd_kafka_err2str(topic->err));
				continue;
			}
			for (int i = 0; i < topic->partition_cnt; i++)
				if (topic->partitions[i].id == p->partition &&
					topic->partitions[i].err == RD_KAFKA_RESP_ERR_NO_ERROR)
					p->leader = topic->partitions[i].leader;
		}
	}
	PG_FINALLY();
	{
		rd_kafka_metadata_destroy(md);
	}
	PG_END_TRY();
}

/*
 * One ListOffsets round for the partitions in list: offset -1 asks for the
 * high watermark, -2 for the log start.  In slices until the deadline, or a
 * single slice.  (rd_kafka_query_watermark_offsets, one partition at a time,
 * ignores its timeout in librdkafka 2.0.2 while the brokers are down; this
 * call honours it, but fails whole when one of its leaders does not answer:
 * hence one call per leader.)
 */
static rd_kafka_resp_err_t
list_offsets(KafkaSource *kc, rd_kafka_topic_partition_list_t *list, int64 which,
			 bool one_try)
{
	TimestampTz deadline = stm_kafka_deadline(one_try ? STM_KAFKA_SLICE_MS : stm_guc_kafka_timeout_ms);
	rd_kafka_resp_err_t err;

	for (int i = 0; i < list->cnt; i++)
		list->elems[i].offset = which;
	for (;;)
	{
		err = rd_kafka_offsets_for_times(kc->meta, list, stm_kafka_slice(deadline));
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR || stm_kafka_slice(deadline) == 0)
			return err;
		stm_check_for_interrupts();
		/* a refused connection fails at once: do not spin */
		if (err != RD_KAFKA_RESP_ERR__TIMED_OUT)
			pg_usleep(Min(50, stm_kafka_slice(deadline)) * 1000L);
	}
}

/* "partitions 0, 3 of topic "t" and 2 of topic "u"": the partitions of a leader */
static char *
partitions_of_leader(KafkaSource *kc, int32 leader)
{
	StringInfoData buf;
	ListCell   *lc;
	const char *topic = NULL;
	int			n = 0;

	initStringInfo(&buf);
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->leader != leader)
			continue;
		if (topic && strcmp(topic, p->topic) != 0)
		{
			appendStringInfo(&buf, " of topic \"%s\" and ", topic);
			n = 0;
		}
		appendStringInfo(&buf, n > 0 ? ", %d" : "%d", p->partition);
		topic = p->topic;
		n++;
	}
	if (topic)
		appendStringInfo(&buf, " of topic \"%s\"", topic);
	return psprintf("%s %s", strchr(buf.data, ',') || strstr(buf.data, " and ") ?
					"partitions" : "partition", buf.data);
}

/*
 * Low and high watermarks of every partition, as their leaders say now.
 * The partitions of a leader that does not answer, and partitions that
 * answer with an error, are held (left out of this batch) and named in the
 * plan's problem.
 */
static void
query_watermarks(KafkaSource *kc)
{
	List	   *leaders = NIL;
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		p->ready = -1;
		p->held_back = p->leader < 0;
		if (p->leader == -1)
			add_problem(kc, "partition %d of topic \"%s\" has no leader", p->partition, p->topic);
		else
			leaders = list_append_unique_int(leaders, p->leader);
	}
	foreach(lc, leaders)
	{
		int32		leader = lfirst_int(lc);
		bool		suspect = list_member_int(kc->suspect_leaders, leader);
		rd_kafka_topic_partition_list_t *high = rd_kafka_topic_partition_list_new(8);
		rd_kafka_topic_partition_list_t *low = rd_kafka_topic_partition_list_new(8);
		rd_kafka_resp_err_t err;
		ListCell   *lc2;
		MemoryContext old;
		int			i = 0;

		foreach(lc2, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc2);

			if (p->leader != leader)
				continue;
			rd_kafka_topic_partition_list_add(high, p->topic, p->partition);
			rd_kafka_topic_partition_list_add(low, p->topic, p->partition);
		}
		err = list_offsets(kc, high, RD_KAFKA_OFFSET_END, suspect);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
			err = list_offsets(kc, low, RD_KAFKA_OFFSET_BEGINNING, suspect);
		/* the suspects are remembered between batches: in the source's memory */
		old = MemoryContextSwitchTo(kc->cxt);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			add_problem(kc, "%s: could not get offsets from leader broker %d: %s",
						partitions_of_leader(kc, leader), leader, rd_kafka_err2str(err));
			kc->suspect_leaders = list_append_unique_int(kc->suspect_leaders, leader);
		}
		else
			kc->suspect_leaders = list_delete_int(kc->suspect_leaders, leader);
		MemoryContextSwitchTo(old);
		foreach(lc2, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc2);
			rd_kafka_resp_err_t perr;

			if (p->leader != leader)
				continue;
			perr = err != RD_KAFKA_RESP_ERR_NO_ERROR ? err :
				high->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR ? high->elems[i].err : low->elems[i].err;
			if (perr != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
					add_problem(kc, "partition %d of topic \"%s\": %s", p->partition, p->topic,
								rd_kafka_err2str(perr));
				p->held_back = true;
			}
			else
			{
				p->high = high->elems[i].offset;
				p->low = low->elems[i].offset;
			}
			i++;
		}
		rd_kafka_topic_partition_list_destroy(high);
		rd_kafka_topic_partition_list_destroy(low);
	}
	list_free(leaders);
}

/*
 * Can the plan read any partition?  With none (every leader down, the
 * topic missing) the stream waits; with some it runs them (SPEC 4).
 */
static bool
any_partition_readable(KafkaSource *kc)
{
	ListCell   *lc;

	foreach(lc, kc->partitions)
		if (!((KafkaPartition *) lfirst(lc))->held_back)
			return true;
	return false;
}

/* starting_offsets for a partition seen in the stream's first batch */
static int64
starting_offset(KafkaSource *kc, KafkaPartition *p)
{
	Jsonb	   *per_topic;
	char	   *off_text;
	int64		off;

	if (strcmp(kc->starting_offsets, "earliest") == 0)
		return p->low;
	if (strcmp(kc->starting_offsets, "latest") == 0)
		return p->high;
	per_topic = stm_option_jsonb(DatumGetJsonbP(DirectFunctionCall1(jsonb_in,
																	CStringGetDatum(kc->starting_offsets))),
								 p->topic);
	off_text = stm_option_text(per_topic, psprintf("%d", p->partition));
	if (off_text == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("starting_offsets of source \"%s\" gives no offset for partition %d of topic \"%s\"",
						kc->source, p->partition, p->topic),
				 errhint("Give every partition an offset, -2 for earliest or -1 for latest.")));
	off = pg_strtoint64(off_text);
	if (off == -2)
		return p->low;
	if (off == -1)
		return p->high;
	return off;
}

static void
note_data_loss(KafkaSource *kc, KafkaPartition *p, int64 from, int64 to)
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
 * trigger continuous: the bounds from what the consumer knows, without a
 * round trip, when every partition has a stored position and is consumed
 * from exactly there (not after a rolled-back batch, an offset reset or a
 * held-back leader: query_watermarks then asks the leaders).  Its high
 * and low watermarks are the ones the last fetch response carried
 * (rd_kafka_get_watermark_offsets: cached, at most a fetch old), and it
 * is ready up to what the consumer has delivered (its last message, or
 * its end-of-partition event): the batch reads records that are here,
 * and what arrives meanwhile is the next batch's.  False when some
 * partition does not qualify (nothing changed then).
 */
static bool
plan_from_consumer(KafkaSource *kc)
{
	ListCell   *lc;

	drain_wakeups(kc);
	(void) pop_messages(kc, false);
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);
		int64_t		low;
		int64_t		high;

		if (!p->stored || !p->started || p->held_back || p->leader < 0 || p->pos != p->start ||
			rd_kafka_get_watermark_offsets(kc->rk, p->topic, p->partition, &low, &high) !=
			RD_KAFKA_RESP_ERR_NO_ERROR || high < 0)
			return false;
	}
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);
		int64_t		low;
		int64_t		high;

		(void) rd_kafka_get_watermark_offsets(kc->rk, p->topic, p->partition, &low, &high);
		p->high = high;
		if (low >= 0)
			p->low = low;
		p->ready = Max(p->popped, p->eof);
	}
	flow_control(kc);
	return true;
}

/*
 * Fix the next batch's bounds [start, end) of every partition from the stored
 * positions and the current high watermarks.  Returns the number of offsets
 * the batch covers; 0 when there is nothing (or not yet enough) to read.
 */
static int64
kafka_plan(StmSource *src, StmPlanContext *ctx)
{
	KafkaSource *kc = (KafkaSource *) src;
	int32		stream_id = ctx->stream_id;
	ListCell   *lc;
	List	   *stored;
	List	   *stored_topics = NIL;
	int64		total = 0;
	bool		fast;

	kc->chunk_size = ctx->chunk_size;
	resetStringInfo(&kc->data_loss);
	resetStringInfo(&kc->problem);
	if (kc->rk)
	{
		rd_kafka_poll(kc->rk, 0);
		resume_partitions(kc);	/* left paused by a batch that failed */
	}
	rd_kafka_poll(kc->meta, 0);
	fast = kc->base.low_latency && !kc->base.bounded && !kc->base.plan_only &&
		kc->rk != NULL && kc->clean_plan;
	/*
	 * the metadata's age is not a reason to wait for the fetches: the plan
	 * after a clean refresh still ends at what the consumer delivered
	 */
	if (!fast ||
		TimestampDifferenceExceeds(kc->metadata_at, GetCurrentTimestamp(), METADATA_MAX_AGE_MS))
	{
		refresh_partitions(kc);
		kc->metadata_at = GetCurrentTimestamp();
		fast = fast && kc->problem.len == 0;
	}

	foreach(lc, kc->partitions)
		((KafkaPartition *) lfirst(lc))->stored = false;
	/* a part is a topic's partition, its position the next offset */
	stored = stm_positions_read(stream_id, kc->base.name);
	foreach(lc, stored)
	{
		StmPosition *pos = lfirst(lc);
		KafkaPartition *p = find_partition(kc, pos->part, pos->part_no);

		if (!list_member(stored_topics, makeString(pos->part)))
			stored_topics = lappend(stored_topics, makeString(pos->part));
		if (p)
		{
			p->stored = true;
			p->start = pos->position;
			p->stored_pos = pos->position;
			p->stored_high = pos->has_end ? pos->end_position : -1;
		}
	}
	list_free_deep(stored);
	if (!fast || !plan_from_consumer(kc))
		query_watermarks(kc);
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		/* a held partition stays where it is (one never stored stays out) */
		if (p->held_back)
		{
			p->end = p->start;
			if (kc->base.bounded && !kc->limits_fixed)
				p->limit = -2;
			continue;
		}

		/*
		 * starting_offsets apply to the partitions of a topic the stream has
		 * not read yet; new partitions of a topic it reads start at their
		 * beginning (as Spark's)
		 */
		if (!p->stored)
			p->start = list_member(stored_topics, makeString(p->topic)) ?
				p->low : starting_offset(kc, p);
		if (p->start < p->low || p->start > p->high)
		{
			note_data_loss(kc, p, p->start, p->low);
			p->start = p->low;
		}
		p->end = p->ready >= 0 ? Max(p->start, Min(p->high, p->ready)) : p->high;
		/* available_now: what was there at the first plan, and no more */
		if (kc->base.bounded)
		{
			if (!kc->limits_fixed || p->limit == -2)
				p->limit = p->high;
			else if (p->limit < 0)
				p->limit = p->start;
			p->end = Max(p->start, Min(p->end, p->limit));
		}
		total += p->end - p->start;
	}
	kc->limits_fixed = kc->base.bounded;
	kc->clean_plan = kc->problem.len == 0 && kc->data_loss.len == 0;
	kc->base.problem = kc->problem.len > 0 ? kc->problem.data : NULL;
	kc->base.unreadable = kc->base.problem != NULL && !any_partition_readable(kc);

	/* max_offsets_per_trigger: split over partitions by their lag (Spark's rateLimit) */
	if (kc->max_offsets_per_trigger > 0 && total > kc->max_offsets_per_trigger)
	{
		double		limit = (double) kc->max_offsets_per_trigger;
		int64		capped = 0;

		foreach(lc, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc);
			double		prorate = limit * ((double) (p->end - p->start) / (double) total);
			double		step = prorate < 1 ? ceil(prorate) : floor(prorate);

			p->end = Min(p->end, p->start + (int64) step);
			capped += p->end - p->start;
		}
		total = capped;
	}

	/*
	 * The sink's room (ctx->max_records): never more, so split exactly:
	 * each partition its share of the limit rounded down, the rest one
	 * record each to partitions in order.
	 */
	if (ctx->max_records >= 0 && total > ctx->max_records)
	{
		int64		limit = ctx->max_records;
		int64		capped = 0;
		int64	   *uncut = palloc(sizeof(int64) * list_length(kc->partitions));

		foreach(lc, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc);
			int64		share = (int64) floor((double) limit * (double) (p->end - p->start) / (double) total);

			uncut[foreach_current_index(lc)] = p->end;
			p->end = p->start + Min(share, p->end - p->start);
			capped += p->end - p->start;
		}
		foreach(lc, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc);

			if (capped >= limit)
				break;
			if (p->end < uncut[foreach_current_index(lc)])
			{
				p->end++;
				capped++;
			}
		}
		pfree(uncut);
		total = capped;
	}

	/*
	 * every partition with a position is consumed from it now, so that
	 * librdkafka fetches while the batch gets ready, and between batches
	 */
	if (!kc->base.plan_only)
		foreach(lc, kc->partitions)
			position_partition(kc, lfirst(lc));

	/* min_offsets_per_trigger: wait for enough records, but not past max_trigger_delay */
	if (kc->min_offsets_per_trigger > 0 && total < kc->min_offsets_per_trigger &&
		!TimestampDifferenceExceeds(stm_plan_last_trigger(ctx), GetCurrentTimestamp(),
									(int) Min(kc->max_trigger_delay_ms, INT_MAX)))
	{
		foreach(lc, kc->partitions)
		{
			KafkaPartition *p = lfirst(lc);

			p->end = p->start;
		}
		total = 0;
	}

	/* what this plan leaves held (a cap, min_offsets_per_trigger) is the next one's */
	kc->arrived = false;
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (!p->held_back && has_held(p) && p->held[p->nheld - 1]->offset >= p->end)
			kc->arrived = true;
	}
	return total;
}

/* The partition a message belongs to (NULL: none that the source reads). */
static KafkaPartition *
partition_of(const rd_kafka_message_t *m)
{
	KafkaTopicMap *map = m->rkt ? rd_kafka_topic_opaque(m->rkt) : NULL;

	if (map == NULL || m->partition < 0 || m->partition >= map->nids)
		return NULL;
	return map->by_id[m->partition];
}

static int64
message_bytes(const rd_kafka_message_t *m)
{
	return (int64) m->len + (int64) m->key_len;
}

/* Keep a popped message in p's held list (for later in the batch, or the next). */
static void
hold_message(KafkaSource *kc, KafkaPartition *p, rd_kafka_message_t *m)
{
	if (p->held_next == p->nheld)
		p->held_next = p->nheld = 0;
	if (p->nheld == p->held_cap)
	{
		if (p->held_next > 0)
		{
			memmove(p->held, p->held + p->held_next,
					sizeof(rd_kafka_message_t *) * (p->nheld - p->held_next));
			p->nheld -= p->held_next;
			p->held_next = 0;
		}
		else
		{
			int			cap = Max(64, p->held_cap * 2);
			rd_kafka_message_t **held = realloc(p->held, sizeof(rd_kafka_message_t *) * cap);

			if (held == NULL)
			{
				rd_kafka_message_destroy(m);
				ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY), errmsg("out of memory")));
			}
			p->held = held;
			p->held_cap = cap;
		}
	}
	p->held[p->nheld++] = m;
	p->consumed = true;
	p->held_bytes += message_bytes(m);
	kc->held_bytes += message_bytes(m);
}

/* Take p's first held message out of its list. */
static rd_kafka_message_t *
unhold_message(KafkaSource *kc, KafkaPartition *p)
{
	rd_kafka_message_t *m = p->held[p->held_next++];

	p->held_bytes -= message_bytes(m);
	kc->held_bytes -= message_bytes(m);
	return m;
}

static bool
has_held(KafkaPartition *p)
{
	return p->held_next < p->nheld;
}

/* Pause (or resume) the given partitions' fetching. */
static void
pause_partitions(KafkaSource *kc, List *parts, bool pause)
{
	rd_kafka_topic_partition_list_t *list;
	ListCell   *lc;

	if (parts == NIL)
		return;
	list = rd_kafka_topic_partition_list_new(list_length(parts));
	foreach(lc, parts)
	{
		KafkaPartition *p = lfirst(lc);

		rd_kafka_topic_partition_list_add(list, p->topic, p->partition);
		p->paused = pause;
	}
	if (pause)
	{
		(void) rd_kafka_pause_partitions(kc->rk, list);
		kc->pauses += list_length(parts);
	}
	else
		(void) rd_kafka_resume_partitions(kc->rk, list);
	rd_kafka_topic_partition_list_destroy(list);
}

/* Every paused partition fetches again (it goes on after what it handed out). */
static void
resume_partitions(KafkaSource *kc)
{
	List	   *parts = NIL;
	ListCell   *lc;

	foreach(lc, kc->partitions)
		if (((KafkaPartition *) lfirst(lc))->paused)
			parts = lappend(parts, lfirst(lc));
	pause_partitions(kc, parts, false);
	list_free(parts);
}

/*
 * Make the shared queue deliver p's messages from its next start, so that
 * librdkafka fetches ahead for it: every partition with a position is
 * consumed, those without records now too (the idle worker wakes when
 * records arrive).  A partition whose local consumption is anywhere else
 * (first batch, a rolled-back batch) is restarted there.
 */
static void
position_partition(KafkaSource *kc, KafkaPartition *p)
{
	if (p->held_back || (p->started && p->pos == p->start))
		return;
	kafka_release_partition(kc, p);
	if (rd_kafka_consume_start_queue(p->rkt, p->partition, p->start, kc->queue) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not start consuming Kafka topic \"%s\" partition %d",
						p->topic, p->partition),
				 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
	p->started = true;
	p->pos = p->start;
	p->next = p->start;
	kc->restarts++;
}

/* Is p still to read in this batch? */
static bool
reading(KafkaPartition *p)
{
	return p->next < p->end;
}

/*
 * One message popped from the shared queue: held by its partition when the
 * partition may still need it (in a batch: at or after the next offset to
 * hand out, or the batch's end for a partition done with it; between
 * batches: at or after where its consumption stands), else destroyed (a
 * stale partition, handed out already); an end-of-partition event only
 * moves the partition's next offset on.  fetching: a batch reads, and an
 * error of a partition it reads is the batch's; otherwise (the idle worker)
 * it makes that partition start again at the next plan.
 */
static void
route_message(KafkaSource *kc, rd_kafka_message_t *m, bool fetching)
{
	KafkaPartition *p = partition_of(m);

	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		rd_kafka_resp_err_t err = m->err;
		int64		offset = m->offset;

		if (err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			strlcpy(kc->error, rd_kafka_message_errstr(m), sizeof(kc->error));
		rd_kafka_message_destroy(m);
		if (p == NULL || !p->started)
			return;
		if (err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
		{
			/* everything of p before offset has been popped */
			p->eof = Max(p->eof, offset);
			if (fetching && reading(p) && !has_held(p))
				p->next = Max(p->next, offset);
		}
		else if (err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET ||
				 err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE)
		{
			if (fetching && reading(p))
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("offset " INT64_FORMAT " of Kafka topic \"%s\" partition %d is out of range",
								p->next, p->topic, p->partition),
						 errdetail("%s", kc->error)));
			/* not read now: the next plan looks at it (data loss) and starts it again */
			p->pos = -1;
		}
		return;
	}
	if (p != NULL && p->started)
		p->popped = Max(p->popped, m->offset + 1);
	if (p == NULL || !p->started)
		rd_kafka_message_destroy(m);
	else if (fetching ? m->offset >= (reading(p) ? p->next : p->end) :
			 p->pos >= 0 && m->offset >= p->pos)
	{
		/* one for the next plan: the worker need not sleep (ready) */
		if (!fetching || m->offset >= p->end)
			kc->arrived = true;
		hold_message(kc, p, m);
	}
	else
		rd_kafka_message_destroy(m);
}

/*
 * librdkafka 2.0.2 decides whether to fetch a partition only when its
 * broker thread wakes: for a response, an operation of its own, or up to
 * 1 s later.  A resumed partition is not such an operation (the resume is
 * served by librdkafka's main thread), and neither is a queue that was
 * emptied after it reached queued.max.messages.kbytes (2.1 added
 * fetch.queue.backoff.ms for this): a batch could wait for that second.
 * A seek is one ("seek done" wakes the broker thread): each of parts that
 * has handed out messages is sought to just after the last one popped,
 * which is where its fetch goes on anyway (librdkafka's resume position);
 * what librdkafka queued for it since is fetched again.  A partition that
 * has popped nothing is left alone: a seek would skip what it queued.
 */
static void
wake_fetcher(KafkaSource *kc, List *parts)
{
	ListCell   *lc;

	foreach(lc, parts)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->started && !p->paused && p->popped >= 0)
		{
			(void) rd_kafka_seek(p->rkt, p->partition, p->popped, 0);
			kc->wakes++;
		}
	}
}

/* wake_fetcher for one partition of each leader: its thread decides for all of them. */
static void
wake_fetchers(KafkaSource *kc)
{
	List	   *one_each = NIL;
	List	   *leaders = NIL;
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->started && !p->paused && p->popped >= 0 && !list_member_int(leaders, p->leader))
		{
			leaders = lappend_int(leaders, p->leader);
			one_each = lappend(one_each, p);
		}
	}
	wake_fetcher(kc, one_each);
	list_free(one_each);
	list_free(leaders);
}

/*
 * Pop all the shared queue has, without waiting, into the partitions' held
 * lists; returns how many messages were popped.  Popped at once, the queue
 * stays short of librdkafka's own bound, whose pause would last until its
 * broker thread next wakes (up to 1 s in librdkafka 2.0.2); what is held
 * is bounded by flow_control instead.
 */
static int
pop_messages(KafkaSource *kc, bool fetching)
{
	rd_kafka_message_t *got[POP_MAX];
	int			total = 0;
	int64		bytes = 0;

	for (;;)
	{
		ssize_t		ngot = rd_kafka_consume_batch_queue(kc->queue, 0, got, POP_MAX);

		if (ngot < 0)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("could not fetch from Kafka for source \"%s\"", kc->source),
					 errdetail("%s", rd_kafka_err2str(rd_kafka_last_error()))));
		for (int i = 0; i < ngot; i++)
		{
			bytes += message_bytes(got[i]);
			PG_TRY();
			{
				route_message(kc, got[i], fetching);
			}
			PG_CATCH();
			{
				for (int j = i + 1; j < ngot; j++)
					rd_kafka_message_destroy(got[j]);
				PG_RE_THROW();
			}
			PG_END_TRY();
		}
		total += (int) ngot;
		if (ngot < POP_MAX)
			break;
	}
	return total;
}

/*
 * Keep the held messages within their share of batch_memory: past it,
 * the partitions that hold messages are paused (those done with the batch
 * first; librdkafka drops what it queued for them and, when they resume,
 * fetches on after what was popped); a paused partition resumes when the
 * batch needs it (it reads and holds nothing) or once the held messages
 * are down to half their share.  A resume does not wake librdkafka's
 * broker thread, and is not made to: a seek per resumed partition (each
 * capped batch resumes many) makes librdkafka fetch what it had queued
 * again, and was measured no faster (issue 21); a batch that waits for a
 * resumed partition wakes the fetchers after STALL_MS (kafka_fetch).
 */
static void
flow_control(KafkaSource *kc)
{
	List	   *pause = NIL;
	List	   *resume = NIL;
	ListCell   *lc;

	if (kc->held_bytes > kc->held_cap_bytes)
	{
		/* what partitions still fetching hold: what can grow */
		int64		growing = 0;

		foreach(lc, kc->partitions)
			if (!((KafkaPartition *) lfirst(lc))->paused)
				growing += ((KafkaPartition *) lfirst(lc))->held_bytes;
		for (int pass = 0; pass < 2 && growing > kc->held_cap_bytes / 2; pass++)
			foreach(lc, kc->partitions)
			{
				KafkaPartition *p = lfirst(lc);

				/*
				 * first those done with the batch, or holding all of it
				 * already (a resumed partition fetches on past its end
				 * until paused: a capped batch's main overshoot)
				 */
				if (p->started && !p->paused && has_held(p) &&
					(reading(p) && p->held[p->nheld - 1]->offset < p->end - 1) == (pass == 1))
				{
					pause = lappend(pause, p);
					growing -= p->held_bytes;
				}
			}
	}
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->paused && ((reading(p) && !has_held(p)) ||
						  kc->held_bytes <= kc->held_cap_bytes / 2))
			resume = lappend(resume, p);
	}
	pause_partitions(kc, pause, true);
	pause_partitions(kc, resume, false);
	list_free(pause);
	list_free(resume);
}

/* Read the queue's wake-up bytes (the pipe is non-blocking). */
static void
drain_wakeups(KafkaSource *kc)
{
	char		buf[64];

	while (read(kc->wake_fds[0], buf, sizeof(buf)) > 0)
		;
}

/*
 * Sleep until the shared queue may have messages (its pipe), the latch is
 * set, or timeout_ms pass; then serve librdkafka's callbacks.
 */
static void
wait_for_queue(KafkaSource *kc, long timeout_ms)
{
	WaitEvent	events[3];
	int			n;
	TimestampTz slept = GetCurrentTimestamp();

	n = WaitEventSetWait(kc->wait_set, timeout_ms, events, lengthof(events), PG_WAIT_EXTENSION);
	stm_source_note_wait(GetCurrentTimestamp() - slept);
	for (int i = 0; i < n; i++)
		if (events[i].events & WL_LATCH_SET)
			ResetLatch(MyLatch);
	drain_wakeups(kc);
	rd_kafka_poll(kc->rk, 0);
}

/*
 * Give a chunk of messages (of any partitions) to fn, as StmRecord; the
 * messages are destroyed after, also on error.
 */
static void
hand_over(KafkaSource *kc, StmChunkFn fn, void *arg, rd_kafka_message_t **msgs, int n)
{
	int			nrec = 0;

	for (int i = 0; i < n; i++)
	{
		/* a change stream's tombstone (the delete came before it) is no row (SPEC 2.1.2) */
		if (msgs[i]->payload == NULL && kc->base.envelope == STM_ENVELOPE_DEBEZIUM)
			continue;
		kc->records[nrec].data = msgs[i]->payload;
		kc->records[nrec].len = (int) msgs[i]->len;
		kc->records[nrec].key = msgs[i]->key;
		kc->records[nrec].key_len = (int) msgs[i]->key_len;
		kc->records[nrec].opaque = msgs[i];
		nrec++;
	}
	PG_TRY();
	{
		if (nrec > 0)
			fn(arg, kc->records, nrec);
	}
	PG_FINALLY();
	{
		for (int i = 0; i < n; i++)
			rd_kafka_message_destroy(msgs[i]);
	}
	PG_END_TRY();
}

/*
 * The held messages of partitions still reading, as far as they go (they
 * come before anything of theirs still queued), into msgs, at most a chunk;
 * returns how many.
 */
static int
take_held(KafkaSource *kc, rd_kafka_message_t **msgs)
{
	int			n = 0;
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		while (reading(p) && has_held(p) && n < kc->chunk_size)
		{
			rd_kafka_message_t *m = p->held[p->held_next];

			if (m->offset >= p->end)
				p->next = p->end;	/* a gap up to the end */
			else if (m->offset < p->next)
				rd_kafka_message_destroy(unhold_message(kc, p));
			else
			{
				msgs[n++] = unhold_message(kc, p);
				p->next = m->offset + 1;
			}
		}
		/* an end-of-partition event after everything held */
		if (reading(p) && !has_held(p) && p->eof >= 0)
			p->next = Max(p->next, p->eof);
		if (n == kc->chunk_size)
			break;
	}
	return n;
}

/*
 * Read [start, end) of every partition of the batch, handing chunks of
 * messages to fn as they come from the shared queue (parsing overlaps
 * librdkafka's fetching of the rest).  Messages are destroyed after fn
 * returns (also when it raises an error).  When the queue is empty the batch
 * sleeps on its pipe and latch; a partition that gives nothing for
 * streaming.kafka_timeout fails the batch.
 */
static void
kafka_fetch(StmSource *src, StmChunkFn fn, void *arg)
{
	KafkaSource *kc = (KafkaSource *) src;
	rd_kafka_message_t **msgs = palloc(sizeof(rd_kafka_message_t *) * kc->chunk_size);
	TimestampTz progress_at = GetCurrentTimestamp();
	TimestampTz fetch_start = progress_at;
	int64		cpu_at_start = stm_thread_cpu_us();
	int64		waited_at_start = stm_source_waited_us();
	int64		handed = 0;
	int64		held = 0;
	int			empty_waits = 0;	/* waits in a row that found nothing */
	ListCell   *lc;

	/* the chunk's arrays, in the batch's memory (an error leaves them to it) */
	Assert(kc->chunk_size > 0);
	kc->records = palloc0(sizeof(StmRecord) * kc->chunk_size);
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		position_partition(kc, p);
		p->next = p->start;
		/* until the batch ends, the local queue is not where the catalog says */
		if (p->end > p->start)
			p->pos = -1;
	}

	for (;;)
	{
		KafkaPartition *waiting_on = NULL;
		int			n;
		int			popped;

		stm_check_for_interrupts();
		popped = pop_messages(kc, true);
		n = take_held(kc, msgs);
		flow_control(kc);
		if (n > 0)
		{
			hand_over(kc, fn, arg, msgs, n);
			handed += n;
			progress_at = GetCurrentTimestamp();
		}
		if (n > 0 || popped > 0)
			empty_waits = 0;
		foreach(lc, kc->partitions)
			if (reading(lfirst(lc)))
			{
				waiting_on = lfirst(lc);
				break;
			}
		if (waiting_on == NULL)
			break;
		if (n > 0 || popped > 0)
			continue;

		/*
		 * nothing queued: sleep until librdkafka queues something; if that
		 * takes longer than STALL_MS, librdkafka's broker threads may be
		 * idle (wake_fetcher): woken once, then slept on
		 */
		if (TimestampDifferenceExceeds(progress_at, GetCurrentTimestamp(), stm_guc_kafka_timeout_ms))
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("timed out fetching from Kafka topic \"%s\" partition %d at offset " INT64_FORMAT,
							waiting_on->topic, waiting_on->partition, waiting_on->next),
					 kc->error[0] ? errdetail("%s", kc->error) : 0));
		if (empty_waits == 1)
			wake_fetchers(kc);
		wait_for_queue(kc, empty_waits == 0 ? STALL_MS : STM_KAFKA_SLICE_MS);
		empty_waits++;
	}
	/*
	 * Fetch ahead for the next batch while what is held is within its
	 * share.  A batch cut by max_offsets_per_trigger leaves the next
	 * batches' records held; resuming every partition then let each
	 * batch's join phase fetch about a batch more than the next one took
	 * (bench/joins.sh --modes capped: 400,000-500,000 records held a
	 * source, 500 MB, every page of it a fault in librdkafka's threads).
	 * Past the share, the partitions that hold records stay paused until
	 * the batches need them (flow_control).
	 */
	if (kc->held_bytes <= kc->held_cap_bytes)
		resume_partitions(kc);
	else
		flow_control(kc);

	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->end > p->start)
			p->pos = p->end;
		held += p->nheld - p->held_next;
	}
	pfree(msgs);
	pfree(kc->records);
	kc->records = NULL;
	if (stm_guc_log_batches)
		ereport(LOG,
				(errmsg_internal("Kafka source \"%s\" read " INT64_FORMAT " records in %.1f ms: "
								 "%.1f ms on a CPU, %.1f ms waiting for records; "
								 "%d partitions started, %d paused, %d fetchers woken; "
								 INT64_FORMAT " records (" INT64_FORMAT " bytes) held for later batches",
								 kc->source, handed,
								 (double) (GetCurrentTimestamp() - fetch_start) / 1000.0,
								 (double) (stm_thread_cpu_us() - cpu_at_start) / 1000.0,
								 (double) (stm_source_waited_us() - waited_at_start) / 1000.0,
								 kc->restarts, kc->pauses, kc->wakes, held, kc->held_bytes)));
	kc->restarts = kc->pauses = kc->wakes = 0;
}

/*
 * The idle worker's wake-up (source.h: wait_fd): the shared queue's pipe.
 * Not with min_offsets_per_trigger, whose plans wait for enough records:
 * such a stream looks again every streaming.naptime.
 */
static int
kafka_wait_fd(StmSource *src)
{
	KafkaSource *kc = (KafkaSource *) src;

	if (kc->rk == NULL || kc->min_offsets_per_trigger > 0)
		return -1;
	return kc->wake_fds[0];
}

/*
 * Have records arrived since the last plan (source.h: ready)?  Pops what
 * the shared queue has into the partitions' held lists: true when a record
 * is held that the last plan did not take (popped since, or left by it:
 * past a cap, or popped by its batch past its end; end-of-partition events
 * are no records), so the worker plans again at once; false when it may
 * sleep on the pipe (which librdkafka writes to again once a message is
 * queued).
 */
static bool
kafka_ready(StmSource *src)
{
	KafkaSource *kc = (KafkaSource *) src;
	int64		held_before = kc->held_bytes;

	if (kc->rk == NULL)
		return false;
	drain_wakeups(kc);
	rd_kafka_poll(kc->rk, 0);
	(void) pop_messages(kc, false);
	flow_control(kc);

	/*
	 * A source that reads shares (the leader's own, beside its helpers)
	 * plans nothing, so nothing takes its held records from arrived: records
	 * new to it say the planning source has some.  Reporting what it holds
	 * said "ready" for good once it held one, so the worker planned again
	 * at once after every plan, each asking the brokers for offsets (TAP 006
	 * hung on one loaded core, the mock broker no longer answering).
	 */
	if (kc->reads_shares)
		return kc->held_bytes > held_before;
	return kc->arrived;
}

/* Has the stream a position in p?  Not when it was held back before it was ever stored. */
static bool
has_position(KafkaPartition *p)
{
	return p->stored || !p->held_back;
}

/*
 * Write the new position (end of this batch) and the high watermark the
 * plan saw of every partition whose row says otherwise, or that has none:
 * the part is the topic and partition.  A row left alone still says where
 * the partition stands (the plan read it in this transaction).
 */
static void
save_positions(KafkaSource *kc, int32 stream_id)
{
	List	   *positions = NIL;
	ListCell   *lc;

	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (has_position(p) &&
			(!p->stored || p->end != p->stored_pos || p->high != p->stored_high))
			positions = lappend(positions, stm_position_make(p->topic, p->partition, p->end, p->high));
	}
	stm_positions_write(stream_id, kc->base.name, positions);
	list_free_deep(positions);
}

/* {"topic":{"0":offset,...},...} of the batch's start or end (Spark's shape) */
static char *
kafka_positions_json(StmSource *src, bool end)
{
	KafkaSource *kc = (KafkaSource *) src;
	StringInfoData buf;
	ListCell   *lc;
	const char *topic = NULL;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (!has_position(p))
			continue;
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
static void
kafka_fill_metadata(StmSource *src, StmRecord *rec, Datum *values, bool *nulls)
{
	KafkaSource *kc = (KafkaSource *) src;
	rd_kafka_message_t *msg = rec->opaque;
	rd_kafka_timestamp_type_t tstype;
	int64_t		ts = rd_kafka_message_timestamp(msg, &tstype);

	values[0] = partition_of(msg)->topic_text;
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

/* {"topic": t, "partition": p, "offset": o}, from kafka_topic, kafka_partition, kafka_offset */
static void
kafka_position_json(StmSource *src, const Datum *meta, const bool *meta_nulls, StringInfo out)
{
	appendStringInfoString(out, "{\"topic\": ");
	escape_json(out, TextDatumGetCString(meta[0]));
	appendStringInfo(out, ", \"partition\": %d, \"offset\": " INT64_FORMAT "}",
					 DatumGetInt32(meta[1]), DatumGetInt64(meta[2]));
}

static void
kafka_save_positions(StmSource *src, int32 stream_id, int64 batch_id)
{
	save_positions((KafkaSource *) src, stream_id);
}

/*
 * Nothing to read, but partitions the stream has not stored yet (where
 * 'latest' pointed when it began, partitions that appeared) or data loss:
 * pinned now, so that records that arrive later are not skipped.
 */
static void
kafka_save_idle_positions(StmSource *src, int32 stream_id)
{
	KafkaSource *kc = (KafkaSource *) src;
	bool		unsaved = kc->data_loss.len > 0;
	ListCell   *lc;

	foreach(lc, kc->partitions)
		if (!((KafkaPartition *) lfirst(lc))->stored && !((KafkaPartition *) lfirst(lc))->held_back)
			unsaved = true;
	if (unsaved)
		save_positions(kc, stream_id);
}

static char *
kafka_data_loss_json(StmSource *src)
{
	KafkaSource *kc = (KafkaSource *) src;

	return kc->data_loss.len > 0 ? psprintf("[%s]", kc->data_loss.data) : NULL;
}

/*
 * process_available: every partition's high watermark now, as positions to
 * reach (a List of StmPosition; NIL when every partition is empty).
 */
static void *
kafka_available(StmSource *src, int32 stream_id)
{
	KafkaSource *kc = (KafkaSource *) src;
	List	   *targets = NIL;
	ListCell   *lc;

	resetStringInfo(&kc->problem);
	refresh_partitions(kc);
	query_watermarks(kc);
	/* what cannot be read now cannot be waited for yet: the caller asks again */
	if (kc->problem.len > 0)
	{
		src->problem = kc->problem.data;
		return NULL;
	}
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (p->high > 0)
			targets = lappend(targets, stm_position_make(p->topic, p->partition, p->high, p->high));
	}
	return targets;
}

/* Has every partition's committed offset reached what kafka_available saw? */
static bool
kafka_reached(StmSource *src, int32 stream_id, void *available)
{
	return stm_positions_reached(stream_id, src->name, (List *) available);
}

/* ---- create time --------------------------------------------------------- */

static List *
kafka_metadata_columns(Jsonb *options)
{
	static const StmMetaColumn columns[] = {
		{"kafka_topic", "pg_catalog.text"},
		{"kafka_partition", "pg_catalog.int4"},
		{"kafka_offset", "pg_catalog.int8"},
		{"kafka_timestamp", "pg_catalog.timestamptz"},
		{"kafka_key", "pg_catalog.bytea"},
		{"kafka_headers", "pg_catalog.jsonb"}
	};
	List	   *result = NIL;
	int			n = KAFKA_META_COLUMNS + (stm_option_bool(options, "include_headers", false) ? 1 : 0);

	for (int i = 0; i < n; i++)
		result = lappend(result, (void *) &columns[i]);
	return result;
}

/* The one topic a source reads (topics or partitions name just one), or NULL. */
static const char *
single_topic(Jsonb *o)
{
	List	   *topics = stm_option_elements(o, "topics");
	List	   *assigned = stm_option_pairs(o, "partitions");

	if (list_length(topics) == 1)
		return linitial(topics);
	if (list_length(assigned) == 1)
		return ((StmOptionPair *) linitial(assigned))->key;
	return NULL;
}

/*
 * format avro, key_format avro, envelope debezium (SPEC 2.1.1, 2.1.2):
 * what each needs, and an Avro source's columns from the registry (or
 * checked against it).  Returns the options as they are to be stored.
 */
static Jsonb *
validate_avro_and_envelope(Jsonb *o, const char *format)
{
	static const char *const envelopes[] = {"debezium", NULL};
	static const char *const key_formats[] = {"avro", NULL};
	char	   *envelope = stm_arg_lower(stm_option_text(o, "envelope"));
	char	   *key_format = stm_arg_lower(stm_option_text(o, "key_format"));
	bool		avro = strcmp(format, "avro") == 0;

	if (envelope)
	{
		stm_arg_check_choice("envelope", envelope, envelopes, "The only envelope is \"debezium\".");
		if (!avro && strcmp(format, "json") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("envelope \"debezium\" needs format \"json\" or \"avro\""),
					 errdetail("The format given was \"%s\".", format)));
		o = stm_option_set_text(o, "envelope", envelope);
	}
	if (key_format)
	{
		stm_arg_check_choice("key_format", key_format, key_formats, "The only key_format is \"avro\".");
		o = stm_option_set_text(o, "key_format", key_format);
	}
	if ((avro || key_format) && !stm_option_given(o, "schema_registry"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s \"avro\" needs schema_registry", avro ? "format" : "key_format"),
				 errhint("Give schema_registry => '{\"url\": \"http://registry:8081\"}'.")));
	if (!avro && !key_format && stm_option_given(o, "schema_registry"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema_registry is only for format \"avro\" and key_format \"avro\"")));
	if (stm_option_given(o, "schema_registry"))
		stm_registry_check_options(stm_option_jsonb(o, "schema_registry"));
	if (stm_option_given(o, "reader_schema_id"))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("reader_schema_id is not an argument")));
	if (avro && !stm_option_given(o, "columns"))
		o = stm_avro_columns_from_registry(o, single_topic(o));
	else if (avro)
		stm_avro_check_columns(o, single_topic(o),
							   stm_source_declared_columns(o, &stm_kafka_source));
	return o;
}

/* create_kafka_source's arguments (SPEC 2.1) */
static Jsonb *
kafka_validate(Jsonb *o, Oid role)
{
	static const char *const formats[] = {"json", "csv", "text", "bytes", "avro", NULL};
	static const char *const required[] = {"bootstrap_servers", "starting_offsets", "format",
	"max_trigger_delay", "fail_on_data_loss", "include_headers", "on_bad_record", "kafka_options", NULL};
	char	   *topic_pattern = stm_option_text(o, "topic_pattern");
	char	   *starting;
	char	   *format;
	char	   *on_bad_record;
	bool		has_columns = stm_option_given(o, "columns");
	int			nmodes;
	ListCell   *lc;

	stm_source_require_options(o, required);
	starting = stm_option_text(o, "starting_offsets");
	format = stm_arg_lower(stm_option_text(o, "format"));
	on_bad_record = stm_arg_lower(stm_option_text(o, "on_bad_record"));
	if (pg_strcasecmp(starting, "earliest") == 0 || pg_strcasecmp(starting, "latest") == 0)
		starting = stm_arg_lower(starting);

	if (stm_option_text(o, "bootstrap_servers")[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("bootstrap_servers must not be empty"),
				 errhint("Give a comma-separated list of host:port.")));

	nmodes = stm_option_given(o, "topics") + stm_option_given(o, "topic_pattern") +
		stm_option_given(o, "partitions");
	if (nmodes != 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("exactly one of topics, topic_pattern and partitions must be given"),
				 errdetail("%d of them were given.", nmodes)));
	if (stm_option_given(o, "topics"))
	{
		List	   *topics = stm_option_elements(o, "topics");
		bool		ok = topics != NIL;

		foreach(lc, topics)
			if (lfirst(lc) == NULL || ((char *) lfirst(lc))[0] == '\0')
				ok = false;
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("topics must be a non-empty array of topic names"),
					 errhint("For example ARRAY['orders'].")));
	}
	if (topic_pattern)
	{
		if (topic_pattern[0] == '\0')
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("topic_pattern must not be empty")));
		/* compiles the pattern: an invalid one raises its own error */
		STM_ARG_ERRCONTEXT_BEGIN("topic_pattern", topic_pattern);
		(void) RE_compile_and_execute(cstring_to_text(topic_pattern), "", 0,
									  REG_ADVANCED, C_COLLATION_OID, 0, NULL);
		STM_ARG_ERRCONTEXT_END();
	}
	if (stm_option_given(o, "partitions") &&
		!stm_arg_check_sql("SELECT jsonb_typeof($1) = 'object' AND $1 <> '{}' AND NOT EXISTS ("
						   "SELECT 1 FROM jsonb_each($1) t WHERE jsonb_typeof(t.value) <> 'array' "
						   "OR jsonb_array_length(t.value) = 0 OR EXISTS (SELECT 1 FROM jsonb_array_elements(t.value) e "
						   "WHERE jsonb_typeof(e) <> 'number' OR e::numeric < 0 OR e::numeric <> trunc(e::numeric)))",
						   JSONBOID, JsonbPGetDatum(stm_option_jsonb(o, "partitions"))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("partitions must map topic names to arrays of partition numbers"),
				 errhint("For example '{\"orders\": [0, 1, 2]}'.")));
	/* share: a part of the subscribed partitions (SPEC 8), stored normalised */
	if (stm_option_given(o, "share"))
	{
		if (stm_option_given(o, "partitions"))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("share cannot be combined with partitions"),
					 errdetail("partitions names the partitions the source reads already."),
					 errhint("Give topics or topic_pattern with share, or list this server's partitions in partitions.")));
		o = stm_option_set_text(o, "share",
								stm_share_format(stm_share_parse(stm_option_text(o, "share"))));
	}

	if (strcmp(starting, "earliest") != 0 && strcmp(starting, "latest") != 0)
	{
		if (!stm_arg_parses_as(starting, JSONBOID) ||
			!stm_arg_check_sql("SELECT jsonb_typeof($1::jsonb) = 'object' AND NOT EXISTS ("
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

	stm_arg_check_choice("format", format, formats,
						 "Valid formats are \"json\", \"csv\", \"text\", \"bytes\" and \"avro\".");
	stm_source_check_columns(format, has_columns);
	stm_source_check_positive(o, "max_offsets_per_trigger");
	stm_source_check_positive(o, "min_offsets_per_trigger");
	stm_source_check_positive_interval(o, "max_trigger_delay");
	stm_source_check_on_bad_record(on_bad_record);

	/* kafka_options: an object of scalars that librdkafka accepts */
	stm_kafka_check_options(o, role, STM_KAFKA_CONSUMER, NULL);
	/* last: it may ask the schema registry */
	o = validate_avro_and_envelope(o, format);

	/* keywords are stored as normalised */
	o = stm_option_set_text(o, "starting_offsets", starting);
	o = stm_option_set_text(o, "format", format);
	o = stm_option_set_text(o, "on_bad_record", on_bad_record);
	return o;
}

/*
 * Parallel helpers: partition i (in the source's order: topic, partition)
 * is share i % nshares's, as lines "start end partition topic" (also those
 * with nothing to read now: the helper fetches ahead for them), after the
 * batch's chunk size.  Held-back partitions are left out: the helper reads
 * nothing of them.
 */
static char *
kafka_share_bounds(StmSource *src, int share, int nshares)
{
	KafkaSource *kc = (KafkaSource *) src;
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	stm_source_share_begin(&buf, kc->chunk_size);
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (foreach_current_index(lc) % nshares != share || p->held_back)
			continue;
		appendStringInfo(&buf, INT64_FORMAT " " INT64_FORMAT " %d %s\n",
						 p->start, p->end, p->partition, p->topic);
	}
	return buf.data;
}

/*
 * A helper's share: these partitions read [start, end) with the next
 * fetch, every other one is not consumed (held back: fetch and positioning
 * skip it).  A partition that keeps its share from batch to batch goes on
 * from where its consumption stands, as the leader's would.
 */
static void
kafka_set_share_bounds(StmSource *src, const char *bounds)
{
	KafkaSource *kc = (KafkaSource *) src;
	List	   *mine = NIL;
	const char *line = stm_source_share_chunk_size(bounds, &kc->chunk_size);
	ListCell   *lc;

	kc->reads_shares = true;
	rd_kafka_poll(kc->meta, 0);
	open_consumer(kc, 1);
	while (*line)
	{
		const char *eol = strchr(line, '\n');
		char	   *copy = pnstrdup(line, eol ? eol - line : strlen(line));
		char	   *start_s = strtok(copy, " ");
		char	   *end_s = strtok(NULL, " ");
		char	   *part_s = strtok(NULL, " ");
		char	   *topic = part_s ? part_s + strlen(part_s) + 1 : NULL;
		KafkaPartition *p;

		if (start_s == NULL || end_s == NULL || part_s == NULL || *topic == '\0')
			elog(ERROR, "malformed share bounds: %s", line);
		add_partition(kc, topic, pg_strtoint32(part_s));
		p = find_partition(kc, topic, pg_strtoint32(part_s));
		p->start = pg_strtoint64(start_s);
		p->end = pg_strtoint64(end_s);
		mine = lappend(mine, p);
		line = eol ? eol + 1 : line + strlen(line);
	}
	foreach(lc, kc->partitions)
	{
		KafkaPartition *p = lfirst(lc);

		if (list_member_ptr(mine, p))
		{
			p->held_back = false;
			continue;
		}
		if (!p->held_back)
			kafka_release_partition(kc, p);
		p->held_back = true;
		p->start = p->end = 0;
	}
	list_free(mine);
}

/* Parallel helpers: the partitions this plan reads (held-back ones aside). */
static int
kafka_share_parts(StmSource *src)
{
	KafkaSource *kc = (KafkaSource *) src;
	int			n = 0;
	ListCell   *lc;

	foreach(lc, kc->partitions)
		if (!((KafkaPartition *) lfirst(lc))->held_back)
			n++;
	return n;
}

const StmSourceRoutine stm_kafka_source = {
	.kind = "kafka",
	.display_name = "Kafka",
	.validate = kafka_validate,
	.probe = stm_kafka_probe_source,
	.metadata_columns = kafka_metadata_columns,
	.open = kafka_open,
	.plan = kafka_plan,
	.positions_json = kafka_positions_json,
	.fetch = kafka_fetch,
	.fill_metadata = kafka_fill_metadata,
	.position_json = kafka_position_json,
	.save_positions = kafka_save_positions,
	.save_idle_positions = kafka_save_idle_positions,
	.data_loss_json = kafka_data_loss_json,
	.available = kafka_available,
	.reached = kafka_reached,
	.after_commit = NULL,
	.wait_fd = kafka_wait_fd,
	.ready = kafka_ready,
	.share_bounds = kafka_share_bounds,
	.set_share_bounds = kafka_set_share_bounds,
	.share_parts = kafka_share_parts,
	.close = kafka_close
};

/* streaming.create_kafka_source(name, bootstrap_servers, ...) */
Datum
streaming_create_kafka_source(PG_FUNCTION_ARGS)
{
	return stm_api_create_source(fcinfo, &stm_kafka_source);
}
