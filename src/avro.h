/*
 * avro.h: Avro in the Confluent wire format (SPEC 2.1.1), with Avro C:
 * records of Kafka sources into typed columns, rows of Kafka sinks into
 * messages.
 */
#ifndef STM_AVRO_H
#define STM_AVRO_H

#include "access/tupdesc.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

#include "parse.h"
#include "schema_registry.h"

/* What an Avro int, long, bytes or string means beyond its type. */
typedef enum StmAvroLogical
{
	STM_AVRO_PLAIN,
	STM_AVRO_DECIMAL,			/* bytes, fixed: unscaled two's complement */
	STM_AVRO_UUID,				/* string */
	STM_AVRO_DATE,				/* int: days since 1970-01-01 */
	STM_AVRO_TIME_MILLIS,		/* int */
	STM_AVRO_TIME_MICROS,		/* long */
	STM_AVRO_TIME_NANOS,		/* long (Debezium's NanoTime) */
	STM_AVRO_TIMESTAMP_MILLIS,	/* long: since 1970-01-01 00:00 UTC */
	STM_AVRO_TIMESTAMP_MICROS,
	STM_AVRO_TIMESTAMP_NANOS,
	STM_AVRO_LOCAL_TIMESTAMP_MILLIS,	/* long: a wall-clock time, no zone */
	STM_AVRO_LOCAL_TIMESTAMP_MICROS,
	STM_AVRO_LOCAL_TIMESTAMP_NANOS
} StmAvroLogical;

typedef struct StmAvroReader StmAvroReader;
typedef struct StmAvroParser StmAvroParser;
typedef struct StmAvroWriter StmAvroWriter;

/* sources: the registry and its schemas by id, for a runtime */
extern StmAvroReader *stm_avro_reader_open(Jsonb *registry, const char *what);

/* a batch's parser: the plans of the schemas its records name */
extern StmAvroParser *stm_avro_parser_new(StmAvroReader *reader, StmParser *p);
extern void stm_avro_parse(StmAvroParser *ap, const char *data, int len,
						   Datum *values, bool *nulls);
extern Datum stm_avro_parse_jsonb(StmAvroParser *ap, const char *data, int len);

/* create_kafka_source: the columns from the subject's latest schema, or checked against it */
extern Jsonb *stm_avro_columns_from_registry(Jsonb *options, const char *topic);
extern void stm_avro_check_columns(Jsonb *options, const char *topic, List *columns);

/* values that Avro and Debezium's JSON share */
extern Datum stm_avro_decimal(const unsigned char *bytes, int len, int scale);
extern Datum stm_avro_logical_datum(StmAvroLogical kind, int64 v, Oid *type);

/* sinks: a record schema of output columns, and rows in the wire format */
extern char *stm_avro_record_schema(TupleDesc desc, int n, const int *atts,
									const char *name, const char *what);
extern StmAvroWriter *stm_avro_writer_new(TupleDesc desc, int n, const int *atts,
										  const char *schema, int32 id);
extern bytea *stm_avro_encode(StmAvroWriter *w, const Datum *values, const bool *nulls);

#endif
