/*
 * source_rate.h: the rate source (SPEC 2.3); the rest is private to
 * source_rate.c.
 */
#ifndef STM_SOURCE_RATE_H
#define STM_SOURCE_RATE_H

#include "source.h"

extern const StmSourceRoutine stm_rate_source;

#endif
