/*
 * rfc3339.h: timestamps in the exact RFC 3339 form, without the general
 * date parser (rfc3339.c), for parse.c's per-field conversion.
 */
#ifndef STM_RFC3339_H
#define STM_RFC3339_H

#include "datatype/timestamp.h"

extern bool stm_rfc3339_timestamptz(const char *str, int32 typmod, TimestampTz *result);
extern bool stm_rfc3339_timestamp(const char *str, int32 typmod, Timestamp *result);

#endif
