/*
 * runtime.h: what a stream keeps between its batches (StmRuntime), for as
 * long as one process runs them: a worker's life, one run_batch call, a
 * parallel helper's life.
 */
#ifndef STM_RUNTIME_H
#define STM_RUNTIME_H

#include "catalog.h"
#include "sink.h"
#include "source.h"
#include "ssjoin.h"

/* One source the stream reads, as the runtime keeps it. */
typedef struct StmSourceRuntime
{
	StmSourceDef *def;			/* its catalog row */
	StmSource  *src;			/* opened by the first batch, in the runtime's cxt */
	char	   *problem;		/* what its last plan could not read, and why (in cxt), or NULL */
	bool		unreadable;		/* its last plan could read no part of it */
} StmSourceRuntime;

typedef struct StmRuntime
{
	MemoryContext cxt;			/* lives as long as the runtime */
	int32		stream_id;
	List	   *sources;		/* StmSourceRuntime: the query's sources, in its order */
	struct StmSink *sink;		/* opened by the first batch, in cxt */
	struct StmJoinPlan *join_plan;	/* a query that reads tables: its kept plan (join.c) */
	struct StmJoinPlan *ssjoin_plans[STM_SSJOIN_NPLANS];	/* a join of two sources: its kept plans (ssjoin.c) */
	bool		ssjoin_ran;		/* the last batch ran the join: its figures below */
	int64		ssjoin_batch_dead[2];	/* row versions its batch left dead, per side */
	int64		ssjoin_live[2];	/* the state's rows after it, per side */
	int64		ssjoin_dead[2]; /* committed batches' dead rows since their side's VACUUM */
	TimestampTz started_at;		/* when this runtime began, for min_offsets_per_trigger */
	bool		bounded;		/* available_now: stop at what the first batch saw */
	bool		low_latency;	/* trigger continuous: sources read for latency */
	bool		no_data_due;	/* the last batch made a no-data batch due */
	const char *sink_problem;	/* what the sink cannot do now (the worker's to set), or NULL */
	bool		parallel_allowed;	/* a worker: helpers even inside a transaction block */
	struct StmParallel *parallel;	/* its helpers (parallel.c), or NULL */
	struct StmSource *share_src[2];	/* with helpers: the leader's own share's source
									 * of each source (opened as a helper's), or NULL */
	bool		share_src_dirty;	/* a fetch of it did not end: open it again */
	int			parallel_wanted;	/* helpers this batch may read with (0: none) */
	int			parallel_asked; /* parallel_wanted when the helpers started */
	TimestampTz parallel_retry_at;	/* automatic helpers: none started before then */
	int			parallel_auto_shape;	/* parallel_workers NULL: 0 not yet asked, 1 helpers
										 * run its query, -1 they do not */
	/* the last batch's steps, for the worker's DEBUG1 timing line */
	TimestampTz batch_started;	/* run_batch_as_owner began */
	TimestampTz batch_planned;	/* its bounds fixed */
	TimestampTz batch_queried;	/* fetched, parsed, its query run, its rows sent */
	TimestampTz batch_recorded; /* positions and progress written */
	int64		batch_rows;		/* its input rows */
} StmRuntime;

extern StmRuntime *stm_runtime_create(int32 stream_id);
extern List *stm_runtime_open_sources(StmRuntime *rt, StmStreamDef *def);
extern StmSink *stm_runtime_open_sink(StmRuntime *rt, StmStreamDef *def);
extern void stm_runtime_prepare_helpers(StmRuntime *rt, StmStreamDef *def);
extern void stm_runtime_start_helpers(StmRuntime *rt, StmStreamDef *def);
extern struct StmSource *stm_runtime_share_source(StmRuntime *rt, StmStreamDef *def, int k);
extern void stm_runtime_note_plan(StmRuntime *rt, StmSourceRuntime *srt);
extern char *stm_runtime_source_problem(StmRuntime *rt);
extern char *stm_runtime_source_error(StmRuntime *rt);
extern bool stm_runtime_unreadable(StmRuntime *rt);
extern void stm_runtime_after_commit(StmRuntime *rt);
extern StmSinkStatus stm_runtime_deliver(StmRuntime *rt, bool busy);
extern bool stm_runtime_wait(StmRuntime *rt, long timeout_ms);
extern bool stm_runtime_quiet(StmRuntime *rt);
extern void stm_runtime_close(StmRuntime *rt);
extern void stm_runtime_abandon(StmRuntime *rt);

/* the lock that makes one stream run in one place */
extern bool stm_lock_stream(int32 stream_id, bool session);
extern void stm_wait_stream_lock(int32 stream_id);

#endif
