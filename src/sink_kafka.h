/*
 * sink_kafka.h: the Kafka sink (SPEC 6.1), a named sink that writes through
 * streaming.outbox.
 */
#ifndef STM_SINK_KAFKA_H
#define STM_SINK_KAFKA_H

#include "sink.h"

extern const StmSinkRoutine stm_kafka_sink_routine;

#endif
