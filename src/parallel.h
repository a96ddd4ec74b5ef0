/*
 * parallel.h: parallel parse per stream (parallel_workers): helper
 * processes that fetch, parse, filter and project their share of the
 * batch and hand the rows to the stream's worker (the leader) through
 * shared memory queues.
 */
#ifndef STM_PARALLEL_H
#define STM_PARALLEL_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "fmgr.h"
#include "nodes/pg_list.h"

#include "deadletter.h"
#include "query.h"
#include "source.h"

/* at most this many helpers per stream */
#define STM_MAX_PARALLEL_WORKERS 64

/* What a helper's share of a batch amounted to, besides its rows. */
typedef struct StmShareTotals
{
	int64		num_input;
	int64		num_late;		/* aggregates: late groups, counted as a batch's part counts them */
	bool		has_max_event_time;
	TimestampTz max_event_time;
} StmShareTotals;

/* The leader's batch: where the helpers' results go. */
typedef struct StmParallelReceiver
{
	void		(*row) (void *arg, Datum *values, bool *nulls);
	/* input: which of the batch's sources the record came from (0, or 1: a join's right side) */
	void		(*bad) (void *arg, int input, const StmBadRecord *bad);
	void		(*group) (void *arg, Datum *values, bool *nulls);	/* aggregates: a partial group */
	/* a parsed source row (valid until the callback returns) */
	void		(*source_row) (void *arg, int input, MinimalTuple tuple);
	/* a late row kept: its position (jsonb text) and event time */
	void		(*late) (void *arg, const char *position, TimestampTz event_time, bool isnull);
	void	   *arg;
} StmParallelReceiver;

typedef struct StmParallel StmParallel;
typedef struct StmHelperOut StmHelperOut;
typedef struct StmHelperLink StmHelperLink;

/* what a helper's wait for the leader's next share found */
typedef enum StmShareNext
{
	STM_SHARE_READY,
	STM_SHARE_NONE,
	STM_SHARE_DETACHED
} StmShareNext;

/* the leader (a stream's worker) */
extern StmParallel *stm_parallel_start(int32 stream_id, int nhelpers, int elevel,
									   MemoryContext cxt);
extern int	stm_parallel_count(StmParallel *par);
extern bool stm_parallel_dirty(StmParallel *par);
extern char *stm_parallel_share_bounds(StmSource **srcs, int nsrcs, int k, int share,
									   int nshares);
extern void stm_parallel_send_shares(StmParallel *par, StmSource **srcs, int nsrcs, int nshares,
									 bool leader_first, TupleDesc desc, TupleDesc partial_desc);
extern bool stm_parallel_drain(StmParallel *par, StmParallelReceiver *recv,
							   StmShareTotals *totals, bool wait);
extern void stm_parallel_stop(StmParallel *par);
extern void stm_parallel_abandon(StmParallel *par);
extern bool stm_parallel_source_supported(const StmSourceRoutine *routine, const char **why);
extern bool stm_parallel_query_supported(StmQueryInfo *qi, const char **why);
extern void stm_parallel_check_arg(const char *stream, int n, const StmSourceRoutine *routine,
								   StmQueryInfo *qi);

/* a helper (helper.c): its end of the leader's segment, and what its share sends */
extern StmHelperLink *stm_parallel_helper_attach(Datum main_arg, int index);
extern Oid	stm_parallel_helper_database(StmHelperLink *link);
extern int32 stm_parallel_helper_stream(StmHelperLink *link);
extern StmHelperOut *stm_parallel_helper_out(StmHelperLink *link);
extern StmShareNext stm_parallel_helper_next(StmHelperLink *link, char **bounds);
extern void stm_parallel_wake_leader(StmHelperLink *link);
extern void stm_parallel_send_row(StmHelperOut *out, TupleDesc desc, Datum *values, bool *nulls);
extern void stm_parallel_send_source_row(StmHelperOut *out, int input, TupleDesc desc,
										 Datum *values, bool *nulls);
extern void stm_parallel_send_late(StmHelperOut *out, const char *position,
								   TimestampTz event_time, bool isnull);
extern void stm_parallel_send_group(StmHelperOut *out, TupleDesc desc, Datum *values, bool *nulls);
extern void stm_parallel_send_bad(StmHelperOut *out, int input, const StmBadRecord *bad);
extern void stm_parallel_send_done(StmHelperOut *out, const StmShareTotals *totals);
extern void stm_parallel_send_error(StmHelperOut *out, ErrorData *edata);

#endif
