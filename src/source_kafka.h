/*
 * source_kafka.h: the Kafka source (SPEC 2.1); the rest is private to
 * source_kafka.c.
 */
#ifndef STM_SOURCE_KAFKA_H
#define STM_SOURCE_KAFKA_H

#include "utils/jsonb.h"

#include "source.h"

extern const StmSourceRoutine stm_kafka_source;
extern bool stm_kafka_source_reads(Jsonb *options, const char *topic, int32 partition);

#endif
