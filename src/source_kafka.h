/*
 * source_kafka.h: the Kafka source: partitions, positions, batch bounds and
 * fetching, on librdkafka.
 */
#ifndef STM_SOURCE_KAFKA_H
#define STM_SOURCE_KAFKA_H

#include <librdkafka/rdkafka.h>

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "parse.h"

/* number of metadata columns after the declared ones */
#define STM_KAFKA_META_COLUMNS 5

typedef struct StmKafkaPartition
{
	char	   *topic;
	Datum		topic_text;		/* the topic as a text Datum, for kafka_topic */
	int32		partition;
	rd_kafka_topic_t *rkt;
	bool		stored;			/* has a row in streaming.offsets */
	int64		start;			/* this batch reads [start, end) */
	int64		end;
	int64		low;			/* log start offset, as last queried */
	int64		high;			/* high watermark, as last queried */
	int64		limit;			/* available_now: never read past this; -1 none */
	bool		started;		/* consumption started at pos */
	int64		next;			/* while fetching: next offset to hand out */
	int64		pos;			/* next offset the local queue delivers */
	rd_kafka_message_t **held;	/* fetched past end: first of next batch */
	int			nheld;
	int			held_next;
} StmKafkaPartition;

typedef struct StmKafka
{
	rd_kafka_t *rk;				/* fetches */
	rd_kafka_t *meta;			/* metadata and offset queries */
	rd_kafka_conf_t *consumer_conf;	/* rk's, until rk is made (open_consumer) */
	bool		privileged;		/* superusers own source and stream: no caps */
	int64		user_queue_kb;	/* prefetch sizes kafka_options asked for (0: none) */
	int64		user_fetch_bytes;
	int64		user_fetch_max_bytes;
	int64		user_receive_max_bytes;
	MemoryContext cxt;			/* where partitions are kept */
	char	   *source;
	char	   *bootstrap;
	List	   *topics;			/* subscribe: names */
	char	   *topic_pattern;	/* subscribePattern */
	List	   *assign;			/* assign: "topic\0partition" pairs as StmKafkaPartition */
	char	   *starting_offsets;
	StmFormat	format;
	bool		has_columns;
	int64		max_offsets_per_trigger;	/* 0: none */
	int64		min_offsets_per_trigger;	/* 0: none */
	int64		max_trigger_delay_ms;
	bool		fail_on_data_loss;
	bool		include_headers;
	char	   *on_bad_record;
	List	   *partitions;		/* StmKafkaPartition, all known */
	bool		bounded;		/* available_now: read only what the first plan saw */
	bool		limits_fixed;
	char		error[512];		/* last error reported by librdkafka */
	StringInfoData data_loss;	/* JSON array of losses found by the plan */
} StmKafka;

typedef void (*StmKafkaChunkFn) (void *arg, StmKafkaPartition *part,
								 rd_kafka_message_t **msgs, int n);

extern StmKafka *stm_kafka_open(StmSourceDef *src, Oid stream_owner, bool for_batches);
extern void stm_kafka_close(StmKafka *kc);
extern int64 stm_kafka_plan(StmKafka *kc, int32 stream_id, bool initialized,
							 TimestampTz last_trigger);
extern void stm_kafka_fetch(StmKafka *kc, StmKafkaChunkFn fn, void *arg);
extern void stm_kafka_save_positions(StmKafka *kc, int32 stream_id);
extern char *stm_kafka_positions_json(StmKafka *kc, bool end);
extern void stm_kafka_fill_metadata(StmKafka *kc, StmKafkaPartition *part,
									rd_kafka_message_t *msg, Datum *values, bool *nulls);
extern void stm_kafka_refresh_partitions(StmKafka *kc);
extern void stm_kafka_query_watermarks(StmKafka *kc);
extern void stm_kafka_check_option(const char *key, const char *value, Oid role);

#endif
