/*
 * kafka_conf.h: librdkafka client configuration shared by the Kafka source
 * and the Kafka sink: the allowlist of properties, and clients built from
 * stored options.
 */
#ifndef STM_KAFKA_CONF_H
#define STM_KAFKA_CONF_H

#include <librdkafka/rdkafka.h>

#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#define STM_KAFKA_ERROR_LEN 512

/* a librdkafka call that may block waits at most this long between interrupt checks */
#define STM_KAFKA_SLICE_MS 200

/* which client the properties are for: their allowlists differ */
typedef enum StmKafkaClient
{
	STM_KAFKA_CONSUMER,
	STM_KAFKA_PRODUCER
} StmKafkaClient;

extern bool stm_kafka_option_allowed(const char *key, Oid role, StmKafkaClient client);
extern void stm_kafka_check_option(const char *key, const char *value, Oid role,
								   StmKafkaClient client);
extern void stm_kafka_check_options(Jsonb *options, Oid role, StmKafkaClient client,
									void (*check_key) (const char *key));
extern void stm_kafka_recheck_options(const char *kind, const char *name, List *pairs,
									  Oid owner, Oid other_owner, StmKafkaClient client);
extern void stm_kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value);
extern rd_kafka_conf_t *stm_kafka_conf_new(const char *bootstrap, char *error_buf);
extern TimestampTz stm_kafka_deadline(int timeout_ms);
extern int	stm_kafka_slice(TimestampTz deadline);

#endif
