/*
 * sink_table.h: writing a batch's output rows into the sink table.
 */
#ifndef STM_SINK_TABLE_H
#define STM_SINK_TABLE_H

#include "executor/spi.h"
#include "nodes/execnodes.h"

#define STM_SINK_BUFFER 1000

typedef struct StmSink
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	bool		fast;			/* heap multi-insert, else one INSERT per row */
	/* fast path */
	TupleTableSlot *slots[STM_SINK_BUFFER];
	int			nbuffered;
	struct BulkInsertStateData *bistate;
	CommandId	cid;
	MemoryContext flush_cxt;	/* what a flush allocates, reset after it */
	/* slow path */
	SPIPlanPtr	plan;
	Oid		   *argtypes;
	char	   *argnulls;
	int64		rows;
} StmSink;

extern StmSink *stm_sink_open(Relation rel, EState *estate);
extern void stm_sink_put(StmSink *sink, Datum *values, bool *nulls);
extern void stm_sink_flush(StmSink *sink);
extern void stm_sink_close(StmSink *sink);

#endif
