/*
 * aggstate.h: the state of aggregate streams: an in-memory hash table of
 * the batch's groups, merged into the stream's state table, and the sink
 * rows it produces (SPEC 3, 3.2).
 */
#ifndef STM_AGGSTATE_H
#define STM_AGGSTATE_H

#include "datatype/timestamp.h"
#include "nodes/execnodes.h"

#include "aggregate.h"
#include "statetable.h"
#include "query.h"
#include "sink.h"

typedef struct StmAggBatch StmAggBatch;

extern char *stm_aggstate_table(int32 stream_id);
extern char *stm_aggstate_key_type(StmAggQuery *agg, int k);
extern char *stm_aggstate_state_type(Aggref *agg);
extern char *stm_aggstate_group_columns(StmAggQuery *agg);
extern void stm_aggstate_create(int32 stream_id, StmAggQuery *agg, Oid owner);
extern StmAggBatch *stm_aggbatch_begin(StmAggQuery *agg, int32 stream_id,
									   StmOutputMode output_mode, StmSinkBatch *sink,
									   bool has_watermark, TimestampTz watermark,
									   int event_time_att, StmLateRows *keep_late);
extern void stm_aggbatch_add(StmAggBatch *ab, ExprContext *econtext);
extern void stm_aggbatch_no_late_rows(StmAggBatch *ab);
extern void stm_aggbatch_finish(StmAggBatch *ab, Jsonb *stored_rows, StringInfo rows_json,
								int64 *num_state_rows, int64 *num_late_rows);

/* parallel helpers: partial groups (parallel.c) */
typedef void (*StmAggForwardFn) (void *arg, TupleDesc desc, Datum *values, bool *nulls);
extern void stm_aggbatch_forward(StmAggBatch *ab, StmAggForwardFn fn, void *arg);
extern TupleDesc stm_aggbatch_partial_desc(StmAggBatch *ab);
extern void stm_aggbatch_add_partial(StmAggBatch *ab, Datum *values, bool *nulls);
extern void stm_aggbatch_finish_forward(StmAggBatch *ab, int64 *num_late_rows);

#endif
