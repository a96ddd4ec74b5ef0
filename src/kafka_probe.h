/*
 * kafka_probe.h: the create-time check of a Kafka source's or sink's
 * brokers and topics (WARNINGs, never errors).
 */
#ifndef STM_KAFKA_PROBE_H
#define STM_KAFKA_PROBE_H

#include "utils/jsonb.h"

extern void stm_kafka_probe_source(const char *name, Jsonb *options);
extern void stm_kafka_probe_sink(const char *name, Jsonb *options);

#endif
