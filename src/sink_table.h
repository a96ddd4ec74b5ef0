/*
 * sink_table.h: the table sink, whose writer the function sink uses for
 * its batch table.
 */
#ifndef STM_SINK_TABLE_H
#define STM_SINK_TABLE_H

#include "sink.h"

extern StmSinkBatch *stm_table_sink_begin(StmSink *sink, Oid relid, const StmSinkOutput *output,
										  int64 batch_id, EState *estate);
extern void stm_table_sink_insert(StmSinkBatch *batch, Datum *values, bool *nulls);
extern void stm_table_sink_upsert(StmSinkBatch *batch, Datum *values, bool *nulls);
extern void stm_table_sink_delete_key(StmSinkBatch *batch, Datum *values, bool *nulls);
extern void stm_table_sink_truncate(StmSinkBatch *batch);
extern void stm_table_sink_end(StmSinkBatch *batch);
extern char *stm_sink_table_ddl(const StmSinkOutput *out, const char *qualified_name, bool keyed);

#endif
