/*
 * debezium.h: Debezium's change events (SPEC 2.1.2): the envelope (before,
 * after, op, ts_ms) and Kafka Connect's encodings of its values.
 */
#ifndef STM_DEBEZIUM_H
#define STM_DEBEZIUM_H

#include "avro.h"
#include "parse.h"

typedef struct StmDebeziumJson StmDebeziumJson;

/* the event's op ('c', 'u', 'd', 'r'); anything else is a bad record */
extern char stm_debezium_op(const char *op, int len);

/* what a Connect schema name says of an int or long (STM_AVRO_PLAIN: nothing) */
extern StmAvroLogical stm_debezium_logical(const char *connect_name, bool is_long);

/* JSON events, with or without the schema/payload wrapper */
extern StmDebeziumJson *stm_debezium_json_new(StmParser *p);
extern void stm_debezium_parse_json(StmDebeziumJson *dj, char *buf, int len);

#endif
