/*
 * ssjoin.h: joins of two sources (SPEC 3.6, stream-stream joins).
 *
 * ssjoin_query.c analyses such a query (its join type, its two sides, the
 * equality between them and the time condition that bounds how long a
 * row can still match) and makes the queries a batch runs;
 * ssjoin.c runs a batch's join: each side's new rows and stored state as
 * relations PostgreSQL's executor joins, eviction by the watermark, the
 * NULL rows of outer joins, and the state tables.
 */
#ifndef STM_SSJOIN_H
#define STM_SSJOIN_H

#include "executor/tuptable.h"
#include "nodes/parsenodes.h"
#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "catalog.h"

typedef enum StmJoinType
{
	STM_JOIN_INNER,
	STM_JOIN_LEFT,
	STM_JOIN_RIGHT,
	STM_JOIN_FULL,
	STM_JOIN_SEMI,				/* WHERE EXISTS (SELECT FROM b WHERE ...) */
	STM_JOIN_ANTI				/* WHERE NOT EXISTS (...) */
} StmJoinType;

#define STM_JOIN_LEFT_SIDE 0
#define STM_JOIN_RIGHT_SIDE 1

/*
 * When a row of a side can no longer match (its eviction bound, from the
 * time condition): its expiry is its event time plus offset_us (less 1us
 * when strict), or its window's end less 1us for equal windows, the
 * earlier of the two when there are both; a watermark at or past the
 * expiry evicts it.
 */
typedef struct StmJoinBound
{
	bool		has_range;
	int64		offset_us;
	bool		strict;			/* partners' times are strictly below time + offset */
	bool		has_window;		/* equal tumbling windows */
	int64		window_us;
	TimestampTz origin;
} StmJoinBound;

/* One side of the join: a source under its alias. */
typedef struct StmJoinSide
{
	char	   *alias;			/* the range table entry's alias, or the source's name */
	char	   *source;			/* the source's name */
	Oid			view;			/* its view */
	int			rtindex;		/* its entry in the stream query's range table
								 * (semi/anti right side: in the EXISTS's) */
	Bitmapset  *used;			/* view columns the query uses (attno) */
	List	   *key_attnos;		/* view columns compared with = to the other side */
	List	   *own_quals;		/* conjuncts of the condition over this side alone, over its
								 * view row (varno 1): a row that fails them matches nothing */
	/* from the watermarks argument */
	int			time_att;		/* the event-time column (attno), 0: none */
	bool		has_delay;
	Interval	delay;
	int64		idle_timeout_us;	/* 0: none */
	StmJoinBound bound;
} StmJoinSide;

typedef struct StmStreamJoin
{
	StmJoinType type;
	StmJoinSide sides[2];
	bool		self_join;		/* one source under two aliases: read once */
	JoinExpr   *join;			/* inner and outer joins: in the stream query */
	SubLink    *sublink;		/* semi and anti joins: the EXISTS */
	Node	   *condition;		/* ON, a comma join's WHERE, or the EXISTS's WHERE */
	bool		has_equality;
	bool		time_condition; /* a bound on at least one side */
	int64		max_bound_us;	/* aggregate windows close at W - this (SPEC 3.6) */
	bool		max_policy;		/* multiple_watermark_policy 'max' */
} StmStreamJoin;

struct StmQueryInfo;
struct StmJoinPlan;
struct StmLateRows;
typedef struct StmJoinRun StmJoinRun;

/* the plans a stream-stream join's batch keeps for its runtime */
#define STM_SSJOIN_NPLANS 5

/* ssjoin_query.c: the query */
extern bool stm_ssjoin_reads_two(Query *q);
extern void stm_ssjoin_prepare(Query *q);
extern StmStreamJoin *stm_ssjoin_analyze(Query *q, List *source_rtes);
extern void stm_ssjoin_bind_watermarks(StmStreamJoin *j, Jsonb *watermarks, const char *policy);
extern void stm_ssjoin_check(StmStreamJoin *j, const char *stream);
extern bool stm_ssjoin_side_bounded(StmStreamJoin *j, int side);
extern TimestampTz stm_ssjoin_expiry(const StmJoinBound *bound, TimestampTz t);
extern const char *stm_ssjoin_type_name(StmJoinType type);

/* ssjoin.c: state tables and a batch */
extern char *stm_ssjoin_table(int32 stream_id, int side);
extern void stm_ssjoin_create_state(int32 stream_id, StmStreamJoin *j, Oid owner);
extern StmJoinRun *stm_ssjoin_begin(StmStreamJoin *j, struct StmQueryInfo *qi, int32 stream_id,
									const char *query_text, int64 batch_id, bool has_watermark,
									TimestampTz watermark, struct StmJoinPlan **plans,
									MemoryContext plans_cxt, struct StmLateRows **keep_late,
									Jsonb *prev_sides);
extern void stm_ssjoin_add(StmJoinRun *run, int side, TupleTableSlot *slot);
typedef void (*StmSSJoinRowFn) (void *arg, TupleTableSlot *slot);
extern void stm_ssjoin_run(StmJoinRun *run, StmSSJoinRowFn fn, void *arg);
extern void stm_ssjoin_dead_rows(StmJoinRun *run, int64 *dead, int64 *live);
extern void stm_ssjoin_vacuum(int32 stream_id, int64 *dead, const int64 *live);
extern void stm_ssjoin_progress(StmJoinRun *run, StringInfo json, int64 *num_late,
								int64 *num_state, bool *has_max, TimestampTz *max);
extern TimestampTz stm_ssjoin_watermark(StmStreamJoin *j, StmJoinRun *run, Jsonb *prev_sides,
										const bool *has_max,
										const TimestampTz *max, TimestampTz now,
										TimestampTz prev_w, char **sides_json);
extern bool stm_ssjoin_idle_due(Jsonb *sides, bool max_policy, TimestampTz prev_w,
								TimestampTz now);

#endif
