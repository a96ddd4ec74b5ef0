/*
 * batch.h: one micro-batch of a stream, in one transaction.
 */
#ifndef STM_BATCH_H
#define STM_BATCH_H

#include "catalog.h"
#include "sink.h"
#include "source.h"

/* What a stream keeps between batches (for a worker: its whole life). */
typedef struct StmRuntime
{
	MemoryContext cxt;			/* lives as long as the runtime */
	int32		stream_id;
	StmSource  *source;			/* opened by the first batch, in cxt */
	struct StmSink *sink;		/* the same */
	struct StmJoinPlan *join_plan;	/* a query that reads tables: its kept plan (join.c) */
	TimestampTz started_at;		/* when this runtime began, for min_offsets_per_trigger */
	bool		bounded;		/* available_now: stop at what the first batch saw */
	char	   *problem;		/* what the last plan could not read, and why (in cxt), or NULL */
	bool		unreadable;		/* the last plan could read no part of the source */
	const char *sink_problem;	/* what the sink cannot do now (the worker's to set), or NULL */
	bool		parallel_allowed;	/* a worker: helpers even inside a transaction block */
	struct StmParallel *parallel;	/* its helpers (parallel.c), or NULL */
	int			parallel_wanted;	/* helpers this batch reads with (0: none) */
} StmRuntime;

extern StmRuntime *stm_runtime_create(int32 stream_id);
extern int64 stm_batch_run(StmRuntime *rt);
extern bool stm_error_is_permanent(int sqlerrcode);
extern void stm_batch_after_commit(StmRuntime *rt);
extern StmSinkStatus stm_runtime_deliver(StmRuntime *rt, bool busy);
extern bool stm_error_is_waiting(int sqlerrcode);
extern bool stm_runtime_wait(StmRuntime *rt, long timeout_ms);
extern char *stm_runtime_source_error(StmRuntime *rt);
extern void stm_runtime_close(StmRuntime *rt);
extern void stm_runtime_abandon(StmRuntime *rt);
struct StmHelperOut;
struct StmShareTotals;
extern void stm_batch_run_share(StmRuntime *rt, const char *bounds, struct StmHelperOut *out,
								struct StmShareTotals *totals);

#endif
