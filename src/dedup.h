/*
 * dedup.h: dedup_keys, before the query (SPEC 3.3).
 */
#ifndef STM_DEDUP_H
#define STM_DEDUP_H

#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "statetable.h"

typedef struct StmDedup StmDedup;

extern char *stm_dedup_table(int32 stream_id);
extern void stm_dedup_create(int32 stream_id, Oid owner);
extern StmDedup *stm_dedup_begin(int32 stream_id, TupleDesc source, List *key_names,
								 int event_time_att, TimestampTz watermark,
								 bool within, int64 delay_us,
								 StmLateRows *keep_late);
extern void stm_dedup_chunk(StmDedup *d, int n, Datum **values, bool **nulls, bool *drop);
extern void stm_dedup_finish(StmDedup *d, Jsonb *stored_rows, StringInfo rows_json,
							 int64 *num_dup, int64 *num_late, int64 *num_state);

#endif
